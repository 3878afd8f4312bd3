"""Benchmarks, each runnable as ``python -m bench.<name>`` (see bench/README.md).

They print figures and ratios against a baseline measured in the same process;
they assert nothing about speed. Each checks its own outcome (the work ran as its
scenario intends) and exits non-zero with a ``FAILED:`` message when it did not: a rate
over rejected or unfinished work is not a rate. Shared helpers live here.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import platform
import uuid
from collections.abc import AsyncIterator, Iterator, Sequence
from typing import Any

from sqlalchemy.engine import make_url

from muster.core.events import Envelope, StreamAppend
from muster.core.model import parse
from muster.core.model.workload import WorkloadSpec
from muster.core.sim.harness import Harness, Livelock
from muster.core.sim.log import MemoryLog

POSTGRES_ENV = "MUSTER_TEST_POSTGRES_URL"


def machine() -> str:
    return (f"python {platform.python_version()}, {os.cpu_count()} cpu(s), "
            f"{platform.system()} {platform.release()}")


def per_second(count: float, seconds: float) -> float:
    return count / seconds if seconds > 0 else float("inf")


def ratio(a: float, b: float) -> str:
    return f"{a / b:.2f}x" if b else "n/a"


def workload_body(i: int, *, gpus: int = 1, duration: float = 0.5,
                  namespace: str = "team-a", queue: str = "training") -> dict[str, Any]:
    """A POST /v1/workloads body (the API's camelCase shape)."""
    return {
        "name": f"bench-{i}", "namespace": namespace, "queueName": queue,
        "podSets": [{"name": "worker", "count": 1,
                     "requests": {"nvidia.com/gpu": gpus, "cpu": 1, "memory": "1Gi"}}],
        "runtime": {"durationSeconds": duration},
    }


def workload_spec(i: int, **kwargs: Any) -> WorkloadSpec:
    return parse.workload(workload_body(i, **kwargs))


def postgres_url() -> str | None:
    return os.environ.get(POSTGRES_ENV) or None


@contextlib.asynccontextmanager
async def scratch_postgres(server_url: str) -> AsyncIterator[str]:
    """A database created for the benchmark on the server of ``server_url``, then dropped.

    Only the server is taken from the URL (its database is the one we connect to to
    issue CREATE/DROP DATABASE); nothing else on it is read or written.
    """
    name = await _create_database(server_url)
    try:
        yield make_url(server_url).set(database=name).render_as_string(hide_password=False)
    finally:
        await _drop_database(server_url, name)


@contextlib.contextmanager
def scratch_postgres_sync(server_url: str) -> Iterator[str]:
    """``scratch_postgres`` for a caller outside an event loop (a ``Stack`` is entered
    outside one): each of the two statements runs in a loop of its own."""
    name = asyncio.run(_create_database(server_url))
    try:
        yield make_url(server_url).set(database=name).render_as_string(hide_password=False)
    finally:
        asyncio.run(_drop_database(server_url, name))


async def _create_database(server_url: str) -> str:
    name = f"muster_bench_{uuid.uuid4().hex[:12]}"
    conn = await _server(server_url)
    try:
        await conn.execute(f'CREATE DATABASE "{name}"')
    finally:
        await conn.close()
    return name


async def _drop_database(server_url: str, name: str) -> None:
    conn = await _server(server_url)
    try:
        force = " WITH (FORCE)" if conn.get_server_version().major >= 13 else ""
        await conn.execute(f'DROP DATABASE IF EXISTS "{name}"{force}')
    finally:
        await conn.close()


async def _server(server_url: str) -> Any:
    import asyncpg

    dsn = make_url(server_url).set(drivername="postgresql").render_as_string(hide_password=False)
    return await asyncpg.connect(dsn)


def redact(url: str) -> str:
    return make_url(url).render_as_string(hide_password=True)


def check_outcome(problems: Sequence[str]) -> None:
    """Print the problems and exit non-zero, loudly, if there are any: the figures printed
    above are then over work that did not run as the scenario intends."""
    if not problems:
        print("outcome check passed: as the scenario intends")
        return
    for problem in problems:
        print(f"  ! {problem}")
    raise SystemExit("FAILED: " + "; ".join(problems) + " (the figures above are not valid)")


class Runaway(RuntimeError):
    """The harness's log outgrew its bound: the deciders never reached a fixed point."""


class BoundedLog(MemoryLog):
    """A MemoryLog that raises ``Runaway`` once it holds more than ``limit`` events, so a
    livelock whose clock keeps moving (timers, retries) fails instead of running forever;
    one at a single instant is the harness's own ``Livelock``."""

    def __init__(self, limit: int) -> None:
        super().__init__()
        self.limit = limit

    def append(
        self, batch: Sequence[StreamAppend], *, producer: str, recorded_at: float
    ) -> list[Envelope]:
        out = super().append(batch, producer=producer, recorded_at=recorded_at)
        if len(self.envelopes) > self.limit:
            raise Runaway(f"more than {self.limit:,} events without reaching a fixed point")
        return out


def run_bounded(harness: Harness, max_events: int) -> str | None:
    """Run a freshly built harness until nothing is left to happen; a livelock is returned
    as a problem (None: it reached its fixed point)."""
    if harness.log.head:
        raise ValueError("the harness has already run: its log cannot be bounded now")
    harness.log = BoundedLog(max_events)
    try:
        harness.run()
    except (Livelock, Runaway) as exc:
        return f"livelock at virtual time {harness.clock:.3f}s: {exc}"
    return None
