"""Every benchmark, at the smallest size that still exercises its outcome check, run as
``python -m bench.<name>`` (as ``make bench`` runs them): it must end without a FAILED
exit. Nothing about speed is asserted: at these sizes, on a shared machine, the figures
mean nothing; only that the work ran as each scenario intends.

PostgreSQL parts run only when MUSTER_TEST_POSTGRES_URL is set (the benchmarks skip them
otherwise). Those that start the stack (broker and services as processes) are marked e2e.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench.traces import ITP, PHILLY, TRACES
from muster.core.events import NewEvent, StreamAppend
from muster.core.events import timer as tev
from muster.store import SqlEventStore
from muster.store.migrate import upgrade_async
from tests.postgres import POSTGRES_URL

ROOT = Path(__file__).resolve().parents[2]
PASSED = "outcome check passed"
TIMEOUT = 240  # seconds per benchmark; each takes a few at these sizes

STACK = pytest.mark.e2e


def run_bench(name: str, *args: str, expect: str = PASSED) -> str:
    """Run ``python -m bench.<name> args``; its output, or the test fails with its tail
    (``expect``: what its output says once its outcome check has run and passed)."""
    done = subprocess.run(
        [sys.executable, "-m", f"bench.{name}", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=False,
    )
    out = done.stdout + done.stderr
    if done.returncode != 0 or "FAILED" in out or expect not in done.stdout:
        pytest.fail(f"bench.{name} exited {done.returncode}:\n{out[-4000:]}")
    return out


def test_store_appends() -> None:
    run_bench(
        "store_appends",
        *("--single", "50", "--batched", "500", "--batch-size", "50", "--warmup", "5"),
    )


def test_append_cost(tmp_path: Path) -> None:
    # A store whose history is 200 timer events; two processes append onto a copy of it.
    db = tmp_path / "history.db"
    asyncio.run(timer_history(f"sqlite:///{db}", 200))
    out = run_bench(
        "append_cost", "--db", str(db), "--processes", "2", "--commits", "12", "--pace-ms", "1"
    )
    assert "us a commit" in out


async def timer_history(url: str, count: int) -> None:
    await upgrade_async(url)
    store = SqlEventStore(url)
    try:
        for i in range(count):
            new = NewEvent(stream_id=tev.stream(f"h{i}"), occurred_at=0.0,
                           event=tev.TimerFired(owner=f"h{i}", deadline=0.0))
            await store.append([StreamAppend(new.stream_id, 0, [new])], producer="queue",
                               recorded_at=0.0)
    finally:
        await store.close()


def test_long_log() -> None:
    # An empty store: the smoke runs the outcome check, not the long log's figures.
    run_bench("long_log", "--appends", "20", "--rounds", "20")


def test_replay() -> None:
    # About 100 workloads of the example cluster, every one run to its end.
    out = run_bench("replay", "--events", "2000")
    assert "rebuilt state == in-memory fold: yes" in out


def test_explain() -> None:
    # About 100 workloads; snapshots every 500 events: the answers from them equal a full fold.
    out = run_bench("explain", "--events", "2000", "--every", "500")
    assert "events folded" in out


def test_kueue_baseline_virtual() -> None:
    # 180 workloads, both configurations (preemption, then minAdmitDuration).
    run_bench("kueue_baseline", "--scale", "0.01")


@STACK
def test_kueue_baseline_services() -> None:
    run_bench("kueue_baseline", "--services", "--scale", "0.01", "--timeout", "120")


def test_cycle_scale() -> None:
    run_bench(
        "cycle_scale",
        *("--pending", "400", "--baseline", "100", "--queues", "40", "--cohorts", "4"),
    )


def test_placement() -> None:
    run_bench("placement", "--scale", "0.013")  # 130 nodes, 13 gangs (the floor is 128)


@STACK
def test_dws_provisioning() -> None:
    # 110 requests: more than GKE's default 100 active ones, so the capped run happens and
    # its 10 expected QuotaExceeded failures are checked; then 20 through the stack.
    run_bench(
        "dws_provisioning",
        *("--scale", "0.11", "--steps", "2", "--services-scale", "0.02"),
        *("--real-step-seconds", "0.3", "--real-delay", "0.2", "--timeout", "120"),
    )


@pytest.mark.skipif(
    not ((TRACES / PHILLY).exists() and (TRACES / ITP).exists()), reason=f"no traces in {TRACES}"
)
def test_traces() -> None:
    # The first 300 jobs of each trace under every configuration, beside the reference
    # replays, and the target check (its verdicts are printed, not asserted: at this size
    # they mean nothing).
    out = run_bench("traces", "--trace", "philly,itp", "--jobs", "300", "--check")
    assert "oracle-sjf" in out and "philly: " in out and "itp: " in out


@STACK
def test_submit_api() -> None:
    run_bench("submit_api", "--workloads", "40", "--clients", "8")


@STACK
def test_e2e_submit() -> None:
    run_bench(
        "e2e_submit",
        *("--workloads", "20", "--clients", "4", "--idle", "2", "--idle-seconds", "0.5"),
        *("--settle", "0.5"),  # and what the services do after the last finish
        expect="admitted 20/20, finished 20",  # its own check (bench/e2e_submit.py)
    )


@STACK
@pytest.mark.skipif(not POSTGRES_URL, reason="PostgreSQL not configured (MUSTER_TEST_POSTGRES_URL)")
def test_e2e_submit_on_postgres() -> None:
    before = asyncio.run(bench_databases())
    out = run_bench(
        "e2e_submit",
        *("--workloads", "20", "--clients", "4", "--idle", "2", "--idle-seconds", "0.5"),
        "--postgres",
        expect="admitted 20/20, finished 20",
    )
    assert "store: PostgreSQL, scratch databases on" in out
    cpu = next(line for line in out.splitlines() if "CPU per admitted workload" in line)
    assert "postgres " in cpu, cpu  # the server runs here (CI's), so its CPU is counted
    assert asyncio.run(bench_databases()) == before  # both scratch databases dropped


def test_e2e_submit_postgres_needs_a_server() -> None:
    env = {k: v for k, v in os.environ.items() if k != "MUSTER_TEST_POSTGRES_URL"}
    done = subprocess.run(
        [sys.executable, "-m", "bench.e2e_submit", "--postgres"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=TIMEOUT, check=False,
    )
    assert done.returncode == 2
    assert done.stderr.strip().splitlines()[-1].endswith(
        "--postgres needs $MUSTER_TEST_POSTGRES_URL, a PostgreSQL server's URL"
    )


async def bench_databases() -> set[str]:
    import asyncpg

    assert POSTGRES_URL is not None
    conn = await asyncpg.connect(POSTGRES_URL.replace("postgresql+asyncpg", "postgresql"))
    try:
        rows = await conn.fetch(
            "SELECT datname FROM pg_database WHERE datname LIKE 'muster_bench_%'"
        )
    finally:
        await conn.close()
    return {row["datname"] for row in rows}


@STACK
def test_e2e_submit_batched() -> None:
    # Batches of 6 (the last one 2): statuses count workloads, so its check reads alike.
    run_bench(
        "e2e_submit",
        *("--workloads", "20", "--clients", "4", "--idle", "1", "--idle-seconds", "0.5"),
        *("--batch", "6"),
        expect="admitted 20/20, finished 20",
    )


@STACK
def test_busy_trace() -> None:
    # 60 jobs of the busy trace's shape, through the stack and the harness.
    run_bench("busy_trace", "--jobs", "60", "--mean-duration", "1", "--timeout", "120")


@STACK
def test_hostile_apply() -> None:
    run_bench("hostile_apply", "--seconds", "1")
