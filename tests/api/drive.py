"""One call, over HTTP or over gRPC, answered in one shape: (HTTP status or gRPC code,
error code, JSON body), so a case table can run through both transports."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import grpc
from google.protobuf import json_format

from muster.api.v1 import muster_pb2 as pb
from tests.api.conftest import Api, bearer, grpc_meta


@dataclass
class Answer:
    status: int | grpc.StatusCode  # HTTP status, or gRPC code
    code: str | None  # error.code / muster-error-code; None on success
    field: str | None
    body: Any
    retry_after: str | None = None

    @property
    def ok(self) -> bool:
        return self.code is None


def _body_path(op: str, args: dict[str, Any]) -> tuple[str, str, Any, dict[str, str]]:
    """(method, path, JSON body, extra headers) of an operation over HTTP."""
    match op:
        case "submit":
            headers = {"Idempotency-Key": args["key"]} if args.get("key") else {}
            return "POST", "/v1/workloads", args["workload"], headers
        case "batch":
            items = [
                {**i["workload"], **({"idempotencyKey": i["key"]} if i.get("key") else {})}
                for i in args["items"]
            ]
            return "POST", "/v1/workloads:batch", {"items": items}, {}
        case "get":
            return "GET", f"/v1/workloads/{args['id']}", None, {}
        case "list":
            q = "&".join(f"{k}={v}" for k, v in args.items() if v is not None)
            return "GET", f"/v1/workloads?{q}", None, {}
        case "cancel":
            return "POST", f"/v1/workloads/{args['id']}/cancel", None, {}
        case "events":
            return (
                "GET",
                f"/v1/workloads/{args['id']}/events?after={args.get('after', 0)}",
                None,
                {},
            )
        case "replay":
            return "POST", "/v1/admin/replay", {"untilPosition": args.get("until", 0)}, {}
        case "explain":
            at = f"?at={quote(args['at'])}" if args.get("at") else ""
            return "GET", f"/v1/workloads/{args['id']}/explain{at}", None, {}
        case "update_check":
            path = f"/v1/workloads/{args['id']}/admissionchecks/{args['check']}"
            return "PUT", path, args["body"], {}
        case "report":
            q = "&".join(f"{k}={quote(v)}" for k, v in args.items())
            return "GET", f"/v1/report?{q}", None, {}
        case "nodes":
            q = "&".join(f"{k}={v}" for k, v in args.items())
            return "GET", f"/v1/nodes?{q}", None, {}
    raise ValueError(op)


async def http(api: Api, who: str | None, op: str, args: dict[str, Any]) -> Answer:
    if op == "apply":
        resp = await api.http.post("/v1/apply", data=args["manifests"], headers=bearer(who))
    elif op in ("get_object", "list_objects"):
        from services.intake.objects import object_kind

        k = object_kind(args["kind"])
        base = f"/v1/namespaces/{args.get('namespace', 'default')}" if k.namespaced else "/v1"
        path = f"{base}/{k.plural}" + (f"/{args['name']}" if op == "get_object" else "")
        resp = await api.http.get(path, headers=bearer(who))
    else:
        method, path, body, headers = _body_path(op, args)
        resp = await api.http.request(method, path, json=body, headers={**bearer(who), **headers})
    data = await resp.json()
    err = data.get("error") if isinstance(data, dict) and resp.status >= 400 else None
    return Answer(
        resp.status,
        err["code"] if err else None,
        err.get("field") if err else None,
        data,
        resp.headers.get("Retry-After"),
    )


def _spec(workload: dict[str, Any]) -> pb.WorkloadSpec:
    return json_format.ParseDict(workload, pb.WorkloadSpec())


async def grpc_call(api: Api, who: str | None, op: str, args: dict[str, Any]) -> Answer:
    meta = grpc_meta(who)
    s, a = api.submissions, api.admin
    try:
        match op:
            case "submit":
                reply: Any = await s.Submit(
                    pb.SubmitRequest(
                        workload=_spec(args["workload"]), idempotency_key=args.get("key")
                    ),
                    metadata=meta,
                )
            case "batch":
                reply = await s.SubmitBatch(
                    pb.SubmitBatchRequest(
                        items=[
                            pb.SubmitRequest(
                                workload=_spec(i["workload"]), idempotency_key=i.get("key")
                            )
                            for i in args["items"]
                        ]
                    ),
                    metadata=meta,
                )
            case "get":
                reply = await s.GetWorkload(pb.GetWorkloadRequest(id=args["id"]), metadata=meta)
            case "list":
                reply = await s.ListWorkloads(pb.ListWorkloadsRequest(**args), metadata=meta)
            case "cancel":
                reply = await s.Cancel(pb.CancelRequest(id=args["id"]), metadata=meta)
            case "events":
                request = pb.WatchRequest(
                    workload_id=args["id"], after_position=args.get("after", 0)
                )
                events = [
                    json_format.MessageToDict(e) async for e in s.Watch(request, metadata=meta)
                ]
                return Answer(grpc.StatusCode.OK, None, None, {"events": events})
            case "apply":
                reply = await a.Apply(pb.ApplyRequest(manifests=args["manifests"]), metadata=meta)
            case "get_object":
                reply = await a.GetObject(
                    pb.ObjectRef(
                        kind=args["kind"], name=args["name"], namespace=args.get("namespace")
                    ),
                    metadata=meta,
                )
            case "list_objects":
                reply = await a.ListObjects(
                    pb.ListObjectsRequest(kind=args["kind"], namespace=args.get("namespace")),
                    metadata=meta,
                )
            case "replay":
                reply = await a.Replay(
                    pb.ReplayRequest(until_position=args.get("until", 0)), metadata=meta
                )
            case "explain":
                request = pb.ExplainRequest(id=args["id"], at=args.get("at"))
                reply = await s.Explain(request, metadata=meta)
            case "update_check":
                update = json_format.ParseDict(
                    {"id": args["id"], "check": args["check"], **args["body"]},
                    pb.UpdateAdmissionCheckRequest(),
                )
                reply = await s.UpdateAdmissionCheck(update, metadata=meta)
            case "report":
                reply = await a.Report(pb.ReportRequest(**args), metadata=meta)
            case "nodes":
                reply = await a.ListNodes(pb.ListNodesRequest(**args), metadata=meta)
            case _:
                raise ValueError(op)
    except grpc.aio.AioRpcError as exc:
        trailing = dict(exc.trailing_metadata() or ())
        return Answer(
            exc.code(),
            str(trailing.get("muster-error-code")),
            trailing.get("muster-error-field"),  # type: ignore[arg-type]
            exc.details(),
            trailing.get("retry-after"),  # type: ignore[arg-type]
        )
    return Answer(
        grpc.StatusCode.OK,
        None,
        None,
        json_format.MessageToDict(reply, always_print_fields_with_no_presence=True),
    )
