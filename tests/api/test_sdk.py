"""muster's Python client (sdk/python, ``muster_client``) against a real intake (HTTP and
gRPC on loopback, a SQLite store): idempotent submission, all-or-none batches, get, list
pages, cancel, watches resumed after a cut connection without loss or repeats, retries
that honour Retry-After, typed errors naming the field.

From the peers: Armada's Python client over its submit API, its ``deduplication_id``
("jobs submitted with the same deduplication_id as an existing job are discarded") and its
event stream resumed ``from_message_id`` (peers.md §1.3, §1.7); the API is docs/api.md.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from muster.core.events import NewEvent, StreamAppend
from muster.core.events import node as nev
from muster.core.events import queue as qev
from muster.core.model.inventory import Gpu
from muster.store import SqlEventStore
from muster_client import (
    NO_RETRY,
    AsyncClient,
    BadRequest,
    Client,
    Conflict,
    Event,
    Forbidden,
    InvalidInput,
    NotFound,
    PodSet,
    RateLimited,
    RetryPolicy,
    Unauthenticated,
    Unavailable,
    WorkloadSpec,
)
from muster_client.grpc_client import AsyncGrpcClient
from muster_client.retry import http_date
from services.intake import errors as intake_errors
from tests.api.conftest import TOKENS, Api, bearer, serve, workload
from tests.api.test_cli import cli
from tests.e2e.tcp_proxy import TcpProxy

FAST = RetryPolicy(base_seconds=0.05, max_seconds=2.0, max_elapsed_seconds=20.0)
# Reconnects for as long as a test keeps its proxy down.
PATIENT = RetryPolicy(attempts=100, base_seconds=0.05, max_seconds=0.5, max_elapsed_seconds=20.0)


def base_url(api: Api) -> str:
    return str(api.http.make_url("")).rstrip("/")


@contextlib.asynccontextmanager
async def http_client(api: Api, who: str = "team-a", **kw: Any) -> AsyncIterator[AsyncClient]:
    kw.setdefault("retry_policy", FAST)
    async with AsyncClient(base_url(api), TOKENS[who], **kw) as c:
        yield c


def spec(name: str, count: int = 1) -> WorkloadSpec:
    return WorkloadSpec(
        name=name,
        namespace="team-a",
        queue_name="lq",
        pod_sets=[PodSet(count=count, requests={"nvidia.com/gpu": 1})],
    )


# -- submission ------------------------------------------------------------------------


async def test_a_repeated_idempotency_key_answers_the_original(api_: Api) -> None:
    """docs/api.md, Endpoints: 201 with the workload, 200 with the original for a repeated
    key, 409 IdempotencyKeyReused for the key with another body."""
    async with http_client(api_) as c:
        first = await c.submit(spec("train"), idempotency_key="k-1")
        head = await api_.head()
        again = await c.submit(spec("train"), idempotency_key="k-1")
        assert first.created and not again.created
        assert again.workload.id == first.workload.id
        assert first.workload.status == "Pending" and first.workload.queue_name == "lq"
        assert await api_.head() == head  # nothing appended for the repeat
        with pytest.raises(Conflict) as refused:
            await c.submit(spec("train", count=2), idempotency_key="k-1")
        assert refused.value.code == "IdempotencyKeyReused" and refused.value.status == 409


async def test_a_submission_without_a_key_gets_one_so_it_can_be_retried(api_: Api) -> None:
    """The client makes a key when the caller gives none: a dict spec (the API's JSON) is
    accepted as well as a WorkloadSpec."""
    async with http_client(api_) as c:
        done = await c.submit(workload("plain"))
    assert done.created and done.workload.name == "plain"
    history = await api_.http.get(
        f"/v1/workloads/{done.workload.id}/events", headers={"Authorization": "Bearer tok-a"}
    )
    submitted = (await history.json())["events"][0]
    assert submitted["type"] == "workload.submitted"
    assert len(submitted["data"]["idempotency_key"]) == 32  # a uuid4, hex


async def test_a_batch_is_all_or_none_and_names_the_bad_item(api_: Api) -> None:
    """docs/api.md: all are valid and accepted, or none is; the first bad one is named."""
    async with http_client(api_) as c:
        head = await api_.head()
        with pytest.raises(InvalidInput) as refused:
            await c.submit_batch([spec("a"), spec("b", count=0), spec("c")])
        assert refused.value.field == "items[1].podSets[0].count"
        assert refused.value.status == 422 and refused.value.code == "InvalidField"
        assert await api_.head() == head  # none of the three was accepted
        done = await c.submit_batch([spec("a"), spec("b")], idempotency_keys=["ka", "kb"])
        assert [d.created for d in done] == [True, True]
        again = await c.submit_batch([spec("a"), spec("b")], idempotency_keys=["ka", "kb"])
        assert [d.created for d in again] == [False, False]
        assert [d.workload.id for d in again] == [d.workload.id for d in done]


# -- reading and cancelling ------------------------------------------------------------


async def test_get_list_pages_and_cancel(api_: Api) -> None:
    """docs/api.md: list in submission order, paged by ``after`` (the previous page's
    ``next``); a pending workload shows its queue position; cancel answers 202."""
    async with http_client(api_) as c:
        ids = [(await c.submit(spec(f"w{i}"))).workload.id for i in range(3)]
        page = await c.list(limit=2)
        assert [w.id for w in page.items] == ids[:2] and page.next == ids[1]
        rest = await c.list(limit=2, after=page.next)
        assert [w.id for w in rest.items] == ids[2:]
        assert [w.id async for w in c.iter_workloads(page_size=1)] == ids
        one = await c.get(ids[0])
        assert one.status == "Pending" and one.queue is not None
        assert one.queue.position_in_local_queue is not None
        # Kueue's status.conditions and RFC 3339 times (docs/api.md, "Conditions").
        assert one.conditions is not None and one.submitted_time is not None
        assert {c["type"] for c in one.conditions} >= {"QuotaReserved"}
        cancelled = await c.cancel(ids[0])
        assert cancelled.cancel_requested and cancelled.id == ids[0]
        with pytest.raises(NotFound) as missing:
            await c.get("no-such-workload")
        assert missing.value.code == "NotFound"


async def test_refusals_are_typed_and_not_retried(api_: Api) -> None:
    """docs/api.md, Errors: one shape, the code, message and field; a 4xx is the caller's
    to fix, so it is answered at once (one attempt, however many are allowed)."""
    async with http_client(api_) as c:
        wid = (await c.submit(spec("mine"))).workload.id
        started = time.monotonic()
        with pytest.raises(InvalidInput) as refused:
            await c.submit(spec("bad", count=0))
        assert time.monotonic() - started < 1.0
        assert refused.value.field == "podSets[0].count"
        assert "podSets[0].count" in str(refused.value)
    async with http_client(api_, "team-b") as other, http_client(api_) as _:
        with pytest.raises(Forbidden):
            await other.get(wid)
    async with AsyncClient(base_url(api_), "wrong-token", retry_policy=FAST) as stranger:
        with pytest.raises(Unauthenticated) as who:
            await stranger.list()
        assert who.value.code == "Unauthenticated"


def test_the_client_knows_every_error_code_intake_answers() -> None:
    from muster_client.errors import CODE_STATUS

    assert intake_errors.STATUS == CODE_STATUS


# -- watching --------------------------------------------------------------------------


async def _take(stream: AsyncIterator[Event], n: int) -> list[Event]:
    out: list[Event] = []
    while len(out) < n:
        out.append(await asyncio.wait_for(anext(stream), 10))
    return out


async def test_a_watch_resumes_after_a_cut_connection_without_loss_or_repeats(api_: Api) -> None:
    """docs/api.md: ``watch=true`` streams events, resume with ``after=<the last position
    seen>``; the client does that itself when the connection drops (Armada's
    ``from_message_id``, peers.md §1.3)."""
    with TcpProxy("127.0.0.1", api_.http.port or 0) as proxy:
        async with (
            http_client(api_) as direct,
            AsyncClient(
                f"http://127.0.0.1:{proxy.port}", TOKENS["team-a"], retry_policy=PATIENT
            ) as via,
        ):
            await direct.submit(spec("w0"))
            stream = via.watch(cluster_queue="cq")
            seen = await _take(stream, 1)
            proxy.cut()  # the watch's connection dropped, new ones refused for a while
            for i in range(1, 4):
                await direct.submit(spec(f"w{i}"))
            proxy.restore()
            history = await direct.events(cluster_queue="cq")
            seen += await _take(stream, len(history) - len(seen))
            await stream.aclose()
    assert [e.position for e in seen] == [e.position for e in history]  # each once, in order
    assert sum(e.type == "workload.submitted" for e in seen) == 4


async def test_a_watch_starts_after_the_position_given(api_: Api) -> None:
    async with http_client(api_) as c:
        wid = (await c.submit(spec("w"))).workload.id
        first = (await c.events(workload_id=wid))[0]
        stream = c.watch(workload_id=wid, since=first.position)
        await c.cancel(wid)
        (nxt,) = await _take(stream, 1)
        await stream.aclose()
    assert nxt.type == "workload.cancel_requested" and nxt.position > first.position
    assert nxt.workload_id == wid


# -- retries ---------------------------------------------------------------------------


@pytest.fixture
async def limited(sqlite_store: SqlEventStore, tmp_path: Path) -> AsyncIterator[Api]:
    """An intake whose tenants may submit one workload a second (burst 1)."""
    async for a in serve(sqlite_store, tmp_path, submit_rate=1.0, submit_burst=1):
        yield a


async def test_a_rate_limited_submission_waits_as_told_and_goes_through(limited: Api) -> None:
    """docs/api.md, Limits: over the rate, 429 RateLimited with Retry-After in seconds."""
    async with http_client(limited, retry_policy=NO_RETRY) as once:
        await once.submit(spec("first"))
        with pytest.raises(RateLimited) as refused:
            await once.submit(spec("second"))
        assert refused.value.retry_after == 1.0 and refused.value.code == "RateLimited"
    async with http_client(limited) as patient:
        started = time.monotonic()
        done = await patient.submit(spec("third"))
        waited = time.monotonic() - started
    assert done.created
    # Retry-After said 1 s; the backoff alone would have tried again within 0.05 s.
    assert waited >= 0.9


async def test_grpc_rate_limit_is_retried_after_retry_after(limited: Api) -> None:
    """docs/api.md: gRPC RESOURCE_EXHAUSTED with trailing metadata ``retry-after``."""
    async with AsyncGrpcClient(limited.grpc_target, TOKENS["team-a"], retry_policy=NO_RETRY) as g:
        await g.submit(spec("first"))
        with pytest.raises(RateLimited) as refused:
            await g.submit(spec("second"))
        assert refused.value.retry_after == 1.0
    async with AsyncGrpcClient(limited.grpc_target, TOKENS["team-a"], retry_policy=FAST) as g:
        started = time.monotonic()
        assert (await g.submit(spec("third"))).created
        assert time.monotonic() - started >= 0.9


# -- gRPC ------------------------------------------------------------------------------


async def test_the_same_operations_over_grpc(api_: Api) -> None:
    """docs/api.md, gRPC: Submit, SubmitBatch, GetWorkload, ListWorkloads, Cancel, Watch,
    with the same answers and errors as HTTP."""
    async with AsyncGrpcClient(api_.grpc_target, TOKENS["team-a"], retry_policy=FAST) as g:
        first = await g.submit(spec("g0"), idempotency_key="g-k")
        again = await g.submit(spec("g0"), idempotency_key="g-k")
        assert first.created and not again.created and again.workload.id == first.workload.id
        with pytest.raises(InvalidInput) as refused:
            await g.submit_batch([spec("g1"), spec("g2", count=0)])
        assert refused.value.field == "items[1].podSets[0].count"
        batch = await g.submit_batch([spec("g1"), spec("g2")])
        ids = [first.workload.id] + [d.workload.id for d in batch]
        page = await g.list(limit=2)
        assert [w.id for w in page.items] == ids[:2] and page.next == ids[1]
        assert [w.id for w in (await g.list(after=page.next)).items] == ids[2:]
        got = await g.get(ids[1])
        assert got.name == "g1" and got.status == "Pending" and got.pods == 1
        with pytest.raises(NotFound):
            await g.get("missing")
        stream = g.watch(workload_id=ids[0])
        (submitted,) = await _take(stream, 1)
        assert (await g.cancel(ids[0])).cancel_requested
        (cancel,) = await _take(stream, 1)
        await stream.aclose()
        history = await g.events(workload_id=ids[0])
        assert [e.position for e in history] == [submitted.position, cancel.position]
        assert [w.id async for w in g.iter_workloads(page_size=2)] == ids
        assert submitted.type == "workload.submitted" and submitted.workload_id == ids[0]
        assert cancel.type == "workload.cancel_requested" and cancel.position > submitted.position


async def test_what_operators_use_answers_alike_over_http_and_grpc(api_: Api) -> None:
    """docs/api.md, gRPC: Explain (now and at a past point), an external admission check's
    state (kueue.md §1.8), Report and ListNodes: the same answers and refusals as HTTP, from
    the same intake operations."""
    assert (await api_.http.post("/v1/apply", data=EXTERNAL_CHECK, headers=bearer("admin"))).ok
    gpus = tuple(Gpu(uuid=f"GPU-{i}", model="A100", memory_mib=81920, index=i) for i in range(2))
    node = nev.NodeRegistered(node="gpu-0", allocatable={"nvidia.com/gpu": 2}, gpus=gpus)
    await _append(api_, nev.stream("gpu-0"), node)
    async with (
        http_client(api_) as h,
        http_client(api_, "admin") as h_admin,
        AsyncGrpcClient(api_.grpc_target, TOKENS["team-a"], retry_policy=FAST) as g,
        AsyncGrpcClient(api_.grpc_target, TOKENS["admin"], retry_policy=FAST) as g_admin,
    ):
        wid = (await h.submit(spec("checked", count=2))).workload.id
        submitted_at = (await h.events(workload_id=wid))[0].position
        await _append(api_, qev.ADMISSION_STREAM, _reserved(wid, "approval"), correlation=wid)

        now_h, now_g = await h.explain(wid), await g.explain(wid)
        assert (
            (now_g.status, now_g.reason)
            == (now_h.status, now_h.reason)
            == (
                "QuotaReserved",
                "QuotaReserved",
            )
        )
        assert now_g.conditions == now_h.conditions and now_g.detail == now_h.detail
        assert now_g.detail["admissionChecks"][0]["state"] == "Pending"
        past_h = await h.explain(wid, at=f"@{submitted_at}")
        past_g = await g.explain(wid, at=f"@{submitted_at}")
        assert past_g == past_h and past_g.position == submitted_at
        assert past_g.status == "Pending"
        with pytest.raises(BadRequest) as bad:
            await g.explain(wid, at="yesterday")
        assert bad.value.field == "at"
        with pytest.raises(NotFound):
            await g.explain("missing")

        update = {"name": "main", "annotations": {"example.com/approved-by": "alice"}}
        with pytest.raises(Forbidden):
            await g.update_admission_check(wid, "approval", "Ready")
        with pytest.raises(InvalidInput) as bad_state:
            await g_admin.update_admission_check(wid, "approval", "Maybe")
        assert bad_state.value.field == "state"
        done = await g_admin.update_admission_check(
            wid, "approval", "Ready", message="approved", pod_set_updates=[update]
        )
        (check,) = done.admission_checks or []
        assert (check["state"], check["message"], check["podSetUpdates"]) == (
            "Ready",
            "approved",
            [update],
        )
        assert check["lastTransitionTime"].endswith("Z")
        assert (await h.get(wid)).admission_checks == done.admission_checks
        again = await h_admin.update_admission_check(wid, "approval", "Ready", message="still")
        assert (again.admission_checks or [])[0]["message"] == "still"

        # The same range for both, the same charges: rounded down, so both ask before their
        # own clocks (rounded up, the first call could charge an open reservation to its
        # clock and the second to ``until``: 0.016 s against 0.017 s in one CI run).
        until = f"{math.floor(time.time() * 1000) / 1000:.3f}"
        report_h = await h.report(since="2026-01-01T00:00:00Z", until=until)
        report_g = await g.report(since="2026-01-01T00:00:00Z", until=until)
        assert report_g.workloads == report_h.workloads and [r.id for r in report_g.workloads] == [
            wid
        ]
        assert report_g.namespaces == report_h.namespaces
        assert report_g.cluster_queues == report_h.cluster_queues
        with pytest.raises(Forbidden):
            await g.report(namespace="team-b")

        nodes_h, nodes_g = await h.nodes(), await g.nodes()
        assert nodes_g == nodes_h and [n["name"] for n in nodes_g] == ["gpu-0"]
        assert nodes_g[0]["spec"]["allocatable"] == {"nvidia.com/gpu": 2}  # ints, as HTTP
        assert nodes_g[0]["status"]["accelerators"] == [{"model": "A100", "used": 0, "total": 2}]


EXTERNAL_CHECK = """
apiVersion: kueue.x-k8s.io/v1beta1
kind: AdmissionCheck
metadata: {name: approval}
spec: {controllerName: example.com/approval}
"""


def _reserved(wid: str, *checks: str) -> qev.QuotaReserved:
    return qev.QuotaReserved(
        workload_id=wid,
        cluster_queue="cq",
        flavors={"main": {"nvidia.com/gpu": "f"}},
        usage={"f": {"nvidia.com/gpu": 2}},
        node_selectors={},
        attempt=1,
        message="Quota reserved in ClusterQueue cq",
        checks=checks,
    )


async def _append(api: Api, stream: str, event: Any, correlation: str | None = None) -> None:
    """An event as another service appends it (intake folds it from the log)."""
    now = time.time()
    news = [NewEvent(stream_id=stream, event=event, occurred_at=now, correlation_id=correlation)]
    await api.store.append([StreamAppend(stream, None, news)], producer="test", recorded_at=now)


async def test_a_grpc_watch_resumes_after_a_cut_connection(api_: Api) -> None:
    port = int(api_.grpc_target.rsplit(":", 1)[1])
    with TcpProxy("127.0.0.1", port) as proxy:
        async with (
            http_client(api_) as direct,
            AsyncGrpcClient(
                f"127.0.0.1:{proxy.port}", TOKENS["team-a"], retry_policy=PATIENT
            ) as via,
        ):
            await direct.submit(spec("w0"))
            stream = via.watch(cluster_queue="cq")
            seen = await _take(stream, 1)
            proxy.cut()
            for i in range(1, 3):
                await direct.submit(spec(f"w{i}"))
            proxy.restore()
            history = await direct.events(cluster_queue="cq")
            seen += await _take(stream, len(history) - len(seen))
            await stream.aclose()
    assert [e.position for e in seen] == [e.position for e in history]


# -- the blocking client ---------------------------------------------------------------


async def test_the_blocking_client_does_the_same(api_: Api) -> None:
    """``Client``: the same calls, blocking (scripts, the CLI), its watch an iterator."""
    url = base_url(api_)

    def go() -> list[str]:
        with Client(url, TOKENS["team-a"], retry_policy=FAST) as c:
            wid = c.submit(spec("sync"), idempotency_key="s").workload.id
            assert not c.submit(spec("sync"), idempotency_key="s").created
            assert c.get(wid).name == "sync"
            c.cancel(wid)
            types = []
            for event in c.watch(workload_id=wid):
                types.append(event.type)
                if len(types) == 2:
                    break
            return types

    types = await asyncio.to_thread(go)
    assert types == ["workload.submitted", "workload.cancel_requested"]


class Flaky:
    """A small real HTTP server on loopback that answers ``answers`` in turn (then 200 with
    a workload), counting the requests: what a proxy or a restarting intake looks like."""

    def __init__(self, *answers: tuple[int, dict[str, str]]) -> None:
        self.answers = list(answers)
        self.hits = 0

    async def handle(self, request: web.Request) -> web.Response:
        self.hits += 1
        if self.answers:
            status, headers = self.answers.pop(0)
            body = {"error": {"code": "StoreUnavailable", "message": "retry"}}
            return web.json_response(body, status=status, headers=headers)
        return web.json_response({"id": request.match_info["id"], "status": "Running"})


@contextlib.asynccontextmanager
async def flaky(*answers: tuple[int, dict[str, str]]) -> AsyncIterator[tuple[Flaky, str]]:
    server = Flaky(*answers)
    app = web.Application()
    app.router.add_route("*", "/v1/workloads/{id}", server.handle)
    async with TestServer(app, host="127.0.0.1") as ts:
        yield server, str(ts.make_url("")).rstrip("/")


async def test_a_503_with_an_http_date_is_waited_out_then_retried() -> None:
    """RFC 9110 §10.2.3: Retry-After may be an HTTP date; docs/api.md: 503 StoreUnavailable
    says retry after Retry-After."""
    when = http_date(time.time() + 2)  # whole seconds: between 1 and 2 s from now
    async with (
        flaky((503, {"Retry-After": when})) as (server, url),
        AsyncClient(url, retry_policy=FAST) as c,
    ):
        started = time.monotonic()
        got = await c.get("w-1")
        waited = time.monotonic() - started
    assert got.id == "w-1" and got.status == "Running" and server.hits == 2
    assert waited >= 0.9


async def test_retries_stop_at_the_attempts_allowed() -> None:
    busy = (503, {"Retry-After": "0"})
    async with flaky(busy, busy, busy, busy) as (server, url):
        policy = RetryPolicy(attempts=3, base_seconds=0.01)
        async with AsyncClient(url, retry_policy=policy) as c:
            with pytest.raises(Unavailable) as failed:
                await c.get("w-1")
    assert server.hits == 3 and failed.value.code == "StoreUnavailable"


async def test_a_bad_gateway_is_retried_only_when_repeating_is_harmless() -> None:
    """A 502 comes from a proxy: the call may have reached intake, so a POST without an
    idempotency key is not repeated; a read is."""
    async with (
        flaky((502, {}), (502, {})) as (server, url),
        AsyncClient(url, retry_policy=FAST) as c,
    ):
        with pytest.raises(Unavailable):
            await c.request("POST", "/v1/workloads/w-1", json={})
        assert server.hits == 1
        assert (await c.get("w-1")).id == "w-1"
        assert server.hits == 3


async def test_the_cli_submits_through_the_client(api_: Api, tmp_path: Path) -> None:
    """``muster submit --idempotency-key``: a repeat says it was seen and makes nothing."""
    doc = tmp_path / "w.json"
    doc.write_text(json.dumps(workload("from-cli")))
    server = ["--server", base_url(api_)]
    first = await cli(api_, "submit", str(doc), "--idempotency-key", "cli-1", *server)
    head = await api_.head()
    again = await cli(api_, "submit", str(doc), "--idempotency-key", "cli-1", *server)
    assert first[0] == 0 and "submitted (team-a/from-cli)" in first[1]
    assert again[0] == 0 and "already submitted under this idempotency key" in again[1]
    assert first[1].split()[1] == again[1].split()[1]  # the same workload id
    assert await api_.head() == head
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(workload("bad", podSets=[{"count": 0}])))
    code, _, err = await cli(api_, "submit", str(bad), *server)
    assert code == 1 and "(podSets[0].count)" in err and len(err.strip().splitlines()) == 1


async def test_the_clis_old_helpers_still_answer_through_the_client(api_: Api) -> None:
    """``muster.cli.http.call`` (a method and a full URL) is a thin wrapper over the
    client (the CLI's one-shot calls and the end-to-end tests)."""
    from muster.cli import http

    server = base_url(api_)

    def go() -> None:
        http.configure(TOKENS["team-a"])
        try:
            view = http.call("POST", f"{server}/v1/workloads", workload("old"))
            assert view["name"] == "old"
            page = http.call("GET", f"{server}/v1/workloads?limit=1&namespace=team-a")
            assert [w["id"] for w in page["items"]] == [view["id"]]
            with pytest.raises(http.ApiError) as missing:
                http.call("GET", f"{server}/v1/workloads/nope")
            assert missing.value.status == 404 and missing.value.body["error"]["code"]
        finally:
            http.configure(None)

    await asyncio.to_thread(go)


async def test_a_watch_reads_long_events_and_resumes_when_the_server_closes() -> None:
    """A server that ends the stream (a restart, a proxy's idle timeout) is asked again
    after the last position; an event cut off with the connection is not taken half; a
    long event (300 KB) is read whole."""
    asked: list[str] = []
    big = {"position": 1, "type": "admission.admitted", "data": {"pods": "x" * 300_000}}

    async def events(request: web.Request) -> web.StreamResponse:
        asked.append(request.query["after"])
        response = web.StreamResponse(headers={"Content-Type": "application/x-ndjson"})
        await response.prepare(request)
        if request.query["after"] == "0":
            await response.write(json.dumps(big).encode() + b"\n")
            await response.write(b'{"position": 2, "type": "cut"')  # cut inside an event
            return response  # the stream ends: the client must resume after 1
        await response.write(b'{"position": 2, "type": "workload.cancel_requested"}\n')
        await asyncio.Event().wait()  # then nothing more, until the client leaves
        return response

    app = web.Application()
    app.router.add_get("/v1/workloads/{id}/events", events)
    async with (
        TestServer(app, host="127.0.0.1") as ts,
        AsyncClient(str(ts.make_url("")), retry_policy=FAST) as c,
    ):
        stream = c.watch(workload_id="w")
        first, second = await _take(stream, 2)
        await stream.aclose()
    assert first.position == 1 and len(first.data["pods"]) == 300_000
    assert second.position == 2 and second.type == "workload.cancel_requested"
    assert asked == ["0", "1"]
