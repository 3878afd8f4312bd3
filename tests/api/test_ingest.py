"""The Kafka submissions topic, on the real Tansu broker: the same validation, access and
idempotency as HTTP; every message answered on the replies topic; refusals leave no
event; a redelivered message does not submit twice."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

from muster.bus.broker import EmbeddedBroker
from muster.bus.kafka import ensure_topics
from muster.store import SqlEventStore
from services.intake import ingest
from tests.api.conftest import TOKENS, Api, serve, workload


@pytest.fixture
async def fed(
    sqlite_store: SqlEventStore, tmp_path: Path, broker: EmbeddedBroker
) -> AsyncIterator[tuple[Api, str]]:
    topic = f"subs-{uuid.uuid4().hex[:8]}"
    async for api in serve(
        sqlite_store, tmp_path, kafka_bootstrap=broker.bootstrap, ingest_topic=topic
    ):
        task = asyncio.create_task(ingest.consume(api.intake, api.settings))
        try:
            yield api, topic
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


async def _send(
    bootstrap: str, topic: str, messages: list[tuple[bytes, bytes, str | None]]
) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, enable_idempotence=False)
    await producer.start()
    try:
        for key, value, who in messages:
            headers = [("authorization", f"Bearer {TOKENS[who]}".encode())] if who else []
            # One partition: the test relies on their order (a key reused after its first use).
            await producer.send_and_wait(topic, value, key=key, headers=headers, partition=0)
    finally:
        await producer.stop()


async def _replies(bootstrap: str, topic: str, n: int) -> dict[bytes, dict[str, Any]]:
    consumer = AIOKafkaConsumer(
        ingest.replies_topic(topic),
        bootstrap_servers=bootstrap,
        group_id=None,
        auto_offset_reset="earliest",
    )
    await consumer.start()
    out: dict[bytes, dict[str, Any]] = {}
    try:
        async with asyncio.timeout(60):
            while len(out) < n:
                for records in (await consumer.getmany(timeout_ms=500)).values():
                    for r in records:
                        out[r.key] = orjson.loads(r.value)
    finally:
        await consumer.stop()
    return out


async def test_ingest_validates_answers_and_dedupes(
    fed: tuple[Api, str], broker: EmbeddedBroker
) -> None:
    api, topic = fed
    await ensure_topics(
        broker.bootstrap, api.settings.topic_prefix, extra=(topic, ingest.replies_topic(topic))
    )
    good = orjson.dumps({**workload("from-kafka"), "idempotencyKey": "k1"})
    await _send(
        broker.bootstrap,
        topic,
        [
            (b"good", good, "team-a"),
            (b"again", good, "team-a"),  # a producer's retry: the same key
            (b"reused", orjson.dumps({**workload("other"), "idempotencyKey": "k1"}), "team-a"),
            (b"zero", orjson.dumps(workload("z", podSets=[{"count": 0}])), "team-a"),
            (b"garbage", b"{not json", "team-a"),
            (b"anon", orjson.dumps(workload("anon")), None),
            (b"foreign", orjson.dumps(workload("f", "team-b")), "team-a"),
            (b"unkeyed", orjson.dumps(workload("no-key")), "team-a"),
        ],
    )
    replies = await _replies(broker.bootstrap, topic, 8)
    assert replies[b"good"]["status"] == 201
    wid = replies[b"good"]["workload"]["id"]
    assert replies[b"again"]["status"] == 200 and replies[b"again"]["workload"]["id"] == wid
    assert replies[b"reused"]["error"]["code"] == "IdempotencyKeyReused"
    assert replies[b"zero"]["status"] == 422
    assert replies[b"zero"]["error"]["field"] == "podSets[0].count"
    assert replies[b"garbage"]["error"]["code"] == "MalformedJSON"
    assert replies[b"anon"]["status"] == 401
    assert replies[b"foreign"]["status"] == 403
    assert replies[b"unkeyed"]["status"] == 201
    for r in replies.values():
        assert r["source"]["topic"] == topic
    # Exactly two workloads exist: the refusals left nothing.
    submitted = [
        e
        for e in await api.store.read_all(0, categories={"workload"})
        if e.type == "workload.submitted"
    ]
    assert {e.event.spec.name for e in submitted} == {"from-kafka", "no-key"}  # type: ignore[attr-defined]


async def test_a_redelivered_message_submits_once(
    sqlite_store: SqlEventStore, tmp_path: Path
) -> None:
    """At-least-once delivery: the same record (topic, partition, offset) handled twice,
    as after a crash before the offset commit, finds its first submission."""

    class Record:
        def __init__(self) -> None:
            self.topic, self.partition, self.offset = "subs", 0, 41
            self.key = b"k"
            self.value = orjson.dumps(workload("twice"))
            self.headers = [("authorization", f"Bearer {TOKENS['team-a']}".encode())]

    async for api in serve(sqlite_store, tmp_path):
        first = await ingest.handle(api.intake, Record())  # type: ignore[arg-type]
        second = await ingest.handle(api.intake, Record())  # type: ignore[arg-type]
        assert (first["status"], second["status"]) == (201, 200)
        assert first["workload"]["id"] == second["workload"]["id"]
