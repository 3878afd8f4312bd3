"""The web UI's routes: its static pages under ``/ui/`` and the JSON they read under
``/v1/ui/``, each page as it is now or (``?at=POSITION`` or ``?time=RFC3339``) as it was
at a past moment, rebuilt from the log (``history``).

Every JSON route authenticates like the rest of the API (a Bearer token when auth is on)
and shows a tenant only its namespaces' workloads; ClusterQueues, cohorts and nodes are
cluster-scoped, as in ``muster get``. The static files carry no data and need no token.
"""

from __future__ import annotations

import contextlib
import math
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import datetime
from pathlib import Path
from typing import Any

import orjson
from aiohttp import web

from muster.core.access.policy import Action, visible_namespaces
from muster.core.access.tokens import Principal
from muster.core.events import Envelope
from muster.core.intake.refusal import not_found
from muster.core.model.times import rfc3339
from muster.core.queueing import visibility
from muster.core.views.workloads import WorkloadsState
from services.intake.errors import Refused, refuse
from services.intake.events import event_json
from services.intake.ops import Intake
from services.intake.ui import pages
from services.intake.ui.history import History

STATIC = Path(__file__).parent / "static"
MAX_POSITION = 2**62
LIST_LIMIT = 500  # rows a list shows unless asked for more (?limit=, at most MAX_LIST)
MAX_LIST = 100_000
HISTORY = web.AppKey("ui-history", History)
Handler = Callable[[web.Request, Intake, Principal], Awaitable[web.StreamResponse]]
Wrap = Callable[[Handler], Callable[[web.Request], Awaitable[web.StreamResponse]]]
Page = Callable[[WorkloadsState, pages.Visible], dict[str, Any]]


def routes(app: web.Application, intake: Intake, wrap: Wrap) -> None:
    """``wrap`` is the API's own handler wrapper: authentication and the error shape."""
    app[HISTORY] = History(intake.ctx.loop.store)
    r = app.router
    r.add_get("/ui", _to_index)
    r.add_get("/ui/", _index)
    r.add_static("/ui/static/", STATIC)
    r.add_get("/v1/ui/clock", wrap(clock))
    r.add_get("/v1/ui/queues", wrap(_page(lambda s, v: pages.queues(s))))
    r.add_get("/v1/ui/pending", wrap(pending))
    r.add_get("/v1/ui/workloads", wrap(_page(lambda s, v: {"items": pages.workloads(s, v)})))
    r.add_get("/v1/ui/workloads/{id}", wrap(workload))
    r.add_get("/v1/ui/nodes", wrap(_page(lambda s, v: {"nodes": pages.nodes(s, v)})))
    r.add_get(
        "/v1/ui/provisioningrequests",
        wrap(_page(lambda s, v: {"items": pages.requests(s, v)})),
    )
    r.add_get("/v1/ui/events", wrap(events))


async def _to_index(_: web.Request) -> web.StreamResponse:
    raise web.HTTPFound("/ui/")


async def _index(_: web.Request) -> web.StreamResponse:
    return web.FileResponse(STATIC / "index.html")


def _json(body: Any) -> web.Response:
    return web.Response(body=orjson.dumps(body), content_type="application/json")


def _visible(intake: Intake, who: Principal) -> pages.Visible:
    return lambda namespace: intake.access.visible(who, namespace)


# -- which moment ---------------------------------------------------------------------------


async def _position(request: web.Request, intake: Intake) -> int | None:
    """The past position asked for (``at`` or ``time``), or None: now."""
    q = request.query
    if q.get("at"):
        return _bounded(request, "at", 0)
    if q.get("time"):
        return await request.app[HISTORY].position_at(_time(q["time"]))
    return None


RELATIVE = re.compile(r"^-(\d+(?:\.\d+)?)([smhd])$")
UNIT = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def _time(raw: str) -> float:
    """RFC 3339 (``2026-11-26T10:03:00Z``), epoch seconds, or ago (``-5m``, ``-2h``)."""
    ago = RELATIVE.match(raw.strip())
    if ago:
        return time.time() - float(ago[1]) * UNIT[ago[2]]
    try:
        value = float(raw)
    except ValueError:
        pass
    else:
        if math.isfinite(value):
            return value
    try:
        at = datetime.fromisoformat(raw.replace("Z", "+00:00"))
        at.timestamp()
    except (ValueError, OverflowError):
        raise refuse(
            "InvalidQuery",
            "time must be RFC 3339 (2026-11-26T10:03:00Z), epoch seconds or ago (-5m)",
            "time",
        ) from None
    if at.tzinfo is None:
        raise refuse("InvalidQuery", "time needs a zone (Z or +01:00)", "time")
    return at.timestamp()


@contextlib.asynccontextmanager
async def _state(request: web.Request, intake: Intake) -> AsyncIterator[tuple[WorkloadsState, int]]:
    """The state to show and its position: intake's own now, or one rebuilt from the log."""
    position = await _position(request, intake)
    if position is None:
        await intake.ctx.loop.step()
        yield intake.ctx.state, intake.ctx.loop.runner.position
        return
    async with request.app[HISTORY].at(position) as state:
        yield state, position


def _page(render: Page) -> Handler:
    async def page(request: web.Request, intake: Intake, who: Principal) -> web.Response:
        limit = _limit(request)
        async with _state(request, intake) as (state, position):
            body = pages.clock(state, position) | render(state, _visible(intake, who))
        return _json(_first(body, limit))

    return page


# -- pages ------------------------------------------------------------------------------


async def clock(request: web.Request, intake: Intake, who: Principal) -> web.Response:
    """What the time slider spans: the log's head and the moment intake has folded; with
    ``time``, the position it falls at (``at``)."""
    at = await _position(request, intake)
    await intake.ctx.loop.step()
    store = intake.ctx.loop.store
    head = await store.head()
    first = await store.read_all(0, limit=1)
    return _json(
        {
            "head": head,
            "position": intake.ctx.loop.runner.position,
            "time": rfc3339(intake.ctx.state.now) if intake.ctx.state.now else None,
            "firstTime": rfc3339(first[0].occurred_at) if first else None,
        }
        | ({} if at is None else {"at": at})
    )


async def pending(request: web.Request, intake: Intake, who: Principal) -> web.Response:
    visible = _visible(intake, who)
    limit = _limit(request)
    async with _state(request, intake) as (state, position):
        if state is intake.ctx.state:  # now: the visibility API's own (cached) dry run
            items = intake.pending.cache.at(intake.ctx.loop).items
        else:
            items = visibility.pending(state.queue)
        body = pages.clock(state, position) | {"items": pages.pending(items, visible)}
    return _json(_first(body, limit))


async def workload(request: web.Request, intake: Intake, who: Principal) -> web.Response:
    wid = request.match_info["id"]
    async with _state(request, intake) as (state, position):
        view = state.workloads.get(wid)
        if view is None:
            raise Refused(not_found(f"workload {wid} at position {position}"))
        intake.access.require(who, Action.READ, view.namespace, view.queue_name)  # as GET
        body = pages.clock(state, position) | {"workload": pages.workload(state, view)}
        history = view.gang_id or wid  # a gang member's history is its gang's
    events = await intake.ctx.loop.store.read_correlated(history)
    body["events"] = [event_json(e) for e in events if e.position <= position]
    return _json(body)


async def events(request: web.Request, intake: Intake, who: Principal) -> web.StreamResponse:
    """Every event the caller may see after a position: its namespaces' workloads' and,
    for a caller that sees every namespace, the rest (configuration, nodes, standalone
    requests). ``?watch=1``: newline-delimited JSON following new ones, as the other
    watches; live mode's one stream for every page (a browser opens at most six
    connections to a host, too few for one watch per ClusterQueue)."""
    after = _bounded(request, "after", 0)
    sees_all = visible_namespaces(who) is None

    def keep(env: Envelope) -> bool:
        view = intake.ctx.state.workloads.get(env.correlation_id or "")
        if view is not None:
            return intake.access.visible(who, view.namespace)
        return sees_all

    await intake.ctx.loop.step()
    if request.query.get("watch", "").lower() not in ("1", "true", "yes"):
        limit = min(max(_bounded(request, "limit", 1000), 1), 1000)
        found = await intake.events.everything(keep, after, limit)
        return _json({"events": [event_json(e) for e in found]})
    stream = intake.events.follow_everything(keep, after)
    response = web.StreamResponse(headers={"Content-Type": "application/x-ndjson"})
    await response.prepare(request)
    async for event in stream:
        await response.write(orjson.dumps(event) + b"\n")
    return response


def _limit(request: web.Request) -> int:
    return min(max(_bounded(request, "limit", LIST_LIMIT), 1), MAX_LIST)


def _first(body: dict[str, Any], limit: int) -> dict[str, Any]:
    """A list's first ``limit`` items and how many there are: a page shows the newest
    (workloads) or the front of the queue (pending), not a hundred thousand rows."""
    items = body.get("items")
    if isinstance(items, list):
        body["total"] = len(items)
        body["items"] = items[:limit]
    return body


def _bounded(request: web.Request, name: str, default: int) -> int:
    try:
        value = int(request.query.get(name, default))
        if not 0 <= value <= MAX_POSITION:
            raise ValueError
    except ValueError:
        raise refuse("InvalidQuery", f"{name} must be an integer from 0 to 2^62", name) from None
    return value
