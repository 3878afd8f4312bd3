"""Intake's group commit over a real SQLite store."""

from __future__ import annotations

import asyncio

import pytest

from muster.core import inputs
from muster.core.events import NewEvent, StreamAppend
from muster.core.events import timer as tev
from muster.core.model import parse
from muster.core.model.workload import WorkloadSpec
from muster.core.views.workloads import WorkloadsView
from muster.runtime.loop import DeciderLoop
from muster.runtime.metrics import ServiceMetrics
from muster.runtime.settings import load
from muster.store import ConcurrencyConflict, SqlEventStore
from services.intake.batcher import GroupCommitter


def spec(i: int) -> WorkloadSpec:
    return parse.workload(
        {
            "name": f"w{i}",
            "namespace": "team-a",
            "queueName": "training",
            "podSets": [{"name": "main", "count": 1, "requests": {"cpu": 1}}],
        }
    )


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


async def test_intake_folds_its_committed_submissions_without_reading_them_back(
    sqlite_store: SqlEventStore,
) -> None:
    """Each committed group is folded from what the append returned, when it is next in
    the log: the view shows the workloads before any step reads the store."""
    settings = load({}, store_url=sqlite_store.url, kafka_bootstrap="unused:9092")
    loop = DeciderLoop(WorkloadsView(), sqlite_store, settings, ServiceMetrics(), decides=False)
    committer = GroupCommitter(sqlite_store, producer="intake", on_commit=loop.fold_appended)
    news = [inputs.submission(f"w{i}", spec(i), 1.0, None) for i in range(5)]
    try:
        await asyncio.gather(*(committer.append(StreamAppend(n.stream_id, 0, [n])) for n in news))
        # Someone else's event, then ours: ours is not next, so it waits for the step.
        await sqlite_store.append([one("timer-other")], producer="queue", recorded_at=1.0)
        late = inputs.submission("w-late", spec(9), 1.0, None)
        await committer.append(StreamAppend(late.stream_id, 0, [late]))
    finally:
        await committer.close()
    assert sorted(loop.runner.state.workloads) == [f"w{i}" for i in range(5)]
    assert loop.runner.position == 5
    await loop.step()
    assert "w-late" in loop.runner.state.workloads
    assert loop.runner.position == 7


async def test_a_submission_folded_by_its_group_wakes_the_relay_not_a_step(
    sqlite_store: SqlEventStore,
) -> None:
    """A submission its group commit already folded is published (the relay is woken) but
    not read back by a step (the follow loop is not); one that could not be folded (another
    writer's event came first) wakes the step, which reads it."""
    settings = load({}, store_url=sqlite_store.url, kafka_bootstrap="unused:9092")
    loop = DeciderLoop(WorkloadsView(), sqlite_store, settings, ServiceMetrics(), decides=False)
    committer = GroupCommitter(sqlite_store, producer="intake", on_commit=loop.fold_appended)
    first = inputs.submission("w0", spec(0), 1.0, None)
    late = inputs.submission("w-late", spec(9), 1.0, None)
    try:
        env = await committer.append(StreamAppend(first.stream_id, 0, [first]))
        loop.appended(through=env.position)
        assert loop._relay_wake.is_set()
        assert not loop._wake.is_set()
        loop._relay_wake.clear()
        await sqlite_store.append([one("timer-other")], producer="queue", recorded_at=1.0)
        env = await committer.append(StreamAppend(late.stream_id, 0, [late]))
        loop.appended(through=env.position)
    finally:
        await committer.close()
    assert loop._relay_wake.is_set()
    assert loop._wake.is_set()
    assert "w-late" not in loop.runner.state.workloads
