"""One contract for the event store, run against SQLite and PostgreSQL alike."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import apsw
import pytest
from alembic import command
from sqlalchemy import text

from muster.core.codec import DecodeError
from muster.core.events import (
    BareEnvelope,
    Envelope,
    Event,
    FoldEnvelope,
    NewEvent,
    StreamAppend,
    decode_payload,
    event_class,
    upcaster,
)
from muster.core.events import node as nev
from muster.core.events import timer as tev
from muster.core.queueing.decider import QueueDecider
from muster.core.runner import DeciderRunner
from muster.runtime import admin
from muster.store import ConcurrencyConflict, SqlEventStore, Tracking
from muster.store.migrate import alembic_config, upgrade_async
from muster.store.rows import COLUMNS, fold_items
from muster.store.sql import _pg_versions, _rows_query, plan_for_these_values, switch_to_wal
from muster.store.sqlite_fast import PER_STREAM, stream_versions
from tests.unit.test_core_runner import scenario


def timer(stream: str, deadline: float = 1.0, correlation: str | None = None) -> NewEvent:
    return NewEvent(
        stream_id=stream,
        event=tev.TimerFired(owner="t", deadline=deadline),
        occurred_at=deadline,
        correlation_id=correlation,
    )


async def put(
    store: SqlEventStore,
    stream: str,
    expected: int | None,
    n: int = 1,
    tracking: Tracking | None = None,
) -> list[int]:
    envs = await store.append(
        [StreamAppend(stream, expected, [timer(stream, i) for i in range(n)])],
        producer="test",
        recorded_at=0.0,
        tracking_row=tracking,
    )
    return [e.position for e in envs]


async def test_positions_are_gapless_and_versions_count_per_stream(store: SqlEventStore) -> None:
    assert await put(store, "timer-a", 0, 2) == [1, 2]
    assert await put(store, "timer-b", 0) == [3]
    assert await put(store, "timer-a", 2) == [4]
    stream = await store.read_stream("timer-a")
    assert [e.stream_version for e in stream] == [1, 2, 3]
    assert [e.position for e in stream] == [1, 2, 4]
    assert await store.head() == 4
    assert await store.stream_version("timer-b") == 1


async def test_expected_version_conflict_appends_nothing(store: SqlEventStore) -> None:
    await put(store, "timer-a", 0)
    with pytest.raises(ConcurrencyConflict) as info:
        await store.append(
            [
                StreamAppend("timer-b", 0, [timer("timer-b")]),
                StreamAppend("timer-a", 0, [timer("timer-a")]),
            ],  # stale: a is at version 1
            producer="test",
            recorded_at=0.0,
        )
    assert info.value.expected == 0 and info.value.actual == 1
    assert info.value.retriable
    assert await store.head() == 1  # b's event did not land either
    assert await store.read_stream("timer-b") == []


async def test_tracking_commits_with_the_events_or_not_at_all(store: SqlEventStore) -> None:
    await put(store, "timer-a", 0, tracking=Tracking("queue", 7))
    assert await store.tracking_position("queue") == 7
    with pytest.raises(ConcurrencyConflict):
        await put(store, "timer-a", 0, tracking=Tracking("queue", 9))
    assert await store.tracking_position("queue") == 7
    await store.set_tracking(Tracking("queue", 3))  # never rewinds
    assert await store.tracking_position("queue") == 7
    assert await store.tracking_position("nobody") == 0


async def test_read_all_filters(store: SqlEventStore) -> None:
    await put(store, "timer-a", 0, 3)
    await store.append(
        [StreamAppend("node-x", 0, [timer("node-x", 5.0, "wl-1")])],
        producer="other",
        recorded_at=0.0,
    )
    await put(store, "timer-a", 3)
    assert [e.position for e in await store.read_all(1, limit=2)] == [2, 3]
    assert [e.position for e in await store.read_all(0, until=2)] == [1, 2]
    assert [e.position for e in await store.read_all(0, categories={"node"})] == [4]
    assert [e.position for e in await store.read_all(0, producer="test")] == [1, 2, 3, 5]
    history = await store.read_correlated("wl-1")
    assert [(e.stream_id, e.category, e.producer) for e in history] == [("node-x", "node", "other")]


async def test_read_folding_is_read_all_with_the_bare_types_unread(store: SqlEventStore) -> None:
    """A replay's read (admin.rebuild): the same events as read_all, as much of each as a
    fold reads (FoldEnvelope), and those of the types it folds bare without their payload
    (BareEnvelope)."""
    await put(store, "timer-a", 0, 3)
    await store.append(
        [StreamAppend("node-x", 0, [timer("node-x", 5.0, "wl-1")])],
        producer="other",
        recorded_at=0.0,
    )
    full = await store.read_all(0)
    folded = [
        FoldEnvelope(
            position=e.position,
            event_id=e.event_id,
            stream_id=e.stream_id,
            stream_version=e.stream_version,
            type=e.type,
            occurred_at=e.occurred_at,
            event=e.event,
        )
        for e in full
    ]
    assert await store.read_folding(0) == folded
    assert await store.read_folding(0, bare={"node.lost"}) == folded
    bare = await store.read_folding(1, bare={"timer.fired"}, categories={"timer"}, until=3)
    assert [e.type for e in full[1:3]] == ["timer.fired"] * 2
    assert bare == [BareEnvelope.of(e) for e in full[1:3]]
    assert [e.position for e in await store.read_folding(0, limit=2)] == [1, 2]
    # A step's catch-up: the head with what it reads, also when the last was not its own.
    assert await store.read_folding_to_head(1, categories={"timer"}, bare={"timer.fired"}) == (
        4,
        bare,
    )
    assert await store.read_folding_to_head(0, limit=2) == (4, folded[:2])
    assert await store.read_folding_to_head(1, categories={"config"}) == (4, [])
    assert await store.read_folding_to_head(4) == (4, [])


async def test_read_folding_leaves_unread_the_events_a_field_makes_clock_only(
    store: SqlEventStore,
) -> None:
    """``bare_when`` (the queue's ``clock_only_when``): a provisioning request's node is read
    bare on SQLite (its payload's ``request_id`` is set); an existing node, whose
    ``request_id`` is empty, is read whole. Elsewhere both are read whole (folds the same)."""
    nodes = [
        nev.NodeRegistered(node=name, allocatable={"cpu": 1}, request_id=rid)
        for name, rid in (("n-1", "wl-1-check-1"), ("n-2", ""))
    ]
    await store.append(
        [
            StreamAppend(
                f"node-{e.node}",
                0,
                [NewEvent(stream_id=f"node-{e.node}", event=e, occurred_at=1.0)],
            )
            for e in nodes
        ],
        producer="test",
        recorded_at=0.0,
    )
    read = await store.read_folding(0, bare_when=QueueDecider.clock_only_when)
    assert [type(e) for e in read] == [
        BareEnvelope if store.is_sqlite else FoldEnvelope,
        FoldEnvelope,
    ]
    assert [e.type for e in read] == ["node.registered"] * 2
    assert read[1].event == nodes[1]  # type: ignore[union-attr]


def as_new(env: Envelope) -> NewEvent:
    """A logged event to append again, as its producer first did."""
    return NewEvent(
        stream_id=env.stream_id,
        event=env.event,
        occurred_at=env.occurred_at,
        causation_id=env.causation_id,
        correlation_id=env.correlation_id,
    )


async def test_a_rebuild_equals_the_fold_of_what_was_appended(store: SqlEventStore) -> None:
    """admin.rebuild (read_folding, the queue's clock-only events bare) ends where a fold
    of the appended envelopes does, on either store."""
    log = scenario().log.envelopes
    appended = []
    for env in log:  # one append each, in log order: the same positions
        appended += await store.append(
            [StreamAppend(env.stream_id, None, [as_new(env)])],
            producer=env.producer,
            recorded_at=0.0,
        )
    assert any(e.type in QueueDecider.clock_only for e in appended)
    rebuilt = await admin.rebuild(store, QueueDecider())
    folded: DeciderRunner[Any] = DeciderRunner(QueueDecider())
    folded.fold(appended)
    assert rebuilt.position == folded.position == len(log)
    assert rebuilt.snapshot() == folded.snapshot()
    half = await admin.rebuild(store, QueueDecider(), until_position=len(log) // 2)
    assert half.position == len(log) // 2


@pytest.mark.parametrize("batch", [1, 7, 40])
async def test_a_rebuild_read_in_small_batches_is_the_same_fold(
    store: SqlEventStore, batch: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A rebuild reads ``REPLAY_BATCH`` rows at a time (small, for the cache): wherever a
    batch ends (a bare run, a stream's events, a reservation and its admission split
    across two reads), the state, position, versions and last event id are the fold's."""
    log = scenario().log.envelopes
    appended = await store.append(
        [StreamAppend(env.stream_id, None, [as_new(env)]) for env in log],
        producer="queue",
        recorded_at=0.0,
    )
    assert len(appended) > 2 * batch  # several reads, the last one short
    folded: DeciderRunner[Any] = DeciderRunner(QueueDecider())
    folded.fold(appended)
    monkeypatch.setattr(admin, "REPLAY_BATCH", batch)
    rebuilt = await admin.rebuild(store, QueueDecider())
    assert rebuilt.position == folded.position == len(log)
    assert rebuilt.snapshot() == folded.snapshot()
    cut = len(log) // 2 + 1
    assert (await admin.rebuild(store, QueueDecider(), until_position=cut)).position == cut


async def test_envelope_round_trips(store: SqlEventStore) -> None:
    new = NewEvent(
        stream_id="timer-q",
        event=tev.TimerFired(owner="queue", deadline=12.5),
        occurred_at=12.5,
        causation_id="c-1",
        correlation_id="w-1",
    )
    [appended] = await store.append(
        [StreamAppend("timer-q", 0, [new])], producer="queue", recorded_at=99.0
    )
    [read] = await store.read_all(0)
    assert read == appended
    assert read.event == tev.TimerFired(owner="queue", deadline=12.5)
    assert (read.causation_id, read.correlation_id, read.producer) == ("c-1", "w-1", "queue")
    assert (read.occurred_at, read.recorded_at, read.schema_version) == (12.5, 99.0, 1)


async def test_appended_rows_are_stored_column_by_column_as_planned(
    store: SqlEventStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The rows an append stores, every column's value and (SQLite) storage class, for
    streams of two categories, one named twice in a batch, ids absent and present; and the
    envelopes it returns are what a read of those rows gives."""
    ids = iter(f"e-{i}" for i in range(1, 100))
    monkeypatch.setattr("muster.store.rows.new_event_id", lambda: next(ids))
    lost = NewEvent(
        stream_id="node-n1",
        event=nev.NodeRemoved(node="n1", reason="gone"),
        occurred_at=7.25,
        causation_id="c-9",
    )
    batch = [
        StreamAppend("timer-a", 0, [timer("timer-a", 1.0, "w-1"), timer("timer-a", 2.5)]),
        StreamAppend("node-n1", None, [lost]),
        StreamAppend("timer-a", None, [timer("timer-a", 3.0)]),
    ]
    appended = await store.append(batch, producer="queue", recorded_at=99.5)
    timer_json = '{{"owner":"t","deadline":{}}}'
    assert await _stored_rows(store) == [
        (1, "e-1", "timer-a", "timer", 1, "timer.fired", 1, 1.0, 99.5, None, "w-1", "queue",
         timer_json.format(1.0)),
        (2, "e-2", "timer-a", "timer", 2, "timer.fired", 1, 2.5, 99.5, None, None, "queue",
         timer_json.format(2.5)),
        (3, "e-3", "node-n1", "node", 1, "node.removed", 1, 7.25, 99.5, "c-9", None, "queue",
         '{"node":"n1","reason":"gone"}'),
        (4, "e-4", "timer-a", "timer", 3, "timer.fired", 1, 3.0, 99.5, None, None, "queue",
         timer_json.format(3.0)),
    ]  # fmt: skip
    if store.is_sqlite:
        head = ("integer", "text", "text", "text", "integer", "text", "integer", "real", "real")
        assert await _stored_rows(store, "typeof") == [
            (*head, "text" if i == 3 else "null", "text" if i == 1 else "null", "text", "text")
            for i in range(1, 5)
        ]
    assert await store.read_all(0) == appended


async def _stored_rows(store: SqlEventStore, fn: str = "") -> list[tuple[Any, ...]]:
    columns = ", ".join(f"{fn}({c})" for c in COLUMNS)
    query = text(f"SELECT {columns} FROM events ORDER BY position")
    return await store._read(lambda conn: [tuple(row) for row in conn.execute(query)])


async def test_batched_append_spans_streams_in_one_transaction(store: SqlEventStore) -> None:
    batch = [
        StreamAppend(f"timer-{i}", 0, [timer(f"timer-{i}", j) for j in range(5)]) for i in range(20)
    ]
    envs = await store.append(batch, producer="test", recorded_at=0.0)
    assert [e.position for e in envs] == list(range(1, 101))
    assert len(await store.read_all(0)) == 100


async def test_versions_are_checked_per_stream_across_many_streams(store: SqlEventStore) -> None:
    """More streams than one versions query takes (500): each stream's version is its own,
    a stream named twice in one batch counts on, and a stale expectation anywhere in the
    batch appends nothing."""
    await put(store, "timer-long", 0, 40)
    await put(store, "timer-599", 0, 2)
    batch = [StreamAppend(f"timer-{i}", None, [timer(f"timer-{i}")]) for i in range(600)]
    batch += [StreamAppend("timer-long", 40, [timer("timer-long")])]
    batch += [StreamAppend("timer-long", None, [timer("timer-long")])]
    envs = await store.append(batch, producer="test", recorded_at=0.0)
    versions = {(e.stream_id, e.stream_version) for e in envs}
    assert ("timer-0", 1) in versions and ("timer-599", 3) in versions
    assert ("timer-long", 41) in versions and ("timer-long", 42) in versions
    head = await store.head()
    stale = [StreamAppend(f"timer-{i}", 1, [timer(f"timer-{i}")]) for i in range(598)]
    stale += [StreamAppend("timer-599", 2, [timer("timer-599")])]  # at 3 now
    with pytest.raises(ConcurrencyConflict) as info:
        await store.append(stale, producer="test", recorded_at=0.0)
    assert (info.value.stream_id, info.value.expected, info.value.actual) == ("timer-599", 2, 3)
    assert await store.head() == head


@pytest.mark.parametrize("of", sorted(PER_STREAM))
async def test_an_append_reads_a_streams_version_in_steps_its_length_does_not_grow(
    sqlite_store: SqlEventStore, of: str
) -> None:
    """The version check seeks each stream's last entry: the queue's admission stream holds
    ~2 events a workload, and a read of all of them (``GROUP BY`` with ``max``) grew every
    queue append with the log (bench/README.md, wip-qa). So do the reads of its last
    event's position (``folded_to``) and of its version as of a position (a few events
    back)."""
    await put(sqlite_store, "timer-short", 0, 2)
    await put(sqlite_store, "timer-long", 0, 3000)
    await put(sqlite_store, "timer-short", 2, 1)  # 3 events on: at 3001 version 2 of each
    assert sqlite_store._fast is not None
    conn = apsw.Connection(sqlite_store._fast.path)  # the store's copy of SQLite, as it must
    steps = 0
    at = 3001 if of == "version_at" else None
    expected = {
        "version": {"timer-short": 3, "timer-long": 3000},
        "end": {"timer-short": 3003, "timer-long": 3002},
        "version_at": {"timer-short": 2, "timer-long": 2999},
    }[of]

    def count() -> int:
        nonlocal steps
        steps += 1
        return 0

    stream_versions(conn, ["timer-short"], of, at)  # the statement prepared
    conn.set_progress_handler(count, 1)  # counts SQLite's VM steps
    try:
        for stream in ("timer-short", "timer-long"):
            steps = 0
            assert stream_versions(conn, [stream], of, at) == {stream: expected[stream]}
            if stream == "timer-short":
                short = steps
        assert steps <= short + 5, (short, steps)
    finally:
        conn.close()


async def test_an_append_as_of_a_position_is_refused_once_the_stream_moved_past_it(
    store: SqlEventStore,
) -> None:
    """``folded_to`` (a decider that let go of a stream's version): refused, with nothing
    appended, exactly when the stream has an event past the position; a new stream, or one
    unmoved since, takes it; ``stream_versions(at=)`` reads what was folded through there."""
    await put(store, "timer-a", 0, 2)  # 1, 2
    await put(store, "timer-b", 0)  # 3
    assert await store.stream_versions(["timer-a", "timer-b", "timer-c"], at=2) == {"timer-a": 2}
    head = await store.head()
    with pytest.raises(ConcurrencyConflict) as info:
        await store.append(
            [
                StreamAppend("timer-c", None, [timer("timer-c")], folded_to=2),  # new
                StreamAppend("timer-b", None, [timer("timer-b")], folded_to=2),  # moved at 3
            ],
            producer="test",
            recorded_at=0.0,
        )
    assert (info.value.stream_id, info.value.expected, info.value.actual) == ("timer-b", None, 1)
    assert await store.head() == head and await store.read_stream("timer-c") == []
    envs = await store.append(
        [
            StreamAppend("timer-c", None, [timer("timer-c")], folded_to=2),
            StreamAppend("timer-b", None, [timer("timer-b")], folded_to=3),
            StreamAppend("timer-a", None, [timer("timer-a")], folded_to=3),
        ],
        producer="test",
        recorded_at=0.0,
    )
    assert [(e.stream_id, e.stream_version) for e in envs] == [
        ("timer-c", 1),
        ("timer-b", 2),
        ("timer-a", 3),
    ]


@pytest.mark.parametrize("of", sorted(PER_STREAM))
async def test_postgres_reads_a_streams_version_from_one_index_entry(
    postgres_url: str, of: str
) -> None:
    """PostgreSQL answers the version check from each stream's last index entry (``GROUP BY``
    with ``max`` scanned every entry: 94 ms at 200,000, the queue's admission stream of a
    1M log). The executed plan reads one row per stream, however long the stream."""
    store = SqlEventStore(postgres_url)
    try:
        await put(store, "timer-long", 0, 2000)
        await put(store, "timer-short", 0, 2)

        def plan(conn: Any) -> Any:
            conn.execute(text("ANALYZE events"))
            sql = "EXPLAIN (ANALYZE, FORMAT JSON) " + str(_pg_versions(of))
            bound = {"ids": ["timer-long", "timer-short"], "at": 2001}
            return conn.execute(text(sql), bound).scalar_one()

        def scanned(node: dict[str, Any]) -> int:
            own = node["Actual Rows"] * node["Actual Loops"] if "Scan" in node["Node Type"] else 0
            return own + sum(scanned(child) for child in node.get("Plans", []))

        tree = await store._write(plan)
        assert scanned(tree[0]["Plan"]) <= 4, tree  # two ids unnested, one entry each
        assert await store.stream_version("timer-long") == 2000
    finally:
        await store.close()


def _pg_rows_read(node: dict[str, Any]) -> int:
    """Rows an executed PostgreSQL plan read from tables and indexes, filtered ones too."""
    own = 0
    if "Scan" in node["Node Type"]:
        own = (node["Actual Rows"] + node.get("Rows Removed by Filter", 0)) * node["Actual Loops"]
    return own + sum(_pg_rows_read(child) for child in node.get("Plans", []))


async def test_postgres_relay_reads_a_quiet_producers_rows_from_its_index(
    postgres_url: str,
) -> None:
    """A relay reads back its producer's rows after its own last one. With one plan for
    any parameters (a prepared statement's generic plan, which PostgreSQL may keep from
    its sixth run), the old query walked the primary key from there and filtered by
    producer: every row the other services wrote since (1M-event log: 1,014,365 rows).
    The positions come from the producer's own index entries, whichever the plan."""
    store = SqlEventStore(postgres_url)
    try:
        (quiet,) = [
            env.position
            for env in await store.append(
                [StreamAppend("timer-quiet", 0, [timer("timer-quiet")])],
                producer="quiet",
                recorded_at=0.0,
            )
        ]
        for i in range(6):
            loud = [timer("timer-loud", n) for n in range(500)]
            await store.append(
                [StreamAppend("timer-loud", i * 500, loud)], producer="loud", recorded_at=0.0
            )
        query = _rows_query(1000, False, None, True)  # what read_rows runs for a relay

        def plan(conn: Any) -> Any:
            conn.execute(text("ANALYZE events"))
            compiled = query.compile(dialect=conn.dialect)
            conn.exec_driver_sql(f"PREPARE relay_read AS {compiled}")
            # As PostgreSQL may come to plan a statement asyncpg prepared; then the store's
            # own setting for the relay's read.
            conn.exec_driver_sql("SET plan_cache_mode = force_generic_plan")
            plan_for_these_values(conn)
            try:
                sql = f"EXPLAIN (ANALYZE, FORMAT JSON) EXECUTE relay_read({quiet}, 'quiet', 1000)"
                return conn.exec_driver_sql(sql).scalar_one()
            finally:
                conn.exec_driver_sql("DEALLOCATE relay_read")
                conn.exec_driver_sql("RESET plan_cache_mode")

        tree = await store._write(plan)
        assert _pg_rows_read(tree[0]["Plan"]) <= 2, tree  # none after its own: nothing read
        assert await store.read_rows(quiet, producer="quiet") == []
        assert [row[0] for row in await store.read_rows(0, producer="quiet")] == [quiet]
        assert len(await store.read_rows(quiet, producer="loud", limit=1000)) == 1000
    finally:
        await store.close()


async def test_applying_configuration_reads_each_streams_last_event_only(
    store: SqlEventStore,
) -> None:
    """``apply`` compares each configuration event with its stream's last one: it read
    (and decoded) the whole stream, one event more for each change ever applied."""
    for deadline in range(1, 301):
        assert await admin.apply_events(store, [timer("timer-config", float(deadline))])
    real_read_stream = store.read_stream
    rows_read = 0

    async def read_stream(stream_id: str, after_version: int = 0) -> Any:
        nonlocal rows_read
        found = await real_read_stream(stream_id, after_version)
        rows_read += len(found)
        return found

    store.read_stream = read_stream  # type: ignore[method-assign]
    assert await admin.apply_events(store, [timer("timer-config", 300.0)]) == []  # unchanged
    assert rows_read == 1
    changed = await admin.apply_events(store, [timer("timer-config", 301.0)])
    assert [env.stream_version for env in changed] == [301]
    assert rows_read == 2


async def test_first_events_reads_what_created_each_stream(store: SqlEventStore) -> None:
    await put(store, "timer-a", 0, 3)
    await put(store, "timer-b", 0)
    names = [f"timer-{i}" for i in range(1200)]  # more than one IN list's worth
    found = await store.first_events(["timer-a", "timer-b", "timer-none", *names])
    assert sorted(found) == ["timer-a", "timer-b"]
    assert found["timer-a"].stream_version == 1 and found["timer-a"].position == 1


async def test_concurrent_writers_get_distinct_gapless_positions(store_url: str) -> None:
    stores = [SqlEventStore(store_url) for _ in range(4)]
    try:

        async def writer(i: int) -> None:
            for j in range(10):
                await put(stores[i], f"timer-w{i}", j)

        await asyncio.gather(*(writer(i) for i in range(4)))
        envs = await stores[0].read_all(0)
        assert [e.position for e in envs] == list(range(1, 41))
        for i in range(4):
            assert [e.stream_version for e in envs if e.stream_id == f"timer-w{i}"] == list(
                range(1, 11)
            )
    finally:
        for s in stores:
            await s.close()


async def test_racing_appends_to_one_stream_let_exactly_one_win(store_url: str) -> None:
    stores = [SqlEventStore(store_url) for _ in range(3)]
    try:
        results = await asyncio.gather(
            *(put(s, "timer-race", 0) for s in stores), return_exceptions=True
        )
        assert sum(isinstance(r, list) for r in results) == 1, results
        assert sum(isinstance(r, ConcurrencyConflict) for r in results) == 2, results
    finally:
        for s in stores:
            await s.close()


def test_the_switch_to_wal_waits_out_a_lock_the_busy_timeout_would_not(tmp_path: Path) -> None:
    """A file Alembic created is not in WAL yet (``migrate`` switches it next), and
    connections switching it together deadlock; SQLite answers one "database is locked" at
    once, as with no busy timeout (here: none set, and another connection reading). The
    switch waits for the lock to go instead."""
    path = tmp_path / "fresh.db"
    command.upgrade(alembic_config(f"sqlite:///{path}"), "head")
    reader = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    switcher = sqlite3.connect(path, isolation_level=None, timeout=0)
    try:
        reader.execute("BEGIN")
        reader.execute("SELECT count(*) FROM events").fetchall()  # holds a shared lock
        with pytest.raises(sqlite3.OperationalError, match="locked"):
            switch_to_wal(switcher.cursor(), attempts=1)
        released = threading.Timer(0.2, reader.rollback)
        released.start()
        switch_to_wal(switcher.cursor())
        released.join()
        assert switcher.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    finally:
        reader.close()
        switcher.close()


async def test_events_are_never_updated_or_deleted(store: SqlEventStore) -> None:
    await put(store, "timer-a", 0)
    for statement in ("UPDATE events SET payload = '{}'", "DELETE FROM events"):
        with pytest.raises(Exception, match="append-only"):
            await store._write(lambda conn, sql=statement: conn.execute(text(sql)))
    assert len(await store.read_all(0)) == 1


async def test_snapshots_replace_and_load(store: SqlEventStore) -> None:
    assert await store.load_snapshot("queue") is None
    await store.save_snapshot("queue", 5, "v1", b"one")
    await store.save_snapshot("queue", 9, "v1", b"two")
    assert await store.load_snapshot("queue") == (9, "v1", b"two")


async def test_snapshot_history_keeps_several_and_finds_the_newest_before(
    store: SqlEventStore,
) -> None:
    for position, at in ((10, 100.0), (20, 200.0), (30, 300.0)):
        await store.save_history_snapshot("queue", position, at, "v1", f"s{position}".encode())
    await store.save_history_snapshot("queue", 20, 200.0, "v1", b"again")  # kept as it was
    await store.save_history_snapshot("queue", 25, 250.0, "v0", b"old format")
    assert await store.load_history_snapshot("queue", "v1", position=29) == (20, b"s20")
    assert await store.load_history_snapshot("queue", "v1", at=299.0) == (20, b"s20")
    assert await store.load_history_snapshot("queue", "v1") == (30, b"s30")
    assert await store.load_history_snapshot("queue", "v1", position=9) is None
    assert await store.load_history_snapshot("other", "v1") is None
    await store.save_history_snapshot("queue", 35, 350.0, "v1", b"s35", spacing=10)  # near 30
    assert await store.load_history_snapshot("queue", "v1", position=39) == (30, b"s30")
    await store.save_history_snapshot("queue", 40, 400.0, "v1", b"s40", keep=2)
    assert await store.load_history_snapshot("queue", "v1", position=29) is None
    assert await store.load_history_snapshot("queue", "v1", position=39) == (30, b"s30")


async def test_a_history_snapshot_replaces_one_of_an_older_format_at_its_position(
    store: SqlEventStore,
) -> None:
    """After a state's shape changed (a new snapshot format), the old rows must not keep
    the new ones out: they land at the same positions (read batches, the same spacing)."""
    await store.save_history_snapshot("queue", 10, 100.0, "v1", b"old")
    await store.save_history_snapshot("queue", 10, 100.0, "v2", b"new")
    assert await store.load_history_snapshot("queue", "v2", position=10) == (10, b"new")
    assert await store.load_history_snapshot("queue", "v1", position=10) is None
    await store.save_history_snapshot("queue", 10, 100.0, "v2", b"again")  # same format: kept
    assert await store.load_history_snapshot("queue", "v2", position=10) == (10, b"new")


async def test_migrations_are_idempotent(store_url: str) -> None:
    await upgrade_async(store_url)  # the fixture already ran it once
    s = SqlEventStore(store_url)
    try:
        assert await s.head() == 0
    finally:
        await s.close()


@event_class("test.renamed_field", version=2)
@dataclass(frozen=True, slots=True, kw_only=True)
class RenamedField(Event):
    gpus: int


@upcaster("test.renamed_field", from_version=1)
def _v1_to_v2(payload: dict[str, object]) -> dict[str, object]:
    return {"gpus": payload["accelerators"]}


def test_old_schema_versions_are_upcast_on_read() -> None:
    event = decode_payload("test.renamed_field", 1, {"accelerators": 8})
    assert event == RenamedField(gpus=8)
    assert decode_payload("test.renamed_field", 2, {"gpus": 4}) == RenamedField(gpus=4)


def test_fold_items_decode_each_row_by_its_own_schema_version() -> None:
    """A replay's rows (``fold_items``, one decoder looked up per type): a row of an older
    schema version is upcast, the current one decoded as it is, and a payload the typed
    decoder refuses fails with the field named (through ``decode_json``), not skipped."""
    row = (1, "e-1", "test-1", 1, "test.renamed_field", 1, 2.0, '{"accelerators": 8}')
    read = fold_items([row, (2, "e-2", "test-1", 2, "test.renamed_field", 2, 3.0, '{"gpus": 4}')])
    assert [e.event for e in read] == [RenamedField(gpus=8), RenamedField(gpus=4)]  # type: ignore[union-attr]
    assert read[1] == FoldEnvelope(
        position=2,
        event_id="e-2",
        stream_id="test-1",
        stream_version=2,
        type="test.renamed_field",
        occurred_at=3.0,
        event=RenamedField(gpus=4),
    )
    with pytest.raises(DecodeError, match="gpus"):
        fold_items([(3, "e-3", "test-1", 3, "test.renamed_field", 2, 4.0, '{"gpus": "x"}')])
