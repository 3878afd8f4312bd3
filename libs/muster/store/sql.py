"""SqlEventStore: append with optimistic concurrency, read by stream or globally.

Positions are gapless and assigned in commit order: appends are serialised
(SQLite ``BEGIN IMMEDIATE``; PostgreSQL an EXCLUSIVE table lock that still lets
readers through), and each append takes ``max(position) + 1``. So a reader that
has seen position P has seen everything committed before it, which is what lets
consumers fill gaps from the store without ever skipping an event.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import orjson
from sqlalchemy import event as sa_event
from sqlalchemy import func, select, text
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine

from muster.core.events import (
    Envelope,
    NewEvent,
    StreamAppend,
    category_of,
    decode_payload,
    encode_payload,
)
from muster.store.errors import ConcurrencyConflict
from muster.store.schema import events, snapshots, tracking

ANY_VERSION = None


@dataclass(frozen=True, slots=True)
class Tracking:
    """A consumer's position, committed with the events it derived from it."""

    consumer: str
    position: int


def normalise_url(url: str) -> str:
    parsed = make_url(url)
    driver = {
        "sqlite": "sqlite+aiosqlite",
        "postgresql": "postgresql+asyncpg",
        "postgres": "postgresql+asyncpg",
    }.get(parsed.drivername, parsed.drivername)
    return parsed.set(drivername=driver).render_as_string(hide_password=False)


class SqlEventStore:
    def __init__(self, url: str, *, pool_size: int = 5) -> None:
        self.url = normalise_url(url)
        self.is_sqlite = self.url.startswith("sqlite")
        if self.is_sqlite:
            self._writer = self._sqlite_engine(begin="BEGIN IMMEDIATE")
            self._reader = self._sqlite_engine(begin="BEGIN")
        else:
            self._writer = create_async_engine(self.url, pool_size=pool_size, pool_pre_ping=True)
            self._reader = self._writer

    def _sqlite_engine(self, *, begin: str) -> AsyncEngine:
        engine = create_async_engine(self.url)

        @sa_event.listens_for(engine.sync_engine, "connect")
        def _connect(dbapi_connection: Any, _record: Any) -> None:
            dbapi_connection.isolation_level = None  # we issue BEGIN ourselves
            cursor = dbapi_connection.cursor()
            for pragma in ("journal_mode=WAL", "synchronous=NORMAL", "busy_timeout=60000"):
                cursor.execute(f"PRAGMA {pragma}")
            cursor.close()

        @sa_event.listens_for(engine.sync_engine, "begin")
        def _begin(conn: Any) -> None:
            conn.exec_driver_sql(begin)

        return engine

    async def close(self) -> None:
        await self._writer.dispose()
        if self._reader is not self._writer:
            await self._reader.dispose()

    # -- writing -------------------------------------------------------------

    async def append(
        self,
        batch: Sequence[StreamAppend],
        *,
        producer: str,
        recorded_at: float,
        tracking_row: Tracking | None = None,
    ) -> list[Envelope]:
        """Append every stream's events in one transaction, or none of them."""
        async with self._writer.begin() as conn:
            if not self.is_sqlite:
                await conn.execute(text("LOCK TABLE events IN EXCLUSIVE MODE"))
            head = await self._head(conn)
            rows: list[dict[str, Any]] = []
            for item in batch:
                version = await self._stream_version(conn, item.stream_id)
                if item.expected_version is not None and item.expected_version != version:
                    raise ConcurrencyConflict(item.stream_id, item.expected_version, version)
                for new in item.events:
                    version += 1
                    head += 1
                    rows.append(_row(new, item.stream_id, version, head, producer, recorded_at))
            if rows:
                await conn.execute(
                    events.insert(), [{k: v for k, v in r.items() if k != "_event"} for r in rows]
                )
            if tracking_row is not None:
                await self._track(conn, tracking_row)
        return [_envelope(row) for row in rows]

    async def set_tracking(self, row: Tracking) -> None:
        async with self._writer.begin() as conn:
            await self._track(conn, row)

    async def _track(self, conn: AsyncConnection, row: Tracking) -> None:
        # Positions only move forward: a late, replayed commit never rewinds a consumer.
        await conn.execute(
            text(
                "INSERT INTO tracking (consumer, position) VALUES (:c, :p) "
                "ON CONFLICT (consumer) DO UPDATE SET position = excluded.position "
                "WHERE tracking.position < excluded.position"
            ),
            {"c": row.consumer, "p": row.position},
        )

    async def save_snapshot(self, name: str, position: int, fmt: str, state: bytes) -> None:
        async with self._writer.begin() as conn:
            await conn.execute(snapshots.delete().where(snapshots.c.name == name))
            await conn.execute(
                snapshots.insert(),
                {"name": name, "position": position, "format": fmt, "state": state},
            )

    # -- reading -------------------------------------------------------------

    async def head(self) -> int:
        async with self._reader.connect() as conn:
            return await self._head(conn)

    async def stream_version(self, stream_id: str) -> int:
        async with self._reader.connect() as conn:
            return await self._stream_version(conn, stream_id)

    async def read_stream(self, stream_id: str, after_version: int = 0) -> list[Envelope]:
        query = (
            select(events)
            .where(events.c.stream_id == stream_id, events.c.stream_version > after_version)
            .order_by(events.c.stream_version)
        )
        async with self._reader.connect() as conn:
            result = await conn.execute(query)
            return [_envelope(row._mapping) for row in result]

    async def read_all(
        self,
        after: int = 0,
        *,
        limit: int | None = None,
        until: int | None = None,
        categories: Iterable[str] | None = None,
        producer: str | None = None,
    ) -> list[Envelope]:
        """Events with ``after < position <= until``, in position order."""
        query = select(events).where(events.c.position > after).order_by(events.c.position)
        if until is not None:
            query = query.where(events.c.position <= until)
        if categories is not None:
            query = query.where(events.c.category.in_(sorted(categories)))
        if producer is not None:
            query = query.where(events.c.producer == producer)
        if limit is not None:
            query = query.limit(limit)
        async with self._reader.connect() as conn:
            result = await conn.execute(query)
            return [_envelope(row._mapping) for row in result]

    async def read_correlated(self, correlation_id: str) -> list[Envelope]:
        """Everything that happened because of one workload, in order (``muster describe``)."""
        query = (
            select(events)
            .where(events.c.correlation_id == correlation_id)
            .order_by(events.c.position)
        )
        async with self._reader.connect() as conn:
            result = await conn.execute(query)
            return [_envelope(row._mapping) for row in result]

    async def tracking_position(self, consumer: str) -> int:
        async with self._reader.connect() as conn:
            result = await conn.execute(
                select(tracking.c.position).where(tracking.c.consumer == consumer)
            )
            value = result.scalar()
            return int(value) if value is not None else 0

    async def load_snapshot(self, name: str) -> tuple[int, str, bytes] | None:
        async with self._reader.connect() as conn:
            result = await conn.execute(select(snapshots).where(snapshots.c.name == name))
            row = result.first()
            if row is None:
                return None
            return int(row.position), str(row.format), bytes(row.state)

    @staticmethod
    async def _head(conn: AsyncConnection) -> int:
        result = await conn.execute(select(func.coalesce(func.max(events.c.position), 0)))
        return int(result.scalar_one())

    @staticmethod
    async def _stream_version(conn: AsyncConnection, stream_id: str) -> int:
        result = await conn.execute(
            select(func.coalesce(func.max(events.c.stream_version), 0)).where(
                events.c.stream_id == stream_id
            )
        )
        return int(result.scalar_one())


def _row(
    new: NewEvent, stream_id: str, version: int, position: int, producer: str, recorded_at: float
) -> dict[str, Any]:
    return {
        "position": position,
        "event_id": str(uuid.uuid4()),
        "stream_id": stream_id,
        "category": category_of(stream_id),
        "stream_version": version,
        "type": new.event.TYPE,
        "schema_version": new.event.VERSION,
        "occurred_at": new.occurred_at,
        "recorded_at": recorded_at,
        "causation_id": new.causation_id,
        "correlation_id": new.correlation_id,
        "producer": producer,
        "payload": orjson.dumps(encode_payload(new.event)).decode(),
        "_event": new.event,
    }


def _envelope(row: Any) -> Envelope:
    event = row.get("_event") if isinstance(row, dict) else None
    if event is None:
        event = decode_payload(row["type"], row["schema_version"], orjson.loads(row["payload"]))
    return Envelope(
        position=int(row["position"]),
        event_id=row["event_id"],
        stream_id=row["stream_id"],
        stream_version=int(row["stream_version"]),
        type=row["type"],
        schema_version=event.VERSION,
        occurred_at=float(row["occurred_at"]),
        recorded_at=float(row["recorded_at"]),
        causation_id=row["causation_id"],
        correlation_id=row["correlation_id"],
        producer=row["producer"],
        event=event,
    )
