"""Submissions from a Kafka topic (MUSTER_INGEST_TOPIC), for platforms that produce
messages rather than call an API.

A message's value is what ``POST /v1/workloads`` takes (JSON; ``idempotencyKey`` may be
in it), its header ``authorization`` the bearer token. It goes through the same
operation as HTTP, so the same validation, access rules and idempotency apply. Every
message gets an answer on ``<topic>.replies``, keyed like the message: the workload
(status 201, or 200 for a repeat) or the error with its reason.

Delivery is at least once: offsets are committed only after the answer is sent, and a
message without an idempotency key is keyed by its topic, partition and offset, so a
redelivered message finds its first submission instead of making a second. Over the
tenant's rate, the consumer waits (Kafka is the buffer) instead of refusing.
"""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
import structlog
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, ConsumerRecord

from muster.bus.kafka import close, ensure_topics
from muster.runtime.settings import Settings
from services.intake import errors
from services.intake.errors import Refused, refuse
from services.intake.ops import Intake

log = structlog.get_logger("intake")
GROUP = "muster-intake-ingest"
MAX_RATE_WAIT = 30.0  # seconds one message waits for its tenant's rate before a 429 reply


def replies_topic(topic: str) -> str:
    return f"{topic}.replies"


async def handle(intake: Intake, record: ConsumerRecord[bytes, bytes]) -> dict[str, Any]:
    """One message's answer. Errors of the input are answers; the store being away is not
    (it propagates, the offset stays, the message comes again)."""
    source = {"topic": record.topic, "partition": record.partition, "offset": record.offset}
    headers = {k.lower(): v for k, v in record.headers or ()}
    raw_auth = headers.get("authorization")
    waited = 0.0
    while True:
        try:
            who = intake.access.authenticate(
                raw_auth.decode(errors="replace") if raw_auth else None
            )
            try:
                body = orjson.loads(record.value or b"")
            except orjson.JSONDecodeError as exc:
                raise refuse("MalformedJSON", f"value is not valid JSON: {exc}") from None
            if isinstance(body, dict) and "idempotencyKey" not in body:
                key = f"kafka:{record.topic}:{record.partition}:{record.offset}"
                body = {**body, "idempotencyKey": key}
            done = await intake.workloads.submit(who, body)
            return {
                "status": 201 if done.created else 200,
                "workload": done.workload,
                "source": source,
            }
        except Refused as exc:
            r = exc.refusal
            if r.code == "RateLimited" and r.retry_after is not None and waited < MAX_RATE_WAIT:
                waited += r.retry_after
                await asyncio.sleep(r.retry_after)
                continue
            return {"status": errors.status(r), **errors.to_json(r), "source": source}


async def consume(intake: Intake, settings: Settings) -> None:
    """Run until cancelled (a routine of the intake service, restarted if the broker goes)."""
    topic = settings.ingest_topic
    await ensure_topics(
        settings.kafka_bootstrap, settings.topic_prefix, extra=(topic, replies_topic(topic))
    )
    consumer = AIOKafkaConsumer(
        topic,
        bootstrap_servers=settings.kafka_bootstrap,
        group_id=GROUP,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        metadata_max_age_ms=5_000,
    )
    producer = AIOKafkaProducer(
        bootstrap_servers=settings.kafka_bootstrap, enable_idempotence=False, acks=1
    )
    try:
        await consumer.start()
        await producer.start()
        log.info("ingest started", topic=topic)
        while True:
            batches = await consumer.getmany(timeout_ms=1000, max_records=500)
            for messages in batches.values():
                for record in messages:
                    answer = await handle(intake, record)
                    await producer.send_and_wait(
                        replies_topic(topic), orjson.dumps(answer), key=record.key
                    )
                    if answer["status"] >= 400:
                        log.info(
                            "ingest refused",
                            offset=record.offset,
                            code=answer["error"]["code"],
                            reason=answer["error"]["message"],
                        )
            if batches:
                await consumer.commit()
    finally:
        await close(consumer, producer)
