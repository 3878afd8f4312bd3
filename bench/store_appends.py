"""Event store appends per second: SQLite (a temp file) and PostgreSQL (when configured).

Modes, each on new streams with ``expected_version=0`` (the optimistic-concurrency
path intake takes for a submission):

* single:          one event per append, i.e. one transaction per event (the baseline);
* batched-streams: 100 streams of one event each per append (what a decider's
                   decisions or a relay batch look like: one version check per stream);
* batched-stream:  one stream with 100 events per append (one version check).

The batched rates are printed as ratios against single, measured in the same process.
PostgreSQL runs only when MUSTER_TEST_POSTGRES_URL is set; the benchmark then creates
a database of its own on that server and drops it afterwards.

    python -m bench.store_appends [--single 2000] [--batched 20000] [--batch-size 100]
                                  [--max-seconds 10]

Each mode stops at its event count or after --max-seconds, whichever comes first,
and its rate is over what it did; so a run stays within about two minutes.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path

from bench import (
    POSTGRES_ENV,
    machine,
    per_second,
    postgres_url,
    ratio,
    redact,
    scratch_postgres,
    workload_spec,
)
from muster.core import inputs
from muster.core.events import NewEvent, StreamAppend
from muster.core.events import timer as tev
from muster.store import SqlEventStore
from muster.store.migrate import upgrade_async

EventFactory = Callable[[str, int], NewEvent]


def workload_events() -> EventFactory:
    """WorkloadSubmitted, as intake appends it (a ~0.5 KB payload)."""
    spec = workload_spec(0)

    def make(stream_key: str, i: int) -> NewEvent:
        return inputs.submission(f"{stream_key}-{i}", spec, time.time())

    return make


def timer_events() -> EventFactory:
    """TimerFired: the smallest event there is."""

    def make(stream_key: str, i: int) -> NewEvent:
        return NewEvent(stream_id=tev.stream(stream_key), occurred_at=time.time(),
                        event=tev.TimerFired(owner=stream_key, deadline=float(i)))

    return make


def single_appends(make: EventFactory, count: int) -> list[list[StreamAppend]]:
    out = []
    for _ in range(count):
        new = make(uuid.uuid4().hex[:16], 0)
        out.append([StreamAppend(new.stream_id, 0, [new])])
    return out


def batches_of_streams(make: EventFactory, events: int, size: int) -> list[list[StreamAppend]]:
    out = []
    for _ in range(max(1, events // size)):
        batch = []
        for _ in range(size):
            new = make(uuid.uuid4().hex[:16], 0)
            batch.append(StreamAppend(new.stream_id, 0, [new]))
        out.append(batch)
    return out


def batches_of_one_stream(make: EventFactory, events: int, size: int) -> list[list[StreamAppend]]:
    out = []
    for _ in range(max(1, events // size)):
        key = uuid.uuid4().hex[:16]
        news = [make(key, i) for i in range(size)]
        # Every event of the batch on the first one's stream (a decision stream, say).
        news = [NewEvent(stream_id=news[0].stream_id, event=n.event, occurred_at=n.occurred_at,
                         correlation_id=n.correlation_id) for n in news]
        out.append([StreamAppend(news[0].stream_id, 0, news)])
    return out


async def timed(store: SqlEventStore, appends: list[list[StreamAppend]],
                budget: float = float("inf")) -> tuple[int, int, float]:
    """Append each batch in its own transaction, stopping once ``budget`` seconds
    have passed; (appends done, events appended, seconds)."""
    events = done = 0
    started = time.perf_counter()
    elapsed = 0.0
    for batch in appends:
        await store.append(batch, producer="bench", recorded_at=time.time())
        events += sum(len(item.events) for item in batch)
        done += 1
        elapsed = time.perf_counter() - started
        if elapsed > budget:
            break
    return done, events, elapsed


async def run_backend(label: str, url: str, args: argparse.Namespace) -> None:
    make = workload_events() if args.event == "workload" else timer_events()
    await upgrade_async(url)
    store = SqlEventStore(url)
    try:
        # Warm up connections, statement caches and the file before measuring.
        await timed(store, single_appends(make, args.warmup))
        # Build every event before the clock starts: only the store is measured.
        plans = {
            "single": single_appends(make, args.single),
            "batched-streams": batches_of_streams(make, args.batched, args.batch_size),
            "batched-stream": batches_of_one_stream(make, args.batched, args.batch_size),
        }
        print(f"{label}: {redact(url)}")
        rates: dict[str, float] = {}
        for mode, appends in plans.items():
            done, events, seconds = await timed(store, appends, args.max_seconds)
            rates[mode] = per_second(events, seconds)
            per_txn = seconds / done * 1000
            cut = "" if done == len(appends) else f"; stopped at {args.max_seconds:g}s"
            shape = ("1 event/append" if mode == "single" else
                     f"{args.batch_size} streams x 1 event/append" if mode == "batched-streams"
                     else f"1 stream x {args.batch_size} events/append")
            print(f"  {mode:<16} {events:>7} events in {seconds:6.2f}s  "
                  f"{rates[mode]:>9,.0f} events/s  ({per_txn:.2f} ms/append; {shape}{cut})")
        for mode in ("batched-streams", "batched-stream"):
            print(f"  {mode}/single: {ratio(rates[mode], rates['single'])}")
        print(f"  head position at the end: {await store.head()}")
    finally:
        await store.close()


async def main_async(args: argparse.Namespace) -> None:
    print(f"bench.store_appends ({machine()}); event: {args.event}")
    with tempfile.TemporaryDirectory(prefix="muster-bench-") as tmp:
        await run_backend("sqlite", f"sqlite:///{Path(tmp) / 'bench.db'}", args)
    server = postgres_url()
    if server is None or args.no_postgres:
        print(f"postgresql: skipped (set {POSTGRES_ENV})")
        return
    async with scratch_postgres(server) as url:
        await run_backend("postgresql", url, args)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.store_appends", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--single", type=int, default=2000,
                   help="events appended one per transaction (default 2000)")
    p.add_argument("--batched", type=int, default=20000,
                   help="events appended in batches, per batched mode (default 20000)")
    p.add_argument("--batch-size", type=int, default=100, help="events per batch (default 100)")
    p.add_argument("--max-seconds", type=float, default=10.0,
                   help="stop a mode after this many seconds (default 10)")
    p.add_argument("--warmup", type=int, default=100, help="unmeasured appends first (default 100)")
    p.add_argument("--event", choices=("workload", "timer"), default="workload",
                   help="workload: WorkloadSubmitted (default); timer: TimerFired")
    p.add_argument("--no-postgres", action="store_true",
                   help=f"skip PostgreSQL even when {POSTGRES_ENV} is set")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    asyncio.run(main_async(parse_args(argv)))


if __name__ == "__main__":
    main()
