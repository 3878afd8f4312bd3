"""A SQLite file through apsw: the event loop's hot path (reading the log's tail, an append
that takes the write lock at once), and every other store call on the file, in the store's
worker threads.

Why not SQLAlchemy in the worker thread for the hot path: a fold's read and a decision's
append are the whole of a hop between services, and there the thread hop (two
cross-thread wake-ups, ~1 ms on a 2-vCPU VM whose idle CPUs sleep) and SQLAlchemy's
per-statement work cost 20-50x the SQLite calls themselves (bench/README.md, e2e_submit).
So these two run on the loop, where they cannot wait:

* a WAL reader never waits for a writer, and one SELECT is a consistent snapshot;
* the append asks for the write lock without waiting (busy timeout 0). If another
  process holds it, nothing was done and the caller goes to the worker thread, which
  waits for the lock as before. Uncontended, an append costs ~0.1-0.3 ms on the loop.

Why apsw, not the stdlib driver: it opens a connection without SQLite's per-connection
mutex (NOMUTEX), where the stdlib's serialized connection locks it around every step and
column value, and builds a row's values with less work (both release the GIL inside a
step): a rebuild's rows cost ~40 % less CPU, a catch-up read ~33 % and an append ~20 %
fewer instructions (bench/README.md, wip-ap). NOMUTEX needs one thread at a time on a
connection: the loop's reader and writer are used by the loop's thread alone, the waiting
writer by the store's one writer thread alone, and each reader thread has a reader of its
own (``_thread_reader``); ``close`` runs once those threads are done.

Why every call on the file, not the hot path alone: apsw carries its own copy of SQLite, and
two copies of SQLite in one process must not open the same file (POSIX locks are the
process's, so neither copy sees the other's: a checkpoint could overwrite pages a reader of
the other copy is reading, both could hold the WAL's write lock, closing one's descriptor
drops the other's locks; sqlite.org/howtocorrupt.html 2.2.1). So a store on a SQLite file
opens it through apsw alone; SQLAlchemy keeps PostgreSQL, SQLite in memory and migrations
(which close their connections before a store opens the file).
"""

from __future__ import annotations

import contextlib
import functools
import threading
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from typing import Any, TypeVar

import apsw
from sqlalchemy import exc as sa_exc
from sqlalchemy.dialects import sqlite as sqlite_dialect

from muster.core.events import StreamAppend
from muster.store.bell import FileBell, Kinds, kinds_of
from muster.store.errors import ReadOnlyStore
from muster.store.rows import COLUMNS, FOLD_COLUMNS, Row, guarded, planned_rows

T = TypeVar("T")

_INSERT = f"INSERT INTO events ({', '.join(COLUMNS)}) VALUES ({', '.join('?' * len(COLUMNS))})"
_TRACK = (
    "INSERT INTO tracking (consumer, position) VALUES (?, ?) "
    "ON CONFLICT (consumer) DO UPDATE SET position = excluded.position "
    "WHERE tracking.position < excluded.position"
)
_HEAD = "SELECT coalesce(max(position), 0) FROM events"  # the rowid's last entry
_SELECT = f"SELECT {', '.join(COLUMNS)} FROM events"
READ_WAIT_MS = 1000  # a reader waits only while another connection recovers the WAL


class Busy(Exception):
    """Another connection holds the write lock: append in the worker thread instead."""


class LoopConnection:
    """A store's connections to its SQLite file: a reader and a writer used from the loop's
    thread (the writer waits for no lock), a writer for the store's writer thread, which
    waits its turn, and a reader for each of its reader threads. ``read_only``: readers
    alone, opened read-only."""

    def __init__(self, path: str, *, wait_ms: int, bell: FileBell, read_only: bool = False) -> None:
        self.path = path
        self.wait_ms = wait_ms
        self.bell = bell  # rung after every commit of an append (store/bell.py)
        self.read_only = read_only
        self._reader: apsw.Connection | None = None
        self._writer: apsw.Connection | None = None
        self._waiting: apsw.Connection | None = None
        self._threads = threading.local()  # a reader thread's own reader (``_thread_reader``)
        self._pooled: list[apsw.Connection] = []
        self._pooled_lock = threading.Lock()

    def _connect(self, busy_ms: int, *, reading: bool = False) -> apsw.Connection:
        """Read-write, created if missing (as the stdlib's ``connect``), or for a read-only
        store read-only; without SQLite's mutex either way (the module's docstring)."""
        if self.read_only and not reading:
            raise ReadOnlyStore(f"{self.path} was opened read-only (a rebuild): no writes")
        mode = (
            apsw.SQLITE_OPEN_READONLY
            if self.read_only
            else apsw.SQLITE_OPEN_READWRITE | apsw.SQLITE_OPEN_CREATE
        )
        with _as_store_errors("connect"):
            conn = apsw.Connection(self.path, flags=mode | apsw.SQLITE_OPEN_NOMUTEX)
            conn.set_busy_timeout(busy_ms)
            if not self.read_only:
                conn.execute("PRAGMA synchronous=NORMAL")
        return conn

    def close(self) -> None:
        """Once no thread uses a connection any more (the store's pools are shut down)."""
        for conn in (self._reader, self._writer, self._waiting, *self._pooled):
            if conn is not None:
                conn.close()
        self._reader = self._writer = self._waiting = None
        self._pooled = []
        self.bell.close()

    def write(self, fn: Callable[[Statements], T]) -> T:
        """``fn`` in a write transaction, on the connection of the store's writer thread,
        which waits for the write lock (the store's write pool: its one thread)."""
        with _as_store_errors(f"a write on {self.path}"):
            return in_transaction(self._waiting_conn(), lambda conn: fn(Statements(conn)))

    def read(self, fn: Callable[[Statements], T]) -> T:
        """``fn`` in a read transaction (one snapshot of the file), on the calling reader
        thread's own connection (the store's read pool)."""
        with _as_store_errors(f"a read on {self.path}"):
            conn = self._thread_reader()
            return in_transaction(conn, lambda conn: fn(Statements(conn)), begin="BEGIN")

    def _thread_reader(self) -> apsw.Connection:
        """The calling reader thread's own reader: one thread at a time on each connection,
        as NOMUTEX needs."""
        conn: apsw.Connection | None = getattr(self._threads, "conn", None)
        if conn is None:
            conn = self._threads.conn = self._connect(READ_WAIT_MS, reading=True)
            with self._pooled_lock:
                self._pooled.append(conn)
        return conn

    def head(self) -> int:
        """The last position committed (0: none), on the reader: one seek of the rowid."""
        with _as_store_errors(_HEAD):
            return _head(self._reading())

    def read_all(
        self,
        after: int,
        *,
        limit: int | None,
        until: int | None,
        categories: Iterable[str] | None,
        producer: str | None,
    ) -> list[tuple[Any, ...]]:
        return self._select(_SELECT, [], after, limit, until, categories, producer)

    def read_folding(
        self,
        after: int,
        *,
        limit: int | None,
        until: int | None,
        categories: Iterable[str] | None,
        bare: Collection[str],
        bare_when: Mapping[str, str] | None = None,
    ) -> list[tuple[Any, ...]]:
        """``read_all``'s rows in ``FOLD_COLUMNS`` order, the payload NULL for the types in
        ``bare``, and for those in ``bare_when`` whose payload has that field set (not
        empty, looked at by SQLite's JSON functions): a fold does not decode them
        (``rows.fold_items``)."""
        params: list[Any] = []
        payload = "payload"
        bare_if: list[str] = []
        if bare:
            wanted = sorted(bare)
            bare_if.append(f"type IN ({', '.join('?' * len(wanted))})")
            params.extend(wanted)
        for wire_type, name in sorted((bare_when or {}).items()):
            bare_if.append("(type = ? AND json_extract(payload, ?) <> '')")
            params.extend([wire_type, f"$.{name}"])
        if bare_if:
            payload = f"CASE WHEN {' OR '.join(bare_if)} THEN NULL ELSE payload END"
        select = f"SELECT {', '.join(FOLD_COLUMNS[:-1])}, {payload} FROM events"
        return self._select(select, params, after, limit, until, categories, None)

    def _select(
        self,
        select: str,
        params: list[Any],
        after: int,
        limit: int | None,
        until: int | None,
        categories: Iterable[str] | None,
        producer: str | None,
    ) -> list[tuple[Any, ...]]:
        where: list[str] = ["position > ?"]
        params = [*params, after]
        if until is not None:
            where.append("position <= ?")
            params.append(until)
        if categories is not None:
            wanted = sorted(categories)
            # The table's own order (the rowid is the position) with the category as a
            # filter: it stops at the LIMIT. Since migration 0003 there is no category index
            # on SQLite; on an older file ``+`` keeps it out, where SQLite would search each
            # category's range, then sort everything after ``after`` before the LIMIT.
            where.append(f"+category IN ({', '.join('?' * len(wanted))})")
            params.extend(wanted)
        if producer is not None:
            where.append("producer = ?")
            params.append(producer)
        sql = f"{select} WHERE {' AND '.join(where)} ORDER BY position"
        if limit is not None:
            sql += f" LIMIT {int(limit)}"
        with _as_store_errors(sql):
            return self._reading().execute(sql, params).fetchall()

    def _reading(self) -> apsw.Connection:
        if self._reader is None:
            self._reader = self._connect(READ_WAIT_MS, reading=True)
        return self._reader

    def track(self, consumer: str, position: int) -> None:
        """Move a consumer's tracking row forward; raises Busy (nothing done) when the
        write lock is taken."""
        with _as_store_errors(_TRACK):
            _track(self._writing(), consumer, position)

    def append(
        self,
        batch: Sequence[StreamAppend],
        producer: str,
        recorded_at: float,
        tracking: tuple[str, int] | None,
        *,
        wait: bool = False,
        ring: bool = True,
    ) -> list[Row]:
        """The rows appended, in one transaction; raises ConcurrencyConflict when a stream
        moved. On the loop's connection a write lock held elsewhere raises Busy (nothing
        done); ``wait``: the writer thread's connection, which waits for the lock.
        ``ring`` False: the caller rings later (``ring``), once for several appends."""
        with _as_store_errors(_INSERT):
            rows = _append(
                self._waiting_conn() if wait else self._writing(),
                batch,
                producer,
                recorded_at,
                tracking,
            )
        if ring and rows:
            self.ring(rows[-1][0], kinds_of(rows))
        return rows

    def ring(self, head: int, kinds: Kinds) -> None:
        """After the commit: a reader woken by the ring finds what it announces."""
        self.bell.ring(head, kinds)

    def _waiting_conn(self) -> apsw.Connection:
        if self._waiting is None:
            self._waiting = self._connect(self.wait_ms)
        return self._waiting

    def _writing(self) -> apsw.Connection:
        if self._writer is None:
            self._writer = self._connect(0)
        return self._writer


class Statements:
    """An apsw connection that runs the statements SQLAlchemy builds, compiled for SQLite
    with their values bound in order: the store's calls off the hot path (snapshots, a
    stream's events, tracking) keep one form for both databases (store/sql.py). The part of
    SQLAlchemy's ``Connection`` those calls use: ``execute``, ``exec_driver_sql``,
    ``dialect``, and results' ``first``, ``scalar``, ``scalar_one``, ``all``."""

    dialect = sqlite_dialect.dialect()

    def __init__(self, conn: apsw.Connection) -> None:
        self.conn = conn

    def execute(self, statement: Any, params: Mapping[str, Any] | None = None) -> Rows:
        compiled = _compiled(statement)
        values = compiled.construct_params(params)
        return self.exec_driver_sql(
            compiled.string, [values[name] for name in compiled.positiontup or ()]
        )

    def exec_driver_sql(self, sql: str, params: Sequence[Any] = ()) -> Rows:
        return Rows(self.conn.execute(sql, tuple(params)).fetchall())


def _compiled(statement: Any) -> Any:
    # Expanding IN lists rendered into the string: their values are the statement's own.
    return statement.compile(
        dialect=Statements.dialect, compile_kwargs={"render_postcompile": True}
    )


class Rows(list[tuple[Any, ...]]):
    """A statement's rows, read whole, as SQLAlchemy's results are asked for them."""

    def first(self) -> tuple[Any, ...] | None:
        return self[0] if self else None

    def scalar(self) -> Any:
        return self[0][0] if self else None

    def scalar_one(self) -> Any:
        (row,) = self
        return row[0]

    def all(self) -> list[tuple[Any, ...]]:
        return list(self)


def in_transaction(
    conn: apsw.Connection, fn: Callable[[apsw.Connection], T], *, begin: str = "BEGIN IMMEDIATE"
) -> T:
    """``fn`` in one transaction (apsw begins none by itself; a write's takes the write lock
    at once), rolled back if it raises."""
    conn.execute(begin)
    try:
        result = fn(conn)
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    return result


def _track(conn: apsw.Connection, consumer: str, position: int) -> None:
    try:
        conn.execute(_TRACK, (consumer, position))  # one statement: its own transaction
    except _BUSY as exc:
        raise Busy from exc


def _append(
    conn: apsw.Connection,
    batch: Sequence[StreamAppend],
    producer: str,
    recorded_at: float,
    tracking: tuple[str, int] | None,
) -> list[Row]:
    try:
        conn.execute("BEGIN IMMEDIATE")
    except _BUSY as exc:
        raise Busy from exc
    try:
        versions = _versions(conn, batch)
        guard = guarded(batch, versions)
        ends = stream_versions(conn, guard, "end") if guard else None
        rows = planned_rows(batch, _head(conn), versions, producer, recorded_at, ends)
        conn.executemany(_INSERT, rows)
        if tracking is not None:
            conn.execute(_TRACK, tracking)
        conn.execute("COMMIT")
    except BaseException as exc:
        conn.execute("ROLLBACK")
        if isinstance(exc, _BUSY):
            raise Busy from exc  # rolled back: the thread's append starts afresh
        raise
    return rows


_BUSY = (apsw.BusyError, apsw.LockedError)  # the lock is another connection's


@contextlib.contextmanager
def _as_store_errors(statement: str) -> Iterator[None]:
    """The driver's errors as SQLAlchemy's, as the stdlib driver's came out of it and as a
    store on PostgreSQL raises them (the loop's ``unavailable`` and the CLI's one-line
    errors know those)."""
    try:
        yield
    except apsw.Error as exc:
        raise _from_apsw(statement, exc) from exc


def _from_apsw(statement: str, exc: apsw.Error) -> sa_exc.DBAPIError:
    """The class the stdlib driver gives the same SQLite result code: a constraint an
    IntegrityError, a file that is not a database or is damaged a DatabaseError, anything
    else (no such file or table, a lock held past the wait, an I/O error, a full disk) an
    OperationalError."""
    if isinstance(exc, apsw.ConstraintError):
        return sa_exc.IntegrityError(statement, None, exc)
    if isinstance(exc, apsw.NotADBError | apsw.CorruptError):
        return sa_exc.DatabaseError(statement, None, exc)
    return sa_exc.OperationalError(statement, None, exc)


def _head(conn: apsw.Connection) -> int:
    row = conn.execute(_HEAD).fetchone()
    assert row is not None  # an aggregate's one row
    return int(row[0])


def _versions(conn: apsw.Connection, batch: Sequence[StreamAppend]) -> dict[str, int]:
    return stream_versions(conn, [item.stream_id for item in batch])


def stream_versions(
    conn: apsw.Connection, stream_ids: Iterable[str], of: str = "version", at: int | None = None
) -> dict[str, int]:
    """Each stream's version (absent: none yet), by one seek per stream: ``max`` alone over
    the (stream, version) index reads its last entry, where ``GROUP BY stream_id`` with
    ``max`` reads every entry of each stream. The queue's admission stream grows with the
    log (~2 events a workload; 216,000 in the 1M log), so that read grew with it: ~0.1 ms
    an append in a 3,000-workload run, 22 ms on the 1M log (bench/README.md, wip-qa).
    ``of``: what of each stream (``PER_STREAM``); ``at``: the position "version_at" is as of."""
    unique = sorted(set(stream_ids))
    found: dict[str, int] = {}
    for i in range(0, len(unique), 500):  # under SQLite's bound-parameter limit
        chunk = unique[i : i + 500]
        found.update(
            (stream, value)
            for stream, value in conn.execute(
                versions_sql(len(chunk), of), chunk if at is None else [*chunk, at]
            )
            if value is not None
        )
    return found


# One seek per stream in the (stream, version) index, for each of what the store asks of
# a stream: its version; the position of its last event (``StreamAppend.folded_to``);
# its version as of a position (walking the index back from its last entry: it stops at
# the first at or before the position, and few came after it).
PER_STREAM = {
    "version": "SELECT max(e.stream_version) FROM events e WHERE e.stream_id = ids.stream",
    "end": "SELECT e.position FROM events e WHERE e.stream_id = ids.stream "
    "ORDER BY e.stream_version DESC LIMIT 1",
    "version_at": "SELECT e.stream_version FROM events e "
    "WHERE e.stream_id = ids.stream AND e.position <= {at} "
    "ORDER BY e.stream_version DESC LIMIT 1",
}


@functools.lru_cache(maxsize=64)
def versions_sql(count: int, of: str = "version") -> str:
    """The query of ``of`` (``PER_STREAM``) for ``count`` streams, a correlated subquery
    for each, ``at`` its last parameter."""
    ids = ", ".join(["(?)"] * count)
    each = PER_STREAM[of].format(at="?")
    return f"WITH ids(stream) AS (VALUES {ids}) SELECT ids.stream, ({each}) FROM ids"
