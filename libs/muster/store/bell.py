"""The store's doorbell: a reader learns that events were committed the moment they are,
at no cost while nothing is.

Polling the store costs CPU in proportion to how fast it answers, and Kafka cannot
stand in: the embedded broker answers a parked fetch only when its wait runs out
(bench/README.md, e2e_submit). So every append rings after it commits, and followers
wait on the ring without polling:

* SQLite: the appender writes the new head into ``<file>.bell`` after the commit
  (the highest yet: appenders in several processes take turns under a file lock);
  readers watch that file with inotify (the kernel wakes them; an idle watch costs
  nothing). Ringing after the commit, not on the WAL file's writes, means a reader
  woken by it always finds what woke it.
* PostgreSQL: ``pg_notify('muster_events', head)`` inside the appending transaction,
  which PostgreSQL delivers on commit, in commit order, to every ``LISTEN`` on any
  machine.

A ring carries the head it announces, so a reader that has folded that far (its own
append) sleeps on. Otherwise it folds from the store, in position order, as after a
poll: a ring lost or doubled changes nothing.

A ring also says what kind of events were committed, so a reader wakes only for a commit
that concerns it (``Interest``: one of its categories and a type it does more with than
move its clock): a service that folds no node events sleeps through the node agent's
commits. Skipping a ring loses nothing: the reader folds from its position, so the next
ring that concerns it (or the poll) brings the skipped events along, in order. On SQLite
the file holds, after the head, the highest position committed per hashed category and
per hashed type (a collision only wakes a reader needlessly); on PostgreSQL the
notification's payload names the commit's (category, type) pairs.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import functools
import os
import struct
import zlib
from collections.abc import AsyncIterator, Iterable, Sequence
from pathlib import Path
from typing import Any

import asyncpg
import structlog
from sqlalchemy.engine import make_url

log = structlog.get_logger("muster.store.bell")

CHANNEL = "muster_events"
RECONNECT_SECONDS = 1.0
SLOTS = 128  # positions kept per hashed category or type, after the head
_FILE = struct.Struct(f"<{1 + SLOTS}Q")  # the bell file: the head, then the slots
_MAX_PAYLOAD = 7000  # bytes; PostgreSQL refuses a notification's payload of 8,000 or more

Kinds = Iterable[tuple[str, str]]  # (category, type) of each event a commit holds


class Interest:
    """What a reader folds: a commit concerns it when it holds an event of one of
    ``categories`` whose type is one of ``types`` (a decider's: every type but those it
    only moves its clock on). An event of another type is folded all the same, in order,
    the next time a commit that concerns the reader (or the poll) wakes it."""

    def __init__(self, categories: Iterable[str], types: Iterable[str]) -> None:
        self.categories = frozenset(categories)
        self.types = frozenset(types)
        # The file's slots to look at: 1 + the slot (slot 0 is the head).
        self._category_slots = sorted({1 + _slot("c", c) for c in self.categories})
        self._type_slots = sorted({1 + _slot("t", t) for t in self.types})

    def concerns(self, kinds: Kinds) -> bool:
        return any(c in self.categories and t in self.types for c, t in kinds)

    def head_in(self, values: tuple[int, ...]) -> int:
        """The highest position in the bell file's ``values`` that may concern the reader:
        it folds an event of one of its categories and of one of its types only past
        both slots' positions (each slot holds the highest position of what hashes to it)."""
        if not self._category_slots or not self._type_slots:
            return 0
        return min(
            max(values[i] for i in self._category_slots),
            max(values[i] for i in self._type_slots),
        )


def kinds_of(rows: Iterable[Sequence[Any]]) -> set[tuple[str, str]]:
    """The (category, type) pairs of a commit's rows (``store/rows.py``: values in
    ``COLUMNS`` order, category fourth and type sixth)."""
    return {(row[3], row[5]) for row in rows}


def _slot(prefix: str, name: str) -> int:
    return zlib.crc32(f"{prefix}:{name}".encode()) % SLOTS


@functools.lru_cache(maxsize=4096)
def _kind_slots(category: str, wire_type: str) -> tuple[int, int]:
    """The bell file's two values a commit of this kind raises (1 + each slot): every
    commit rings its kinds, a few dozen in all."""
    return 1 + _slot("c", category), 1 + _slot("t", wire_type)


async def rings(url: str, interest: Interest | None = None) -> AsyncIterator[int]:
    """Yields the head announced by each ring (or burst of rings) of the store at ``url``
    (the async URL ``SqlEventStore.url``); 0 when the head is unknown (a new listening
    connection). With ``interest``: only rings of commits that concern it, and the head
    among those. Runs until cancelled, riding out a database that goes away."""
    if url.startswith("sqlite"):
        async for head in _file_rings(bell_path(url), interest):
            yield head
    else:
        async for head in _pg_rings(url, interest):
            yield head


def bell_path(url: str) -> Path:
    database = make_url(url).database
    if not database or database == ":memory:":
        raise ValueError(f"an in-memory SQLite store has no doorbell: {url}")
    # One file however the URL spells the path, so every process rings the same bell.
    return Path(f"{Path(database).resolve()}.bell")


class FileBell:
    """The appending side on SQLite: one open descriptor, one locked read and write of the
    file (1 KiB) per commit, so waiting for the lock is brief."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = None

    def ring(self, head: int, kinds: Kinds = ()) -> None:
        """``head``: the commit's last position; ``kinds``: what it holds."""
        if self._fd is None:
            self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        slots = {0}.union(*(_kind_slots(c, t) for c, t in kinds))
        fcntl.lockf(self._fd, fcntl.LOCK_EX)
        try:
            # Commits in two processes may ring out of order: every value only grows.
            values = _values_in(self._fd)
            raised = [i for i in slots if values[i] < head]
            if raised:
                grown = list(values)
                for i in raised:
                    grown[i] = head
                os.pwrite(self._fd, _FILE.pack(*grown), 0)
        finally:
            fcntl.lockf(self._fd, fcntl.LOCK_UN)

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def _values_in(fd: int) -> tuple[int, ...]:
    """The head and the slots; a shorter file (an older build's: the head alone) reads
    as zeros past its end."""
    return _FILE.unpack(os.pread(fd, _FILE.size, 0).ljust(_FILE.size, b"\0"))


def _head_in(fd: int, interest: Interest | None) -> int:
    values = _values_in(fd)
    return values[0] if interest is None else interest.head_in(values)


async def _file_rings(path: Path, interest: Interest | None) -> AsyncIterator[int]:
    """inotify on the bell file: after each change, the head that concerns the reader,
    when it moved."""
    # Imported here: inotify is Linux's; elsewhere the routine fails, is restarted, and
    # the store poll alone keeps the service moving.
    from asyncinotify import Inotify, Mask

    path.touch(exist_ok=True)
    fd = os.open(path, os.O_RDONLY)
    loop = asyncio.get_running_loop()
    try:
        with Inotify() as watcher:
            watcher.add_watch(path, Mask.MODIFY)
            heard = _head_in(fd, interest)
            yield heard  # what was committed before the watch began
            changes = _Changes(watcher.fd, int(Mask.IGNORED))
            loop.add_reader(watcher.fd, changes.read)
            try:
                while True:
                    if await changes.wait():  # the file was removed: watch the new one
                        path.touch(exist_ok=True)
                        os.close(fd)
                        fd = os.open(path, os.O_RDONLY)
                        watcher.add_watch(path, Mask.MODIFY)
                        heard = 0
                        yield 0  # unknown: fold what is there
                        continue
                    head = _head_in(fd, interest)
                    if head > heard:
                        heard = head
                        yield head
            finally:
                loop.remove_reader(watcher.fd)
    finally:
        os.close(fd)


class _Changes:
    """The inotify descriptor's events, read by a reader the loop keeps for the watch's
    life (asyncinotify's iteration adds and removes one, two epoll_ctl, and builds an
    object an event: ~40 us of CPU a wake-up in all, bench/README.md, wip-ap2). All that
    matters of them: some came (the bell rang at least once since the last ``wait``), and
    whether one says the watched file was removed."""

    _EVENT = struct.Struct("iIII")  # struct inotify_event: wd, mask, cookie, len; then a name

    def __init__(self, fd: int, ignored_mask: int) -> None:
        self.fd = fd
        self.ignored_mask = ignored_mask
        self.ignored = False
        self.rang = asyncio.Event()
        os.set_blocking(fd, False)

    def read(self) -> None:
        try:
            data = os.read(self.fd, 4096)
        except BlockingIOError:
            return
        offset = 0
        while offset < len(data):
            _, mask, _, name_length = self._EVENT.unpack_from(data, offset)
            self.ignored |= bool(mask & self.ignored_mask)
            offset += self._EVENT.size + name_length
        self.rang.set()

    async def wait(self) -> bool:
        """Until the bell rang since the last call; True if the file was removed."""
        await self.rang.wait()
        self.rang.clear()
        ignored, self.ignored = self.ignored, False
        return ignored


def notification(head: int, kinds: Kinds) -> str:
    """A ring's payload on PostgreSQL: the head, then the commit's ``category/type``
    pairs; the head alone when they would not fit (a reader then wakes)."""
    pairs = ",".join(sorted({f"{c}/{t}" for c, t in kinds}))
    payload = f"{head} {pairs}" if pairs else str(head)
    return payload if len(payload) < _MAX_PAYLOAD else str(head)


def _heard(payload: str, interest: Interest | None) -> int | None:
    """The head a notification announces if it concerns the reader; None if it does not
    (or cannot be read). A payload of the head alone concerns everyone."""
    head_text, _, pairs = payload.partition(" ")
    try:
        head = int(head_text)
    except ValueError:
        return None
    if interest is None or not pairs:
        return head
    kinds = (pair.partition("/")[::2] for pair in pairs.split(","))
    return head if interest.concerns(kinds) else None


async def _pg_rings(url: str, interest: Interest | None) -> AsyncIterator[int]:
    dsn = make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)
    while True:
        try:
            async for head in _pg_session(dsn, interest):
                yield head
        except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
            log.warning("doorbell connection failed; reconnecting", error=str(exc))
        await asyncio.sleep(RECONNECT_SECONDS)


async def _pg_session(dsn: str, interest: Interest | None) -> AsyncIterator[int]:
    """One listening connection, until it ends. A notification that concerns the reader,
    or the connection's end, sets ``rung``; many notifications before the reader wakes
    are one ring, of the highest head among them."""
    conn = await asyncpg.connect(dsn)
    rung = asyncio.Event()
    highest = [0]

    def heard(_conn: object, _pid: int, _channel: str, payload: str) -> None:
        head = _heard(payload, interest)
        if head is not None:
            highest[0] = max(highest[0], head)
            rung.set()

    conn.add_termination_listener(lambda _conn: rung.set())
    try:
        await conn.add_listener(CHANNEL, heard)
        yield 0  # what was committed while nobody listened is folded now
        while True:
            await rung.wait()
            rung.clear()
            if conn.is_closed():
                return
            yield highest[0]
    finally:
        with contextlib.suppress(Exception):
            await conn.close(timeout=2)
