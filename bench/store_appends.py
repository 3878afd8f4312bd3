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

Outcome (fails loudly otherwise): every append committed at the positions that follow
the previous head with no gap, each stream at the versions expected (1 for a new stream,
1..N for a batched stream), and at the end the store's head and a full read back hold
exactly the events appended.
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
    check_outcome,
    machine,
    per_second,
    postgres_url,
    ratio,
    redact,
    scratch_postgres,
    workload_spec,
)
from muster.core import inputs
from muster.core.events import Envelope, NewEvent, StreamAppend
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
                budget: float = float("inf"), problems: list[str] | None = None,
                ) -> tuple[int, int, float]:
    """Append each batch in its own transaction, stopping once ``budget`` seconds
    have passed; (appends done, events appended, seconds). What an append committed
    other than expected goes to ``problems`` (checked outside the timing)."""
    events = done = 0
    started = time.perf_counter()
    elapsed = 0.0
    committed: list[tuple[list[StreamAppend], list[Envelope]]] = []
    for batch in appends:
        committed.append((batch, await store.append(batch, producer="bench",
                                                    recorded_at=time.time())))
        events += sum(len(item.events) for item in batch)
        done += 1
        elapsed = time.perf_counter() - started
        if elapsed > budget:
            break
    if problems is not None:
        problems += [p for batch, envs in committed for p in append_problems(batch, envs)]
    return done, events, elapsed


def append_problems(batch: list[StreamAppend], envs: list[Envelope]) -> list[str]:
    """An append's envelopes other than expected: one per event, at consecutive positions,
    each stream from its expected version on, in the order given."""
    want = [(item.stream_id, (item.expected_version or 0) + k + 1)
            for item in batch for k in range(len(item.events))]
    got = [(e.stream_id, e.stream_version) for e in envs]
    positions = [e.position for e in envs]
    if got != want:
        return [f"an append of {len(want)} events committed streams/versions {got[:3]}..., "
                f"expected {want[:3]}..."]
    if positions != list(range(positions[0], positions[0] + len(positions))):
        return [f"an append committed non-consecutive positions {positions[:5]}..."]
    return []


async def run_backend(label: str, url: str, args: argparse.Namespace) -> list[str]:
    """One store's modes, printed; what went other than intended, labelled."""
    make = workload_events() if args.event == "workload" else timer_events()
    await upgrade_async(url)
    store = SqlEventStore(url)
    problems: list[str] = []
    try:
        # Warm up connections, statement caches and the file before measuring.
        _, appended, _ = await timed(store, single_appends(make, args.warmup), problems=problems)
        # Build every event before the clock starts: only the store is measured.
        plans = {
            "single": single_appends(make, args.single),
            "batched-streams": batches_of_streams(make, args.batched, args.batch_size),
            "batched-stream": batches_of_one_stream(make, args.batched, args.batch_size),
        }
        print(f"{label}: {redact(url)}")
        rates: dict[str, float] = {}
        for mode, appends in plans.items():
            done, events, seconds = await timed(store, appends, args.max_seconds, problems)
            appended += events
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
        head = await store.head()
        print(f"  head position at the end: {head}")
        problems += await read_back(store, head, appended)
    finally:
        await store.close()
    return [f"{label}: {p}" for p in problems]


async def read_back(store: SqlEventStore, head: int, appended: int) -> list[str]:
    """The store holds exactly what was appended: the head, and every event read back."""
    position = read = 0
    while batch := await store.read_all(position, limit=10_000):
        read += len(batch)
        position = batch[-1].position
    if head == appended and read == appended:
        return []
    return [f"{appended} events appended, but the head is {head} and {read} read back"]


async def main_async(args: argparse.Namespace) -> None:
    """Every backend's figures, then the outcome check over all of them."""
    print(f"bench.store_appends ({machine()}); event: {args.event}")
    with tempfile.TemporaryDirectory(prefix="muster-bench-") as tmp:
        problems = await run_backend("sqlite", f"sqlite:///{Path(tmp) / 'bench.db'}", args)
    server = postgres_url()
    if server is None or args.no_postgres:
        print(f"postgresql: skipped (set {POSTGRES_ENV})")
    else:
        async with scratch_postgres(server) as url:
            problems += await run_backend("postgresql", url, args)
    check_outcome(problems)


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
