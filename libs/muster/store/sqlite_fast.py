"""SQLite's hot path, on the event loop's own thread: reading the log's tail and an append
that takes the write lock at once.

Why not SQLAlchemy in the worker thread, as every other store call: a fold's read and a
decision's append are the whole of a hop between services, and there the thread hop
(two cross-thread wake-ups, ~1 ms on a 2-vCPU VM whose idle CPUs sleep) and SQLAlchemy's
per-statement work cost 20-50x the SQLite calls themselves (bench/README.md, e2e_submit).
So these two run on the stdlib driver, on the loop, where they cannot wait:

* a WAL reader never waits for a writer, and one SELECT is a consistent snapshot;
* the append asks for the write lock without waiting (busy timeout 0). If another
  process holds it, nothing was done and the caller goes to the worker thread, which
  waits for the lock as before. Uncontended, an append costs ~0.1-0.3 ms on the loop.

A read-only store (``SqlEventStore(read_only=True)``: a rebuild's process) reads through
apsw instead: opened without SQLite's per-connection mutex, a row costs ~40 % less CPU
(bench/README.md, wip-ap). Only there: apsw carries its own copy of SQLite, and two copies
of SQLite in one process must not open the same file (their POSIX locks do not see each
other's; sqlite.org/howtocorrupt.html 2.2.1), which a service's engine connections would.
"""

from __future__ import annotations

import contextlib
import functools
import sqlite3
import sys
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from sqlalchemy import exc as sa_exc

from muster.core.events import StreamAppend
from muster.store.bell import FileBell, Kinds, kinds_of
from muster.store.errors import ReadOnlyStore
from muster.store.rows import COLUMNS, FOLD_COLUMNS, planned_rows, values_of

if TYPE_CHECKING:
    import apsw

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
    """A store's connections on the stdlib driver: a reader and a writer used from the
    loop's thread (the writer waits for no lock), and a writer for the store's writer
    thread, which waits its turn as long as the SQLAlchemy engine would. ``read_only``: the
    reader alone, on apsw (``_read_only``), and no writer."""

    def __init__(self, path: str, *, wait_ms: int, bell: FileBell, read_only: bool = False) -> None:
        self.path = path
        self.wait_ms = wait_ms
        self.bell = bell  # rung after every commit of an append (store/bell.py)
        self.read_only = read_only
        self._reader: sqlite3.Connection | apsw.Connection | None = None
        self._writer: sqlite3.Connection | None = None
        self._waiting: sqlite3.Connection | None = None

    def _connect(self, busy_ms: int) -> sqlite3.Connection:
        # check_same_thread off only so that close() may run at shutdown elsewhere.
        conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        conn.execute(f"PRAGMA busy_timeout={busy_ms}")
        conn.execute("PRAGMA synchronous=NORMAL")
        return conn

    def close(self) -> None:
        for conn in (self._reader, self._writer, self._waiting):
            if conn is not None:
                conn.close()
        self._reader = self._writer = self._waiting = None
        self.bell.close()

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

    def _reading(self) -> sqlite3.Connection | apsw.Connection:
        if self._reader is None:
            if self.read_only:
                self._reader = _read_only(self.path, READ_WAIT_MS)
            else:
                self._reader = self._connect(READ_WAIT_MS)
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
    ) -> list[dict[str, Any]]:
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
            self.ring(rows[-1]["position"], kinds_of(rows))
        return rows

    def ring(self, head: int, kinds: Kinds) -> None:
        """After the commit: a reader woken by the ring finds what it announces."""
        self.bell.ring(head, kinds)

    def _waiting_conn(self) -> sqlite3.Connection:
        if self._waiting is None:
            self._refuse_if_read_only()
            self._waiting = self._connect(self.wait_ms)
        return self._waiting

    def _writing(self) -> sqlite3.Connection:
        if self._writer is None:
            self._refuse_if_read_only()
            self._writer = self._connect(0)
        return self._writer

    def _refuse_if_read_only(self) -> None:
        if self.read_only:
            raise ReadOnlyStore(f"{self.path} was opened read-only (a rebuild): no writes")


def _read_only(path: str, busy_ms: int) -> apsw.Connection:
    """A read-only store's reader, on apsw. Opened without SQLite's mutex (NOMUTEX): the
    stdlib driver's serialized connections lock it around every step and column value,
    ~10 % of a rebuild's instructions. Safe because one thread at a time uses it: the event
    loop's, which makes every read of a read-only store (SqlEventStore refuses the calls
    that would go to its worker threads) and closes it."""
    import apsw  # here: only a rebuild's process needs it (~3 ms an import)

    conn = apsw.Connection(path, flags=apsw.SQLITE_OPEN_READONLY | apsw.SQLITE_OPEN_NOMUTEX)
    conn.setbusytimeout(busy_ms)
    return conn


def _track(conn: sqlite3.Connection, consumer: str, position: int) -> None:
    try:
        conn.execute(_TRACK, (consumer, position))  # one statement: its own transaction
    except sqlite3.OperationalError as exc:
        if _busy(exc):
            raise Busy from exc
        raise


def _append(
    conn: sqlite3.Connection,
    batch: Sequence[StreamAppend],
    producer: str,
    recorded_at: float,
    tracking: tuple[str, int] | None,
) -> list[dict[str, Any]]:
    try:
        conn.execute("BEGIN IMMEDIATE")
    except sqlite3.OperationalError as exc:
        if _busy(exc):
            raise Busy from exc
        raise
    try:
        rows = planned_rows(batch, _head(conn), _versions(conn, batch), producer, recorded_at)
        conn.executemany(_INSERT, [values_of(row) for row in rows])
        if tracking is not None:
            conn.execute(_TRACK, tracking)
        conn.execute("COMMIT")
    except BaseException as exc:
        conn.execute("ROLLBACK")
        if isinstance(exc, sqlite3.OperationalError) and _busy(exc):
            raise Busy from exc  # rolled back: the thread's append starts afresh
        raise
    return rows


@contextlib.contextmanager
def _as_store_errors(statement: str) -> Iterator[None]:
    """The driver's errors as SQLAlchemy's, as every other store call raises them (the
    loop's ``unavailable`` and the CLI's one-line errors know those)."""
    try:
        yield
    except sqlite3.Error as exc:
        raise sa_exc.DBAPIError.instance(statement, None, exc, sqlite3.Error) from exc
    except _apsw_errors() as exc:
        raise _from_apsw(statement, exc) from exc


def _apsw_errors() -> tuple[type[Exception], ...]:
    """apsw's base error once a read-only store imported it (evaluated only when an error
    is on its way: an ``except`` clause's classes are)."""
    apsw = sys.modules.get("apsw")
    return () if apsw is None else (apsw.Error,)


def _from_apsw(statement: str, exc: Exception) -> sa_exc.DBAPIError:
    """An apsw error as the stdlib's would come out of SQLAlchemy: a file that is not a
    database, or is damaged, a DatabaseError; anything else a reader meets (no such file
    or table, a lock held past the wait, an I/O error) an OperationalError."""
    import apsw

    damaged = isinstance(exc, apsw.NotADBError | apsw.CorruptError)
    kind = sa_exc.DatabaseError if damaged else sa_exc.OperationalError
    return kind(statement, None, exc)


def _busy(exc: sqlite3.OperationalError) -> bool:
    return "locked" in str(exc) or "busy" in str(exc)


def _head(conn: sqlite3.Connection | apsw.Connection) -> int:
    row = conn.execute(_HEAD).fetchone()
    assert row is not None  # an aggregate's one row
    return int(row[0])


def _versions(conn: sqlite3.Connection, batch: Sequence[StreamAppend]) -> dict[str, int]:
    """Each stream's version (absent: none yet), by one seek per stream: ``max`` alone over
    the (stream, version) index reads its last entry, where ``GROUP BY stream_id`` with
    ``max`` reads every entry of each stream. The queue's admission stream grows with the
    log (~2 events a workload; 216,000 in the 1M log), so that read grew with it: ~0.1 ms
    an append in a 3,000-workload run, 22 ms on the 1M log (bench/README.md, wip-qa)."""
    unique = sorted({item.stream_id for item in batch})
    found: dict[str, int] = {}
    for i in range(0, len(unique), 500):  # under SQLite's bound-parameter limit
        chunk = unique[i : i + 500]
        found.update(
            (stream, version)
            for stream, version in conn.execute(versions_sql(len(chunk)), chunk)
            if version is not None
        )
    return found


@functools.lru_cache(maxsize=64)
def versions_sql(count: int) -> str:
    """The versions query for ``count`` streams: a correlated ``max`` for each."""
    ids = ", ".join(["(?)"] * count)
    return (
        f"WITH ids(stream) AS (VALUES {ids}) SELECT ids.stream, "
        "(SELECT max(e.stream_version) FROM events e WHERE e.stream_id = ids.stream) FROM ids"
    )
