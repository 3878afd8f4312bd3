"""Kafka transport against the real Tansu broker: relay, republish after a crash, doorbell."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from typing import Any

import orjson
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

from muster.bus.broker import EmbeddedBroker
from muster.bus.kafka import (
    BATCH_BYTES,
    Doorbell,
    Publisher,
    decode,
    ensure_topics,
    topic,
    wire_of_row,
)
from muster.core.events import NewEvent, StreamAppend, category_of
from muster.core.events import node as nev
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


async def _register(store: SqlEventStore, stream: str, n: int, pad: int) -> None:
    version = await store.stream_version(stream)
    news = [
        NewEvent(
            stream_id=stream,
            event=nev.NodeRegistered(
                node=stream, allocatable={"gpu": i}, labels={"pad": "x" * pad}
            ),
            occurred_at=float(i),
        )
        for i in range(n)
    ]
    await store.append(
        [StreamAppend(stream, version, news)], producer="node-agent", recorded_at=0.0
    )


async def _partitions(bootstrap: str, prefix: str, want: int) -> dict[tuple[str, int], list[Any]]:
    """Every message on ``prefix``'s category topics: (category, partition) -> (key, value)
    in offset order."""
    consumer = AIOKafkaConsumer(
        *(topic(prefix, c) for c in ("node", "timer")),
        bootstrap_servers=bootstrap,
        group_id=None,
        auto_offset_reset="earliest",
    )
    await consumer.start()
    got: dict[tuple[str, int], list[Any]] = {}
    try:
        async with asyncio.timeout(30):
            while sum(map(len, got.values())) < want:
                for tp, msgs in (await consumer.getmany(timeout_ms=500)).items():
                    where = (tp.topic.removeprefix(prefix), tp.partition)
                    got.setdefault(where, []).extend((m.offset, m.key, m.value) for m in msgs)
    finally:
        await consumer.stop()
    for messages in got.values():
        assert [o for o, _, _ in messages] == list(range(len(messages)))
    return {where: [(k, v) for _, k, v in messages] for where, messages in got.items()}


async def test_batched_rows_are_the_messages_one_send_each_would_publish(
    sqlite_store: SqlEventStore, broker: EmbeddedBroker
) -> None:
    """``publish_rows`` builds a partition's batches itself (a step's rows of a partition in
    one batch, while it holds them): a consumer must read what aiokafka's own ``send`` of
    each row, keyed by its stream, publishes: same keys, values, partitions and order."""
    await _append(sqlite_store, "node-agent", 30)
    for i in range(40):  # streams over every partition, interleaved with the timer's
        await _register(sqlite_store, f"node-n{i}", 3, 50)
        await _append(sqlite_store, "node-agent", 1)
    await _register(sqlite_store, "node-big", 500, 1000)  # past a batch's bytes: three of them
    rows = await sqlite_store.read_rows(0)
    assert sum(len(wire_of_row(r)) for r in rows if r[2] == "node-big") > 2 * BATCH_BYTES
    batched, sent = f"t{uuid.uuid4().hex[:6]}.", f"t{uuid.uuid4().hex[:6]}."
    for prefix in (batched, sent):
        await ensure_topics(broker.bootstrap, prefix)
    publisher = Publisher(broker.bootstrap, batched)
    await publisher.start()
    try:
        for step in (rows[:100], rows[100:700], rows[700:]):  # steps, as a relay's
            await publisher.publish_rows(step)
    finally:
        await publisher.stop()
    producer = AIOKafkaProducer(bootstrap_servers=broker.bootstrap, enable_idempotence=False)
    await producer.start()
    try:
        for row in rows:
            name = topic(sent, category_of(row[2]))
            await producer.send(name, wire_of_row(row), key=row[2].encode())
        await producer.flush()
    finally:
        await producer.stop()
    got = await _partitions(broker.bootstrap, batched, len(rows))
    assert len(got) > 3  # both topics, more than one partition each
    assert got == await _partitions(broker.bootstrap, sent, len(rows))
