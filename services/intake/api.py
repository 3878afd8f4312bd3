"""Intake's HTTP API (aiohttp): a thin translation of ``ops.Intake`` to JSON over HTTP.

Every handler authenticates the caller (``Authorization: Bearer``), calls one operation
and answers its result, or the operation's refusal in the one error shape.
The OpenAPI document describing all of it is served at ``/openapi.json``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import orjson
from aiohttp import web

from muster.core.access.tokens import Authenticator, Principal
from muster.runtime.loop import DeciderLoop
from muster.store import unavailable
from services.intake import errors, openapi
from services.intake.errors import Refused, refuse
from services.intake.events import Scope
from services.intake.objects import KINDS
from services.intake.ops import Intake
from services.intake.ui.routes import routes as ui_routes

INTAKE = web.AppKey("intake", Intake)
Handler = Callable[[web.Request, Intake, Principal], Awaitable[web.StreamResponse]]


def routes(
    app: web.Application, loop: DeciderLoop, authenticator: Authenticator | None = None
) -> Intake:
    intake = Intake(loop, authenticator or Authenticator(None, None))
    app[INTAKE] = intake

    async def close(app: web.Application) -> None:
        await app[INTAKE].close()

    app.on_cleanup.append(close)
    r = app.router
    r.add_get("/openapi.json", openapi_document)
    r.add_post("/v1/workloads", _h(submit))
    r.add_post("/v1/workloads:batch", _h(submit_batch))
    r.add_get("/v1/workloads", _h(list_workloads))
    r.add_get("/v1/workloads/{id}", _h(get_workload))
    r.add_delete("/v1/workloads/{id}", _h(cancel))
    r.add_post("/v1/workloads/{id}/cancel", _h(cancel))
    r.add_get("/v1/workloads/{id}/events", _h(workload_events))
    r.add_get("/v1/workloads/{id}/explain", _h(explain_workload))
    r.add_put("/v1/workloads/{id}/admissionchecks/{check}", _h(update_check))
    r.add_get("/v1/clusterqueues/{name}/pendingworkloads", _h(pending_in_cluster_queue))
    r.add_get("/v1/clusterqueues/{name}/events", _h(cluster_queue_events))
    r.add_get(
        "/v1/namespaces/{namespace}/localqueues/{name}/pendingworkloads",
        _h(pending_in_local_queue),
    )
    r.add_get("/v1/namespaces/{namespace}/localqueues/{name}/events", _h(local_queue_events))
    r.add_post("/v1/provisioningrequests", _h(create_request))
    r.add_get("/v1/provisioningrequests", _h(list_requests))
    r.add_get("/v1/namespaces/{namespace}/provisioningrequests/{name}", _h(get_request))
    r.add_delete("/v1/namespaces/{namespace}/provisioningrequests/{name}", _h(delete_request))
    r.add_post("/v1/apply", _h(apply))
    r.add_post("/v1/admin/replay", _h(replay))
    r.add_get("/v1/report", _h(report))
    ui_routes(app, intake, _h)  # the web UI at /ui/ and the JSON it reads at /v1/ui/
    for k in KINDS:
        if k.kind == "ProvisioningRequest":
            continue  # its own routes above answer with its conditions
        r.add_get(f"/v1/{k.plural}", _h(_list_objects(k.plural)))
        if k.namespaced:
            r.add_get(f"/v1/namespaces/{{namespace}}/{k.plural}", _h(_list_objects(k.plural)))
            r.add_get(
                f"/v1/namespaces/{{namespace}}/{k.plural}/{{name}}", _h(_get_object(k.plural))
            )
        else:
            r.add_get(f"/v1/{k.plural}/{{name}}", _h(_get_object(k.plural)))
    return intake


def _h(handler: Handler) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
    async def wrapped(request: web.Request) -> web.StreamResponse:
        intake = request.app[INTAKE]
        try:
            who = intake.access.authenticate(request.headers.get("Authorization"))
            return await handler(request, intake, who)
        except Refused as exc:
            return errors.response(exc.refusal)
        except Exception as exc:
            if not unavailable(exc):
                raise
            return errors.response(errors.STORE_AWAY)

    wrapped.__name__ = handler.__name__
    return wrapped


def _json(body: Any, status: int = 200) -> web.Response:
    return web.Response(body=orjson.dumps(body), status=status, content_type="application/json")


async def _body(request: web.Request) -> Any:
    return _decode(await _raw(request))


def _decode(raw: bytes) -> Any:
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise refuse("MalformedJSON", f"body is not valid JSON: {exc}") from None


async def _raw(request: web.Request) -> bytes:
    limit = request.app[INTAKE].settings.max_body_bytes
    if request.content_length is not None and request.content_length > limit:
        raise refuse(
            "PayloadTooLarge",
            f"body of {request.content_length} bytes exceeds the limit of {limit}",
        )
    content = request.content
    if content.is_eof():  # all of it came with the headers (a submission): no awaits
        body = content.read_nowait()
        if len(body) > limit:  # chunked: no length was declared
            raise refuse("PayloadTooLarge", "body exceeds the size limit")
        return body
    try:
        return await request.read()
    except web.HTTPRequestEntityTooLarge:
        raise refuse("PayloadTooLarge", "body exceeds the size limit") from None


def _int(request: web.Request, name: str, default: int, lo: int, hi: int) -> int:
    raw = request.query.get(name)
    try:
        value = default if raw is None else int(raw)
        if not lo <= value <= hi:
            raise ValueError
    except ValueError:
        raise refuse("InvalidQuery", f"{name} must be an integer from {lo} to {hi}", name) from None
    return value


def _flag(request: web.Request, name: str) -> bool:
    return request.query.get(name, "").lower() in ("1", "true", "yes")


async def openapi_document(_: web.Request) -> web.Response:
    return _json(openapi.document())


# -- workloads ------------------------------------------------------------------------


async def submit(request: web.Request, intake: Intake, who: Principal) -> web.Response:
    body = await _body(request)
    done = await intake.workloads.submit(who, body, request.headers.get("Idempotency-Key"))
    return _json(done.workload, 201 if done.created else 200)


async def submit_batch(request: web.Request, intake: Intake, who: Principal) -> web.Response:
    body = await _body(request)
    if not isinstance(body, dict) or set(body) != {"items"}:
        raise refuse("InvalidField", 'must be {"items": [workload, ...]}', "items")
    done = await intake.workloads.submit_batch(who, body["items"])
    created = any(d.created for d in done)
    return _json(
        {"items": [{"workload": d.workload, "created": d.created} for d in done]},
        201 if created else 200,
    )


async def list_workloads(request: web.Request, intake: Intake, who: Principal) -> web.Response:
    q = request.query
    return _json(
        await intake.workloads.page(
            who,
            namespace=q.get("namespace") or None,
            status=q.get("status") or None,
            limit=_int(request, "limit", 100, 1, 1000),
            after=q.get("after") or None,
        )
    )


async def get_workload(request: web.Request, intake: Intake, who: Principal) -> web.Response:
    return _json(await intake.workloads.get(who, request.match_info["id"]))


async def explain_workload(request: web.Request, intake: Intake, who: Principal) -> web.Response:
    """Its state and why, now or ``at`` a past point (RFC 3339, -5m, @position)."""
    at = request.query.get("at")
    return _json(await intake.explain.explain(who, request.match_info["id"], at))


async def cancel(request: web.Request, intake: Intake, who: Principal) -> web.Response:
    return _json(await intake.workloads.cancel(who, request.match_info["id"]), 202)


async def update_check(request: web.Request, intake: Intake, who: Principal) -> web.Response:
    """Admin: an external admission check's controller sets the check's state."""
    m = request.match_info
    body = await _body(request)
    return _json(await intake.workloads.update_check(who, m["id"], m["check"], body))


# -- events ------------------------------------------------------------------------------


async def _events(request: web.Request, intake: Intake, who: Principal, scope: Scope) -> Any:
    after = _int(request, "after", 0, 0, 2**62)
    if not _flag(request, "watch"):
        limit = _int(request, "limit", 1000, 1, 1000)
        items = await intake.events.read(who, scope, after, limit)
        body: dict[str, Any] = {"events": items}
        if scope.workload_id is not None:
            body["id"] = scope.workload_id
        return _json(body)
    # A watch: newline-delimited JSON, one event a line, until the client goes away.
    stream = await intake.events.watch(who, scope, after, follow=True)  # access checked here
    response = web.StreamResponse(headers={"Content-Type": "application/x-ndjson"})
    await response.prepare(request)
    async for event in stream:
        await response.write(orjson.dumps(event) + b"\n")
    return response


async def workload_events(request: web.Request, intake: Intake, who: Principal) -> Any:
    return await _events(request, intake, who, Scope(workload_id=request.match_info["id"]))


async def cluster_queue_events(request: web.Request, intake: Intake, who: Principal) -> Any:
    return await _events(request, intake, who, Scope(cluster_queue=request.match_info["name"]))


async def local_queue_events(request: web.Request, intake: Intake, who: Principal) -> Any:
    scope = Scope(local_queue=(request.match_info["namespace"], request.match_info["name"]))
    return await _events(request, intake, who, scope)


# -- visibility --------------------------------------------------------------------------


async def pending_in_cluster_queue(
    request: web.Request, intake: Intake, who: Principal
) -> web.Response:
    """Kueue's visibility API: a ClusterQueue's pending workloads in admission order."""
    return _json(
        await intake.pending.page(
            who,
            cluster_queue=request.match_info["name"],
            limit=_int(request, "limit", 1000, 1, 100_000),
            offset=_int(request, "offset", 0, 0, 2**31),
        )
    )


async def pending_in_local_queue(
    request: web.Request, intake: Intake, who: Principal
) -> web.Response:
    return _json(
        await intake.pending.page(
            who,
            local_queue=(request.match_info["namespace"], request.match_info["name"]),
            limit=_int(request, "limit", 1000, 1, 100_000),
            offset=_int(request, "offset", 0, 0, 2**31),
        )
    )


# -- standalone ProvisioningRequests -----------------------------------------------------


async def create_request(request: web.Request, intake: Intake, who: Principal) -> web.Response:
    view, created = await intake.requests.create(who, await _body(request))
    return _json(view, 201 if created else 200)


async def list_requests(request: web.Request, intake: Intake, who: Principal) -> web.Response:
    """Every request (``?standalone=1``: only standalone ones), oldest first."""
    return _json(
        await intake.requests.page(
            who,
            request.query.get("namespace") or None,
            _flag(request, "standalone"),
            _int(request, "limit", 1000, 1, 1000),
            request.query.get("after") or None,
        )
    )


async def get_request(request: web.Request, intake: Intake, who: Principal) -> web.Response:
    m = request.match_info
    return _json(await intake.requests.get(who, m["namespace"], m["name"]))


async def delete_request(request: web.Request, intake: Intake, who: Principal) -> web.Response:
    m = request.match_info
    return _json(await intake.requests.delete(who, m["namespace"], m["name"]), 202)


# -- manifests and configured objects ------------------------------------------------------


async def apply(request: web.Request, intake: Intake, who: Principal) -> web.Response:
    """Kubernetes manifests (multi-document YAML, or JSON), as ``muster apply -f``."""
    return _json({"items": await intake.applies.apply(who, await _raw(request))})


def _list_objects(plural: str) -> Handler:
    async def list_objects(request: web.Request, intake: Intake, who: Principal) -> web.Response:
        return _json(
            await intake.objects.page(
                who,
                plural,
                request.match_info.get("namespace") or request.query.get("namespace") or None,
                _int(request, "limit", 1000, 1, 1000),
                request.query.get("after") or None,
            )
        )

    return list_objects


def _get_object(plural: str) -> Handler:
    async def get_object(request: web.Request, intake: Intake, who: Principal) -> web.Response:
        m = request.match_info
        return _json(await intake.objects.get(who, plural, m["name"], m.get("namespace")))

    return get_object


async def report(request: web.Request, intake: Intake, who: Principal) -> web.Response:
    """Accounting over a time range (``muster report``)."""
    q = request.query
    return _json(
        await intake.report.report(
            who, q.get("since") or None, q.get("until") or None, q.get("namespace") or None
        )
    )


async def replay(request: web.Request, intake: Intake, who: Principal) -> web.Response:
    """Admin: rebuild the queue's state from the store up to a position (default: all)."""
    raw = await _raw(request)
    body = _decode(raw) if raw.strip() else {}
    if not isinstance(body, dict) or set(body) - {"untilPosition"}:
        raise refuse("InvalidField", 'must be {"untilPosition": N} or empty', "body")
    until = body.get("untilPosition")
    if until is not None and (isinstance(until, bool) or not isinstance(until, int)):
        raise refuse("InvalidField", "must be a position (an integer)", "untilPosition")
    return _json(await intake.admin.replay(who, until))
