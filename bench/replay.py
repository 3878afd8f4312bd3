"""Replay: rebuilding the queue service's state from a SQLite store of N events.

The log is a real one: the simulation harness (the same deciders the services run)
plays examples/cluster.yaml with enough generated workloads for about N events
(submissions, quota reservations, pending reasons, provisioning, nodes, pods,
timers, finishes), every one of them run to its end, and those envelopes are copied
row for row into a fresh SQLite store (positions, versions, producers, causation
kept). Then, in one process:

* read:    the read loop ``admin.rebuild`` runs (``read_all`` by the queue's categories,
           ``admin.REPLAY_BATCH`` at a time), decoding every event, but not folding (the
           baseline);
* rebuild: ``admin.rebuild(store, QueueDecider())``, i.e. read + fold;
* fold:    ``DeciderRunner(QueueDecider()).fold`` over the same envelopes, already in
           memory (read beforehand, untimed).

    python -m bench.replay [--events 100000] [--db PATH]

With --db the store is kept (and reused by a later run if it already holds events).

Outcome, checked on the stored log (fails loudly otherwise): the harness reached its fixed
point within a bound on events (no livelock), every workload was admitted and finished,
failed exactly when its pods were generated to fail, none was rejected or cancelled; the
store holds the log row for row; the rebuilt state equals the in-memory fold.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson
from sqlalchemy import create_engine, func, select

from bench import check_outcome, machine, per_second, ratio, run_bounded
from muster.cli.commands import EXAMPLES, build_harness, load_cluster
from muster.core.decider import clock_only, clock_only_when
from muster.core.events import Envelope, encode_payload
from muster.core.events import queue as qev
from muster.core.events import workload as wev
from muster.core.model import parse
from muster.core.queueing.decider import QueueDecider
from muster.core.runner import DeciderRunner
from muster.core.sim.summary import summarize
from muster.runtime import admin
from muster.runtime.memory import collection_paused
from muster.store import SqlEventStore
from muster.store.migrate import upgrade
from muster.store.schema import events as events_table

COPY_BATCH = 10_000
# Events one generated workload brings to the log, run to its end on examples/cluster.yaml
# (19-22 measured over seeds and gaps): the workload count for about --events events.
EVENTS_PER_WORKLOAD = 20
# A log this many times the expected size has no fixed point: a livelock, not a long run.
RUNAWAY_FACTOR = 3


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
    """The whole log of enough workloads for about ``events`` events, each run to its end.

    The log is not cut at ``events``: a cut leaves the last workloads mid-flight, and the
    example cluster serves fewer workloads than arrive (capacity stalls for its 10-minute
    bookings when a preemption cancels a request whose nodes were booting), so a cut log
    was mostly workloads still waiting. Draining the queue gives the same mix, complete."""
    spec = load_cluster(cluster)
    workloads = generated_workloads(
        max(1, round(events / EVENTS_PER_WORKLOAD)), seed=seed, gap=gap)
    harness = build_harness(spec, workloads)
    livelock = run_bounded(harness, RUNAWAY_FACTOR * events + 1000)
    if livelock is not None:
        s = summarize(harness.log.envelopes)
        check_outcome([f"{livelock} ({s['workloads']} workloads submitted by then, "
                       f"{s['outcomes']})"])
    print(f"  virtual clock at the end {harness.clock:,.0f}s (last arrival at "
          f"{workloads[-1][0]:,.0f}s)")
    return harness.log.envelopes


def log_outcome(envs: list[Envelope]) -> list[str]:
    """What the log shows went other than generated: every workload admitted and finished,
    failed exactly when its pods exit non-zero, none rejected or cancelled."""
    meant: dict[str, bool] = {}  # workload -> generated to fail
    admitted: set[str] = set()
    ended: dict[str, str] = {}  # workload -> Succeeded, Failed, Rejected, Cancelled
    for env in envs:
        ev = env.event
        if isinstance(ev, wev.WorkloadSubmitted):
            meant[ev.workload_id] = ev.spec.runtime.exit_code != 0
        elif isinstance(ev, qev.WorkloadAdmitted):
            admitted.add(ev.workload_id)
        elif isinstance(ev, qev.WorkloadFinished):
            ended[ev.workload_id] = ev.outcome
        elif isinstance(ev, qev.WorkloadRejected):
            ended[ev.workload_id] = "Rejected"
        elif isinstance(ev, qev.WorkloadCancelled):
            ended[ev.workload_id] = "Cancelled"
    problems = []
    if not meant:
        problems.append("the log holds no workload")
    if gave_up := sorted(w for w, o in ended.items() if o in ("Rejected", "Cancelled")):
        problems.append(f"{len(gave_up)} rejected or cancelled, e.g. {gave_up[0]}")
    if never := sorted(set(meant) - admitted):
        problems.append(f"{len(never)} of {len(meant)} never admitted, e.g. {never[0]}")
    if unfinished := sorted(set(meant) - set(ended)):
        problems.append(f"{len(unfinished)} of {len(meant)} never finished, e.g. {unfinished[0]}")
    wrong = sorted(w for w, o in ended.items()
                   if o in ("Succeeded", "Failed") and (o == "Failed") != meant.get(w))
    if wrong:
        problems.append(f"{len(wrong)} ended other than generated (failed though meant to "
                        f"succeed, or the reverse), e.g. {wrong[0]}")
    return problems


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


async def read_like_rebuild(store: SqlEventStore, decider: QueueDecider) -> int:
    """``admin.rebuild``'s read loop without the fold: every batch decoded (but for the
    events the decider folds from the row alone), then dropped."""
    count = position = 0
    while True:
        envs = await store.read_folding(
            position,
            categories=decider.categories,
            limit=admin.REPLAY_BATCH,
            bare=clock_only(decider),
            bare_when=clock_only_when(decider),
        )
        count += len(envs)
        if envs:
            position = envs[-1].position
        if len(envs) < admin.REPLAY_BATCH:
            return count


async def measure(url: str, repeat: int) -> list[str]:
    """Print the figures; what went other than intended (the log's outcome, the rebuild)."""
    store = SqlEventStore(url, read_only=True)  # as `muster replay` reads
    decider = QueueDecider()
    try:
        head = await store.head()
        # Warm up: connections, SQLite's cache, the decoders (one batch, unmeasured).
        await store.read_all(0, categories=decider.categories, limit=admin.REPLAY_BATCH)
        read_s, rebuild_s, rebuild_cpu = [], [], []
        n = 0
        runner: DeciderRunner[Any] = DeciderRunner(decider)
        for _ in range(max(1, repeat)):
            started = time.perf_counter()
            with collection_paused():  # as the rebuild reads
                n = await read_like_rebuild(store, decider)
            read_s.append(time.perf_counter() - started)

            started, cpu = time.perf_counter(), time.process_time()
            runner = await admin.rebuild(store, QueueDecider())
            rebuild_s.append(time.perf_counter() - started)
            rebuild_cpu.append(time.process_time() - cpu)

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
        print(f"  read (rebuild's reads, no fold) {read:5.2f}s  "
              f"{per_second(n, read):>9,.0f} events/s")
        print(f"  rebuild (read + fold)         {rebuild:7.2f}s  "
              f"{per_second(n, rebuild):>9,.0f} events/s  (CPU {min(rebuild_cpu):.2f}s; "
              f"every run {', '.join(f'{t:.2f}' for t in rebuild_s)}s)")
        print(f"  fold in memory (no store)     {fold:7.2f}s  "
              f"{per_second(n, fold):>9,.0f} events/s")
        print(f"  rebuild/read time: {ratio(rebuild, read)}; rebuild - read = "
              f"{rebuild - read:+.2f}s vs in-memory fold {fold:.2f}s "
              f"(fold = {fold / rebuild:.1%} of rebuild time)")
        same = decider.summary(runner.state) == decider.summary(in_memory.state)
        print(f"  rebuilt state == in-memory fold: {'yes' if same else 'NO'} "
              f"(position {runner.position}, {len(runner.state.workloads)} workloads)")
        problems = log_outcome(envs)
        if n != len(envs) or (envs and runner.position != envs[-1].position):
            problems.append(f"the rebuild read {n} events (to position {runner.position}), "
                            f"the in-memory fold {len(envs)}")
        if not same:
            problems.append("the rebuilt state differs from the in-memory fold")
        return problems
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
            if (have := stored_count(url)) != len(envelopes):
                check_outcome([f"the store holds {have} rows of the {len(envelopes)} copied"])
            del envelopes
        print(f"load average before measuring {load()}")
        problems = asyncio.run(measure(url, args.repeat))
        print(f"load average after {load()}")
        check_outcome(problems)


def load() -> str:
    """The machine's 1, 5 and 15-minute load averages (it is shared: say how busy)."""
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.replay", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--events", type=int, default=100_000,
                   help="about this many events: enough workloads for it, each run to its "
                        "end (default 100000)")
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
