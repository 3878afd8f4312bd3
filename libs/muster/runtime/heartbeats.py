"""Node-agent heartbeats: every interval, one Kafka message per node the agent vouches for.

Heartbeats say a node is alive now; they are not history, so they never enter the
store. Whoever watches for lapses turns a missing heartbeat into an explicit event.
"""

from __future__ import annotations

import asyncio
import time

from muster.bus.kafka import Publisher, ensure_topics
from muster.core.nodes.state import beating
from muster.runtime.loop import DeciderLoop
from muster.runtime.settings import Settings


async def heartbeats(loop: DeciderLoop, settings: Settings) -> None:
    await ensure_topics(settings.kafka_bootstrap, settings.topic_prefix)
    publisher = Publisher(settings.kafka_bootstrap, settings.topic_prefix)
    await publisher.start()
    try:
        while True:
            await beat_once(loop, publisher)
            await asyncio.sleep(settings.heartbeat_seconds)
    finally:
        await publisher.stop()


async def beat_once(loop: DeciderLoop, publisher: Publisher) -> int:
    nodes = beating(loop.runner.state)
    now = time.time()
    await publisher.heartbeats(nodes, loop.name, now, loop.runner.position)
    loop.metrics.heartbeats.labels(loop.name).inc(len(nodes))
    loop.rounds_beaten += 1
    return len(nodes)
