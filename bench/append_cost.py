"""The CPU of an append on a SQLite store, per row and per commit, user and kernel apart,
as the services append: several processes appending commits of 1-40 rows onto a store
with history, each listening to the doorbell as a service does.

    python -m bench.append_cost --db /tmp/lead-100k.db [--processes 4] [--commits 400]
                                [--pace-ms 10] [--sizes 1,8,16,24,32,40] [--no-listen]

The store is a copy of ``--db`` in a temporary directory (the source is only read). Each
process appends the events of one producer of that log (``--producers``; a producer with
none: the log's last events), renamed onto new streams (a stream per workload, as the
services' streams are), in commits of the
``--sizes`` in turn, one every ``--pace-ms`` (0: back to back), through
``SqlEventStore.append`` on the event loop (another process's write lock: the writer
thread, as a service). Unless ``--no-listen``, each also follows the doorbell (``rings``)
and reads the head on each ring, as a service's wake-up begins.

Printed per process and summed: user and system CPU (getrusage) a commit and a row, of
the whole process over the appending (the listening included) and of the append calls
alone (the loop's thread, RUSAGE_THREAD around each call, split into the SQL part, the
ring, and the rest: envelopes); bytes written (``/proc/self/io`` write_bytes) and write
system calls a commit; wake-ups a commit. Outcome (fails loudly otherwise): every commit
landed, and the store's head grew by exactly the rows appended.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import multiprocessing
import resource
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import apsw

from muster.core.events import NewEvent, StreamAppend
from muster.store import SqlEventStore, bell, sqlite_fast
from muster.store.rows import COLUMNS, envelopes

PRODUCERS = ("queue", "provisioner", "node-agent", "queue")


def source_events(db: str, producer: str, count: int) -> list[NewEvent]:
    """``count`` events ``producer`` appended to the log at ``db`` (decoded as a reader
    decodes them), each on its own stream for now (``renamed``)."""
    conn = apsw.Connection(db, flags=apsw.SQLITE_OPEN_READONLY)
    conn.set_busy_timeout(10_000)  # the other processes open it at once
    try:
        select = f"SELECT {', '.join(COLUMNS)} FROM events"
        last = "ORDER BY position DESC LIMIT ?"
        rows = conn.execute(f"{select} WHERE producer = ? {last}", (producer, count)).fetchall()
        rows = rows or conn.execute(f"{select} {last}", (count,)).fetchall()
    finally:
        conn.close()
    if not rows:
        raise SystemExit(f"FAILED: {db} holds no events")
    return [
        NewEvent(
            stream_id=env.stream_id,
            event=env.event,
            occurred_at=env.occurred_at,
            causation_id=env.causation_id,
            correlation_id=env.correlation_id,
        )
        for env in envelopes(reversed(rows))
    ]


def commits(
    events: list[NewEvent], sizes: list[int], count: int, tag: str
) -> Iterator[list[StreamAppend]]:
    """``count`` commits of ``sizes`` rows in turn; each source stream renamed per pass
    over the events (new streams, as a new workload's), expected versions checked."""
    versions: dict[str, int] = {}
    i = 0
    for n in range(count):
        size = sizes[n % len(sizes)]
        by_stream: dict[str, list[NewEvent]] = {}
        for _ in range(size):
            new = events[i % len(events)]
            stream = f"{new.stream_id}~{tag}{i // len(events)}"
            by_stream.setdefault(stream, []).append(
                NewEvent(
                    stream_id=stream,
                    event=new.event,
                    occurred_at=new.occurred_at,
                    causation_id=new.causation_id,
                    correlation_id=new.correlation_id,
                )
            )
            i += 1
        batch = []
        for stream, news in by_stream.items():
            batch.append(StreamAppend(stream, versions.get(stream, 0), news))
            versions[stream] = versions.get(stream, 0) + len(news)
        yield batch


class Clock:
    """User and system CPU of the calling thread, summed over the calls measured."""

    def __init__(self) -> None:
        self.user = 0.0
        self.system = 0.0
        self.cpu = 0.0  # thread_time: exact, where getrusage's split is sampled by ticks

    @contextlib.contextmanager
    def measure(self) -> Iterator[None]:
        before = resource.getrusage(resource.RUSAGE_THREAD)
        t0 = time.thread_time()
        try:
            yield
        finally:
            t1 = time.thread_time()
            after = resource.getrusage(resource.RUSAGE_THREAD)
            self.user += after.ru_utime - before.ru_utime
            self.system += after.ru_stime - before.ru_stime
            self.cpu += t1 - t0


def io_counters() -> dict[str, int]:
    with open("/proc/self/io") as f:
        return {k: int(v) for k, v in (line.split(": ") for line in f)}


def worker(
    url: str, db: str, producer: str, tag: str, args: argparse.Namespace, start: Any, out: Any
) -> None:
    sizes = [int(s) for s in args.sizes.split(",")]
    events = source_events(db, producer, 2000)
    plan = list(commits(events, sizes, args.commits, tag))
    clocks = {"call": Clock(), "sql": Clock(), "ring": Clock()}
    real_append, real_ring = sqlite_fast._append, sqlite_fast.LoopConnection.ring

    def timed_append(*a: Any, **k: Any) -> Any:
        with clocks["sql"].measure():
            return real_append(*a, **k)

    def timed_ring(self: Any, *a: Any, **k: Any) -> Any:
        with clocks["ring"].measure():
            return real_ring(self, *a, **k)

    real_connect = sqlite_fast.LoopConnection._connect

    def connect(self: Any, *a: Any, **k: Any) -> Any:
        conn = real_connect(self, *a, **k)
        for pragma in args.pragma:
            conn.execute(f"PRAGMA {pragma}")
        return conn

    sqlite_fast.LoopConnection._connect = connect  # type: ignore[method-assign]
    waited = [0]
    real_loop_append = sqlite_fast.LoopConnection.append

    def counted_append(self: Any, *a: Any, **k: Any) -> Any:
        waited[0] += bool(k.get("wait"))
        return real_loop_append(self, *a, **k)

    sqlite_fast.LoopConnection.append = counted_append  # type: ignore[method-assign]
    sqlite_fast._append = timed_append  # type: ignore[assignment]
    sqlite_fast.LoopConnection.ring = timed_ring  # type: ignore[method-assign]
    wakes = [0]

    async def listen(store: SqlEventStore) -> None:
        async for _ in bell.rings(store.url):
            wakes[0] += 1
            await store.head()

    async def run() -> dict[str, Any]:
        store = SqlEventStore(url)
        await store.head()
        listener = None if args.no_listen else asyncio.create_task(listen(store))
        await asyncio.sleep(0.2)
        start.wait()
        io0, ru0, t0 = io_counters(), resource.getrusage(resource.RUSAGE_SELF), time.monotonic()
        wakes[0] = waited[0] = 0
        rows = 0
        for batch in plan:
            with clocks["call"].measure():
                appended = await store.append(batch, producer=producer, recorded_at=time.time())
            rows += len(appended)
            await asyncio.sleep(args.pace_ms / 1000)
        await asyncio.sleep(0.3)  # the last rings heard
        ru1, io1, t1 = resource.getrusage(resource.RUSAGE_SELF), io_counters(), time.monotonic()
        if listener is not None:
            listener.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await listener
        await store.close()
        return {
            "producer": producer,
            "commits": len(plan),
            "rows": rows,
            "wall": t1 - t0,
            "user": ru1.ru_utime - ru0.ru_utime,
            "system": ru1.ru_stime - ru0.ru_stime,
            **{f"{k}_user": c.user for k, c in clocks.items()},
            **{f"{k}_system": c.system for k, c in clocks.items()},
            **{f"{k}_cpu": c.cpu for k, c in clocks.items()},
            "write_bytes": io1["write_bytes"] - io0["write_bytes"],
            "syscw": io1["syscw"] - io0["syscw"],
            "syscr": io1["syscr"] - io0["syscr"],
            "wakes": wakes[0],
            "waited": waited[0],
        }

    out.put(asyncio.run(run()))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--db", required=True, help="a store with history (only read)")
    p.add_argument("--processes", type=int, default=4)
    p.add_argument("--producers", default=",".join(PRODUCERS))
    p.add_argument("--commits", type=int, default=400, help="a process")
    p.add_argument("--sizes", default="1,8,16,24,32,40", help="rows a commit, in turn")
    p.add_argument("--pace-ms", type=float, default=10.0)
    p.add_argument("--no-listen", action="store_true")
    p.add_argument(
        "--pragma",
        action="append",
        default=[],
        help="run on every connection a process opens (trying settings)",
    )
    p.add_argument("--keep", help="copy the store here and keep it (default: a temp dir)")
    p.add_argument("--json", action="store_true")
    args = p.parse_args()
    producers = args.producers.split(",")
    with tempfile.TemporaryDirectory(prefix="append-cost-") as tmp:
        path = Path(args.keep or tmp) / "store.db"
        shutil.copyfile(args.db, path)
        url = f"sqlite:///{path}"
        head0 = _head(str(path))
        ctx = multiprocessing.get_context("spawn")
        start, out = ctx.Event(), ctx.Queue()
        procs = [
            ctx.Process(
                target=worker,
                args=(url, args.db, producers[i % len(producers)], f"p{i}r", args, start, out),
            )
            for i in range(args.processes)
        ]
        for proc in procs:
            proc.start()
        time.sleep(3.0)  # every process's store opened and listening
        start.set()
        results = [out.get(timeout=600) for _ in procs]
        for proc in procs:
            proc.join()
        head1 = _head(str(path))
    rows = sum(r["rows"] for r in results)
    commits_ = sum(r["commits"] for r in results)
    if head1 - head0 != rows or commits_ != args.processes * args.commits:
        raise SystemExit(f"FAILED: the head moved {head1 - head0}, rows appended {rows}")
    report(results, rows, commits_, args)
    print("outcome check passed: every commit landed, the head grew by the rows appended")


def _head(path: str) -> int:
    conn = apsw.Connection(path, flags=apsw.SQLITE_OPEN_READONLY)
    try:
        return int(conn.execute("SELECT max(position) FROM events").fetchone()[0])
    finally:
        conn.close()


def report(
    results: list[dict[str, Any]], rows: int, commits_: int, args: argparse.Namespace
) -> None:
    total = {k: sum(r[k] for r in results) for k in results[0] if k != "producer"}
    if args.json:
        print(json.dumps({"total": total, "processes": results}))
        return
    us = 1e6
    print(
        f"{args.processes} processes, {commits_} commits, {rows} rows "
        f"({rows / commits_:.1f} a commit), pace {args.pace_ms} ms, "
        f"listening {not args.no_listen}; wall {max(r['wall'] for r in results):.2f} s"
    )
    for name, r in [*((r["producer"], r) for r in results), ("all", total)]:
        c, n = r["commits"], r["rows"]
        print(
            f"  {name:12} process user+sys {(r['user']) * us / c:6.0f}+{r['system'] * us / c:5.0f} "
            f"us a commit ({(r['user'] + r['system']) * us / n:5.1f} a row); append calls "
            f"{r['call_user'] * us / c:5.0f}+{r['call_system'] * us / c:4.0f} "
            f"(sql {r['sql_user'] * us / c:4.0f}+{r['sql_system'] * us / c:4.0f}, "
            f"ring {r['ring_user'] * us / c:3.0f}+{r['ring_system'] * us / c:3.0f}); "
            f"thread_time call {r['call_cpu'] * us / c:4.0f} sql {r['sql_cpu'] * us / c:4.0f} "
            f"ring {r['ring_cpu'] * us / c:4.0f}; "
            f"written {r['write_bytes'] / c / 1024:5.1f} KiB, {r['syscw'] / c:4.1f} writes, "
            f"{r['syscr'] / c:4.1f} reads a commit; wakes {r['wakes'] / c:.2f} a commit; "
            f"waited for the lock {r['waited'] / c:.1%}"
        )


if __name__ == "__main__":
    main()
