"""The queue's heartbeat watch: a node silent past the grace period is declared lost.

It reads the ``muster.heartbeat`` topic (no consumer group: every queue replica sees
every beat) and, for the existing nodes the queue places on, appends ``node.lost`` on
the node's stream with the version the queue has folded: a second replica that saw the
same lapse conflicts and drops it.

Silence is measured up to the time the watch has heard everything: the replica probes
every partition of the topic with its own marker and counts to the send time of the
latest marker read back (``lapse.Hearing``). A stalled consumer or broker then freezes
every silence instead of declaring every node lost at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from typing import Any

import orjson
import structlog
from aiokafka import AIOKafkaConsumer
from aiokafka.errors import KafkaError

from muster.bus.kafka import HEARTBEAT, Publisher, close, ensure_topics, topic
from muster.core import inputs
from muster.core.events import StreamAppend
from muster.core.events import node as nev
from muster.core.nodes.lapse import Hearing, Watch
from muster.runtime.loop import DeciderLoop
from muster.runtime.settings import Settings
from muster.store.errors import ConcurrencyConflict

log = structlog.get_logger()


async def node_monitor(loop: DeciderLoop, settings: Settings) -> None:
    watch = Watch(grace=settings.node_grace_seconds, interval=settings.heartbeat_seconds)
    hearing = Hearing()
    probe = uuid.uuid4().hex  # this replica's own markers, told apart from another's
    every = min(settings.heartbeat_seconds, settings.node_grace_seconds / 4)
    await ensure_topics(settings.kafka_bootstrap, settings.topic_prefix)
    async with asyncio.TaskGroup() as group:
        group.create_task(listen(watch, hearing, probe, settings))
        group.create_task(send_probes(hearing, probe, every, settings))
        group.create_task(_check(loop, watch, hearing, every))


async def listen(watch: Watch, hearing: Hearing, probe: str, settings: Settings) -> None:
    while True:
        consumer = AIOKafkaConsumer(
            topic(settings.topic_prefix, HEARTBEAT),
            bootstrap_servers=settings.kafka_bootstrap,
            group_id=None,
            auto_offset_reset="latest",
            enable_auto_commit=False,
        )
        try:
            await consumer.start()
            async for msg in consumer:
                with contextlib.suppress(ValueError, KeyError, TypeError):
                    heard(watch, hearing, probe, msg.partition, orjson.loads(msg.value))
        except KafkaError as exc:
            log.warning("heartbeat consumer failed; reconnecting", error=str(exc))
            await asyncio.sleep(1.0)
        finally:
            await close(consumer)


def heard(
    watch: Watch, hearing: Hearing, probe: str, partition: int, message: dict[str, Any]
) -> None:
    """One message read from the heartbeat topic: a node's beat, or a probe."""
    if "probe" in message:
        if message["probe"] == probe:
            hearing.back(partition, float(message["sentAt"]))
        return
    # A beat counts when received, not sent: the watch's clock is the only one that matters.
    watch.beat(str(message["node"]), time.time(), str(message.get("agent") or ""))


async def send_probes(hearing: Hearing, probe: str, every: float, settings: Settings) -> None:
    publisher = Publisher(settings.kafka_bootstrap, settings.topic_prefix)
    await publisher.start()
    try:
        while True:
            with contextlib.suppress(KafkaError):
                hearing.partitions = await publisher.probe(probe, time.time())
            await asyncio.sleep(every)
    finally:
        await publisher.stop()


async def _check(loop: DeciderLoop, watch: Watch, hearing: Hearing, every: float) -> None:
    deaf, started = False, time.time()
    while True:
        await asyncio.sleep(every)
        through = hearing.through()
        behind = time.time() - (started if through is None else through)
        # Said once when it starts and once when it ends: while the watch cannot hear the
        # topic, no node is declared lost, and operators should know why.
        if (behind > watch.grace) != deaf:
            deaf = not deaf
            if deaf:
                log.warning(
                    "heartbeat watch hears nothing; no node is declared lost meanwhile",
                    behind_seconds=round(behind, 1),
                )
            else:
                log.info("heartbeat watch hears the topic again")
        if through is not None:
            await check_once(loop, watch, through)


async def check_once(loop: DeciderLoop, watch: Watch, now: float) -> list[str]:
    """Declare lost the watched nodes that lapsed by ``now`` (the time up to which the
    watch has heard every beat); returns their names.

    The nodes that lapsed together are appended in one transaction, so the queue folds
    them together: an agent that died takes all its nodes at once, and a gang evicted from
    one of them is never re-placed on another that is about to be declared lost.
    """
    await loop.step()
    state = loop.runner.state
    watched = [n.name for n in state.book.ready_nodes()]
    news: list[tuple[str, float, StreamAppend]] = []
    for node in watch.lapsed(watched, now):
        last = watch.last_beat.get(node)
        silent = now - (last if last is not None else watch.watched_since[node])
        new = inputs.node_lost(
            node,
            max(now, state.now),
            f"no heartbeat for {silent:.0f}s (grace {watch.grace:g}s)",
            last_heartbeat_at=last,
        )
        item = loop.runner.guarded(nev.stream(node), [new])
        news.append((node, silent, item))
    lost: list[tuple[str, float]] = []
    try:
        await _append([item for _, _, item in news], loop)
        lost = [(node, silent) for node, silent, _ in news]
    except ConcurrencyConflict:
        # Another replica, or a node re-registered: each on its own, the rest next time.
        for node, silent, item in news:
            with contextlib.suppress(ConcurrencyConflict):
                await _append([item], loop)
                lost.append((node, silent))
    for node, silent in lost:
        log.warning("node lost", node=node, silent_seconds=round(silent, 1))
    if lost:
        loop.appended()
        await loop.step()
    return [node for node, _ in lost]


async def _append(items: list[StreamAppend], loop: DeciderLoop) -> None:
    if items:
        await loop.store.append(items, producer=inputs.MONITOR, recorded_at=time.time())
