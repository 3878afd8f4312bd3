"""Admin operations on the store: apply a cluster description, rebuild state (replay)."""

from __future__ import annotations

import time
from typing import Any

from muster.bus.kafka import Publisher, ensure_topics
from muster.core import inputs
from muster.core.decider import Decider
from muster.core.events import Envelope, StreamAppend, encode_payload
from muster.core.model.cluster import ClusterSpec
from muster.core.runner import DeciderRunner
from muster.runtime.relay import relay_step
from muster.store import SqlEventStore

ADMIN = inputs.ADMIN
REPLAY_BATCH = 10_000


async def apply_cluster(
    store: SqlEventStore, spec: ClusterSpec, now: float | None = None
) -> list[Envelope]:
    """Append the configuration events that differ from what the store holds (idempotent)."""
    now = time.time() if now is None else now
    batch = []
    for new in inputs.configuration(spec, now):
        current = await store.read_stream(new.stream_id)
        if current and encode_payload(current[-1].event) == encode_payload(new.event):
            continue
        batch.append(StreamAppend(new.stream_id, len(current), [new]))
    if not batch:
        return []
    return await store.append(batch, producer=ADMIN, recorded_at=time.time())


async def publish(store: SqlEventStore, bootstrap: str, prefix: str = "muster.") -> int:
    """Relay what ``admin`` committed; consumers would also find it on their next store poll."""
    consumer = f"relay:{ADMIN}"
    position = await store.tracking_position(consumer)
    published = 0
    await ensure_topics(bootstrap, prefix)
    publisher = Publisher(bootstrap, prefix)
    await publisher.start()
    try:
        while True:
            position, sent = await relay_step(store, publisher, ADMIN, position)
            if not sent:
                break
            published += sent
    finally:
        await publisher.stop()
    return published


async def configure(store_url: str, spec: ClusterSpec, bootstrap: str | None) -> list[Envelope]:
    """``muster apply``: append what changed and, given a broker, publish it at once."""
    store = SqlEventStore(store_url)
    try:
        appended = await apply_cluster(store, spec)
        if bootstrap:
            await publish(store, bootstrap)
        return appended
    finally:
        await store.close()


async def rebuild(
    store: SqlEventStore,
    decider: Decider[Any],
    *,
    until_position: int | None = None,
    until_time: float | None = None,
) -> DeciderRunner[Any]:
    """Fold the store from the beginning, never from a snapshot: replay is the check."""
    runner: DeciderRunner[Any] = DeciderRunner(decider)
    while True:
        envs = await store.read_all(
            runner.position, categories=decider.categories, limit=REPLAY_BATCH, until=until_position
        )
        if until_time is not None:
            # The log is in position order; --until TIME stops at the first event past it.
            cut = next((i for i, e in enumerate(envs) if e.occurred_at > until_time), None)
            if cut is not None:
                runner.fold(envs[:cut])
                break
        runner.fold(envs)
        if len(envs) < REPLAY_BATCH:
            break
    return runner
