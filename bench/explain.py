"""explain --at: a workload's state and why at a past point of an N-event log, with and
without history snapshots.

The log is bench.replay's (the simulation harness over examples/cluster.yaml, every
workload run to its end, copied row for row into a fresh SQLite store). Then, in one
process, what ``GET /v1/workloads/{id}/explain?at=`` does: rebuild the queue's state at
the target (``runtime.history.state_at``), read the workload's history, explain it
(``core.explain``, the visibility dry run included). Timed:

* cold:   no snapshot: a fold from the start (what every explain --at cost before);
* build:  one fold over the whole log that writes a history snapshot every
          ``--every`` events (what the queue service's own snapshots and the first
          explain of a long log leave behind), untimed in the figures below but printed;
* middle: the target in the middle of the log, from the newest snapshot before it;
* worst:  the target just before the next snapshot (``--every`` - 1 events to fold).

Each target is explained for a workload that was pending there (else any workload that
existed), and the answer must equal the cold one's: snapshots change no result.

    python -m bench.explain [--events 100000] [--every 25000] [--db PATH]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import tempfile
import time
from pathlib import Path
from typing import Any

from bench import check_outcome, machine
from bench.replay import copy_into, simulate, stored_count
from muster.cli.commands import EXAMPLES
from muster.core.explain import explain
from muster.core.timepoint import At, parse_at
from muster.runtime import history
from muster.store import SqlEventStore
from muster.store.migrate import upgrade


async def explain_at(
    store: SqlEventStore, at: At, wid: str | None, every: int, snapshots: bool = True
) -> Any:
    """What the endpoint does: (answer, seconds, events folded, snapshot used, workload,
    CPU seconds). The seconds are wall-clock; the CPU seconds the process spent meanwhile
    (its worker thread's included) are printed too: on a machine shared with other work
    the wall time is mostly waiting for a core."""
    started, cpu = time.perf_counter(), time.process_time()
    rebuilt = await history.state_at(store, at, snapshots=snapshots, every=every)
    state = rebuilt.runner.state
    wid = wid or _subject(state)
    found = explain(state, wid, await store.read_correlated(wid), rebuilt.runner.position)
    took = time.perf_counter() - started
    used = time.process_time() - cpu
    return found.to_json(), took, rebuilt.folded, rebuilt.from_snapshot, wid, used


def _subject(state: Any) -> str:
    """A workload pending at that point (the interesting question), else the newest."""
    if state.pending:
        return str(min(state.pending, key=lambda w: state.workloads[w].order))
    if state.workloads:
        return str(max(state.workloads, key=lambda w: state.workloads[w].order))
    return str(next(reversed(state.ended)))  # all ended: the last to end


async def measure(url: str, every: int) -> list[str]:
    store = SqlEventStore(url)
    problems: list[str] = []
    try:
        head = await store.head()
        middle = head // 2 + 7
        at = At(position=middle)
        cold, cold_s, cold_n, _, wid, cold_c = await explain_at(store, at, None, every, False)
        print(f"log of {head:,} events; target: position {middle:,} (the middle), workload "
              f"{wid} ({cold['status']}, {cold['reason']})")
        print(f"  cold (no snapshot, fold from the start) {cold_s * 1000:8.1f} ms  "
              f"({cold_n:,} events folded, {cold_c * 1000:,.0f} ms of CPU)")
        started = time.perf_counter()
        await history.state_at(store, At(position=head), every=every)
        print(f"  build: one fold writing a snapshot every {every:,} events "
              f"{time.perf_counter() - started:6.2f} s (not part of an explain)")
        hot, hot_s, hot_n, snap, _, hot_c = await explain_at(
            store, At(position=middle), wid, every
        )
        print(f"  middle (from snapshot at {snap or 0:,})      {hot_s * 1000:8.1f} ms  "
              f"({hot_n:,} events folded, {hot_c * 1000:,.0f} ms of CPU)")
        if hot != cold:
            problems.append("the middle answer from a snapshot differs from the cold one")
        worst_at = (snap or 0) + every - 1
        if worst_at < head:
            ref, *_ = await explain_at(store, At(position=worst_at), wid, every, False)
            got, worst_s, worst_n, wsnap, _, worst_c = await explain_at(
                store, At(position=worst_at), wid, every)
            print(f"  worst (position {worst_at:,}, snapshot at {wsnap or 0:,}) "
                  f"{worst_s * 1000:8.1f} ms  ({worst_n:,} events folded, "
                  f"{worst_c * 1000:,.0f} ms of CPU)")
            if got != ref:
                problems.append("the worst-case answer from a snapshot differs from the cold one")
        moment = cold["time"]
        _, t_s, t_n, _, _, t_c = await explain_at(store, parse_at(moment, 0.0), wid, every)
        print(f"  by time ({moment})  {t_s * 1000:8.1f} ms  ({t_n:,} events folded, "
              f"{t_c * 1000:,.0f} ms of CPU)")
        print(f"  load average {os.getloadavg()[0]:.2f} ({machine()})")
        return problems
    finally:
        await store.close()


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    print(f"bench.explain ({machine()})")
    with tempfile.TemporaryDirectory(prefix="muster-bench-") as tmp:
        db = args.db.resolve() if args.db else Path(tmp) / "explain.db"
        url = f"sqlite:///{db}"
        upgrade(url)
        if not stored_count(url):
            started = time.perf_counter()
            envelopes = simulate(args.cluster, args.events, seed=args.seed, gap=1.5)
            copy_into(url, envelopes)
            print(f"built and stored {len(envelopes):,} events in "
                  f"{time.perf_counter() - started:.1f}s")
            del envelopes
        check_outcome(asyncio.run(measure(url, args.every)))


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.explain", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--events", type=int, default=100_000, help="about this many events")
    p.add_argument("--every", type=int, default=history.SNAPSHOT_EVERY,
                   help="events between history snapshots (default %(default)s)")
    p.add_argument("--cluster", type=Path, default=EXAMPLES / "cluster.yaml")
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--db", type=Path, help="keep the SQLite store here (reused)")
    return p.parse_args(argv)


if __name__ == "__main__":
    main()
