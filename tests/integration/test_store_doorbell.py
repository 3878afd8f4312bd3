"""The store's doorbell and SQLite's hot path, on real files and a real PostgreSQL."""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator
from pathlib import Path

import apsw
import asyncpg
import pytest

from muster.core.events import NewEvent, StreamAppend
from muster.core.events import node as nev
from muster.core.events import timer as tev
from muster.core.nodes.decider import NodeAgentDecider
from muster.core.provisioning.decider import ProvisionerDecider
from muster.core.queueing.decider import QueueDecider
from muster.runtime.loop import DeciderLoop, waking
from muster.runtime.metrics import ServiceMetrics
from muster.runtime.settings import load
from muster.store import SqlEventStore, bell
from muster.store.bell import FileBell, Interest, bell_path, notification
from muster.store.migrate import upgrade_async
from muster.store.rows import COLUMNS


def _timers(stream: str, n: int, expected: int | None = 0) -> list[StreamAppend]:
    news = [
        NewEvent(stream_id=stream, event=tev.TimerFired(owner="t", deadline=i), occurred_at=i)
        for i in range(n)
    ]
    return [StreamAppend(stream, expected, news)]


def _removed(node: str, at: float) -> list[StreamAppend]:
    """A commit the node agent wakes for: a node event it does more with than its clock."""
    new = NewEvent(
        stream_id=nev.stream(node), event=nev.NodeRemoved(node=node, reason="t"), occurred_at=at
    )
    return [StreamAppend(nev.stream(node), None, [new])]


def _values(path: Path) -> tuple[int, ...]:
    fd = os.open(path, os.O_RDONLY)
    try:
        return bell._values_in(fd)
    finally:
        os.close(fd)


async def _next(rings: AsyncIterator[int]) -> int:
    async with asyncio.timeout(10):
        return await anext(rings)


async def test_a_commit_rings_every_listener_with_its_head(store_url: str) -> None:
    writer = SqlEventStore(store_url)  # another store: as another process would append
    listening = [bell.rings(writer.url), bell.rings(writer.url)]
    try:
        for rings in listening:
            assert await _next(rings) == 0  # what the store held before the watch began
        appended = await writer.append(_timers("timer-a", 3), producer="t", recorded_at=0.0)
        for rings in listening:
            assert await _next(rings) == appended[-1].position == 3
        appended = await writer.append(_timers("timer-b", 1), producer="t", recorded_at=0.0)
        for rings in listening:
            assert await _next(rings) == 4
    finally:
        for rings in listening:
            await rings.aclose()  # type: ignore[attr-defined]
        await writer.close()


async def test_a_loop_wakes_on_another_writers_commit_without_polling(store_url: str) -> None:
    async with _listening(store_url) as (loop, writer):
        # Whether the listener has begun or not: its first ring reads the head in the file.
        # Another owner's timers only move the node agent's clock: they come along with
        # the commit that concerns it.
        await writer.append(_timers("timer-x", 2), producer="node-agent", recorded_at=0.0)
        await writer.append(_removed("n1", 1.5), producer="node-agent", recorded_at=0.0)
        await _folded_up_to(loop, 3)
        assert loop.runner.state.now == 1.5  # the latest occurred_at, folded


@contextlib.asynccontextmanager
async def _listening(url: str) -> AsyncIterator[tuple[DeciderLoop, SqlEventStore]]:
    """A node agent's loop following the store by its doorbell alone (a poll far longer
    than the test, no Kafka: only the doorbell can wake it), and another writer."""
    store, writer = SqlEventStore(url), SqlEventStore(url)
    settings = load({}, store_url=store.url, kafka_bootstrap="unused:9092", poll_seconds=300)
    loop = DeciderLoop(NodeAgentDecider(), store, settings, ServiceMetrics())
    await loop.restore()
    tasks = [asyncio.create_task(loop.listen_store()), asyncio.create_task(loop.follow())]
    try:
        yield loop, writer
    finally:
        for task in tasks:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await store.close()
        await writer.close()


async def test_a_burst_of_rings_is_heard_at_its_highest_head(tmp_path: Path) -> None:
    """Rings that come while the reader is busy are one wake-up, of the last head: none
    is lost, however many the reader's one read of the inotify descriptor takes in."""
    path = tmp_path / "muster.db.bell"
    rings = bell._file_rings(path, None)
    ringer = FileBell(path)
    try:
        assert await _next(rings) == 0
        for head in range(1, 501):
            ringer.ring(head)
        heard = [await _next(rings)]
        while heard[-1] < 500:
            heard.append(await _next(rings))
        assert heard == sorted(heard) and len(heard) <= 2  # read as they came, then the rest
        ringer.ring(501)
        assert await _next(rings) == 501
    finally:
        await rings.aclose()  # type: ignore[attr-defined]
        ringer.close()


def test_rings_out_of_order_leave_the_highest_head(tmp_path: Path) -> None:
    path = tmp_path / "muster.db.bell"
    first, second = FileBell(path), FileBell(path)  # two processes' appenders
    first.ring(7)
    second.ring(3)  # committed earlier, rang later
    assert int.from_bytes(path.read_bytes(), "little") == 7
    second.ring(9)
    assert int.from_bytes(path.read_bytes(), "little") == 9
    first.close()
    second.close()


def test_a_ring_names_what_was_committed(tmp_path: Path) -> None:
    """The bell file keeps, past the head, the highest position per category and type
    committed, so a reader tells a commit that concerns it from one that does not."""
    path = tmp_path / "muster.db.bell"
    first, second = FileBell(path), FileBell(path)
    first.ring(3, {("timer", "timer.fired")})
    second.ring(5, {("node", "node.removed")})
    first.ring(4, {("timer", "timer.fired")})  # committed before 5, rang after it
    values = _values(path)
    assert values[0] == 5
    assert Interest({"timer"}, {"timer.fired"}).head_in(values) == 4
    assert Interest({"node"}, {"node.removed"}).head_in(values) == 5
    assert Interest({"workload"}, {"workload.submitted"}).head_in(values) == 0
    first.close()
    second.close()


def test_a_bell_file_of_the_head_alone_reads_as_nothing_named(tmp_path: Path) -> None:
    """An older build's appender writes the head alone: a reader with an interest then
    hears nothing of it (the poll folds it), and the head still reads."""
    path = tmp_path / "muster.db.bell"
    path.write_bytes((9).to_bytes(8, "little"))
    values = _values(path)
    assert values[0] == 9
    assert Interest({"node"}, {"node.removed"}).head_in(values) == 0


def test_a_notification_names_the_commits_pairs_and_old_ones_concern_everyone() -> None:
    """PostgreSQL: the payload is the head then the (category, type) pairs; a payload of
    the head alone (an older build's writer) wakes every reader."""
    interest = Interest({"node"}, {"node.removed"})
    kinds = {("timer", "timer.fired"), ("node", "node.removed")}
    assert notification(7, kinds) == "7 node/node.removed,timer/timer.fired"
    assert bell._heard(notification(7, kinds), interest) == 7
    assert bell._heard(notification(8, {("timer", "timer.fired")}), interest) is None
    assert bell._heard(notification(8, {("node", "node.lost")}), interest) is None
    assert bell._heard("9", interest) == 9
    assert bell._heard("not a head", interest) is None
    assert bell._heard(notification(8, {("timer", "timer.fired")}), None) == 8
    many = {("config", f"config.t{i:04d}") for i in range(1000)}
    assert notification(10, many) == "10"  # too long for PostgreSQL: the head alone


async def test_a_reader_hears_only_the_commits_that_concern_it(store_url: str) -> None:
    writer = SqlEventStore(store_url)
    rings = bell.rings(writer.url, Interest({"node"}, {"node.removed"}))
    try:
        assert await _next(rings) == 0
        await writer.append(_timers("timer-a", 2), producer="t", recorded_at=0.0)  # 1-2
        await writer.append(_removed("n1", 1.0), producer="t", recorded_at=0.0)  # 3
        # The ring of 1-2 was not heard: the next one heard is the commit of 3.
        assert await _next(rings) == 3
        await writer.append(_timers("timer-b", 1), producer="t", recorded_at=0.0)  # 4
        await writer.append(_removed("n2", 2.0), producer="t", recorded_at=0.0)  # 5
        assert await _next(rings) == 5
    finally:
        await rings.aclose()  # type: ignore[attr-defined]
        await writer.close()


def test_a_service_wakes_for_what_it_does_more_with_than_its_clock() -> None:
    interest = waking(NodeAgentDecider())
    assert {"node.removed", "admission.admitted", "provisioning.provisioned"} <= interest.types
    # It only moves its clock on these: their commits do not wake it.
    assert not interest.types & {"timer.fired", "admission.quota_reserved"}
    # It keeps a submitted workload's runtime for the admission, whose commit wakes it.
    assert "workload.submitted" not in interest.types
    assert "workload.submitted" not in waking(ProvisionerDecider()).types
    assert "workload.submitted" in waking(QueueDecider()).types  # the queue reserves on it
    assert "config" not in interest.categories


async def test_a_loop_folds_a_skipped_commit_with_the_next_that_concerns_it(
    tmp_path: Path,
) -> None:
    """A commit that does not concern the node agent (another owner's timer: it only moves
    its clock) rings without waking it; it is folded, in order, with the next commit that
    does, and that one promptly: the poll is far longer than the test. An event committed
    without a ring at all (its appender died between the commit and the ring) is folded
    the same way."""
    db = tmp_path / "muster.db"
    url = f"sqlite:///{db}"
    await upgrade_async(url)
    async with _listening(url) as (loop, writer):
        await writer.append(_removed("n1", 1.0), producer="t", recorded_at=0.0)  # 1
        await _folded_up_to(loop, 1)
        await writer.append(_timers("timer-other", 1, None), producer="t", recorded_at=0.0)  # 2
        await writer.append(_removed("n2", 3.0), producer="t", recorded_at=0.0)  # 3
        await _folded_up_to(loop, 3)
        assert loop.runner.versions["timer-other"] == 1  # the skipped commit, folded
        assert loop.runner.state.now == 3.0

        # Commits, never rings; apsw, the store's copy of SQLite: another copy's locks in
        # this process would not be seen by the store's (store/sqlite_fast.py).
        unrung = apsw.Connection(str(db))
        try:
            row = (4, "e-unrung", "node-n3", "node", 1, nev.NodeRemoved.TYPE, 1, 4.0, 0.0,
                   None, None, "other", '{"node": "n3", "reason": "t"}')  # fmt: skip
            unrung.execute(
                f"INSERT INTO events ({', '.join(COLUMNS)}) VALUES ({', '.join('?' * 13)})", row
            )
        finally:
            unrung.close()
        await writer.append(_removed("n4", 5.0), producer="t", recorded_at=0.0)  # 5
        await _folded_up_to(loop, 5)
        assert {"node-n3", "node-n4"} <= set(loop.runner.versions)


async def _folded_up_to(loop: DeciderLoop, position: int) -> None:
    async with asyncio.timeout(10):
        while loop.runner.position < position:
            await loop.moved(10)


def test_the_bell_is_one_file_however_the_url_spells_the_path(tmp_path: Path) -> None:
    nested = tmp_path / "a"
    nested.mkdir()
    spelled = f"sqlite+aiosqlite:///{nested}/../muster.db"
    assert bell_path(spelled) == bell_path(f"sqlite+aiosqlite:///{tmp_path / 'muster.db'}")


async def test_an_append_waits_for_a_writer_in_another_process(tmp_path: Path) -> None:
    """The loop's append does not wait for the write lock; held elsewhere, the append goes
    to the writer thread, waits there, and lands after what the other writer committed."""
    db = tmp_path / "muster.db"
    url = f"sqlite:///{db}"
    await upgrade_async(url)
    store = SqlEventStore(url)
    other = apsw.Connection(str(db))  # "another process": the store's copy of SQLite, as above
    try:
        other.execute("BEGIN IMMEDIATE")
        row = (1, "e-other", "timer-o", "timer", 1, tev.TimerFired.TYPE, 1, 0.0, 0.0, None,
               None, "other", '{"owner": "o", "deadline": 0.0}')  # fmt: skip
        other.execute(f"INSERT INTO events ({', '.join(COLUMNS)}) VALUES ({', '.join('?' * 13)})",
                      row)  # fmt: skip
        appending = asyncio.create_task(
            store.append(_timers("timer-a", 2), producer="t", recorded_at=0.0)
        )
        done, _ = await asyncio.wait({appending}, timeout=0.3)
        assert not done  # waiting for the lock, not failed and not ahead of the other writer
        other.execute("COMMIT")
        appended = await asyncio.wait_for(appending, 30)
        assert [e.position for e in appended] == [2, 3]
        assert [e.position for e in await store.read_all()] == [1, 2, 3]
    finally:
        other.close()
        await store.close()


async def test_what_an_append_returns_is_what_a_read_gives_back(store: SqlEventStore) -> None:
    """A service folds its own appends from what append returned: it must equal the
    events read back, decoded from the stored JSON (not the objects the decider made)."""
    appended = await store.append(_timers("timer-r", 3), producer="t", recorded_at=5.0)
    assert appended == await store.read_all()
    assert all(type(e.event.deadline) is float for e in appended)  # an int given, a float read


@pytest.mark.postgres
async def test_a_listener_cut_off_by_the_server_listens_again(postgres_url: str) -> None:
    store_url = postgres_url
    writer = SqlEventStore(store_url)
    rings = bell.rings(writer.url)
    try:
        assert await _next(rings) == 0
        admin = await asyncpg.connect(store_url)
        try:
            cut = await admin.fetchval(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                "WHERE query LIKE 'LISTEN%' AND pid <> pg_backend_pid()"
            )
        finally:
            await admin.close()
        assert cut >= 1
        assert await _next(rings) == 0  # a new connection: what came meanwhile is folded
        appended = await writer.append(_timers("timer-c", 1), producer="t", recorded_at=0.0)
        assert await _next(rings) == appended[-1].position
    finally:
        await rings.aclose()  # type: ignore[attr-defined]
        await writer.close()
