"""Migration 0003: a SQLite store written at 0002 keeps every event, in order and equal, its
guards (append-only triggers, unique stream versions and event ids), and reads by the
indexes its queries need; PostgreSQL's schema is left as it was."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

import pytest
from alembic import command
from sqlalchemy import text
from sqlalchemy.ext.asyncio import create_async_engine

from muster.core.events import Envelope, NewEvent, StreamAppend
from muster.core.events import timer as tev
from muster.store import SqlEventStore
from muster.store.migrate import alembic_config, upgrade
from muster.store.sql import normalise_url


def _timer(stream: str, deadline: float, correlation: str | None) -> NewEvent:
    return NewEvent(
        stream_id=stream,
        event=tev.TimerFired(owner="t", deadline=deadline),
        occurred_at=deadline,
        correlation_id=correlation,
        causation_id=f"cause-{deadline}",
    )


async def _written_at_0002(path: Path) -> tuple[str, list[Envelope]]:
    """A store at revision 0002 holding events of several streams, producers and
    correlations (each append one producer's), as a service would have written them."""
    url = f"sqlite:///{path}"
    await asyncio.to_thread(command.upgrade, alembic_config(url), "0002")
    store = SqlEventStore(url)
    try:
        for i in range(40):
            stream = f"timer-{i % 7}"
            events = [_timer(stream, float(i), f"wl-{i % 5}")] * (1 + i % 3)
            await store.append(
                [StreamAppend(stream, None, events)],
                producer=("intake", "queue", "node-agent")[i % 3],
                recorded_at=1000.0 + i,
            )
        return url, await store.read_all(0)
    finally:
        await store.close()


def _sql(path: Path, query: str, *args: object) -> list[tuple[object, ...]]:
    conn = sqlite3.connect(path)
    try:
        return conn.execute(query, args).fetchall()
    finally:
        conn.close()


async def test_upgrade_keeps_every_event_and_makes_position_the_rowid(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    url, before = await _written_at_0002(path)
    assert len(before) > 70
    assert _sql(path, "SELECT name FROM sqlite_master WHERE name = 'sqlite_autoindex_events_1'")

    await asyncio.to_thread(upgrade, url)

    store = SqlEventStore(url)
    try:
        assert await store.read_all(0) == before  # every column of every event, in order
        assert await store.head() == before[-1].position
        assert [e.stream_version for e in await store.read_stream("timer-3")] == list(
            range(1, 1 + sum(1 for e in before if e.stream_id == "timer-3"))
        )
        # Appends go on from the head, through both drivers' paths.
        more = await store.append(
            [StreamAppend("timer-3", None, [_timer("timer-3", 99.0, "wl-1")])],
            producer="queue",
            recorded_at=2000.0,
        )
        assert more[0].position == before[-1].position + 1
        correlated = await store.read_correlated("wl-1")
        assert [e.position for e in correlated] == [
            e.position for e in [*before, *more] if e.correlation_id == "wl-1"
        ]
        mine = await store.read_rows(0, producer="node-agent")
        assert [r[0] for r in mine] == [e.position for e in before if e.producer == "node-agent"]
    finally:
        await store.close()

    # position is exactly INTEGER PRIMARY KEY: the rowid, with no index of its own.
    columns = {row[1]: row for row in _sql(path, "PRAGMA table_info(events)")}
    assert columns["position"][2] == "INTEGER" and columns["position"][5] == 1
    assert _sql(path, "SELECT max(rowid) = max(position) FROM events") == [(1,)]
    names = {row[0] for row in _sql(path, "SELECT name FROM sqlite_master WHERE tbl_name='events'")}
    assert names == {
        "events",
        "uq_events_stream_version",
        "uq_events_event_id",
        "ix_events_correlation",
        "ix_events_producer_position",
        "events_no_update",
        "events_no_delete",
    }
    assert _sql(path, "SELECT version_num FROM alembic_version") == [("0003",)]


async def test_upgraded_store_keeps_its_guards(tmp_path: Path) -> None:
    """Append-only, one event a stream version, one event an id: as at 0001."""
    path = tmp_path / "old.db"
    url, before = await _written_at_0002(path)
    await asyncio.to_thread(upgrade, url)
    first = before[0]
    conn = sqlite3.connect(path)
    try:
        for refused in (
            "UPDATE events SET payload = '{}' WHERE position = 1",
            "DELETE FROM events WHERE position = 1",
        ):
            with pytest.raises(sqlite3.IntegrityError, match="append-only"):
                conn.execute(refused)
        row = "(?, ?, ?, 'timer', ?, 'timer.fired', 1, 0, 0, NULL, NULL, 'p', '{}')"
        insert = f"INSERT INTO events VALUES {row}"
        with pytest.raises(sqlite3.IntegrityError, match=r"stream_id, events\.stream_version"):
            conn.execute(insert, (10_000, "fresh-id", first.stream_id, first.stream_version))
        with pytest.raises(sqlite3.IntegrityError, match=r"events\.event_id"):
            conn.execute(insert, (10_000, first.event_id, "timer-new", 1))
        with pytest.raises(sqlite3.IntegrityError, match=r"events\.position"):
            conn.execute(insert, (first.position, "fresh-id", "timer-new", 1))
    finally:
        conn.close()


def test_queries_use_the_kept_indexes(tmp_path: Path) -> None:
    """What each kept index is for (migration 0003's list), as SQLite plans it."""
    path = tmp_path / "new.db"
    upgrade(f"sqlite:///{path}")

    def plan(query: str) -> str:
        return " ".join(str(row[3]) for row in _sql(path, f"EXPLAIN QUERY PLAN {query}"))

    tail = "SELECT * FROM events WHERE position > 5 AND +category IN ('a', 'b') ORDER BY position"
    assert "INTEGER PRIMARY KEY (rowid>?)" in plan(tail)
    relay = "SELECT * FROM events WHERE position > 5 AND producer = 'q' ORDER BY position"
    assert "INDEX ix_events_producer_position (producer=? AND rowid>?)" in plan(relay)
    history = "SELECT * FROM events WHERE correlation_id = 'w' AND position > 5 ORDER BY position"
    assert "INDEX ix_events_correlation (correlation_id=? AND rowid>?)" in plan(history)
    versions = (
        "SELECT stream_id, max(stream_version) FROM events "
        "WHERE stream_id IN ('a', 'b') GROUP BY stream_id"
    )
    assert "INDEX uq_events_stream_version" in plan(versions)
    assert "TEMP B-TREE" not in plan(tail) + plan(relay) + plan(history)


async def test_a_failed_upgrade_leaves_the_old_table(tmp_path: Path) -> None:
    """The rebuild is one transaction: failing after the old table was dropped (here an
    index's name is taken) rolls everything back, and the next attempt goes through."""
    path = tmp_path / "old.db"
    url, before = await _written_at_0002(path)
    _sql(path, "CREATE TABLE uq_events_event_id (x)")
    with pytest.raises(Exception, match="uq_events_event_id"):
        await asyncio.to_thread(upgrade, url)
    assert _sql(path, "SELECT version_num FROM alembic_version") == [("0002",)]
    assert _sql(path, "SELECT count(*) FROM events") == [(len(before),)]
    assert _sql(path, "SELECT name FROM sqlite_master WHERE name = 'ix_events_category_position'")

    _sql(path, "DROP TABLE uq_events_event_id")
    await asyncio.to_thread(upgrade, url)
    store = SqlEventStore(url)
    try:
        assert await store.read_all(0) == before
    finally:
        await store.close()


async def test_downgrade_to_0002_restores_the_old_table(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    url, before = await _written_at_0002(path)
    await asyncio.to_thread(upgrade, url)
    await asyncio.to_thread(command.downgrade, alembic_config(url), "0002")
    columns = {row[1]: row for row in _sql(path, "PRAGMA table_info(events)")}
    assert columns["position"][2] == "BIGINT"
    assert _sql(path, "SELECT name FROM sqlite_master WHERE name = 'ix_events_category_position'")
    store = SqlEventStore(url)
    try:
        assert await store.read_all(0) == before
    finally:
        await store.close()


@pytest.mark.postgres
async def test_postgresql_schema_is_unchanged(postgres_url: str) -> None:
    """0003 is SQLite's alone: PostgreSQL keeps its BIGINT primary key and every index."""
    engine = create_async_engine(normalise_url(postgres_url))
    try:
        async with engine.connect() as conn:
            version = (await conn.execute(text("SELECT version_num FROM alembic_version"))).scalar()
            position = (
                await conn.execute(
                    text(
                        "SELECT data_type FROM information_schema.columns "
                        "WHERE table_name = 'events' AND column_name = 'position'"
                    )
                )
            ).scalar()
            indexes = {
                row[0]
                for row in await conn.execute(
                    text("SELECT indexname FROM pg_indexes WHERE tablename = 'events'")
                )
            }
    finally:
        await engine.dispose()
    assert version == "0003"
    assert position == "bigint"
    assert {
        "ix_events_category_position",
        "ix_events_correlation",
        "ix_events_producer_position",
        "uq_events_stream_version",
    } <= indexes


async def test_a_migrated_file_is_in_wal_mode(tmp_path: Path) -> None:
    """Migrating leaves the file in WAL mode, so even a store whose first call is an append
    (the stdlib driver's path, which switches nothing) commits to the WAL, with no
    journal's fsyncs; a file migrated before (rollback journal) is switched too."""
    old = tmp_path / "old.db"
    await asyncio.to_thread(command.upgrade, alembic_config(f"sqlite:///{old}"), "0002")
    assert _sql(old, "PRAGMA journal_mode") == [("delete",)]
    await asyncio.to_thread(upgrade, f"sqlite:///{old}")
    assert _sql(old, "PRAGMA journal_mode") == [("wal",)]

    path = tmp_path / "fresh.db"
    url = f"sqlite:///{path}"
    await asyncio.to_thread(upgrade, url)
    assert _sql(path, "PRAGMA journal_mode") == [("wal",)]
    store = SqlEventStore(url)
    try:
        await store.append(
            [StreamAppend("timer-a", 0, [_timer("timer-a", 1.0, None)])],
            producer="test",
            recorded_at=0.0,
        )
        assert (tmp_path / "fresh.db-wal").stat().st_size > 0  # the append went to the WAL
    finally:
        await store.close()
