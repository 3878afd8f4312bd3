"""Node-agent heartbeats over the real broker: one per live node per round, none after removal."""

from __future__ import annotations

import asyncio
import time
import uuid

import orjson
from aiokafka import AIOKafkaConsumer

from muster.bus.broker import EmbeddedBroker
from muster.bus.kafka import HEARTBEAT, Publisher, ensure_topics, topic
from muster.core.events import NewEvent, StreamAppend
from muster.core.events import node as nev
from muster.core.nodes.decider import NodeAgentDecider
from muster.core.nodes.lapse import Hearing, Watch
from muster.runtime.heartbeats import beat_once
from muster.runtime.loop import DeciderLoop
from muster.runtime.metrics import ServiceMetrics
from muster.runtime.node_monitor import listen, send_probes
from muster.runtime.settings import load
from muster.store import SqlEventStore


async def _node_event(store: SqlEventStore, event: nev.NodeRegistered | nev.NodeRemoved) -> None:
    stream = nev.stream(event.node)
    version = await store.stream_version(stream)
    new = NewEvent(stream_id=stream, event=event, occurred_at=1.0)
    await store.append(
        [StreamAppend(stream, version, [new])], producer="node-agent", recorded_at=1.0
    )


async def test_heartbeats_follow_the_nodes_an_agent_runs(
    sqlite_store: SqlEventStore, broker: EmbeddedBroker
) -> None:
    prefix = f"h{uuid.uuid4().hex[:6]}."
    await ensure_topics(broker.bootstrap, prefix)
    settings = load(
        {}, store_url=sqlite_store.url, kafka_bootstrap=broker.bootstrap, topic_prefix=prefix
    )
    loop = DeciderLoop(NodeAgentDecider(), sqlite_store, settings, ServiceMetrics())
    publisher = Publisher(broker.bootstrap, prefix)
    await publisher.start()
    try:
        assert await beat_once(loop, publisher) == 0  # no node registered yet
        for name in ("n-a", "n-b"):
            await _node_event(sqlite_store, nev.NodeRegistered(node=name, allocatable={"cpu": 1}))
        await loop.step()
        assert await beat_once(loop, publisher) == 2
        await _node_event(sqlite_store, nev.NodeRemoved(node="n-a", reason="Released"))
        await loop.step()
        assert await beat_once(loop, publisher) == 1
    finally:
        await publisher.stop()

    consumer = AIOKafkaConsumer(
        topic(prefix, HEARTBEAT),
        bootstrap_servers=broker.bootstrap,
        group_id=None,
        auto_offset_reset="earliest",
    )
    await consumer.start()
    beats: list[dict[str, object]] = []
    try:
        async with asyncio.timeout(20):
            while len(beats) < 3:
                for msgs in (await consumer.getmany(timeout_ms=500)).values():
                    beats += [orjson.loads(m.value) for m in msgs]
    finally:
        await consumer.stop()
    assert sorted((b["node"], b["position"]) for b in beats) == [("n-a", 2), ("n-b", 2), ("n-b", 3)]
    assert {b["agent"] for b in beats} == {"node-agent"}
    assert loop.metrics.heartbeats.labels("node-agent")._value.get() == 3


async def test_the_watch_hears_beats_and_its_own_probes_back_over_the_broker(
    broker: EmbeddedBroker,
) -> None:
    """The queue's watch reads beats and counts how far it has heard from its own probes
    read back on every partition; another replica's probes do not move its count."""
    prefix = f"w{uuid.uuid4().hex[:6]}."
    await ensure_topics(broker.bootstrap, prefix)
    settings = load(
        {}, store_url="sqlite+aiosqlite://", kafka_bootstrap=broker.bootstrap, topic_prefix=prefix
    )
    watch, hearing, other = Watch(grace=2.0), Hearing(), Hearing()
    publisher = Publisher(broker.bootstrap, prefix)
    await publisher.start()
    async with asyncio.TaskGroup() as group:
        tasks = [
            group.create_task(listen(watch, hearing, "mine", settings)),
            group.create_task(listen(Watch(grace=2.0), other, "theirs", settings)),
            group.create_task(send_probes(hearing, "mine", 0.1, settings)),
        ]
        try:
            async with asyncio.timeout(20):
                while hearing.through() is None:
                    await asyncio.sleep(0.05)
                started = time.time()
                first = hearing.through()
                assert first is not None and first <= started
                while (hearing.through() or 0.0) < started:  # probes keep coming back
                    await asyncio.sleep(0.05)
                while "n-b" not in watch.last_beat:
                    await publisher.heartbeats(["n-a", "n-b"], "agent-0", time.time(), 1)
                    await asyncio.sleep(0.1)
        finally:
            for task in tasks:
                task.cancel()
            await publisher.stop()
    assert hearing.partitions == frozenset({0, 1, 2})
    assert watch.agent_of == {"n-a": "agent-0", "n-b": "agent-0"}
    assert other.heard == {}  # "theirs" sent nothing
