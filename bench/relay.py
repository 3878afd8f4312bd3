"""Relay: publishing a kept store's rows to the embedded broker, CPU a row.

Each round starts a fresh Tansu broker, creates the topics and a ``Publisher``, then
relays every producer's rows of the store as ``relay_step`` does (``read_rows`` after the
last position, ``--step`` at a time, ``publish_rows`` waiting for every acknowledgement),
producer after producer. Timed: this process's CPU in the reads and in the publishing
(``time.process_time``: the aiokafka sender runs in this loop), and the broker's CPU
(``/proc/PID/stat``, clock ticks) from the first step to the last acknowledgement.

    python -m bench.relay --db PATH [--rows N] [--step 1000] [--rounds 3] [--digest FILE]

The store is opened read-only (a kept one: ``/tmp/lead-100k.db`` or one e2e_submit
wrote). ``--digest FILE`` reads every message back after the last round's publishing and
writes, per topic and partition, the count and a SHA-256 of its (key, value) sequence in
offset order: two runs (e.g. with integ's code on PYTHONPATH) published the same messages
on the same partitions in the same order if their digests are equal.

Outcome, checked (fails loudly otherwise): every row read was acknowledged, and with
``--digest`` every one was read back.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import resource
import sys
import time
import uuid
from collections import Counter
from typing import Any

from aiokafka import AIOKafkaConsumer

from bench import machine
from muster.bus.broker import EmbeddedBroker
from muster.bus.kafka import CATEGORIES, Publisher, ensure_topics, topic
from muster.store import SqlEventStore

TICKS = os.sysconf("SC_CLK_TCK")


def cpu_of(pid: int) -> float:
    """A process's user + system CPU seconds so far."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS  # utime, stime: fields 14 and 15


async def producers_of(store: SqlEventStore) -> list[str]:
    rows = await store.read_rows(0)
    return sorted({row[11] for row in rows})


async def relay_all(
    store: SqlEventStore, publisher: Publisher, producers: list[str], step: int, cap: int
) -> dict[str, float]:
    """Every producer's rows (at most ``cap`` in all), a step at a time: CPU seconds spent
    reading and publishing, rows and steps."""
    read = publish = 0.0
    sent = steps = 0
    for producer in producers:
        position = 0
        while sent < cap:
            t0 = time.process_time()
            rows = await store.read_rows(position, producer=producer, limit=min(step, cap - sent))
            t1 = time.process_time()
            if not rows:
                break
            await publisher.publish_rows(rows)
            t2 = time.process_time()
            read, publish = read + t1 - t0, publish + t2 - t1
            position, sent, steps = rows[-1][0], sent + len(rows), steps + 1
    return {"read": read, "publish": publish, "rows": sent, "steps": steps}


async def digest(bootstrap: str, prefix: str, want: int) -> dict[str, list[Any]]:
    """Per topic-partition: message count and SHA-256 of its keys and values in order."""
    consumer = AIOKafkaConsumer(
        *(topic(prefix, c) for c in CATEGORIES),
        bootstrap_servers=bootstrap,
        group_id=None,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
    )
    await consumer.start()
    hashes: dict[str, Any] = {}
    counts: Counter[str] = Counter()
    offsets: dict[str, int] = {}
    try:
        async with asyncio.timeout(120):
            while sum(counts.values()) < want:
                for tp, msgs in (await consumer.getmany(timeout_ms=1000)).items():
                    where = f"{tp.topic.removeprefix(prefix)}/{tp.partition}"
                    h = hashes.setdefault(where, hashlib.sha256())
                    for m in msgs:
                        assert m.offset == offsets.get(where, -1) + 1, (where, m.offset)
                        offsets[where] = m.offset
                        key = m.key or b""
                        h.update(len(key).to_bytes(4, "big") + key)
                        h.update(len(m.value).to_bytes(4, "big") + m.value)
                        counts[where] += 1
    finally:
        await consumer.stop()
    return {w: [counts[w], hashes[w].hexdigest()] for w in sorted(hashes)}


async def one_round(store: SqlEventStore, args: argparse.Namespace) -> dict[str, Any]:
    producers = args.producer or await producers_of(store)
    with EmbeddedBroker() as broker:
        assert broker.process is not None
        prefix = f"b{uuid.uuid4().hex[:6]}."
        await ensure_topics(broker.bootstrap, prefix)
        publisher = Publisher(broker.bootstrap, prefix)
        await publisher.start()
        try:
            before, own = cpu_of(broker.process.pid), resource.getrusage(resource.RUSAGE_SELF)
            figures: dict[str, Any] = await relay_all(
                store, publisher, producers, args.step, args.rows
            )
            figures["broker"] = cpu_of(broker.process.pid) - before
            after = resource.getrusage(resource.RUSAGE_SELF)
            figures["system"] = after.ru_stime - own.ru_stime  # of the relay's read + publish
        finally:
            await publisher.stop()
        if args.digest:
            figures["digest"] = await digest(broker.bootstrap, prefix, figures["rows"])
            got = sum(n for n, _ in figures["digest"].values())
            if got != figures["rows"]:
                sys.exit(f"FAILED: {figures['rows']} rows published, {got} read back")
    return figures


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--db", required=True, help="a SQLite store (opened read-only)")
    parser.add_argument("--rows", type=int, default=10**9, help="at most this many rows")
    parser.add_argument("--step", type=int, default=1000, help="rows a relay step")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--producer", action="append", help="only these producers' rows")
    parser.add_argument("--digest", help="write the last round's messages' digest here")
    args = parser.parse_args()
    store = SqlEventStore(f"sqlite:///{args.db}", read_only=True)
    print(machine())
    try:
        for n in range(args.rounds):
            figures = await one_round(store, args if n == args.rounds - 1 else _no_digest(args))
            rows = figures["rows"]
            us = {k: figures[k] / rows * 1e6 for k in ("read", "publish", "broker")}
            print(
                f"round {n + 1}: {rows} rows in {figures['steps']} steps of <= {args.step}; "
                f"CPU a row: read {us['read']:.2f} us, publish {us['publish']:.2f} us, "
                f"broker {us['broker']:.2f} us (relay + broker "
                f"{us['read'] + us['publish'] + us['broker']:.2f} us); the relay's system CPU "
                f"{figures['system'] / rows * 1e6:.2f} us a row"
            )
            if "digest" in figures:
                with open(args.digest, "w") as f:
                    json.dump(figures["digest"], f, indent=1)
                print(f"digest of {len(figures['digest'])} partitions: {args.digest}")
    finally:
        await store.close()


def _no_digest(args: argparse.Namespace) -> argparse.Namespace:
    return argparse.Namespace(**{**vars(args), "digest": None})


if __name__ == "__main__":
    asyncio.run(main())
