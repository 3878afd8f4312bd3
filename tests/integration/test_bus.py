"""Kafka transport against the real Tansu broker: relay, republish after a crash, doorbell."""

from __future__ import annotations

import asyncio
import contextlib
import uuid

import orjson
from aiokafka import AIOKafkaConsumer

from muster.bus.broker import EmbeddedBroker
from muster.bus.kafka import Doorbell, Publisher, decode, ensure_topics, topic, wire_of_row
from muster.core.events import NewEvent, StreamAppend
from muster.core.events import timer as tev
from muster.core.nodes.decider import NodeAgentDecider
from muster.runtime.loop import DeciderLoop
from muster.runtime.metrics import ServiceMetrics
from muster.runtime.settings import load
from muster.store import SqlEventStore


async def _append(store: SqlEventStore, producer: str, n: int, stream: str = "timer-x") -> None:
    version = await store.stream_version(stream)
    news = [
        NewEvent(
            stream_id=stream,
            event=tev.TimerFired(owner=producer, deadline=float(i)),
            occurred_at=float(i),
        )
        for i in range(n)
    ]
    await store.append([StreamAppend(stream, version, news)], producer=producer, recorded_at=0.0)


async def _consume(bootstrap: str, name: str, want: int) -> list[tuple[int, bytes]]:
    consumer = AIOKafkaConsumer(
        name, bootstrap_servers=bootstrap, group_id=None, auto_offset_reset="earliest"
    )
    await consumer.start()
    got: list[tuple[int, bytes]] = []
    try:
        async with asyncio.timeout(30):
            while len(got) < want:
                for msgs in (await consumer.getmany(timeout_ms=500)).values():
                    got += [(orjson.loads(m.value)["position"], m.key or b"") for m in msgs]
    finally:
        await consumer.stop()
    return got


def _loop(
    store: SqlEventStore, broker: EmbeddedBroker, prefix: str, poll_seconds: float = 0.2
) -> DeciderLoop:
    settings = load(
        {},
        store_url=store.url,
        kafka_bootstrap=broker.bootstrap,
        topic_prefix=prefix,
        poll_seconds=poll_seconds,
    )
    return DeciderLoop(NodeAgentDecider(), store, settings, ServiceMetrics())


async def test_relay_publishes_in_order_and_resumes_after_a_crash(
    sqlite_store: SqlEventStore, broker: EmbeddedBroker
) -> None:
    prefix = f"t{uuid.uuid4().hex[:6]}."
    await ensure_topics(broker.bootstrap, prefix)
    await _append(sqlite_store, "node-agent", 3)
    await _append(sqlite_store, "someone-else", 2, stream="timer-y")  # not this relay's to send

    async def relay_until(published: int) -> None:
        loop = _loop(sqlite_store, broker, prefix)
        publisher = Publisher(broker.bootstrap, prefix)
        await publisher.start()
        task = asyncio.create_task(loop.relay(publisher))
        loop.appended()
        try:
            async with asyncio.timeout(20):
                while loop.published_up_to < published:
                    await asyncio.sleep(0.05)
        finally:
            task.cancel()  # the "crash": whatever is committed later is not published
            with contextlib.suppress(asyncio.CancelledError):
                await task
            await publisher.stop()

    await relay_until(3)
    await _append(sqlite_store, "node-agent", 2)  # committed while no relay runs (positions 6, 7)
    assert await sqlite_store.tracking_position("relay:node-agent") == 3
    await relay_until(7)
    got = await _consume(broker.bootstrap, topic(prefix, "timer"), 5)
    assert sorted(p for p, _ in got) == [1, 2, 3, 6, 7]
    assert {k for _, k in got} == {b"timer-x"}  # keyed by stream: one partition, in order
    assert [p for p, _ in got] == sorted(p for p, _ in got)


async def test_consumers_fill_gaps_from_the_store_and_skip_what_they_applied(
    sqlite_store: SqlEventStore, broker: EmbeddedBroker
) -> None:
    prefix = f"t{uuid.uuid4().hex[:6]}."
    await ensure_topics(broker.bootstrap, prefix)
    # A poll far longer than the test: only the doorbell can wake the loop in time.
    loop = _loop(sqlite_store, broker, prefix, poll_seconds=300)
    await loop.restore()
    # Events committed but never published: no message will ever announce positions 1-4.
    await _append(sqlite_store, "node-agent", 4)
    listening = asyncio.create_task(loop.listen(Doorbell(broker.bootstrap, prefix, ["timer"])))
    following = asyncio.create_task(loop.follow())
    try:
        await asyncio.sleep(1.5)  # let the doorbell's consumer join before the message
        await _append(sqlite_store, "node-agent", 1)
        rows = await sqlite_store.read_rows(4)
        publisher = Publisher(broker.bootstrap, prefix)
        await publisher.start()
        await publisher.publish_rows(rows)
        await publisher.publish_rows(rows)  # a duplicate message changes nothing
        await publisher.stop()
        async with asyncio.timeout(20):
            while loop.runner.position < 5:
                await asyncio.sleep(0.05)
        assert loop.runner.state.now == 3.0  # the latest occurred_at folded
        assert loop.metrics.events_folded.labels("node-agent")._value.get() == 5
    finally:
        for task in (listening, following):
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


async def test_a_relayed_row_is_the_message_its_envelope_would_be(
    sqlite_store: SqlEventStore,
) -> None:
    """The relay publishes stored rows without decoding them; a consumer must read the
    same envelope as from the store."""
    await _append(sqlite_store, "node-agent", 3)
    rows = await sqlite_store.read_rows(0)
    envs = await sqlite_store.read_all(0)
    assert [decode(wire_of_row(row)) for row in rows] == envs
    assert [orjson.loads(wire_of_row(row)) for row in rows] == [
        orjson.loads(orjson.dumps(env.to_wire())) for env in envs
    ]
