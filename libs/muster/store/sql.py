"""SqlEventStore: append with optimistic concurrency, read by stream or globally.

Positions are gapless and assigned in commit order: appends are serialised
(SQLite ``BEGIN IMMEDIATE``; PostgreSQL an EXCLUSIVE table lock that still lets
readers through), and each append takes ``max(position) + 1``. So a reader that
has seen position P has seen everything committed before it, which is what lets
consumers fill gaps from the store without ever skipping an event.

Every operation is one synchronous function over a SQLAlchemy ``Connection``. On
PostgreSQL it runs through asyncpg (``AsyncConnection.run_sync``); on SQLite the
whole function runs in a worker thread, so a transaction costs one hop between the
event loop and the database instead of one per statement.
"""

from __future__ import annotations

import asyncio
import sqlite3
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from typing import Any, TypeVar

import orjson
from sqlalchemy import Connection, Engine, create_engine, func, select, text
from sqlalchemy import event as sa_event
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

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

T = TypeVar("T")
# busy_timeout first: the others may meet a lock, and must wait for it, not fail.
SQLITE_PRAGMAS = ("busy_timeout=60000", "journal_mode=WAL", "synchronous=NORMAL")


@dataclass(frozen=True, slots=True)
class Tracking:
    """A consumer's position, committed with the events it derived from it."""

    consumer: str
    position: int


def normalise_url(url: str) -> str:
    """The async driver URL (Alembic and PostgreSQL use it)."""
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
        self._async: AsyncEngine | None = None
        if self.is_sqlite:
            sync_url = make_url(self.url).set(drivername="sqlite+pysqlite")
            self._write_engine = _sqlite_engine(sync_url, begin="BEGIN IMMEDIATE")
            self._read_engine = _sqlite_engine(sync_url, begin="BEGIN")
            # One writer thread: SQLite has one writer anyway; readers run beside it (WAL).
            self._write_pool = ThreadPoolExecutor(1, thread_name_prefix="muster-sqlite-w")
            self._read_pool = ThreadPoolExecutor(2, thread_name_prefix="muster-sqlite-r")
        else:
            self._async = create_async_engine(self.url, pool_size=pool_size, pool_pre_ping=True)

    async def close(self) -> None:
        if self._async is not None:
            await self._async.dispose()
            return
        self._write_pool.shutdown(wait=True)
        self._read_pool.shutdown(wait=True)
        self._write_engine.dispose()
        self._read_engine.dispose()

    async def _write(self, fn: Callable[[Connection], T]) -> T:
        if self._async is None:
            return await _in_thread(self._write_pool, self._write_engine, fn)
        async with self._async.begin() as conn:
            return await conn.run_sync(fn)

    async def _read(self, fn: Callable[[Connection], T]) -> T:
        if self._async is None:
            return await _in_thread(self._read_pool, self._read_engine, fn)
        async with self._async.connect() as conn:
            return await conn.run_sync(fn)

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
        pg = not self.is_sqlite

        def run(conn: Connection) -> list[Envelope]:
            if pg:
                conn.execute(text("LOCK TABLE events IN EXCLUSIVE MODE"))
            rows = _rows(conn, batch, producer, recorded_at)
            if rows:
                conn.execute(
                    events.insert(), [{k: v for k, v in r.items() if k != "_event"} for r in rows]
                )
            if tracking_row is not None:
                _track(conn, tracking_row)
            return [_envelope(row) for row in rows]

        return await self._write(run)

    async def set_tracking(self, row: Tracking) -> None:
        await self._write(lambda conn: _track(conn, row))

    async def save_snapshot(self, name: str, position: int, fmt: str, state: bytes) -> None:
        def run(conn: Connection) -> None:
            conn.execute(snapshots.delete().where(snapshots.c.name == name))
            conn.execute(
                snapshots.insert(),
                {"name": name, "position": position, "format": fmt, "state": state},
            )

        await self._write(run)

    # -- reading -------------------------------------------------------------

    async def head(self) -> int:
        return await self._read(_head)

    async def stream_version(self, stream_id: str) -> int:
        return await self._read(lambda conn: _stream_versions(conn, [stream_id]).get(stream_id, 0))

    async def read_stream(self, stream_id: str, after_version: int = 0) -> list[Envelope]:
        query = (
            select(events)
            .where(events.c.stream_id == stream_id, events.c.stream_version > after_version)
            .order_by(events.c.stream_version)
        )
        return await self._read(lambda conn: _envelopes(conn, query))

    async def first_events(self, stream_ids: Iterable[str]) -> dict[str, Envelope]:
        """The first event of each of these streams that has one (what created it)."""
        wanted = sorted(set(stream_ids))
        found: dict[str, Envelope] = {}
        for start in range(0, len(wanted), 500):  # bounded IN lists
            query = select(events).where(
                events.c.stream_id.in_(wanted[start : start + 500]), events.c.stream_version == 1
            )
            for env in await self._read(partial(_envelopes, query=query)):
                found[env.stream_id] = env
        return found

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
        return await self._read(lambda conn: _envelopes(conn, query))

    async def read_correlated(
        self, correlation_id: str, after: int = 0, *, limit: int | None = None
    ) -> list[Envelope]:
        """Everything that happened because of one workload, in order (``muster describe``),
        from after a position (a resumed watch)."""
        query = (
            select(events)
            .where(events.c.correlation_id == correlation_id, events.c.position > after)
            .order_by(events.c.position)
        )
        if limit is not None:
            query = query.limit(limit)
        return await self._read(lambda conn: _envelopes(conn, query))

    async def tracking_position(self, consumer: str) -> int:
        def run(conn: Connection) -> int:
            value = conn.execute(
                select(tracking.c.position).where(tracking.c.consumer == consumer)
            ).scalar()
            return int(value) if value is not None else 0

        return await self._read(run)

    async def load_snapshot(self, name: str) -> tuple[int, str, bytes] | None:
        def run(conn: Connection) -> tuple[int, str, bytes] | None:
            row = conn.execute(select(snapshots).where(snapshots.c.name == name)).first()
            if row is None:
                return None
            return int(row.position), str(row.format), bytes(row.state)

        return await self._read(run)


def _sqlite_engine(url: Any, *, begin: str) -> Engine:
    engine = create_engine(url, connect_args={"check_same_thread": False})

    @sa_event.listens_for(engine, "connect")
    def _connect(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None  # we issue BEGIN ourselves
        cursor = dbapi_connection.cursor()
        for pragma in SQLITE_PRAGMAS:
            if pragma == "journal_mode=WAL":
                switch_to_wal(cursor)
            else:
                cursor.execute(f"PRAGMA {pragma}")
        cursor.close()

    @sa_event.listens_for(engine, "begin")
    def _begin(conn: Any) -> None:
        conn.exec_driver_sql(begin)

    return engine


def switch_to_wal(cursor: Any, attempts: int = 60) -> None:
    """WAL is kept in the file, so only a file not yet in WAL is switched. The switch needs
    an exclusive lock; connections switching together (services starting on a fresh file
    after ``migrate``) deadlock on it, and SQLite answers one of them "database is locked"
    at once, without the busy timeout. So the switch is retried, for up to about 18 s."""
    for attempt in range(attempts):
        try:
            (mode,) = cursor.execute("PRAGMA journal_mode").fetchone()
            if str(mode).lower() != "wal":
                (mode,) = cursor.execute("PRAGMA journal_mode=WAL").fetchone()
            if str(mode).lower() == "wal":
                return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or attempt == attempts - 1:
                raise
        time.sleep(0.01 * (attempt + 1))
    raise sqlite3.OperationalError("could not switch the SQLite file to WAL")


async def _in_thread(pool: ThreadPoolExecutor, engine: Engine, fn: Callable[[Connection], T]) -> T:
    def run() -> T:
        with engine.begin() as conn:
            return fn(conn)

    return await asyncio.get_running_loop().run_in_executor(pool, run)


def _rows(
    conn: Connection, batch: Sequence[StreamAppend], producer: str, recorded_at: float
) -> list[dict[str, Any]]:
    """Rows to insert, after checking every stream's expected version."""
    head = _head(conn)
    versions = _stream_versions(conn, [item.stream_id for item in batch])
    rows: list[dict[str, Any]] = []
    for item in batch:
        version = versions.get(item.stream_id, 0)
        if item.expected_version is not None and item.expected_version != version:
            raise ConcurrencyConflict(item.stream_id, item.expected_version, version)
        for new in item.events:
            version += 1
            head += 1
            rows.append(_row(new, item.stream_id, version, head, producer, recorded_at))
        versions[item.stream_id] = version  # a stream may appear twice in one batch
    return rows


def _track(conn: Connection, row: Tracking) -> None:
    # Positions only move forward: a late, replayed commit never rewinds a consumer.
    conn.execute(
        text(
            "INSERT INTO tracking (consumer, position) VALUES (:c, :p) "
            "ON CONFLICT (consumer) DO UPDATE SET position = excluded.position "
            "WHERE tracking.position < excluded.position"
        ),
        {"c": row.consumer, "p": row.position},
    )


def _head(conn: Connection) -> int:
    return int(conn.execute(select(func.coalesce(func.max(events.c.position), 0))).scalar_one())


def _stream_versions(conn: Connection, stream_ids: list[str]) -> dict[str, int]:
    """Every stream's version in one query: a batch costs the same as one append."""
    found: dict[str, int] = {}
    unique = sorted(set(stream_ids))
    for i in range(0, len(unique), 500):  # stay under SQLite's bound-parameter limit
        result = conn.execute(
            select(events.c.stream_id, func.max(events.c.stream_version))
            .where(events.c.stream_id.in_(unique[i : i + 500]))
            .group_by(events.c.stream_id)
        )
        found.update({row[0]: int(row[1]) for row in result})
    return found


def _envelopes(conn: Connection, query: Any) -> list[Envelope]:
    return [_envelope(row._mapping) for row in conn.execute(query)]


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
