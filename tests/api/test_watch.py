"""Event streams: a workload's or a queue's events, followed as they are committed, and
resumed from the last position seen without loss or repeats, over HTTP and gRPC."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import grpc

from muster.api.v1 import muster_pb2 as pb
from tests.api.conftest import Api, bearer, grpc_meta, workload


async def _submit(api: Api, name: str) -> str:
    resp = await api.http.post("/v1/workloads", json=workload(name), headers=bearer("team-a"))
    assert resp.status == 201
    return str((await resp.json())["id"])


async def _cancel(api: Api, wid: str) -> None:
    resp = await api.http.post(f"/v1/workloads/{wid}/cancel", headers=bearer("team-a"))
    assert resp.status == 202


async def test_http_watch_follows_and_resumes(api_: Api) -> None:
    wid = await _submit(api_, "watched")
    resp = await api_.http.get(f"/v1/workloads/{wid}/events?watch=true", headers=bearer("team-a"))
    assert resp.status == 200
    assert resp.headers["Content-Type"].startswith("application/x-ndjson")
    first = json.loads(await resp.content.readline())
    assert first["type"] == "workload.submitted" and first["workloadId"] == wid
    await _cancel(api_, wid)
    second = json.loads(await asyncio.wait_for(resp.content.readline(), 10))
    assert second["type"] == "workload.cancel_requested"
    assert second["position"] > first["position"]
    resp.close()
    # Resume after the first: only what came later, nothing twice.
    resp = await api_.http.get(
        f"/v1/workloads/{wid}/events?after={first['position']}", headers=bearer("team-a")
    )
    events = (await resp.json())["events"]
    assert [e["position"] for e in events] == [second["position"]]


async def test_http_watch_checks_access_before_streaming(api_: Api) -> None:
    wid = await _submit(api_, "private")
    resp = await api_.http.get(f"/v1/workloads/{wid}/events?watch=1", headers=bearer("team-b"))
    assert resp.status == 403
    resp = await api_.http.get("/v1/clusterqueues/nope/events?watch=1", headers=bearer("admin"))
    assert resp.status == 404


async def _take(stream: Any, n: int) -> list[pb.Event]:
    """The next ``n`` workload events (the queue's own configuration events come too)."""
    out: list[pb.Event] = []
    async for event in stream:
        if event.HasField("workload_id"):
            out.append(event)
        else:
            assert event.stream == "config-localqueue-team-a.lq"
        if len(out) == n:
            break
    return out


async def test_grpc_queue_watch_follows_and_resumes(api_: Api) -> None:
    a = await _submit(api_, "one")
    request = pb.WatchRequest(local_queue="team-a/lq", follow=True)
    call = api_.submissions.Watch(request, metadata=grpc_meta("team-a"))
    seen = await asyncio.wait_for(_take(call, 1), 10)
    assert seen[0].workload_id == a and seen[0].type == "workload.submitted"
    b = await _submit(api_, "two")
    more = await asyncio.wait_for(_take(call, 1), 10)
    assert more[0].workload_id == b
    call.cancel()
    # The queue's watch holds its workloads and no one else's.
    other = await api_.http.post(
        "/v1/workloads", json=workload("elsewhere", "team-b"), headers=bearer("team-b")
    )
    assert other.status == 201
    resumed = [
        e
        async for e in api_.submissions.Watch(
            pb.WatchRequest(local_queue="team-a/lq", after_position=seen[0].position),
            metadata=grpc_meta("team-a"),
        )
    ]
    assert [e.position for e in resumed] == [more[0].position]
    assert dict(resumed[0].data)["spec"]["queue_name"] == "lq"


async def test_a_quiet_queues_watch_does_not_read_again_what_others_did(api_: Api) -> None:
    """A queue's watch reads the log up to intake's position and goes on from there, not
    from its own last event: else, while its queue is quiet, each move of intake's fold
    read again all the other queues' events since (issue 16, reads whose cost grows with
    the log)."""
    a = await _submit(api_, "one")
    call = api_.submissions.Watch(
        pb.WatchRequest(local_queue="team-a/lq", follow=True), metadata=grpc_meta("team-a")
    )
    assert (await asyncio.wait_for(_take(call, 1), 10))[0].workload_id == a
    store = api_.store
    real_read_all = store.read_all
    reads: list[tuple[int, int | None, list[str | None]]] = []  # (after, until, workloads)
    read_through: dict[int, asyncio.Event] = {}

    async def read_all(after: int = 0, **kw: Any) -> Any:
        envs = await real_read_all(after, **kw)
        reads.append((after, kw.get("until"), [e.correlation_id for e in envs]))
        for target, seen in read_through.items():
            if (kw.get("until") or 0) >= target:
                seen.set()
        return envs

    store.read_all = read_all  # type: ignore[method-assign]
    try:
        for i in range(3):
            other = await api_.http.post(
                "/v1/workloads", json=workload(f"other-{i}", "team-b"), headers=bearer("team-b")
            )
            assert other.status == 201
        others_end = await api_.head()
        read_through[others_end] = asyncio.Event()
        await asyncio.wait_for(read_through[others_end].wait(), 10)  # the watch read them
        b = await _submit(api_, "two")
        assert (await asyncio.wait_for(_take(call, 1), 10))[0].workload_id == b
        found = next(after for after, _, wids in reads if b in wids)
        assert found >= others_end, (others_end, reads)
    finally:
        call.cancel()
        store.read_all = real_read_all  # type: ignore[method-assign]


async def test_grpc_watch_needs_a_scope(api_: Api) -> None:
    try:
        async for _ in api_.submissions.Watch(pb.WatchRequest(), metadata=grpc_meta("admin")):
            pass
    except grpc.aio.AioRpcError as exc:
        assert exc.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert dict(exc.trailing_metadata() or ())["muster-error-field"] == "scope"
    else:
        raise AssertionError("a watch without a scope was accepted")
