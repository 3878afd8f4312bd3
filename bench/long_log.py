"""An append and a service's catch-up on a store with a long history against an empty one.

A benchmark that starts from an empty store cannot see a query whose cost grows with the
log: here the store is a copy of a long one (SQLite: the file given is copied into a
temporary directory and never written) or a PostgreSQL database of the caller's (it is
written to: give one of your own). Two measurements, CPU of this process and wall
time (PostgreSQL's own work shows only in the wall time):

* append: the queue's append to its admission stream (one event, guarded by the
  stream's version, as the queue appends an admission); on the 1M-event log that stream
  holds 215,808 events, so a version check that reads the stream grows with the log;
* catch-up: the provisioner's loop, at the head, after each of ``--rounds`` events of a
  category it does not fold (node events: pods starting and finishing on existing
  nodes) is appended: a step that scans again everything after its last own event
  grows with the rounds.

    python -m bench.long_log [--sqlite-copy-of FILE | --url URL] [--appends 200]
                             [--rounds 200]

Without a store, a new empty SQLite file. Outcome (fails loudly otherwise): every append
committed at the next position and the stream's next version; every catch-up folded
nothing (none of the events is of the provisioner's categories) and left the loop's
position between where it started and the head.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from bench import check_outcome, machine
from muster.core.events import NewEvent, StreamAppend
from muster.core.events import timer as tev
from muster.core.provisioning.decider import ProvisionerDecider
from muster.runtime.loop import DeciderLoop
from muster.runtime.metrics import ServiceMetrics
from muster.runtime.settings import load
from muster.store import SqlEventStore
from muster.store.migrate import upgrade_async

ADMISSION_STREAM = "admission-cluster"  # the queue's admissions (core/events/admission.py)
NODE_STREAM = "node-bench-long-log"  # category "node": not the provisioner's


def _event(stream: str, i: int) -> NewEvent:
    """The smallest event there is, on ``stream`` (its category is the stream's)."""
    event = tev.TimerFired(owner="bench", deadline=float(i))
    return NewEvent(stream_id=stream, event=event, occurred_at=time.time())


async def appends(
    store: SqlEventStore, count: int, problems: list[str]
) -> tuple[list[float], list[float]]:
    """CPU and wall seconds of each append to the admission stream."""
    version = await store.stream_version(ADMISSION_STREAM)
    head = await store.head()
    spent, wall = [], []
    for i in range(count):
        started, started_wall = time.process_time(), time.perf_counter()
        envs = await store.append(
            [StreamAppend(ADMISSION_STREAM, version, [_event(ADMISSION_STREAM, i)])],
            producer="queue",
            recorded_at=time.time(),
        )
        spent.append(time.process_time() - started)
        wall.append(time.perf_counter() - started_wall)
        version += 1
        head += 1
        if [(e.position, e.stream_version) for e in envs] != [(head, version)]:
            problems.append(f"append {i}: {[(e.position, e.stream_version) for e in envs]}")
            break
    return spent, wall


async def catch_ups(
    store: SqlEventStore, url: str, rounds: int, problems: list[str]
) -> tuple[list[float], list[float]]:
    """CPU and wall seconds of each catch-up of the provisioner's loop after one node
    event."""
    settings = load({}, store_url=url, kafka_bootstrap="unused:9092", poll_seconds=300)
    loop = DeciderLoop(ProvisionerDecider(), store, settings, ServiceMetrics())
    start = loop.runner.position = await store.head()  # as restored from a snapshot there
    spent, wall = [], []
    for i in range(rounds):
        await store.append(
            [StreamAppend(NODE_STREAM, None, [_event(NODE_STREAM, i)])],
            producer="node-agent",
            recorded_at=time.time(),
        )
        started, started_wall = time.process_time(), time.perf_counter()
        folded = await loop.catch_up()
        spent.append(time.process_time() - started)
        wall.append(time.perf_counter() - started_wall)
        if folded:
            problems.append(f"round {i}: the provisioner folded {folded} node event(s)")
    head = await store.head()
    if not start <= loop.runner.position <= head:
        problems.append(f"the loop's position {loop.runner.position} outside {start}..{head}")
    return spent, wall


def _ms(values: list[float]) -> str:
    median, mean = statistics.median(values) * 1e3, statistics.fmean(values) * 1e3
    return f"median {median:.3f} ms, mean {mean:.3f} ms"


async def main(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory(prefix="muster-long-log-") as tmp:
        if args.url:
            url = args.url
        else:
            path = Path(tmp) / "muster.db"
            if args.sqlite_copy_of:
                shutil.copyfile(args.sqlite_copy_of, path)  # the original is never opened
            url = f"sqlite:///{path}"
            await upgrade_async(url)
        store = SqlEventStore(url)
        try:
            history = await store.head()
            version = await store.stream_version(ADMISSION_STREAM)
            problems: list[str] = []
            append_cpu, append_wall = await appends(store, args.appends, problems)
            catch_up_cpu, catch_up_wall = await catch_ups(store, url, args.rounds, problems)
        finally:
            await store.close()
    print(machine())
    print(f"load: {os.getloadavg()[0]:.2f} (1 min)")
    print(f"store: {'PostgreSQL' if url.startswith('postgres') else 'SQLite'}, "
          f"{history:,} events of history, {ADMISSION_STREAM} at version {version:,}")
    print(f"append ({args.appends}): CPU {_ms(append_cpu)}; wall {_ms(append_wall)}")
    tail = max(1, args.rounds // 10)
    for label, values in (("CPU", catch_up_cpu), ("wall", catch_up_wall)):
        print(f"catch-up ({args.rounds} rounds) {label}: {_ms(values)}; "
              f"first {tail}: {_ms(values[:tail])}; last {tail}: {_ms(values[-tail:])}")
    check_outcome(problems)


def cli() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--sqlite-copy-of", help="a SQLite store to copy (never written)")
    where.add_argument("--url", help="a store to use as it is (it is written to)")
    parser.add_argument("--appends", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=200)
    asyncio.run(main(parser.parse_args()))


if __name__ == "__main__":
    cli()
