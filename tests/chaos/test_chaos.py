"""The chaos suite, bounded for `make test`: the checker's mutation self-test (it must
catch each injected fault in a real run's log), a short run with every service and the
broker killed (and the database cut, on PostgreSQL), and a short hostile-input run.
`make chaos` runs the long ones."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from muster.core import inputs
from muster.core.events import StreamAppend
from muster.core.model import parse
from muster.store import SqlEventStore
from tests.api.conftest import workload
from tests.api.hostile import Answer
from tests.chaos import hostile
from tests.chaos import run as chaos
from tests.chaos.checker import Row, check, read_rows
from tests.e2e.test_stack import ROOM
from tests.postgres import POSTGRES_URL, drop_postgres, fresh_postgres

pytestmark = pytest.mark.e2e

SMALL = chaos.Plan(workloads=40, kills=1, broker_kills=1, db_restarts=1, rate=20.0)


@pytest.fixture(scope="module")
def clean_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[Row], list[str]]:
    """A run without faults: its log, and the workloads accepted."""
    data = tmp_path_factory.mktemp("clean")
    plan = replace(SMALL, workloads=12, kills=0, broker_kills=0, db_restarts=0)
    figures = chaos.run(plan, data, quiet=True)
    assert chaos.failures(figures) == []
    return read_rows(f"sqlite:///{data / 'muster.db'}"), list(figures.accepted.values())


def _mutate(rows: list[Row], kind: str) -> list[Row]:
    """The log with one fault of ``kind`` injected."""
    first = {r.type: r for r in reversed(rows)}
    out = list(rows)
    last = rows[-1].position

    def extra(r: Row, payload: dict[str, Any] | None = None) -> Row:
        return Row(last + 1, r.type, payload or r.payload)

    match kind:
        case "lost":
            out = [
                r
                for r in rows
                if not (
                    r.type == "workload.submitted"
                    and r.payload["workload_id"]
                    == first["workload.submitted"].payload["workload_id"]
                )
            ]
        case "duplicated":
            out.append(extra(first["workload.submitted"]))
        case "double admission":  # reserved again before the first is released
            reserved = first["admission.quota_reserved"]
            out.insert(rows.index(reserved) + 1, replace(reserved, position=reserved.position))
        case "quota violation":
            r = first["admission.quota_reserved"]
            big = {**r.payload, "usage": {"gpu": {"nvidia.com/gpu": ROOM + 1}}}
            out.insert(rows.index(r), replace(r, payload=big))
            out.remove(r)
        case "unfinished":
            wid = first["admission.finished"].payload["workload_id"]
            out = [
                r
                for r in rows
                if not (r.type == "admission.finished" and r.payload["workload_id"] == wid)
            ]
        case "node left":  # a node never deleted nor removed: its request's deletion lost
            deletion = first["provisioning.nodes_deleted"]
            nodes = set(deletion.payload["nodes"])
            out = [
                r
                for r in rows
                if r is not deletion
                and not (r.type == "node.removed" and r.payload["node"] in nodes)
            ]
    return out


@pytest.mark.parametrize(
    ("kind", "found"),
    [
        ("lost", "lost"),
        ("duplicated", "duplicated"),
        ("double admission", "double admissions"),
        ("quota violation", "quota violations"),
        ("unfinished", "unfinished"),
        ("node left", "nodes left"),
    ],
)
def test_the_checker_catches_each_injected_fault(
    clean_run: tuple[list[Row], list[str]], kind: str, found: str
) -> None:
    rows, accepted = clean_run
    assert check(rows, accepted).problems() == {}
    problems = check(_mutate(rows, kind), accepted).problems()
    assert found in problems, problems


@pytest.mark.parametrize(("ended", "left"), [(True, []), (False, ["n1"])])
def test_a_deleted_node_counts_as_gone_only_when_idle(ended: bool, left: list[str]) -> None:
    """A deleted node with no pod running goes with its deletion (no ``node.removed``); one
    whose pod never ended and was never removed is left."""
    pod = {"node": "n1", "workload_id": "w", "attempt": 1, "pod": "p0"}
    rows = [
        Row(1, "node.registered", {"node": "n1"}),
        Row(2, "node.pod_started", {**pod, "finishes_at": 5.0}),
        *([Row(3, "node.pod_succeeded", pod)] if ended else []),
        Row(4, "provisioning.nodes_deleted", {"nodes": ["n1"]}),
    ]
    assert check(rows, []).nodes_left == left


def test_a_short_chaos_run_keeps_every_promise(tmp_path: Path) -> None:
    if POSTGRES_URL:
        url, name = asyncio.run(fresh_postgres())
        try:
            figures = chaos.run(SMALL, tmp_path, url, quiet=True)
        finally:
            asyncio.run(drop_postgres(name))
    else:
        figures = chaos.run(SMALL, tmp_path, quiet=True)
    assert chaos.failures(figures) == []
    assert figures.report is not None and figures.report.stored == SMALL.workloads
    services = {"intake", "queue", "provisioner", "node-agent"}
    assert {s for s, n in figures.faults.items() if n} >= services | {"broker"}
    assert all(n > 0 for n in figures.checked.values())


def test_a_short_hostile_run_finds_no_server_error_and_no_trace(tmp_path: Path) -> None:
    figures = hostile.run(hostile.HostilePlan(examples=2, baseline=1.0), tmp_path, quiet=True)
    assert hostile.failures(figures) == []
    assert set(figures.requests) == {"large", "http", "grpc", "ingest"}
    assert {"401", "403", "422"} <= set(figures.statuses["http"])
    assert figures.alone and figures.during


async def test_the_hostile_judge_catches_a_refusal_that_left_an_event(
    sqlite_store: SqlEventStore,
) -> None:
    """Its self-test: a "refusal" that appended a tenant's workload is caught; the healthy
    tenant's own submission meanwhile is not counted against it; a 5xx is a server error."""
    loop = asyncio.get_running_loop()
    figures = hostile.HostileFigures()
    judge = hostile.StrayJudge(sqlite_store.url, figures)

    def appending(namespace: str) -> Answer:
        spec = parse.workload(workload(namespace=namespace))
        new = inputs.submission(f"w-{namespace}", spec, 1.0, None)
        append = sqlite_store.append(
            [StreamAppend(new.stream_id, 0, [new])], producer=inputs.INTAKE, recorded_at=1.0
        )
        asyncio.run_coroutine_threadsafe(append, loop).result(timeout=30)
        return Answer("422", True)

    await asyncio.to_thread(judge, "http", "healthy meanwhile", lambda: appending(hostile.HEALTHY))
    assert figures.stray == []
    await asyncio.to_thread(judge, "http", "leaky", lambda: appending("team-a"))
    assert len(figures.stray) == 1 and figures.stray[0].startswith("leaky: 422")
    await asyncio.to_thread(judge, "grpc", "broken", lambda: Answer("INTERNAL", True, "boom"))
    assert figures.server_errors == ["boom"]
