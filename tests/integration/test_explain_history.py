"""The queue's state at a past point, from history snapshots, equals a fold from the start
(``admin.rebuild``): snapshots are an optimisation only.

The log is bench.replay's: the simulation harness over examples/cluster.yaml, copied row
for row into a SQLite store.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from bench.replay import copy_into, simulate
from muster.cli.commands import EXAMPLES
from muster.core.events import Envelope
from muster.core.explain import explain
from muster.core.queueing import state as qs
from muster.core.queueing.decider import QueueDecider
from muster.core.timepoint import At
from muster.runtime import admin, history
from muster.runtime.loop import DeciderLoop
from muster.runtime.metrics import ServiceMetrics
from muster.store import SqlEventStore
from muster.store.migrate import upgrade_async
from tests.api.conftest import settings_for


@pytest.fixture(scope="module")
def log() -> list[Envelope]:
    return simulate(EXAMPLES / "cluster.yaml", 3000, seed=3, gap=1.5)


@pytest.fixture
async def store(tmp_path: Path, log: list[Envelope]) -> Any:
    url = f"sqlite:///{tmp_path / 'history.db'}"
    await upgrade_async(url)
    copy_into(url, log)
    s = SqlEventStore(url)
    yield s
    await s.close()


def explained(state: qs.QueueState, log: list[Envelope], position: int) -> list[Any]:
    """Every workload explained at ``position``: the answers must match too."""
    return [
        explain(state, wid, [e for e in log if e.correlation_id == wid], position).to_json()
        for wid in sorted(state.workloads)
    ]


async def test_from_snapshots_equals_a_full_rebuild(
    store: SqlEventStore, log: list[Envelope]
) -> None:
    head = log[-1].position
    first = await history.state_at(store, At(position=head), every=500, batch=100)
    assert first.from_snapshot is None and first.runner.position == head
    for target in (head // 3, head // 2 + 7, head - 1):
        full = await admin.rebuild(store, QueueDecider(), until_position=target)
        fast = await history.state_at(store, At(position=target), every=500, batch=100)
        assert fast.from_snapshot is not None and fast.from_snapshot <= target
        assert fast.folded < 600  # from the snapshot, not from the start
        assert fast.runner.position == full.position
        assert qs.summary(fast.runner.state) == qs.summary(full.state)
        assert explained(fast.runner.state, log, target) == explained(full.state, log, target)


async def test_a_time_cuts_where_replay_until_cuts(
    store: SqlEventStore, log: list[Envelope]
) -> None:
    await history.state_at(store, At(position=log[-1].position), every=500, batch=100)
    moment = log[len(log) // 2].occurred_at + 0.5
    full = await admin.rebuild(store, QueueDecider(), until_time=moment)
    fast = await history.state_at(store, At(time=moment), every=500, batch=100)
    assert fast.from_snapshot is not None
    assert fast.runner.position == full.position
    assert qs.summary(fast.runner.state) == qs.summary(full.state)
    assert fast.runner.state.now <= moment


async def test_without_snapshots_nothing_is_written(store: SqlEventStore) -> None:
    rebuilt = await history.state_at(store, At(position=2000), snapshots=False, batch=100)
    assert rebuilt.from_snapshot is None and rebuilt.runner.position == 2000
    assert await store.load_history_snapshot("queue", QueueDecider.snapshot_format) is None


async def test_the_queue_service_keeps_its_snapshots_by_position(
    store: SqlEventStore, log: list[Envelope]
) -> None:
    """The queue's periodic snapshot is also a history row: explain --at starts there."""
    settings = settings_for(store, snapshot_every=1, snapshot_seconds=0.0)
    loop = DeciderLoop(QueueDecider(), store, settings, ServiceMetrics(), decides=False)
    await loop.restore()
    await loop._maybe_snapshot()
    head = log[-1].position
    assert loop.runner.position == head
    found = await store.load_history_snapshot("queue", QueueDecider.snapshot_format)
    assert found is not None and found[0] == head
    rebuilt = await history.state_at(store, At(position=head))
    assert rebuilt.from_snapshot == head and rebuilt.folded == 0
    full = await admin.rebuild(store, QueueDecider())
    assert qs.summary(rebuilt.runner.state) == qs.summary(full.state)


async def test_a_kept_state_goes_on_forward_and_equals_a_full_rebuild(
    store: SqlEventStore, log: list[Envelope]
) -> None:
    """A time slider moving forward: each question goes on from the state the last one
    rebuilt; one before it starts again from a snapshot (or the start)."""
    head = log[-1].position
    kept = None
    for target in (head // 4, head // 2, head // 2, head - 3):
        got = await history.state_at(store, At(position=target), kept=kept, batch=100)
        assert got.reused == (kept is not None)
        full = await admin.rebuild(store, QueueDecider(), until_position=target)
        assert got.runner.position == full.position
        assert qs.summary(got.runner.state) == qs.summary(full.state)
        kept = got.runner
    back = await history.state_at(store, At(position=head // 3), kept=kept, batch=100)
    assert not back.reused and back.runner is not kept
    assert (
        back.runner.position
        == (await admin.rebuild(store, QueueDecider(), until_position=head // 3)).position
    )
