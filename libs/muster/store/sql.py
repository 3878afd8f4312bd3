"""SqlEventStore: append with optimistic concurrency, read by stream or globally.

Positions are gapless and assigned in commit order: appends are serialised
(SQLite ``BEGIN IMMEDIATE``; PostgreSQL an EXCLUSIVE table lock that still lets
readers through), and each append takes ``max(position) + 1``. So a reader that
has seen position P has seen everything committed before it, which is what lets
consumers fill gaps from the store without ever skipping an event.

Every operation is one synchronous function over a connection. On PostgreSQL it runs
through asyncpg (``AsyncConnection.run_sync``) on a SQLAlchemy ``Connection``; on a SQLite
file on apsw (store/sqlite_fast.py: the hot path on the loop, the rest whole in a worker
thread, so a transaction costs one hop between the event loop and the database instead of
one per statement); SQLite in memory (tests) on SQLAlchemy in a worker thread.
"""

from __future__ import annotations

import asyncio
import functools
import sqlite3
import time
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from typing import Any, TypeVar, cast

from sqlalchemy import (
    Connection,
    Engine,
    bindparam,
    case,
    create_engine,
    func,
    null,
    select,
    text,
    true,
)
from sqlalchemy import event as sa_event
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from muster.core.events import (
    BareEnvelope,
    Envelope,
    FoldEnvelope,
    StreamAppend,
)
from muster.store.bell import CHANNEL, FileBell, bell_path, kinds_of, notification
from muster.store.errors import ReadOnlyStore
from muster.store.rows import (
    FOLD_COLUMNS,
    Row,
    as_mappings,
    envelopes,
    fold_items,
    guarded,
    planned_rows,
)
from muster.store.schema import events, snapshot_history, snapshots, tracking
from muster.store.sqlite_fast import PER_STREAM, Busy, LoopConnection, Statements, versions_sql

T = TypeVar("T")
# busy_timeout first: the others may meet a lock, and must wait for it, not fail.
BUSY_WAIT_MS = 60_000
SQLITE_PRAGMAS = (f"busy_timeout={BUSY_WAIT_MS}", "journal_mode=WAL", "synchronous=NORMAL")


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
    def __init__(self, url: str, *, pool_size: int = 5, read_only: bool = False) -> None:
        """``read_only``: a process that only reads (``muster replay``, ``bench.replay``):
        writes are refused, and a SQLite file is opened read-only."""
        self.url = normalise_url(url)
        self.is_sqlite = self.url.startswith("sqlite")
        self.read_only = read_only
        self._async: AsyncEngine | None = None
        self._fast: LoopConnection | None = None  # SQLite's hot path (store/sqlite_fast.py)
        self._write_engine: Engine | None = None
        self._read_engine: Engine | None = None
        if self.is_sqlite:
            sync_url = make_url(self.url).set(drivername="sqlite+pysqlite")
            # One writer thread: SQLite has one writer anyway; readers run beside it (WAL).
            self._write_pool = ThreadPoolExecutor(1, thread_name_prefix="muster-sqlite-w")
            self._read_pool = ThreadPoolExecutor(2, thread_name_prefix="muster-sqlite-r")
            if sync_url.database in (None, "", ":memory:"):
                self._write_engine = _sqlite_engine(sync_url, begin="BEGIN IMMEDIATE")
                self._read_engine = _sqlite_engine(sync_url, begin="BEGIN")
            else:  # the file through apsw alone: no engine opens it beside (sqlite_fast.py)
                self._fast = LoopConnection(
                    sync_url.database,
                    wait_ms=BUSY_WAIT_MS,
                    bell=FileBell(bell_path(self.url)),
                    read_only=read_only,
                )
        else:
            self._async = create_async_engine(self.url, pool_size=pool_size, pool_pre_ping=True)

    async def close(self) -> None:
        if self._async is not None:
            await self._async.dispose()
            return
        self._write_pool.shutdown(wait=True)  # no append is waiting in it any more
        self._read_pool.shutdown(wait=True)  # nor a read: their connections may close
        if self._fast is not None:
            self._fast.close()
        for engine in (self._write_engine, self._read_engine):
            if engine is not None:
                engine.dispose()

    async def _write(self, fn: Callable[[Connection], T]) -> T:
        """``fn`` in a write transaction: on a SQLite file in the writer thread, on apsw
        (``LoopConnection.write``: SQLAlchemy's statements compiled for SQLite)."""
        if self.read_only:
            raise ReadOnlyStore(f"{self.url}: opened read-only (a rebuild): no writes")
        if self._fast is not None:
            return await _on(self._write_pool, partial(self._fast.write, _as_connection(fn)))
        if self._async is None:
            assert self._write_engine is not None  # SQLite in memory
            return await _in_thread(self._write_pool, self._write_engine, fn)
        async with self._async.begin() as conn:
            return await conn.run_sync(fn)

    async def _read(self, fn: Callable[[Connection], T]) -> T:
        """``fn`` in a read transaction: on a SQLite file in a reader thread, on apsw."""
        if self._fast is not None:
            return await _on(self._read_pool, partial(self._fast.read, _as_connection(fn)))
        if self._async is None:
            assert self._read_engine is not None  # SQLite in memory
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
        ring: bool = True,
    ) -> list[Envelope]:
        """Append every stream's events in one transaction, or none of them.
        ``ring`` False: on SQLite the commit does not ring the doorbell (store/bell.py); the
        caller rings once for several appends (``ring``), so readers wake once for them.
        PostgreSQL's ring is part of the transaction and is sent as before."""
        if self._fast is not None:
            track = None if tracking_row is None else (tracking_row.consumer, tracking_row.position)
            try:
                rows = self._fast.append(batch, producer, recorded_at, track, ring=ring)
            except Busy:  # another process is writing: wait for the lock in the writer thread
                fast = self._fast
                rows = await asyncio.get_running_loop().run_in_executor(
                    self._write_pool,
                    lambda: fast.append(batch, producer, recorded_at, track, wait=True, ring=ring),
                )
            return envelopes(rows)
        pg = not self.is_sqlite

        def run(conn: Connection) -> list[Envelope]:
            if pg:
                conn.execute(text("LOCK TABLE events IN EXCLUSIVE MODE"))
            rows = _rows(conn, batch, producer, recorded_at)
            if rows:
                conn.execute(events.insert(), as_mappings(rows))
                if pg:  # delivered on commit to every LISTEN (store/bell.py)
                    conn.execute(
                        text("SELECT pg_notify(:channel, :ring)"),
                        {
                            "channel": CHANNEL,
                            "ring": notification(rows[-1][0], kinds_of(rows)),
                        },
                    )
            if tracking_row is not None:
                _track(conn, tracking_row)
            return envelopes(rows)

        return await self._write(run)

    def ring(self, appended: Sequence[Envelope]) -> None:
        """Ring the doorbell for what was appended with ``ring=False`` (several appends'
        envelopes at once: one ring of the last position and every kind among them)."""
        if self._fast is not None and appended:
            self._fast.ring(
                max(env.position for env in appended),
                {(env.category, env.type) for env in appended},
            )

    async def set_tracking(self, row: Tracking) -> None:
        if self._fast is not None:
            try:
                self._fast.track(row.consumer, row.position)
                return
            except Busy:
                pass  # another process is writing: wait for the lock in the writer thread
        await self._write(lambda conn: _track(conn, row))

    async def save_snapshot(self, name: str, position: int, fmt: str, state: bytes) -> None:
        def run(conn: Connection) -> None:
            conn.execute(snapshots.delete().where(snapshots.c.name == name))
            conn.execute(
                snapshots.insert(),
                {"name": name, "position": position, "format": fmt, "state": state},
            )

        await self._write(run)

    async def save_history_snapshot(
        self,
        name: str,
        position: int,
        at: float,
        fmt: str,
        state: bytes,
        *,
        keep: int = 0,
        spacing: int = 0,
    ) -> None:
        """One more of ``name``'s snapshots by position (one already there is kept); none
        if another of its format lies within ``spacing`` positions; with ``keep``, only the
        newest ``keep`` of them stay."""
        def run(conn: Connection) -> None:
            h = snapshot_history.c
            if spacing:
                near = select(h.position).where(
                    h.name == name,
                    h.format == fmt,
                    h.position > position - spacing,
                    h.position < position + spacing,
                )
                if conn.execute(near.limit(1)).first() is not None:
                    return
            # Two writers (the queue service, an explain in intake) may race for a position:
            # the first stays. A row of another format there (written before the state's
            # shape changed, and never read again) gives way, else it would keep this
            # position, and the snapshots at the same spacing, from ever being written.
            conn.execute(
                text(_HISTORY_INSERT), {"n": name, "p": position, "a": at, "f": fmt, "s": state}
            )
            if keep:
                newest = (
                    select(h.position)
                    .where(h.name == name)
                    .order_by(h.position.desc())
                    .offset(keep - 1)
                    .limit(1)
                ).scalar_subquery()
                conn.execute(snapshot_history.delete().where(h.name == name, h.position < newest))

        await self._write(run)

    async def load_history_snapshot(
        self, name: str, fmt: str, *, position: int | None = None, at: float | None = None
    ) -> tuple[int, bytes] | None:
        """The newest of ``name``'s snapshots in format ``fmt`` at or before ``position``
        and holding nothing after time ``at``: (its position, its state)."""
        def run(conn: Connection) -> tuple[int, bytes] | None:
            h = snapshot_history.c
            newest = select(h.position).where(h.name == name, h.format == fmt)
            if position is not None:
                newest = newest.where(h.position <= position)
            if at is not None:
                newest = newest.where(h.at <= at)
            # The position first, then that one row's state: by time, the rows come by
            # the ``at`` index and are sorted by position, and a sort of (position,
            # state) copied every candidate's state, tens of MB each (2.6 s of CPU for
            # 50 rows of a 1M-event log's backlog), to keep one.
            newest = newest.order_by(h.position.desc()).limit(1)
            query = select(h.position, h.state).where(
                h.name == name, h.position == newest.scalar_subquery()
            )
            row = conn.execute(query).first()
            return None if row is None else (int(row[0]), bytes(row[1]))

        return await self._read(run)

    # -- reading -------------------------------------------------------------

    async def head(self) -> int:
        if self._fast is not None:  # one seek on the loop: no thread hop (a step reads it)
            return self._fast.head()
        return await self._read(_head)

    async def stream_version(self, stream_id: str) -> int:
        return (await self.stream_versions([stream_id])).get(stream_id, 0)

    async def stream_versions(
        self, stream_ids: Collection[str], *, at: int | None = None
    ) -> dict[str, int]:
        """The streams' versions (absent: none), as of position ``at`` if given: what a
        decider folded through there."""
        ids = list(stream_ids)
        of = "version" if at is None else "version_at"
        return await self._read(lambda conn: _stream_versions(conn, ids, of, at))

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
        found = await self.read_rows(
            after, limit=limit, until=until, categories=categories, producer=producer
        )
        return envelopes(found)

    async def read_rows(
        self,
        after: int = 0,
        *,
        limit: int | None = None,
        until: int | None = None,
        categories: Iterable[str] | None = None,
        producer: str | None = None,
    ) -> list[tuple[Any, ...]]:
        """``read_all``'s rows as stored, in ``rows.COLUMNS`` order, payloads undecoded (the
        relay publishes them as they are)."""
        if self._fast is not None:
            return self._fast.read_all(
                after, limit=limit, until=until, categories=categories, producer=producer
            )
        # The statement built once a shape, its values bound (a relay reads back every
        # wake-up), and planned for them (``plan_for_these_values``).
        query = _rows_query(
            limit,
            until is not None,
            None if categories is None else frozenset(categories),
            producer is not None,
        )
        values = {"after": after, "until": until, "producer": producer}

        def run(conn: Connection) -> list[tuple[Any, ...]]:
            if producer is not None:
                plan_for_these_values(conn)
            return [tuple(row) for row in conn.execute(query, values)]

        return await self._read(run)

    async def read_folding(
        self,
        after: int = 0,
        *,
        limit: int | None = None,
        until: int | None = None,
        categories: Iterable[str] | None = None,
        bare: Collection[str] = (),
        bare_when: Mapping[str, str] | None = None,
    ) -> list[FoldEnvelope | BareEnvelope]:
        """``read_all`` for a fold, which needs no more of a row than ``FoldEnvelope``; the
        events of the types in ``bare`` without their payload, undecoded (``BareEnvelope``:
        a replay's ``clock_only``), and on SQLite those of ``bare_when`` whose payload has
        that field set (``clock_only_when``; elsewhere they are decoded, which folds the
        same)."""
        if self._fast is not None:
            rows = self._fast.read_folding(
                after,
                limit=limit,
                until=until,
                categories=categories,
                bare=bare,
                bare_when=bare_when,
            )
            return fold_items(rows)
        query = _folding_query(after, limit, until, categories, bare)
        return await self._read(lambda conn: fold_items(conn.execute(query)))

    async def read_folding_to_head(
        self,
        after: int = 0,
        *,
        limit: int | None = None,
        categories: Iterable[str] | None = None,
        bare: Collection[str] = (),
        bare_when: Mapping[str, str] | None = None,
    ) -> tuple[int, list[FoldEnvelope | BareEnvelope]]:
        """The log's head, and ``read_folding`` up to it, read together (a step's catch-up:
        it then knows it has read everything through the head, also when the last events
        were of other categories). PostgreSQL: both in one statement (``_to_head_query``)."""
        if self._fast is not None:
            head = self._fast.head()
            rows = self._fast.read_folding(
                after,
                limit=limit,
                until=head,
                categories=categories,
                bare=bare,
                bare_when=bare_when,
            )
            return head, fold_items(rows)

        query = _to_head_query(
            limit, None if categories is None else frozenset(categories), frozenset(bare)
        )
        sqlite = self.is_sqlite  # in memory (no fast path): SQLite has no LATERAL

        def run(conn: Connection) -> tuple[int, list[FoldEnvelope | BareEnvelope]]:
            if sqlite:
                head = _head(conn)
                return head, fold_items(
                    conn.execute(_folding_query(after, limit, head, categories, bare))
                )
            found = conn.execute(query, {"after": after}).all()
            return int(found[0][0]), fold_items(row[1:] for row in found if row[1] is not None)

        return await self._read(run)

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
            return int(row[1]), str(row[2]), bytes(row[3])  # name, position, format, state

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
) -> list[Row]:
    """Rows to insert, after checking every stream's expected version."""
    versions = _stream_versions(conn, [item.stream_id for item in batch])
    guard = guarded(batch, versions)
    ends = _stream_versions(conn, guard, "end") if guard else None
    return planned_rows(batch, _head(conn), versions, producer, recorded_at, ends)


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


def _stream_versions(
    conn: Connection, stream_ids: list[str], of: str = "version", at: int | None = None
) -> dict[str, int]:
    """Every stream's version (``of``: or what else ``PER_STREAM`` names; ``at``: the
    position it is as of) in one query, by one index seek per stream (a correlated
    ``max``, which both databases answer from the (stream, version) index's last entry):
    ``GROUP BY`` with ``max`` reads every entry of each stream, and the queue's admission
    stream grows with the log (PostgreSQL 15, 200,000 entries: 94 ms against 0.09 ms)."""
    found: dict[str, int] = {}
    unique = sorted(set(stream_ids))
    for i in range(0, len(unique), 500):  # stay under SQLite's bound-parameter limit
        chunk = unique[i : i + 500]
        if conn.dialect.name == "sqlite":
            params = tuple(chunk) if at is None else (*chunk, at)
            result = conn.exec_driver_sql(versions_sql(len(chunk), of), params)
        else:
            bound = {"ids": chunk} if at is None else {"ids": chunk, "at": at}
            result = conn.execute(_pg_versions(of), bound)
        found.update({row[0]: int(row[1]) for row in result if row[1] is not None})
    return found


@functools.lru_cache(maxsize=8)
def _pg_versions(of: str) -> Any:
    each = PER_STREAM[of].format(at=":at")
    return text(f"SELECT ids.stream, ({each}) FROM unnest(CAST(:ids AS text[])) AS ids(stream)")


@functools.lru_cache(maxsize=64)
def _rows_query(
    limit: int | None, until: bool, categories: frozenset[str] | None, producer: bool
) -> Any:
    """``read_rows``'s statement (PostgreSQL, and SQLite in memory) for one shape of
    question: ``after``, and ``until`` and ``producer`` where asked, bound at execution."""
    c = events.c
    query = select(events).where(c.position > bindparam("after")).order_by(c.position)
    if until:
        query = query.where(c.position <= bindparam("until"))
    if categories is not None:
        query = query.where(c.category.in_(sorted(categories)))
    if producer:
        query = query.where(c.producer == bindparam("producer"))
    if limit is not None:
        query = query.limit(limit)
    return query


def _folding_query(
    after: Any,
    limit: int | None,
    until: int | None,
    categories: Iterable[str] | None,
    bare: Collection[str],
) -> Any:
    """``read_folding``'s query (PostgreSQL, and SQLite in memory)."""
    c = events.c
    payload: Any = c.payload
    if bare:
        payload = case((c.type.in_(sorted(bare)), null()), else_=c.payload)
    query = (
        select(*(c[name] for name in FOLD_COLUMNS[:-1]), payload)
        .where(c.position > after)
        .order_by(c.position)
    )
    if until is not None:
        query = query.where(c.position <= until)
    if categories is not None:
        query = query.where(c.category.in_(sorted(categories)))
    if limit is not None:
        query = query.limit(limit)
    return query


@functools.lru_cache(maxsize=64)
def _to_head_query(
    limit: int | None, categories: frozenset[str] | None, bare: frozenset[str]
) -> Any:
    """``read_folding_to_head``'s query on PostgreSQL, one a decider (built once: building
    and compiling it each step cost more than the statement itself). One statement: the
    head (one seek of the primary key's last entry; every position up to it is committed,
    appends serialise), each row read beside it, a row of NULLs when none is. Against a
    second statement for the head, ~0.6 ms less CPU a step (SQLAlchemy and asyncpg's
    work per statement; bench/README.md, wip-sq)."""
    c = events.c
    h = select(func.coalesce(func.max(c.position), 0).label("head")).subquery("h")
    rows = _folding_query(bindparam("after"), limit, None, categories, bare)
    rows = rows.where(c.position <= h.c.head).lateral("e")
    query = select(h.c.head, rows).select_from(h.outerjoin(rows, true()))
    return query.order_by(rows.c.position)


def plan_for_these_values(conn: Connection) -> None:
    """PostgreSQL plans the transaction's next statements for their own parameters.

    asyncpg prepares every statement, and from a statement's sixth run PostgreSQL may
    keep one generic plan for any parameters when the plans so far cost no less. For a
    relay's read-back (``producer = ? AND position > ?``) that plan walks the primary
    key from the relay's position and filters by producer: it reads every row the other
    services wrote since this producer's last (1M-event log, a quiet producer: 1,014,365
    rows, 0.5-3.7 s a read), where the plan for the values seeks the producer's own
    (producer, position) index entries. Planning it anew costs ~0.2 ms."""
    if conn.dialect.name == "postgresql":
        conn.exec_driver_sql("SET LOCAL plan_cache_mode = force_custom_plan")


def _envelopes(conn: Connection, query: Any) -> list[Envelope]:
    return envelopes(tuple(row) for row in conn.execute(query))


_HISTORY_INSERT = (
    "INSERT INTO snapshot_history (name, position, at, format, state) "
    "VALUES (:n, :p, :a, :f, :s) ON CONFLICT (name, position) DO UPDATE "
    "SET at = excluded.at, format = excluded.format, state = excluded.state "
    "WHERE snapshot_history.format <> excluded.format"
)


def _as_connection(fn: Callable[[Connection], T]) -> Callable[[Statements], T]:
    """A store call written against SQLAlchemy's ``Connection``, run on a SQLite file's apsw
    connection: ``Statements`` is the part of ``Connection`` those calls use."""
    return cast(Callable[[Statements], T], fn)


async def _on(pool: ThreadPoolExecutor, call: Callable[[], T]) -> T:
    return await asyncio.get_running_loop().run_in_executor(pool, call)
