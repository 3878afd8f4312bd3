"""Admin operations on the store: apply configuration (a cluster description, Kubernetes
manifests), rebuild state (replay)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from muster.bus.kafka import Publisher, ensure_topics
from muster.core import inputs
from muster.core.decider import Decider, clock_only, clock_only_when
from muster.core.events import Envelope, NewEvent, StreamAppend, encode_payload
from muster.core.model.cluster import ClusterSpec
from muster.core.model.manifests import Manifests, merge
from muster.core.runner import DeciderRunner
from muster.runtime.memory import collection_paused
from muster.runtime.relay import relay_step
from muster.store import SqlEventStore

ADMIN = inputs.ADMIN
# Rows a rebuild reads, decodes, folds and frees at a time. Small, so that the fold and the
# freeing find a read's rows, envelopes and events (and the next read the memory just
# freed) while they are still in the caches: at 10,000 (10-13 MB of them) a 1M rebuild took
# ~45 % more CPU for the same instructions (bench/README.md, wip-rx). 300-500: more reads,
# a little slower.
REPLAY_BATCH = 1_000


async def apply_events(
    store: SqlEventStore, events: Sequence[NewEvent], *, producer: str = ADMIN
) -> list[Envelope]:
    """Append the configuration events that differ from what the store holds (idempotent):
    an event equal to the last one on its stream is left out."""
    batch = await config_changes(store, events)
    if not batch:
        return []
    return await store.append(batch, producer=producer, recorded_at=time.time())


async def config_changes(store: SqlEventStore, events: Sequence[NewEvent]) -> list[StreamAppend]:
    """The appends of those configuration events that differ from the last one on their
    stream, each guarded by the version read."""
    batch = []
    for new in events:
        # The stream's last event alone: a configuration object changed many times has a
        # long stream, and each apply read and decoded all of it.
        version = await store.stream_version(new.stream_id)
        last = await store.read_stream(new.stream_id, version - 1) if version else []
        if last and encode_payload(last[-1].event) == encode_payload(new.event):
            continue
        batch.append(StreamAppend(new.stream_id, version, [new]))
    return batch


async def apply_cluster(
    store: SqlEventStore, spec: ClusterSpec, now: float | None = None
) -> list[Envelope]:
    """A cluster description's configuration events, through ``apply_events``."""
    now = time.time() if now is None else now
    return await apply_events(store, inputs.configuration(spec, now))


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


async def configure(
    store_url: str,
    spec: ClusterSpec | None,
    bootstrap: str | None,
    manifests: Manifests | None = None,
) -> list[Envelope]:
    """``muster apply``: append what changed and, given a broker, publish it at once.

    The manifests' queue objects are merged into the cluster description (same name
    replaces); without a description, they are applied alone.
    """
    if spec is not None and manifests is not None:
        spec = merge(spec, manifests)
    store = SqlEventStore(store_url)
    try:
        if spec is not None:
            appended = await apply_cluster(store, spec)
        elif manifests is not None:
            appended = await apply_events(store, inputs.queue_configuration(manifests, time.time()))
        else:
            appended = []
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
    bare = clock_only(decider)  # folded from the row alone: their payloads are not read
    bare_when = clock_only_when(decider)  # nor these, when the field says so
    with collection_paused():
        while True:
            envs = await store.read_folding(
                runner.position,
                categories=decider.categories,
                limit=REPLAY_BATCH,
                until=until_position,
                bare=bare,
                bare_when=bare_when,
            )
            if until_time is not None:
                # The log is in position order; --until TIME stops at the first event past it.
                cut = next((i for i, e in enumerate(envs) if e.occurred_at > until_time), None)
                if cut is not None:
                    runner.fold(envs[:cut], ours=True)
                    break
            runner.fold(envs, ours=True)  # read by the decider's categories
            if len(envs) < REPLAY_BATCH:
                break
    return runner
