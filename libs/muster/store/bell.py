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
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
from collections.abc import AsyncIterator
from pathlib import Path

import asyncpg
import structlog
from sqlalchemy.engine import make_url

log = structlog.get_logger("muster.store.bell")

CHANNEL = "muster_events"
RECONNECT_SECONDS = 1.0


async def rings(url: str) -> AsyncIterator[int]:
    """Yields the head announced by each ring (or burst of rings) of the store at ``url``
    (the async URL ``SqlEventStore.url``); 0 when the head is unknown (a new listening
    connection). Runs until cancelled, riding out a database that goes away."""
    if url.startswith("sqlite"):
        async for head in _file_rings(bell_path(url)):
            yield head
    else:
        async for head in _pg_rings(url):
            yield head


def bell_path(url: str) -> Path:
    database = make_url(url).database
    if not database or database == ":memory:":
        raise ValueError(f"an in-memory SQLite store has no doorbell: {url}")
    # One file however the URL spells the path, so every process rings the same bell.
    return Path(f"{Path(database).resolve()}.bell")


class FileBell:
    """The appending side on SQLite: one open descriptor, one locked write per commit.
    The lock is held for a read and a write of 8 bytes, so waiting for it is brief."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = None

    def ring(self, head: int) -> None:
        if self._fd is None:
            self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        fcntl.lockf(self._fd, fcntl.LOCK_EX)
        try:
            if head > _head_in(self._fd):  # commits in two processes may ring out of order
                os.pwrite(self._fd, head.to_bytes(8, "little"), 0)
        finally:
            fcntl.lockf(self._fd, fcntl.LOCK_UN)

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def _head_in(fd: int) -> int:
    return int.from_bytes(os.pread(fd, 8, 0).ljust(8, b"\0"), "little")


async def _file_rings(path: Path) -> AsyncIterator[int]:
    # Imported here: inotify is Linux's; elsewhere the routine fails, is restarted, and
    # the store poll alone keeps the service moving.
    from asyncinotify import Inotify, Mask

    path.touch(exist_ok=True)
    fd = os.open(path, os.O_RDONLY)
    try:
        with Inotify() as watcher:
            watcher.add_watch(path, Mask.MODIFY)
            yield _head_in(fd)  # what was committed before the watch began
            async for event in watcher:
                if Mask.IGNORED in event.mask:  # the file was removed: watch the new one
                    path.touch(exist_ok=True)
                    os.close(fd)
                    fd = os.open(path, os.O_RDONLY)
                    watcher.add_watch(path, Mask.MODIFY)
                yield _head_in(fd)
    finally:
        os.close(fd)


async def _pg_rings(url: str) -> AsyncIterator[int]:
    dsn = make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)
    while True:
        try:
            async for head in _pg_session(dsn):
                yield head
        except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
            log.warning("doorbell connection failed; reconnecting", error=str(exc))
        await asyncio.sleep(RECONNECT_SECONDS)


async def _pg_session(dsn: str) -> AsyncIterator[int]:
    """One listening connection, until it ends. A notification or the connection's end
    sets ``rung``; many notifications before the reader wakes are one ring, of the
    highest head among them."""
    conn = await asyncpg.connect(dsn)
    rung = asyncio.Event()
    highest = [0]

    def heard(_conn: object, _pid: int, _channel: str, payload: str) -> None:
        with contextlib.suppress(ValueError):
            highest[0] = max(highest[0], int(payload))
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
