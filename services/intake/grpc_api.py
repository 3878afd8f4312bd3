"""Intake's gRPC API (proto/muster/api/v1/muster.proto): a thin translation of
``ops.Intake``, like the HTTP API, so both validate and answer alike.

Requests arrive as bytes and are decoded here, not by grpcio, so a malformed message or
one with fields this version does not know gets INVALID_ARGUMENT with a reason (grpcio
would answer INTERNAL), and a decoded message goes to the JSON validator through
protobuf's JSON mapping.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, NoReturn, TypeVar

import grpc
import structlog
from google.protobuf import json_format
from google.protobuf.message import DecodeError, Message
from grpc import aio

from muster.api.v1 import muster_pb2 as pb
from muster.core.access.tokens import Principal
from muster.core.intake.refusal import Refusal
from muster.runtime.settings import Settings
from muster.store import unavailable
from services.intake import errors
from services.intake.errors import Refused, refuse
from services.intake.events import Scope
from services.intake.ops import Intake

log = structlog.get_logger("intake")
T = TypeVar("T")

# The HTTP status of a refusal picks the gRPC code; a few codes are more precise.
STATUS_CODES: dict[int, grpc.StatusCode] = {
    400: grpc.StatusCode.INVALID_ARGUMENT,
    401: grpc.StatusCode.UNAUTHENTICATED,
    403: grpc.StatusCode.PERMISSION_DENIED,
    404: grpc.StatusCode.NOT_FOUND,
    409: grpc.StatusCode.ALREADY_EXISTS,
    413: grpc.StatusCode.RESOURCE_EXHAUSTED,
    422: grpc.StatusCode.INVALID_ARGUMENT,
    429: grpc.StatusCode.RESOURCE_EXHAUSTED,
    503: grpc.StatusCode.UNAVAILABLE,
}
ERROR_CODES: dict[str, grpc.StatusCode] = {
    "AlreadyFinished": grpc.StatusCode.FAILED_PRECONDITION,
    "AlreadyDeleted": grpc.StatusCode.FAILED_PRECONDITION,
    "CheckNotApplicable": grpc.StatusCode.FAILED_PRECONDITION,
    "GangCancelled": grpc.StatusCode.FAILED_PRECONDITION,
    "UnknownQueue": grpc.StatusCode.FAILED_PRECONDITION,
    "UnknownFlavor": grpc.StatusCode.FAILED_PRECONDITION,
    "BatchTooLarge": grpc.StatusCode.INVALID_ARGUMENT,
}


def status_of(r: Refusal) -> grpc.StatusCode:
    return ERROR_CODES.get(r.code) or STATUS_CODES.get(errors.status(r), grpc.StatusCode.INTERNAL)


async def _abort(context: aio.ServicerContext[Any, Any], r: Refusal) -> NoReturn:
    metadata: list[tuple[str, str]] = [("muster-error-code", r.code)]
    if r.field:
        metadata.append(("muster-error-field", r.field))
    if (retry := errors.retry_after(r)) is not None:
        metadata.append(("retry-after", retry))
    await context.abort(status_of(r), r.message, trailing_metadata=tuple(metadata))
    raise AssertionError("abort returns only by raising")


def _decode(cls: type[Message], raw: bytes) -> Message:
    try:
        msg = cls.FromString(raw)
    except DecodeError as exc:
        raise refuse("MalformedProtobuf", f"not a valid {cls.__name__}: {exc}") from None
    bare = cls()
    bare.CopyFrom(msg)
    bare.DiscardUnknownFields()
    if bare.ByteSize() != msg.ByteSize():
        raise refuse(
            "UnknownField",
            f"{cls.__name__} has fields this server does not know (a newer client?)",
        )
    return msg


def to_json(msg: Message) -> Any:
    """A message as the HTTP API's JSON (proto field pod_sets -> podSets)."""
    return json_format.MessageToDict(msg)


def from_json(body: dict[str, Any], cls: type[Message]) -> Any:
    clean = {k: v for k, v in body.items() if v is not None}
    return json_format.ParseDict(clean, cls(), ignore_unknown_fields=True)


def _principal(intake: Intake, context: aio.ServicerContext[Any, Any]) -> Principal:
    metadata = dict(context.invocation_metadata() or ())
    value = metadata.get("authorization")
    return intake.access.authenticate(value if isinstance(value, str) else None)


Unary = Callable[[Any, Principal], Awaitable[Message]]
Streaming = Callable[[Any, Principal], Awaitable[AsyncIterator[Message]]]


async def _answer(
    intake: Intake,
    cls: type[Message],
    fn: Callable[[Any, Principal], Awaitable[T]],
    raw: bytes,
    context: aio.ServicerContext[Any, Any],
) -> T:
    """``fn``'s answer to the decoded request, or the call aborted with its refusal (the
    store being away is UNAVAILABLE)."""
    try:
        return await fn(_decode(cls, raw), _principal(intake, context))
    except Refused as exc:
        await _abort(context, exc.refusal)
    except Exception as exc:
        if not unavailable(exc):
            raise
        await _abort(context, errors.STORE_AWAY)


def _unary(intake: Intake, cls: type[Message], fn: Unary) -> grpc.RpcMethodHandler:
    async def handle(raw: bytes, context: aio.ServicerContext[Any, Any]) -> bytes:
        reply = await _answer(intake, cls, fn, raw, context)
        return reply.SerializeToString()

    return grpc.unary_unary_rpc_method_handler(handle)


def _streaming(intake: Intake, cls: type[Message], fn: Streaming) -> grpc.RpcMethodHandler:
    async def handle(raw: bytes, context: aio.ServicerContext[Any, Any]) -> AsyncIterator[bytes]:
        replies = await _answer(intake, cls, fn, raw, context)
        async for reply in replies:
            yield reply.SerializeToString()

    return grpc.unary_stream_rpc_method_handler(handle)


def handlers(intake: Intake) -> list[grpc.GenericRpcHandler]:
    async def submit(req: pb.SubmitRequest, who: Principal) -> pb.SubmitResponse:
        key = req.idempotency_key if req.HasField("idempotency_key") else None
        done = await intake.workloads.submit(who, to_json(req.workload), key)
        return pb.SubmitResponse(
            workload=from_json(done.workload, pb.Workload), created=done.created
        )

    async def submit_batch(req: pb.SubmitBatchRequest, who: Principal) -> pb.SubmitBatchResponse:
        items = []
        for item in req.items:
            body = to_json(item.workload)
            if item.HasField("idempotency_key"):
                body["idempotencyKey"] = item.idempotency_key
            items.append(body)
        done = await intake.workloads.submit_batch(who, items)
        return pb.SubmitBatchResponse(
            items=[
                pb.SubmitResponse(workload=from_json(d.workload, pb.Workload), created=d.created)
                for d in done
            ]
        )

    async def get_workload(req: pb.GetWorkloadRequest, who: Principal) -> pb.Workload:
        return from_json(await intake.workloads.get(who, req.id), pb.Workload)

    async def list_workloads(req: pb.ListWorkloadsRequest, who: Principal) -> pb.WorkloadList:
        page = await intake.workloads.page(
            who,
            namespace=req.namespace or None,
            status=req.status or None,
            limit=req.limit if req.HasField("limit") else 100,
            after=req.after or None,
        )
        return from_json(page, pb.WorkloadList)

    async def cancel(req: pb.CancelRequest, who: Principal) -> pb.Workload:
        return from_json(await intake.workloads.cancel(who, req.id), pb.Workload)

    async def watch(req: pb.WatchRequest, who: Principal) -> AsyncIterator[pb.Event]:
        which = req.WhichOneof("scope")
        if which == "workload_id":
            scope = Scope(workload_id=req.workload_id)
        elif which == "cluster_queue":
            scope = Scope(cluster_queue=req.cluster_queue)
        elif which == "local_queue" and req.local_queue.count("/") == 1:
            ns, name = req.local_queue.split("/")
            scope = Scope(local_queue=(ns, name))
        else:
            raise refuse(
                "InvalidField",
                "give workload_id, cluster_queue or local_queue (namespace/name)",
                "scope",
            )
        if req.after_position < 0:
            raise refuse("InvalidField", "must be >= 0", "afterPosition")
        events = await intake.events.watch(who, scope, req.after_position, req.follow)

        async def stream() -> AsyncIterator[pb.Event]:
            async for event in events:
                yield from_json(event, pb.Event)

        return stream()

    async def explain(req: pb.ExplainRequest, who: Principal) -> pb.Explanation:
        found = await intake.explain.explain(who, req.id, req.at if req.HasField("at") else None)
        reply: pb.Explanation = from_json(found, pb.Explanation)
        reply.detail.update(found)
        return reply

    async def update_check(req: pb.UpdateAdmissionCheckRequest, who: Principal) -> pb.Workload:
        # The HTTP body's JSON, as PUT .../admissionchecks/{check} takes it.
        body = {k: v for k, v in to_json(req).items() if k not in ("id", "check")}
        return from_json(
            await intake.workloads.update_check(who, req.id, req.check, body), pb.Workload
        )

    async def apply(req: pb.ApplyRequest, who: Principal) -> pb.ApplyResponse:
        rows = await intake.applies.apply(who, req.manifests)
        return from_json({"items": rows}, pb.ApplyResponse)

    async def get_object(req: pb.ObjectRef, who: Principal) -> pb.Object:
        found = await intake.objects.get(who, req.kind, req.name, req.namespace or None)
        return from_json(found, pb.Object)

    async def list_objects(req: pb.ListObjectsRequest, who: Principal) -> pb.ObjectList:
        page = await intake.objects.page(
            who,
            req.kind,
            req.namespace or None,
            req.limit if req.HasField("limit") else 1000,
            req.after or None,
        )
        return from_json(page, pb.ObjectList)

    async def replay(req: pb.ReplayRequest, who: Principal) -> pb.ReplayResponse:
        done = await intake.admin.replay(who, req.until_position or None)
        return from_json(done, pb.ReplayResponse)

    async def report(req: pb.ReportRequest, who: Principal) -> pb.AccountingReport:
        found = await intake.report.report(
            who, req.since or None, req.until or None, req.namespace or None
        )
        return from_json(found, pb.AccountingReport)

    async def list_nodes(req: pb.ListNodesRequest, who: Principal) -> pb.ObjectList:
        limit = req.limit if req.HasField("limit") else 1000
        page = await intake.objects.page(who, "nodes", None, limit, req.after or None)
        return from_json(page, pb.ObjectList)

    submissions = {
        "Submit": _unary(intake, pb.SubmitRequest, submit),
        "SubmitBatch": _unary(intake, pb.SubmitBatchRequest, submit_batch),
        "GetWorkload": _unary(intake, pb.GetWorkloadRequest, get_workload),
        "ListWorkloads": _unary(intake, pb.ListWorkloadsRequest, list_workloads),
        "Cancel": _unary(intake, pb.CancelRequest, cancel),
        "Watch": _streaming(intake, pb.WatchRequest, watch),
        "Explain": _unary(intake, pb.ExplainRequest, explain),
        "UpdateAdmissionCheck": _unary(intake, pb.UpdateAdmissionCheckRequest, update_check),
    }
    admin = {
        "Apply": _unary(intake, pb.ApplyRequest, apply),
        "GetObject": _unary(intake, pb.ObjectRef, get_object),
        "ListObjects": _unary(intake, pb.ListObjectsRequest, list_objects),
        "Replay": _unary(intake, pb.ReplayRequest, replay),
        "Report": _unary(intake, pb.ReportRequest, report),
        "ListNodes": _unary(intake, pb.ListNodesRequest, list_nodes),
    }
    return [
        grpc.method_handlers_generic_handler("muster.v1.Submissions", submissions),
        grpc.method_handlers_generic_handler("muster.v1.Admin", admin),
    ]


async def start(
    intake: Intake, settings: Settings, port: int | None = None
) -> tuple[aio.Server, int]:
    """A started server and the port it listens on: ``port``, default MUSTER_GRPC_PORT
    (0: any free port, for tests)."""
    server = aio.server(
        options=[
            ("grpc.max_receive_message_length", settings.max_body_bytes),
            ("grpc.so_reuseport", 0),
        ]
    )
    server.add_generic_rpc_handlers(handlers(intake))
    bound = server.add_insecure_port(
        f"{settings.http_host}:{settings.grpc_port if port is None else port}"
    )
    await server.start()
    return server, bound


async def serve(intake: Intake, settings: Settings) -> None:
    """Run the gRPC API until cancelled (a routine of the intake service)."""
    server, _ = await start(intake, settings)
    log.info("grpc started", grpc=f"{settings.http_host}:{settings.grpc_port}")
    try:
        await server.wait_for_termination()
    finally:
        with contextlib.suppress(Exception):
            await server.stop(grace=2.0)
