"""Intake's group commit over a real SQLite store."""

from __future__ import annotations

import asyncio
from typing import Any

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
    finally:
        await committer.close()
    assert sorted(loop.runner.state.workloads) == [f"w{i}" for i in range(5)]
    assert loop.runner.position == 5


async def test_a_group_after_others_commits_is_folded_without_being_read_back(
    sqlite_store: SqlEventStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another writer committed between two of intake's groups (nearly every group in a
    burst): what came before the group is read, then the group is folded from what the
    append returned, in log order, and not read back (it was read and decoded a second
    time by the next step). A step after it reads nothing of it again."""
    settings = load({}, store_url=sqlite_store.url, kafka_bootstrap="unused:9092")
    loop = DeciderLoop(WorkloadsView(), sqlite_store, settings, ServiceMetrics(), decides=False)
    committer = GroupCommitter(sqlite_store, producer="intake", on_commit=loop.fold_appended)
    reads: list[tuple[int, int | None, list[int]]] = []
    read_folding = sqlite_store.read_folding

    async def spied(after: int = 0, **kw: Any) -> Any:
        got = await read_folding(after, **kw)
        reads.append((after, kw.get("until"), [e.position for e in got]))
        return got

    read_to_head = sqlite_store.read_folding_to_head

    async def spied_to_head(after: int = 0, **kw: Any) -> Any:
        head, got = await read_to_head(after, **kw)
        reads.append((after, head, [e.position for e in got]))
        return head, got

    monkeypatch.setattr(sqlite_store, "read_folding", spied)
    monkeypatch.setattr(sqlite_store, "read_folding_to_head", spied_to_head)
    first = inputs.submission("w0", spec(0), 1.0, None)
    late = inputs.submission("w-late", spec(9), 1.0, None)
    try:
        await committer.append(StreamAppend(first.stream_id, 0, [first]))
        await sqlite_store.append([one("timer-other")], producer="queue", recorded_at=1.0)
        env = await committer.append(StreamAppend(late.stream_id, 0, [late]))
        loop.appended(through=env.position)
        assert not loop._wake.is_set()  # its fold is on its way: no step to read it back
        await asyncio.gather(*loop._own_folds)
    finally:
        await committer.close()
    assert sorted(loop.runner.state.workloads) == ["w-late", "w0"]
    assert loop.runner.position == 3
    assert reads == [(1, 2, [])]  # only what lay between: the timer is not intake's
    await loop.step()
    assert reads[1:] == [(3, 3, [])]  # through the head (3): nothing after its own rows


async def test_groups_committed_while_a_step_folds_are_folded_after_it_in_order(
    sqlite_store: SqlEventStore,
) -> None:
    """Groups committed while a step holds the fold wait for it and fold in commit order,
    each from what its append returned."""
    settings = load({}, store_url=sqlite_store.url, kafka_bootstrap="unused:9092")
    loop = DeciderLoop(WorkloadsView(), sqlite_store, settings, ServiceMetrics(), decides=False)
    committer = GroupCommitter(sqlite_store, producer="intake", on_commit=loop.fold_appended)
    news = [inputs.submission(f"w{i}", spec(i), 1.0, None) for i in range(4)]
    try:
        async with loop._lock:  # a step is folding
            for n in news:
                await sqlite_store.append(
                    [one(f"timer-{n.stream_id}")], producer="queue", recorded_at=1.0
                )
                await committer.append(StreamAppend(n.stream_id, 0, [n]))
            assert loop.runner.position == 0
        await asyncio.gather(*loop._own_folds)
    finally:
        await committer.close()
    assert sorted(loop.runner.state.workloads) == [f"w{i}" for i in range(4)]
    assert loop.runner.position == 8


async def test_a_submission_folded_by_its_group_wakes_the_relay_not_a_step(
    sqlite_store: SqlEventStore,
) -> None:
    """A submission its group commit already folded, or whose fold is on its way (another
    writer's event came first), is published (the relay is woken) but not read back by a
    step (the follow loop is not woken); one appended outside the group commit is."""
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
        assert loop._relay_wake.is_set()
        assert not loop._wake.is_set()
        await asyncio.gather(*loop._own_folds)
        assert "w-late" in loop.runner.state.workloads
        loop.appended()
        assert loop._wake.is_set()
    finally:
        await committer.close()
