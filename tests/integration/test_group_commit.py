"""Intake's group commit over a real SQLite store."""

from __future__ import annotations

import asyncio

import pytest

from muster.core.events import NewEvent, StreamAppend
from muster.core.events import timer as tev
from muster.store import ConcurrencyConflict, SqlEventStore
from services.intake.batcher import GroupCommitter


def one(stream: str) -> StreamAppend:
    new = NewEvent(stream_id=stream, event=tev.TimerFired(owner="t", deadline=1.0), occurred_at=1.0)
    return StreamAppend(stream, 0, [new])


async def test_concurrent_requests_share_transactions(sqlite_store: SqlEventStore) -> None:
    committer = GroupCommitter(sqlite_store, producer="intake")
    try:
        envs = await asyncio.gather(*(committer.append(one(f"timer-{i}")) for i in range(60)))
    finally:
        await committer.close()
    assert [e.stream_id for e in envs] == [f"timer-{i}" for i in range(60)]
    assert sorted(e.position for e in envs) == list(range(1, 61))
    assert committer.groups < 60  # grouped, not one transaction each
    assert len(await sqlite_store.read_all(0)) == 60


async def test_a_conflict_fails_only_its_own_request(sqlite_store: SqlEventStore) -> None:
    await sqlite_store.append([one("timer-taken")], producer="intake", recorded_at=0.0)
    committer = GroupCommitter(sqlite_store, producer="intake")
    try:
        results = await asyncio.gather(
            *(committer.append(one(s)) for s in ("timer-a", "timer-taken", "timer-b")),
            return_exceptions=True,
        )
    finally:
        await committer.close()
    assert isinstance(results[1], ConcurrencyConflict)
    assert results[1].stream_id == "timer-taken"
    assert [r.stream_id for r in (results[0], results[2])] == ["timer-a", "timer-b"]  # type: ignore[union-attr]
    assert len(await sqlite_store.read_all(0)) == 3


async def test_only_single_event_appends_are_grouped(sqlite_store: SqlEventStore) -> None:
    committer = GroupCommitter(sqlite_store, producer="intake")
    with pytest.raises(ValueError, match="one event"):
        await committer.append(StreamAppend("timer-x", 0, []))
    await committer.close()
