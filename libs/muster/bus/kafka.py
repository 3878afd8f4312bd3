"""Events over Kafka: one topic per stream category, keyed by stream id.

Publishing goes through a relay that reads back, in position order, what this
producer committed past its tracking position, so a crash between commit and
publish only delays a message. Consumers use messages as news that positions up
to N exist and fold from the store in global position order: that skips what
they already applied, fills any gap a lost message left, and makes arrival
order irrelevant to every decision.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterable, Sequence
from typing import Any

import orjson
import structlog
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import KafkaError, TopicAlreadyExistsError

from muster.bus.partition import partition_of
from muster.core.events import Envelope

log = structlog.get_logger("muster.bus")

CATEGORIES = ("config", "cloud", "workload", "admission", "provisioning", "node", "timer")
# Liveness, not history: heartbeats go to Kafka only, never to the store.
HEARTBEAT = "heartbeat"
KEYS_REMEMBERED = 100_000  # streams whose topic, partition and key a publisher remembers
# A record batch's size: a relay step's rows of a partition in one batch (Kafka's 16 KiB
# default made ~60 batches, in ~20 produce requests, of a step of 1,000 rows; each batch
# and request costs the relay and the broker more than its rows), well under the 1 MiB a
# Kafka broker takes by default (``message.max.bytes``).
BATCH_BYTES = 256 * 1024


def topic(prefix: str, category: str) -> str:
    return f"{prefix}{category}"


def decode(value: bytes) -> Envelope:
    return Envelope.from_wire(orjson.loads(value))


def wire_of_row(values: Sequence[Any]) -> bytes:
    """A stored row's message (values in ``rows.COLUMNS`` order): ``Envelope.to_wire``'s
    JSON, built without decoding the event (the stored payload JSON goes in as it is)."""
    position, event_id, stream_id, _, stream_version, wire_type, schema_version = values[:7]
    occurred_at, recorded_at, causation_id, correlation_id, producer, payload = values[7:]
    return orjson.dumps(
        {
            "position": position,
            "event_id": event_id,
            "stream_id": stream_id,
            "stream_version": stream_version,
            "type": wire_type,
            "schema_version": schema_version,
            "occurred_at": occurred_at,
            "recorded_at": recorded_at,
            "causation_id": causation_id,
            "correlation_id": correlation_id,
            "producer": producer,
            "payload": orjson.Fragment(payload),
        }
    )


async def ensure_topics(
    bootstrap: str, prefix: str, partitions: int = 3, *, extra: Iterable[str] = ()
) -> None:
    """Create the category topics (and ``extra`` ones, e.g. intake's ingest topic) that
    do not exist yet."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        existing = set(await admin.list_topics())
        names = [topic(prefix, c) for c in (*CATEGORIES, HEARTBEAT)] + list(extra)
        wanted = [NewTopic(name, partitions, 1) for name in names if name not in existing]
        if wanted:
            with contextlib.suppress(TopicAlreadyExistsError):
                await admin.create_topics(wanted)
    finally:
        await admin.close()


async def close(*clients: AIOKafkaConsumer | AIOKafkaProducer, timeout: float = 10.0) -> None:
    """Stop consumers and producers, each within ``timeout`` and whatever it raises: a
    group consumer's stop can wait forever on its coordinator (aiokafka #773), and a
    shutdown must not."""
    for client in clients:
        with contextlib.suppress(Exception):
            async with asyncio.timeout(timeout):
                await client.stop()


class Publisher:
    """An aiokafka producer; idempotence stays off (the embedded broker lacks it)."""

    def __init__(self, bootstrap: str, prefix: str) -> None:
        self.prefix = prefix
        self._producer = AIOKafkaProducer(
            bootstrap_servers=bootstrap,
            enable_idempotence=False,
            acks=1,
            # No lingering: ``publish_rows`` hands a step's batches over before it yields,
            # so they go in one request at once; a linger only added a timed wake-up a step.
            linger_ms=0,
            max_batch_size=BATCH_BYTES,
            request_timeout_ms=10_000,
        )
        self._partitions: dict[str, list[int]] = {}  # a topic's partitions (fixed once made)
        # stream id -> ((topic, partition), key): its category, so its topic, is its prefix
        self._streams: dict[str, tuple[tuple[str, int], bytes]] = {}

    async def start(self) -> None:
        await self._producer.start()

    async def stop(self) -> None:
        await close(self._producer)

    async def publish_rows(self, rows: Sequence[Sequence[Any]]) -> None:
        """Send stored rows (``rows.COLUMNS`` order) in order and wait for every
        acknowledgement: a batch per partition, each message keyed by its stream and put
        on the partition ``send`` would choose for that key (one ``send`` per message cost
        more than the rest of a relay)."""
        batches: dict[tuple[str, int], Any] = {}
        futures = []
        streams = self._streams
        for row in rows:
            found = streams.get(row[2])  # the stream id
            if found is None:
                found = await self._place(row[2], row[3])
            where, key = found
            batch = batches.get(where)
            if batch is None:
                batch = batches[where] = self._producer.create_batch()
            value = wire_of_row(row)
            if batch.append(key=key, value=value, timestamp=None) is None:  # full: send it
                futures.append(await self._producer.send_batch(batch, where[0], partition=where[1]))
                batch = batches[where] = self._producer.create_batch()
                batch.append(key=key, value=value, timestamp=None)
        for (name, partition), batch in batches.items():
            futures.append(await self._producer.send_batch(batch, name, partition=partition))
        await asyncio.gather(*futures)

    async def _place(self, stream_id: str, category: str) -> tuple[tuple[str, int], bytes]:
        """A stream's topic, partition and key, remembered: murmur2 is Python (partition.py)
        and a stream's events share its key."""
        name = topic(self.prefix, category)
        partitions = self._partitions.get(name)
        if partitions is None:
            partitions = sorted(await self._producer.partitions_for(name))
            self._partitions[name] = partitions
        if len(self._streams) >= KEYS_REMEMBERED:
            self._streams.clear()
        key = stream_id.encode()
        found = self._streams[stream_id] = ((name, partition_of(key, partitions)), key)
        return found

    async def heartbeats(
        self, nodes: Sequence[str], agent: str, sent_at: float, position: int
    ) -> None:
        """One round: each node's liveness, keyed by node so a node's beats stay in order,
        sent together so a slow broker delays the round once, not once per node."""
        name = topic(self.prefix, HEARTBEAT)
        futures = [
            await self._producer.send(
                name,
                orjson.dumps({"node": n, "agent": agent, "sentAt": sent_at, "position": position}),
                key=n.encode(),
            )
            for n in nodes
        ]
        await asyncio.gather(*futures)

    async def probe(self, probe: str, sent_at: float) -> frozenset[int]:
        """A watch's own marker on every partition of the heartbeat topic; read back, it
        tells the watch it has heard every beat sent before ``sent_at``. Returns the
        partitions."""
        name = topic(self.prefix, HEARTBEAT)
        partitions = frozenset(await self._producer.partitions_for(name))
        value = orjson.dumps({"probe": probe, "sentAt": sent_at})
        futures = [await self._producer.send(name, value, partition=p) for p in partitions]
        await asyncio.gather(*futures)
        return partitions


class Doorbell:
    """Yields the highest position seen in each batch of messages on ``categories``.

    No consumer group: every replica needs every event of its categories, and the
    store, not the offset, records what was applied. On broker failure it
    reconnects; meanwhile the service keeps polling the store.
    """

    def __init__(self, bootstrap: str, prefix: str, categories: Iterable[str]) -> None:
        self.bootstrap = bootstrap
        self.topics = sorted(topic(prefix, c) for c in categories)

    async def rings(self) -> AsyncIterator[int]:
        while True:
            consumer = AIOKafkaConsumer(
                *self.topics,
                bootstrap_servers=self.bootstrap,
                group_id=None,
                auto_offset_reset="latest",
                enable_auto_commit=False,
                metadata_max_age_ms=5_000,
            )
            try:
                await consumer.start()
                while True:
                    batches = await consumer.getmany(timeout_ms=1000, max_records=5000)
                    highest = 0
                    for messages in batches.values():
                        for msg in messages:
                            with contextlib.suppress(ValueError, KeyError):
                                highest = max(highest, int(orjson.loads(msg.value)["position"]))
                    if highest:
                        yield highest
            except KafkaError as exc:
                log.warning("kafka consumer failed; reconnecting", error=str(exc))
                await asyncio.sleep(1.0)
            finally:
                await close(consumer)
