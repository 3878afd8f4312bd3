"""Intake's HTTP API (aiohttp): submit, get, list, cancel, and a workload's event history.

Validation happens before anything is appended: a refused request leaves no event.
A submission's idempotency key picks its workload id, so a retry appends against
the same stream and optimistic concurrency turns it into "return the original".
"""

from __future__ import annotations

import time
import uuid
from typing import Any

import orjson
from aiohttp import web

from muster.core import inputs
from muster.core.events import StreamAppend
from muster.core.events.workload import WorkloadSubmitted
from muster.core.model import parse
from muster.core.model.fields import InvalidInput
from muster.core.queueing import visibility
from muster.core.views.workloads import TERMINAL, WorkloadsState, submitted_view
from muster.runtime.loop import DeciderLoop
from muster.store import ConcurrencyConflict
from services.intake.batcher import GroupCommitter
from services.intake.errors import error

LOOP = web.AppKey("loop", DeciderLoop)
COMMITTER = web.AppKey("committer", GroupCommitter)
MAX_LIST = 1000


def routes(app: web.Application, loop: DeciderLoop) -> None:
    app[LOOP] = loop
    app[COMMITTER] = GroupCommitter(loop.store, producer="intake")
    app[VISIBILITY] = _Visibility()

    async def close_committer(app: web.Application) -> None:
        await app[COMMITTER].close()

    app.on_cleanup.append(close_committer)
    app.router.add_post("/v1/workloads", submit)
    app.router.add_get("/v1/workloads", list_workloads)
    app.router.add_get("/v1/workloads/{id}", get_workload)
    app.router.add_delete("/v1/workloads/{id}", cancel)
    app.router.add_post("/v1/workloads/{id}/cancel", cancel)
    app.router.add_get("/v1/workloads/{id}/events", history)
    app.router.add_get("/v1/clusterqueues/{name}/pendingworkloads", pending_in_cluster_queue)
    app.router.add_get(
        "/v1/namespaces/{namespace}/localqueues/{name}/pendingworkloads", pending_in_local_queue
    )
    app.router.add_post("/v1/provisioningrequests", create_request)
    app.router.add_get("/v1/provisioningrequests", list_requests)
    app.router.add_get("/v1/namespaces/{namespace}/provisioningrequests/{name}", get_request)
    app.router.add_delete("/v1/namespaces/{namespace}/provisioningrequests/{name}", delete_request)


class _Visibility:
    """The dry-run cycle behind the visibility API. It costs O(pending), so under load it
    is recomputed at most every ``MAX_AGE`` seconds (sooner for a workload it lacks)."""

    MAX_AGE = 1.0

    def __init__(self) -> None:
        self.position = -1
        self.computed_at = 0.0
        self.items: list[visibility.PendingItem] = []
        self.by_id: dict[str, visibility.PendingItem] = {}

    def at(self, loop: DeciderLoop, wanted: str | None = None) -> _Visibility:
        moved = loop.runner.position != self.position
        stale = time.monotonic() - self.computed_at >= self.MAX_AGE
        if moved and (stale or self.position < 0 or (wanted and wanted not in self.by_id)):
            self.items = visibility.pending(loop.runner.state.queue)
            self.by_id = {i.workload.id: i for i in self.items}
            self.position = loop.runner.position
            self.computed_at = time.monotonic()
        return self


VISIBILITY = web.AppKey("visibility", _Visibility)


def _state(request: web.Request) -> WorkloadsState:
    state: WorkloadsState = request.app[LOOP].runner.state
    return state


async def _body(request: web.Request) -> Any:
    if (
        request.content_length is not None
        and request.content_length > request.app[LOOP].settings.max_body_bytes
    ):
        raise _Refused(
            413,
            "PayloadTooLarge",
            f"body of {request.content_length} bytes exceeds the limit of "
            f"{request.app[LOOP].settings.max_body_bytes}",
        )
    try:
        raw = await request.read()
    except web.HTTPRequestEntityTooLarge:
        raise _Refused(413, "PayloadTooLarge", "body exceeds the size limit") from None
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise _Refused(400, "MalformedJSON", f"body is not valid JSON: {exc}") from None


class _Refused(Exception):
    def __init__(self, status: int, code: str, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.status, self.code, self.message, self.field = status, code, message, field

    def response(self) -> web.Response:
        return error(self.status, self.code, self.message, self.field)


async def submit(request: web.Request) -> web.Response:
    loop = request.app[LOOP]
    try:
        body = await _body(request)
        key = request.headers.get("Idempotency-Key")
        if isinstance(body, dict) and "idempotencyKey" in body:
            body = dict(body)
            body_key = body.pop("idempotencyKey")
            if not isinstance(body_key, str) or not 0 < len(body_key) <= 256:
                raise _Refused(
                    422, "InvalidField", "must be a string of 1 to 256 characters", "idempotencyKey"
                )
            key = key or body_key
        spec = parse.workload(body)
        if spec.consumes is None:  # a consumer runs on its request's nodes, not a queue
            await _require_queue(loop, spec.namespace, spec.queue_name)
    except InvalidInput as exc:
        return error(422, "InvalidField", exc.problem, exc.path)
    except _Refused as exc:
        return exc.response()
    wid = inputs.workload_id(spec.namespace, key) if key else uuid.uuid4().hex[:16]
    new = inputs.submission(wid, spec, time.time(), key)
    try:
        await request.app[COMMITTER].append(StreamAppend(new.stream_id, 0, [new]))
    except ConcurrencyConflict:
        return await _retried(loop, wid, inputs.digest(spec))
    loop.appended()
    assert isinstance(new.event, WorkloadSubmitted)
    view = submitted_view(new.event, new.occurred_at)
    return web.json_response(view.to_json(), status=201)


async def _retried(loop: DeciderLoop, wid: str, digest: str) -> web.Response:
    first = (await loop.store.read_stream(f"workload-{wid}"))[0].event
    if getattr(first, "request_digest", None) != digest:
        return error(
            409, "IdempotencyKeyReused", "this idempotency key was used for a different workload"
        )
    await loop.step()
    return web.json_response(_view(loop, wid), status=200)


def _view(loop: DeciderLoop, wid: str) -> dict[str, Any]:
    view = loop.runner.state.workloads.get(wid)
    return view.to_json() if view is not None else {"id": wid, "status": "Pending"}


async def _require_queue(loop: DeciderLoop, namespace: str, name: str) -> None:
    key = f"{namespace}/{name}"
    if key not in loop.runner.state.local_queues:
        await loop.step()  # configuration may have been applied a moment ago
    if key not in loop.runner.state.local_queues:
        raise _Refused(
            422,
            "UnknownQueue",
            f"LocalQueue {name!r} does not exist in namespace {namespace!r}",
            "queueName",
        )


async def get_workload(request: web.Request) -> web.Response:
    loop = request.app[LOOP]
    await loop.step()
    view = loop.runner.state.workloads.get(request.match_info["id"])
    if view is None:
        return error(404, "NotFound", f"workload {request.match_info['id']} not found")
    body = view.to_json()
    if view.id in loop.runner.state.queue.pending:
        item = request.app[VISIBILITY].at(loop, view.id).by_id.get(view.id)
        if item is not None:
            current = item.to_json()
            body["queue"] = {
                k: current[k]
                for k in ("positionInClusterQueue", "positionInLocalQueue", "reason", "message")
            }
    return web.json_response(body)


def _page_args(request: web.Request) -> tuple[int, int]:
    try:
        limit = int(request.query.get("limit", "1000"))
        offset = int(request.query.get("offset", "0"))
        if not 0 < limit <= visibility.MAX_LIMIT or offset < 0:
            raise ValueError
    except ValueError:
        raise _Refused(
            400,
            "InvalidQuery",
            f"limit must be 1 to {visibility.MAX_LIMIT} and offset at least 0",
            "limit",
        ) from None
    return limit, offset


async def pending_in_cluster_queue(request: web.Request) -> web.Response:
    """Kueue's visibility API: a ClusterQueue's pending workloads in admission order."""
    loop = request.app[LOOP]
    try:
        limit, offset = _page_args(request)
    except _Refused as exc:
        return exc.response()
    await loop.step()
    name = request.match_info["name"]
    if name not in loop.runner.state.queue.cluster_queues:
        return error(404, "NotFound", f"ClusterQueue {name} not found")
    items = request.app[VISIBILITY].at(loop).items
    return web.json_response(
        {"items": visibility.page(items, cluster_queue=name, limit=limit, offset=offset)}
    )


async def pending_in_local_queue(request: web.Request) -> web.Response:
    loop = request.app[LOOP]
    try:
        limit, offset = _page_args(request)
    except _Refused as exc:
        return exc.response()
    await loop.step()
    ns, name = request.match_info["namespace"], request.match_info["name"]
    if f"{ns}/{name}" not in loop.runner.state.local_queues:
        return error(404, "NotFound", f"LocalQueue {name} not found in namespace {ns}")
    items = request.app[VISIBILITY].at(loop).items
    return web.json_response(
        {"items": visibility.page(items, local_queue=(ns, name), limit=limit, offset=offset)}
    )


async def list_workloads(request: web.Request) -> web.Response:
    loop = request.app[LOOP]
    await loop.step()
    q = request.query
    try:
        limit = int(q.get("limit", "100"))
        if not 0 < limit <= MAX_LIST:
            raise ValueError
    except ValueError:
        return error(400, "InvalidQuery", f"limit must be an integer from 1 to {MAX_LIST}", "limit")
    items = [
        v
        for v in _state(request).workloads.values()
        if (not q.get("namespace") or v.namespace == q["namespace"])
        and (not q.get("status") or v.status == q["status"])
    ]
    after = q.get("after")
    if after:
        ids = [v.id for v in items]
        items = items[ids.index(after) + 1 :] if after in ids else []
    page = items[:limit]
    return web.json_response(
        {
            "items": [v.to_json() for v in page],
            "next": page[-1].id if len(items) > limit else None,
        }
    )


async def cancel(request: web.Request) -> web.Response:
    loop = request.app[LOOP]
    await loop.step()
    wid = request.match_info["id"]
    view = loop.runner.state.workloads.get(wid)
    if view is None:
        return error(404, "NotFound", f"workload {wid} not found")
    if view.status in TERMINAL:
        return error(409, "AlreadyFinished", f"workload {wid} is already {view.status}")
    new = inputs.cancellation(wid, time.time())
    await loop.store.append(
        [StreamAppend(new.stream_id, None, [new])], producer="intake", recorded_at=time.time()
    )
    loop.appended()
    await loop.step()
    return web.json_response(_view(loop, wid), status=202)


async def history(request: web.Request) -> web.Response:
    loop = request.app[LOOP]
    wid = request.match_info["id"]
    envs = await loop.store.read_correlated(wid)
    if not envs:
        return error(404, "NotFound", f"workload {wid} not found")
    return web.json_response({"id": wid, "events": [describe_row(e) for e in envs]})


def describe_row(env: Any) -> dict[str, Any]:
    ev = env.event
    return {
        "position": env.position,
        "time": env.occurred_at,
        "type": env.type,
        "producer": env.producer,
        "stream": env.stream_id,
        "reason": getattr(ev, "reason", None) or getattr(ev, "outcome", None),
        "message": getattr(ev, "message", None),
    }


# -- standalone ProvisioningRequests -----------------------------------------------------


async def create_request(request: web.Request) -> web.Response:
    """Create a standalone ProvisioningRequest. Its spec is immutable, as in Kubernetes:
    the same spec again answers 200 with the request, another spec 409."""
    loop = request.app[LOOP]
    try:
        spec = parse.provisioning_request(await _body(request))
    except InvalidInput as exc:
        return error(422, "InvalidField", exc.problem, exc.path)
    except _Refused as exc:
        return exc.response()
    new = inputs.provisioning_request(spec, time.time())
    try:
        await request.app[COMMITTER].append(StreamAppend(new.stream_id, 0, [new]))
    except ConcurrencyConflict:
        first = (await loop.store.read_stream(new.stream_id))[0].event
        if getattr(first, "spec", None) != spec:
            return error(
                409,
                "AlreadyExists",
                f"ProvisioningRequest {spec.key} already exists with another spec; a "
                "request's spec is immutable (and names are not reused after deletion)",
            )
        await loop.step()
        return web.json_response(_request_view(loop, spec.key), status=200)
    loop.appended()
    await loop.step()
    return web.json_response(_request_view(loop, spec.key), status=201)


def _request_view(loop: DeciderLoop, rid: str) -> dict[str, Any]:
    view = _state_of(loop).requests.get(rid)
    return view.to_json() if view is not None else {"id": rid, "status": "Pending"}


def _state_of(loop: DeciderLoop) -> WorkloadsState:
    state = loop.runner.state
    assert isinstance(state, WorkloadsState)
    return state


async def list_requests(request: web.Request) -> web.Response:
    """Every request, standalone and made for queued workloads (``?standalone=1``: only
    the former), oldest first."""
    loop = request.app[LOOP]
    await loop.step()
    only_standalone = request.query.get("standalone") in ("1", "true")
    namespace = request.query.get("namespace")
    items = [
        v.to_json()
        for v in _state_of(loop).requests.values()
        if (v.spec is not None or not only_standalone)
        and (namespace is None or (v.spec is not None and v.spec.namespace == namespace))
    ]
    return web.json_response({"items": items[:MAX_LIST]})


async def get_request(request: web.Request) -> web.Response:
    loop = request.app[LOOP]
    await loop.step()
    rid = f"{request.match_info['namespace']}/{request.match_info['name']}"
    if rid not in _state_of(loop).requests:
        return error(404, "NotFound", f"ProvisioningRequest {rid} not found")
    return web.json_response(_request_view(loop, rid))


async def delete_request(request: web.Request) -> web.Response:
    """Delete: node creation stops; nodes already there go when unneeded (GKE's rules)."""
    loop = request.app[LOOP]
    await loop.step()
    rid = f"{request.match_info['namespace']}/{request.match_info['name']}"
    view = _state_of(loop).requests.get(rid)
    if view is None or view.spec is None:
        return error(404, "NotFound", f"ProvisioningRequest {rid} not found")
    if view.deleted:
        return error(409, "AlreadyDeleted", f"ProvisioningRequest {rid} is already deleted")
    new = inputs.provisioning_deletion(rid, time.time())
    await loop.store.append(
        [StreamAppend(new.stream_id, None, [new])], producer="intake", recorded_at=time.time()
    )
    loop.appended()
    await loop.step()
    return web.json_response(_request_view(loop, rid), status=202)
