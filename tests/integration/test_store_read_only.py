"""A store on a SQLite file goes through apsw alone; a read-only one
(``SqlEventStore(read_only=True)``: ``muster replay``, ``bench.replay``) reads exactly as a
writable one does, and refuses writes."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import exc as sa_exc

from muster.core.decider import clock_only, clock_only_when
from muster.core.events import StreamAppend
from muster.core.queueing.decider import QueueDecider
from muster.runtime import admin
from muster.store import SqlEventStore, Tracking
from muster.store.errors import ReadOnlyStore
from muster.store.migrate import upgrade_async
from tests.integration.test_store_contract import as_new, timer
from tests.unit.test_core_runner import scenario


async def _write_scenario(url: str) -> None:
    """The queue scenario's log, one append an event, then the store closed: a process
    opens a file with one copy of SQLite at a time (store/sqlite_fast.py)."""
    store = SqlEventStore(url)
    try:
        for env in scenario().log.envelopes:
            await store.append(
                [StreamAppend(env.stream_id, None, [as_new(env)])],
                producer=env.producer,
                recorded_at=0.0,
            )
    finally:
        await store.close()


async def _reads(store: SqlEventStore) -> list[Any]:
    """Every read a rebuild, a catch-up or a relay makes, with several shapes of question."""
    decider = QueueDecider()
    bare, when = clock_only(decider), clock_only_when(decider)
    head = await store.head()
    return [
        head,
        await store.read_rows(0),
        await store.read_rows(3, limit=5, until=head - 2, producer="queue"),
        await store.read_all(0, categories=decider.categories),
        await store.read_folding(0, categories=decider.categories, bare=bare, bare_when=when),
        await store.read_folding(2, limit=7, until=head - 1, bare=bare),
        await store.read_folding_to_head(1, categories=decider.categories, bare=bare),
        (await admin.rebuild(store, QueueDecider())).snapshot(),
        (await admin.rebuild(store, QueueDecider(), until_position=head // 2)).snapshot(),
    ]


async def test_a_read_only_store_reads_what_a_writable_one_does(store_url: str) -> None:
    """Rows (their values and value types), envelopes, the fold's items and a rebuilt state
    are the same through the read-only store as through the writable one; on SQLite its
    reader is apsw's."""
    await _write_scenario(store_url)
    writable = SqlEventStore(store_url)
    try:
        expected = await _reads(writable)
    finally:
        await writable.close()
    read_only = SqlEventStore(store_url, read_only=True)
    try:
        got = await _reads(read_only)
        if read_only.is_sqlite:
            assert type(read_only._fast._reader).__module__ == "apsw"  # type: ignore[union-attr]
    finally:
        await read_only.close()
    assert got == expected
    rows, expected_rows = got[1], expected[1]
    assert rows and [[type(v) for v in r] for r in rows] == [
        [type(v) for v in r] for r in expected_rows
    ]
    assert {type(v) for r in rows for v in r} <= {int, float, str, type(None)}


async def test_a_store_never_opens_its_sqlite_file_with_the_stdlib_driver(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What makes apsw safe: from opening to closing a store, writable or read-only, through
    appends, tracking, snapshots, every read and a rebuild, the stdlib's SQLite
    (``sqlite3.connect``, which SQLAlchemy's engine calls too) never opens the file beside
    apsw's copy of SQLite."""
    url = f"sqlite:///{tmp_path / 'muster.db'}"
    await upgrade_async(url)  # migrations close their connections before a store opens

    def refuse(*args: Any, **kwargs: Any) -> None:
        raise AssertionError(f"sqlite3.connect{args} beside apsw")

    monkeypatch.setattr(sqlite3, "connect", refuse)
    await _write_scenario(url)
    store = SqlEventStore(url)
    try:
        await store.set_tracking(Tracking("queue", 3))
        await store.save_snapshot("queue", 3, "f", b"x")
        await store.save_history_snapshot("queue", 3, 1.0, "f", b"x", keep=2, spacing=1)
        assert await store.tracking_position("queue") == 3
        assert await store.load_snapshot("queue") == (3, "f", b"x")
        assert await store.load_history_snapshot("queue", "f") == (3, b"x")
        log = await store.read_all(0)
        env = log[0]
        stream = [e for e in log if e.stream_id == env.stream_id]
        assert await store.read_stream(env.stream_id) == stream
        assert await store.read_stream(env.stream_id, after_version=1) == stream[1:]
        firsts = {e.stream_id: e for e in log if e.stream_version == 1}
        assert await store.first_events([*firsts, "none"]) == firsts
        assert await store.stream_version(env.stream_id) == len(stream)
        corr = next(e.correlation_id for e in log if e.correlation_id)
        correlated = [e for e in log if e.correlation_id == corr]
        assert len(correlated) > 2
        assert await store.read_correlated(corr) == correlated
        assert await store.read_correlated(corr, correlated[0].position, limit=1) == [correlated[1]]
    finally:
        await store.close()
    read_only = SqlEventStore(url, read_only=True)
    try:
        assert (await _reads(read_only))[0] == len(scenario().log.envelopes)
        assert await read_only.load_snapshot("queue") == (3, "f", b"x")
    finally:
        await read_only.close()


async def test_a_read_only_store_refuses_writes(store_url: str) -> None:
    """Appends, tracking and snapshots are refused and nothing is written; reads are not."""
    await _write_scenario(store_url)
    store = SqlEventStore(store_url, read_only=True)
    try:
        head = await store.head()
        with pytest.raises(ReadOnlyStore):
            await store.append(
                [StreamAppend("timer-a", None, [timer("timer-a")])],
                producer="t",
                recorded_at=0.0,
            )
        with pytest.raises(ReadOnlyStore):
            await store.set_tracking(Tracking("c", 1))
        with pytest.raises(ReadOnlyStore):
            await store.save_snapshot("queue", 1, "f", b"x")
        with pytest.raises(ReadOnlyStore):
            await store.save_history_snapshot("queue", 1, 1.0, "f", b"x")
        assert await store.load_snapshot("queue") is None
        assert await store.tracking_position("c") == 0
        assert await store.head() == head
    finally:
        await store.close()


async def test_a_read_only_stores_errors_are_the_writable_ones(tmp_path: Path) -> None:
    """A file that is not a database, one without the schema: the same SQLAlchemy error
    classes from both stores (the CLI prints them as one line; ``unavailable`` tells a
    database away from a damaged one by them)."""
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"not a database" * 512)
    empty = tmp_path / "empty.db"
    empty.write_bytes(b"")
    for path, kind in ((junk, sa_exc.DatabaseError), (empty, sa_exc.OperationalError)):
        for read_only in (False, True):
            store = SqlEventStore(f"sqlite:///{path}", read_only=read_only)
            try:
                with pytest.raises(kind) as info:
                    await store.read_all(0)
                assert type(info.value) is kind, (path.name, read_only, info.value)
            finally:
                await store.close()


async def test_a_read_only_store_reads_while_another_process_appends(tmp_path: Path) -> None:
    """A rebuild beside running services: another process appends while the read-only
    store reads; every read is a gapless prefix of the log, and the last one all of it."""
    url = f"sqlite:///{tmp_path / 'muster.db'}"
    await upgrade_async(url)
    writer = textwrap.dedent(
        f"""
        import asyncio
        from muster.store import SqlEventStore
        from tests.integration.test_store_contract import put

        async def main():
            store = SqlEventStore({url!r})
            for i in range(300):
                await put(store, f"timer-{{i % 7}}", None, 3)
            await store.close()

        asyncio.run(main())
        """
    )
    proc = subprocess.Popen([sys.executable, "-c", writer])
    store = SqlEventStore(url, read_only=True)
    try:
        seen = 0
        while True:
            done = proc.poll() is not None
            head, envs = await store.read_folding_to_head(0)
            assert [e.position for e in envs] == list(range(1, head + 1))
            seen = max(seen, head)
            if done:
                break
    finally:
        await store.close()
        proc.wait(timeout=60)
    assert proc.returncode == 0
    assert seen == 900
