"""Replay: rebuilding the queue service's state from a SQLite store of N events.

The log is a real one: the simulation harness (the same deciders the services run)
plays examples/cluster.yaml with generated workloads until it has written N events
(submissions, quota reservations, pending reasons, provisioning, nodes, pods,
timers, finishes), and those envelopes are copied row for row into a fresh SQLite
store (positions, versions, producers, causation kept). Then, in one process:

* read:    the read loop ``admin.rebuild`` runs (``read_all`` by the queue's categories,
           10,000 at a time), decoding every event, but not folding (the baseline);
* rebuild: ``admin.rebuild(store, QueueDecider())``, i.e. read + fold;
* fold:    ``DeciderRunner(QueueDecider()).fold`` over the same envelopes, already in
           memory (read beforehand, untimed).

    python -m bench.replay [--events 100000] [--db PATH]

With --db the store is kept (and reused by a later run if it already holds events).
"""

from __future__ import annotations

import argparse
import asyncio
import random
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson
from sqlalchemy import create_engine, func, select

from bench import machine, per_second, ratio
from muster.cli.commands import EXAMPLES, build_harness, load_cluster
from muster.core.events import Envelope, encode_payload
from muster.core.model import parse
from muster.core.queueing.decider import QueueDecider
from muster.core.runner import DeciderRunner
from muster.core.sim.summary import summarize
from muster.runtime import admin
from muster.store import SqlEventStore
from muster.store.migrate import upgrade
from muster.store.schema import events as events_table

COPY_BATCH = 10_000


def generated_workloads(count: int, *, seed: int, gap: float) -> list[tuple[float, Any]]:
    """A mixed stream for the demo cluster: 1 to 5 pods of 8 GPUs, 1 to 4 s, a few failing."""
    rng = random.Random(seed)
    out = []
    at = 0.0
    for i in range(count):
        at += rng.expovariate(1.0 / gap)
        body = {
            "name": f"job-{i}", "namespace": rng.choice(["team-a", "team-b"]),
            "queueName": "training", "priority": rng.choice([0, 0, 0, 10]),
            "podSets": [{"name": "worker", "count": rng.choice([1, 1, 1, 2, 2, 3, 5]),
                         "requests": {"nvidia.com/gpu": 8, "cpu": 48}}],
            "runtime": {"durationSeconds": rng.choice([1, 2, 3, 4]),
                        "exitCode": 1 if rng.random() < 0.03 else 0},
        }
        out.append((round(at, 3), parse.workload(body)))
    return out


def simulate(cluster: Path, events: int, *, seed: int, gap: float) -> list[Envelope]:
    """Run the harness until its log holds ``events`` events; its first ``events``."""
    spec = load_cluster(cluster)
    # ~15 to 25 events a workload: schedule more than enough, stop once the log is long.
    workloads = generated_workloads(events // 8 + 10, seed=seed, gap=gap)
    harness = build_harness(spec, workloads)
    last_arrival = workloads[-1][0]
    horizon = 0.0
    while len(harness.log.envelopes) < events:
        horizon += 60.0
        before = len(harness.log.envelopes)
        harness.run(until=horizon)
        if len(harness.log.envelopes) == before and horizon > last_arrival:
            break  # nothing left to happen
    return harness.log.envelopes[:events]


def copy_into(url: str, envelopes: list[Envelope]) -> None:
    """Insert the envelopes as the store's rows (what ``SqlEventStore.append`` writes)."""
    engine = create_engine(url)  # the plain sqlite driver: a bulk load, not the measured path
    try:
        for start in range(0, len(envelopes), COPY_BATCH):
            rows = [{
                "position": e.position, "event_id": e.event_id, "stream_id": e.stream_id,
                "category": e.category, "stream_version": e.stream_version, "type": e.type,
                "schema_version": e.schema_version, "occurred_at": e.occurred_at,
                "recorded_at": e.recorded_at, "causation_id": e.causation_id,
                "correlation_id": e.correlation_id, "producer": e.producer,
                "payload": orjson.dumps(encode_payload(e.event)).decode(),
            } for e in envelopes[start:start + COPY_BATCH]]
            with engine.begin() as conn:
                conn.execute(events_table.insert(), rows)
    finally:
        engine.dispose()


def stored_count(url: str) -> int:
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            return int(conn.execute(select(func.count()).select_from(events_table)).scalar_one())
    finally:
        engine.dispose()


async def read_like_rebuild(store: SqlEventStore, categories: frozenset[str]) -> int:
    """``admin.rebuild``'s read loop without the fold: every batch decoded, then dropped."""
    count = position = 0
    while True:
        envs = await store.read_all(position, categories=categories, limit=admin.REPLAY_BATCH)
        count += len(envs)
        if envs:
            position = envs[-1].position
        if len(envs) < admin.REPLAY_BATCH:
            return count


async def measure(url: str, repeat: int) -> None:
    store = SqlEventStore(url)
    decider = QueueDecider()
    try:
        head = await store.head()
        # Warm up: connections, SQLite's cache, the decoders (one batch, unmeasured).
        await store.read_all(0, categories=decider.categories, limit=admin.REPLAY_BATCH)
        read_s, rebuild_s = [], []
        n = 0
        runner: DeciderRunner[Any] = DeciderRunner(decider)
        for _ in range(max(1, repeat)):
            started = time.perf_counter()
            n = await read_like_rebuild(store, decider.categories)
            read_s.append(time.perf_counter() - started)

            started = time.perf_counter()
            runner = await admin.rebuild(store, QueueDecider())
            rebuild_s.append(time.perf_counter() - started)

        # The in-memory fold needs every envelope at once: read them untimed.
        envs = await store.read_all(0, categories=decider.categories)
        fold_s = []
        in_memory: DeciderRunner[Any] = DeciderRunner(decider)
        for _ in range(max(1, repeat)):
            in_memory = DeciderRunner(QueueDecider())
            started = time.perf_counter()
            in_memory.fold(envs)
            fold_s.append(time.perf_counter() - started)

        read, rebuild, fold = min(read_s), min(rebuild_s), min(fold_s)
        best = f" (best of {repeat})" if repeat > 1 else ""
        print(f"store head {head}; the queue's categories hold {n} of them{best}")
        print(f"  read (read_all loop, no fold) {read:7.2f}s  "
              f"{per_second(n, read):>9,.0f} events/s")
        print(f"  rebuild (read + fold)         {rebuild:7.2f}s  "
              f"{per_second(n, rebuild):>9,.0f} events/s")
        print(f"  fold in memory (no store)     {fold:7.2f}s  "
              f"{per_second(n, fold):>9,.0f} events/s")
        print(f"  rebuild/read time: {ratio(rebuild, read)}; rebuild - read = "
              f"{rebuild - read:+.2f}s vs in-memory fold {fold:.2f}s "
              f"(fold = {fold / rebuild:.1%} of rebuild time)")
        same = decider.summary(runner.state) == decider.summary(in_memory.state)
        print(f"  rebuilt state == in-memory fold: {'yes' if same else 'NO'} "
              f"(position {runner.position}, {len(runner.state.workloads)} workloads)")
    finally:
        await store.close()


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    print(f"bench.replay ({machine()})")
    with tempfile.TemporaryDirectory(prefix="muster-bench-") as tmp:
        db = args.db.resolve() if args.db else Path(tmp) / "replay.db"
        url = f"sqlite:///{db}"
        upgrade(url)
        have = stored_count(url)
        if have:
            print(f"reusing {db}: {have} events")
        else:
            started = time.perf_counter()
            envelopes = simulate(args.cluster, args.events, seed=args.seed, gap=args.gap)
            took = time.perf_counter() - started
            s = summarize(envelopes)
            print(f"simulated {len(envelopes)} events ({s['workloads']} workloads, "
                  f"{s['outcomes']}) in {took:.1f}s")
            started = time.perf_counter()
            copy_into(url, envelopes)
            print(f"copied into {db} in {time.perf_counter() - started:.1f}s")
            del envelopes
        asyncio.run(measure(url, args.repeat))


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.replay", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--events", type=int, default=100_000, help="log length (default 100000)")
    p.add_argument("--cluster", type=Path, default=EXAMPLES / "cluster.yaml",
                   help="cluster description (default examples/cluster.yaml)")
    p.add_argument("--gap", type=float, default=1.5,
                   help="mean seconds between submissions, simulated time (default 1.5)")
    p.add_argument("--seed", type=int, default=7, help="workload generator seed (default 7)")
    p.add_argument("--repeat", type=int, default=1,
                   help="measure this many times and print the best (default 1)")
    p.add_argument("--db", type=Path,
                   help="keep the SQLite store here (reused if it already holds events)")
    return p.parse_args(argv)


if __name__ == "__main__":
    main()
