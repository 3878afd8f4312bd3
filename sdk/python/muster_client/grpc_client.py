"""The asynchronous client over muster's gRPC API (``muster.v1.Submissions`` and the
``muster.v1.Admin`` calls an operator uses: report, nodes).

Needs the ``grpc`` extra and the message classes generated from
``proto/muster/api/v1/muster.proto`` (``python -m muster.api.codegen`` in a muster
checkout, which ``make setup`` runs): they are muster's own, not a copy, since two copies
of one .proto cannot be loaded in one process. Same operations, answers and exceptions as
the HTTP client; every call here may be repeated (a submission always carries an
idempotency key), so a call is retried on RESOURCE_EXHAUSTED ``RateLimited``, UNAVAILABLE
and DEADLINE_EXCEEDED, honouring the ``retry-after`` trailing metadata.
"""

from __future__ import annotations

import asyncio
import builtins
import time
from collections.abc import AsyncGenerator, Awaitable, Callable, Mapping, Sequence
from typing import Any, TypeVar

from muster_client import errors
from muster_client.errors import MusterError, TransportError
from muster_client.http import NODES_PAGE, check_body, every_workload, new_key
from muster_client.models import (
    Event,
    Explanation,
    Report,
    Spec,
    Submitted,
    Workload,
    WorkloadPage,
    convert,
    spec_json,
)
from muster_client.retry import RetryPolicy, parse_retry_after

try:
    import grpc
    from google.protobuf import json_format
    from grpc import aio

    from muster.api.v1 import muster_pb2 as pb
    from muster.api.v1 import muster_pb2_grpc as rpc
except ImportError as exc:  # pragma: no cover - depends on the installation
    raise ImportError(
        "muster_client.grpc_client needs grpcio (pip install 'muster-client[grpc]') and "
        "muster's generated API code (python -m muster.api.codegen in a muster checkout)"
    ) from exc

T = TypeVar("T")

# A gRPC status without muster's own error code, as the HTTP status it stands for.
STATUS_OF: dict[grpc.StatusCode, int] = {
    grpc.StatusCode.INVALID_ARGUMENT: 400,
    grpc.StatusCode.UNAUTHENTICATED: 401,
    grpc.StatusCode.PERMISSION_DENIED: 403,
    grpc.StatusCode.NOT_FOUND: 404,
    grpc.StatusCode.ALREADY_EXISTS: 409,
    grpc.StatusCode.FAILED_PRECONDITION: 409,
    grpc.StatusCode.RESOURCE_EXHAUSTED: 429,
    grpc.StatusCode.UNAVAILABLE: 503,
    grpc.StatusCode.DEADLINE_EXCEEDED: 504,
}


def _metadata(err: aio.AioRpcError) -> dict[str, str]:
    return {k: v for k, v in (err.trailing_metadata() or ()) if isinstance(v, str)}


def _retryable(err: aio.AioRpcError) -> bool:
    code = err.code()
    if code == grpc.StatusCode.RESOURCE_EXHAUSTED:
        return _metadata(err).get("muster-error-code") == "RateLimited"
    return code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)


def _error(err: aio.AioRpcError) -> MusterError:
    """The exception for a failed call: the API's refusal, or the transport's failure."""
    meta = _metadata(err)
    code = meta.get("muster-error-code")
    message = err.details() or err.code().name
    if code is None and err.code() in (
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.DEADLINE_EXCEEDED,
    ):
        return TransportError(message)
    status = errors.CODE_STATUS.get(code or "") or STATUS_OF.get(err.code(), 500)
    return errors.api_error(
        status,
        code or err.code().name,
        message,
        meta.get("muster-error-field"),
        parse_retry_after(meta.get("retry-after")),
    )


def _to_json(msg: Any) -> Any:
    return json_format.MessageToDict(msg, always_print_fields_with_no_presence=True)


def _whole(value: Any) -> Any:
    """A ``google.protobuf.Struct``'s JSON with whole numbers as ints, as the HTTP API
    writes them (a Struct carries every number as a double)."""
    if isinstance(value, dict):
        return {k: _whole(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_whole(v) for v in value]
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def _workload(msg: Any) -> Workload:
    """A Workload message as the HTTP API's JSON gives it: a pod set update names only
    the maps it sets (proto3 prints an empty map as ``{}``)."""
    body = _to_json(msg)
    for check in body.get("admissionChecks") or ():
        check["podSetUpdates"] = [
            {k: v for k, v in u.items() if v != {}} for u in check.get("podSetUpdates") or ()
        ]
    if not body.get("admissionChecks"):
        body.pop("admissionChecks", None)  # absent without checks, as over HTTP
    return convert(body, Workload)


def _parse(body: dict[str, Any], message: Any) -> Any:
    try:
        return json_format.ParseDict(body, message)
    except json_format.ParseError as exc:
        raise errors.api_error(422, "InvalidField", str(exc)) from None


def _spec(spec: Spec) -> Any:
    """A spec as the proto's WorkloadSpec (JSON mapping; quantities are strings there)."""
    body = spec_json(spec)
    body.pop("idempotencyKey", None)
    for pod_set in body.get("podSets") or ():
        if isinstance(pod_set, dict) and isinstance(pod_set.get("requests"), dict):
            pod_set["requests"] = {k: str(v) for k, v in pod_set["requests"].items()}
    return _parse(body, pb.WorkloadSpec())


class AsyncGrpcClient:
    """muster's API over gRPC. ``target`` is ``host:port`` of intake's gRPC port; pass
    ``credentials`` for TLS (default: a plaintext channel). Use as ``async with``."""

    def __init__(
        self,
        target: str,
        token: str | None = None,
        *,
        timeout: float = 30.0,
        retry_policy: RetryPolicy | None = None,
        credentials: grpc.ChannelCredentials | None = None,
    ) -> None:
        self.target = target
        self.token = token or None
        self.timeout = timeout
        self.retry = retry_policy or RetryPolicy()
        self._channel = (
            aio.secure_channel(target, credentials)
            if credentials is not None
            else aio.insecure_channel(target)
        )
        self._stub = rpc.SubmissionsStub(self._channel)
        self._admin = rpc.AdminStub(self._channel)

    async def __aenter__(self) -> AsyncGrpcClient:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.close()

    async def close(self) -> None:
        await self._channel.close()

    def _meta(self) -> tuple[tuple[str, str], ...]:
        return (("authorization", f"Bearer {self.token}"),) if self.token else ()

    async def _call(self, call: Callable[..., Awaitable[T]], request: Any) -> T:
        started = time.monotonic()
        attempt = 0
        while True:
            attempt += 1
            try:
                return await call(request, metadata=self._meta(), timeout=self.timeout)
            except aio.AioRpcError as err:
                failure = _error(err)
                wait = self.retry.delay(attempt, getattr(failure, "retry_after", None))
                if not _retryable(err) or not self.retry.may_retry(attempt, started, wait):
                    raise failure from None
            await asyncio.sleep(wait)

    async def submit(self, spec: Spec, *, idempotency_key: str | None = None) -> Submitted:
        key = idempotency_key or spec_json(spec).get("idempotencyKey") or new_key()
        request = pb.SubmitRequest(workload=_spec(spec), idempotency_key=key)
        return convert(_to_json(await self._call(self._stub.Submit, request)), Submitted)

    async def submit_batch(
        self, specs: Sequence[Spec], *, idempotency_keys: Sequence[str] | None = None
    ) -> builtins.list[Submitted]:
        if idempotency_keys is not None and len(idempotency_keys) != len(specs):
            raise ValueError("one idempotency key for each spec")
        items = [
            pb.SubmitRequest(
                workload=_spec(spec),
                idempotency_key=(idempotency_keys[i] if idempotency_keys else None)
                or spec_json(spec).get("idempotencyKey")
                or new_key(),
            )
            for i, spec in enumerate(specs)
        ]
        answer = await self._call(self._stub.SubmitBatch, pb.SubmitBatchRequest(items=items))
        return [convert(_to_json(item), Submitted) for item in answer.items]

    async def get(self, workload_id: str) -> Workload:
        answer = await self._call(self._stub.GetWorkload, pb.GetWorkloadRequest(id=workload_id))
        return _workload(answer)

    async def list(
        self,
        *,
        namespace: str | None = None,
        status: str | None = None,
        limit: int = 100,
        after: str | None = None,
    ) -> WorkloadPage:
        request = pb.ListWorkloadsRequest(
            namespace=namespace, status=status, limit=limit, after=after
        )
        return convert(_to_json(await self._call(self._stub.ListWorkloads, request)), WorkloadPage)

    def iter_workloads(
        self, *, namespace: str | None = None, status: str | None = None, page_size: int = 1000
    ) -> AsyncGenerator[Workload, None]:
        """Every workload, page after page."""
        return every_workload(self.list, namespace=namespace, status=status, page_size=page_size)

    async def cancel(self, workload_id: str) -> Workload:
        answer = await self._call(self._stub.Cancel, pb.CancelRequest(id=workload_id))
        return _workload(answer)

    async def explain(self, workload_id: str, *, at: str | None = None) -> Explanation:
        """Its state and why, now or ``at`` a past point (RFC 3339, ``-5m``, ``@12345``)."""
        request = pb.ExplainRequest(id=workload_id, at=at)
        answer = await self._call(self._stub.Explain, request)
        body = _to_json(answer)
        body["detail"] = _whole(json_format.MessageToDict(answer.detail))
        return convert(body, Explanation)

    async def update_admission_check(
        self,
        workload_id: str,
        check: str,
        state: str,
        *,
        message: str | None = None,
        attempt: int | None = None,
        requeue_after_seconds: int | None = None,
        pod_set_updates: Sequence[Mapping[str, Any]] | None = None,
    ) -> Workload:
        """An external admission check's controller sets the check's state (admin)."""
        body = check_body(state, message, attempt, requeue_after_seconds, pod_set_updates)
        request = _parse(
            {"id": workload_id, "check": check, **body}, pb.UpdateAdmissionCheckRequest()
        )
        answer = await self._call(self._stub.UpdateAdmissionCheck, request)
        return _workload(answer)

    async def nodes(self) -> builtins.list[dict[str, Any]]:
        """Every node (``kind: Node`` objects, as ``muster get nodes`` reads them)."""
        out: builtins.list[dict[str, Any]] = []
        after: str | None = None
        while True:
            request = pb.ListNodesRequest(limit=NODES_PAGE, after=after)
            page = await self._call(self._admin.ListNodes, request)
            out += [_whole(json_format.MessageToDict(item)) for item in page.items]
            after = page.next if page.HasField("next") else None
            if not after or not page.items:
                return out

    async def report(
        self, *, since: str | None = None, until: str | None = None, namespace: str | None = None
    ) -> Report:
        """Accounting over ``[since, until)`` (RFC 3339, epoch seconds or ``-2h``)."""
        request = pb.ReportRequest(since=since, until=until, namespace=namespace)
        return convert(_to_json(await self._call(self._admin.Report, request)), Report)

    async def events(
        self,
        *,
        workload_id: str | None = None,
        cluster_queue: str | None = None,
        local_queue: str | None = None,
        since: int = 0,
    ) -> builtins.list[Event]:
        """The scope's events after position ``since``, up to now."""
        stream = self.watch(
            workload_id=workload_id,
            cluster_queue=cluster_queue,
            local_queue=local_queue,
            since=since,
            follow=False,
        )
        return [event async for event in stream]

    async def watch(
        self,
        *,
        workload_id: str | None = None,
        cluster_queue: str | None = None,
        local_queue: str | None = None,
        since: int = 0,
        follow: bool = True,
    ) -> AsyncGenerator[Event, None]:
        """As ``AsyncClient.watch``; with ``follow=False``, only the events up to now."""
        scope = {
            "workload_id": workload_id,
            "cluster_queue": cluster_queue,
            "local_queue": local_queue,
        }
        given = {k: v for k, v in scope.items() if v is not None}
        if len(given) != 1:
            raise ValueError("give exactly one of workload_id, cluster_queue, local_queue")
        last = since
        started = time.monotonic()
        attempt = 0
        while True:
            request = pb.WatchRequest(**given, after_position=last, follow=follow)
            stream = self._stub.Watch(request, metadata=self._meta())
            try:
                async for message in stream:
                    event: Event = convert(_to_json(message), Event)
                    if event.position <= last:
                        continue
                    last = event.position
                    started, attempt = time.monotonic(), 0  # progress: a fresh budget
                    yield event
                if not follow:
                    return
                failure: MusterError = TransportError(f"the watch ended after {last}")
            except aio.AioRpcError as err:
                failure = _error(err)
                if not _retryable(err):
                    raise failure from None
            finally:
                stream.cancel()
            attempt += 1
            wait = self.retry.delay(attempt, getattr(failure, "retry_after", None))
            if not self.retry.may_retry(attempt, started, wait):
                raise failure
            await asyncio.sleep(wait)
