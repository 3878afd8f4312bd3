"""A service's catch-up reads through the log's head, so its position moves past the
events of categories it does not fold: the next step starts after them instead of
scanning them again (issue 16, store queries whose cost grows with the log)."""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest

from muster.core import inputs
from muster.core.events import NewEvent, StreamAppend, category_of
from muster.core.events import timer as tev
from muster.core.model import parse
from muster.core.queueing.decider import QueueDecider
from muster.core.runner import DeciderRunner
from muster.core.views.workloads import WorkloadsView
from muster.runtime import loop as loop_module
from muster.runtime.loop import DeciderLoop
from muster.runtime.metrics import ServiceMetrics
from muster.runtime.settings import load
from muster.store import SqlEventStore
from muster.store.migrate import upgrade_async
from tests.unit.harness_inputs import gpu_job, gpu_node_cluster


def _elsewhere(i: int) -> NewEvent:
    """An event of a category the queue does not fold."""
    return NewEvent(
        stream_id="elsewhere-1", event=tev.TimerFired(owner="x", deadline=i), occurred_at=1.0
    )


async def _steps_of_a_quiet_catch_up(tmp_path: Path, others: int) -> tuple[int, int, int]:
    """(SQLite VM steps of a catch-up with nothing new, the loop's position, the head)
    after ``others`` events the queue does not fold came last."""
    url = f"sqlite:///{tmp_path / f'muster-{others}.db'}"
    await upgrade_async(url)
    store = SqlEventStore(url)
    try:
        settings = load({}, store_url=url, kafka_bootstrap="unused:9092", poll_seconds=300)
        loop = DeciderLoop(QueueDecider(), store, settings, ServiceMetrics())
        doc = gpu_node_cluster("one", nodes=1, gpus=2, nominal=2)
        config = inputs.configuration(parse.cluster(doc), 1.0)
        await store.append(
            [StreamAppend(n.stream_id, None, [n]) for n in config],
            producer="test",
            recorded_at=1.0,
        )
        for start in range(0, others, 500):
            batch = [_elsewhere(i) for i in range(start, min(others, start + 500))]
            await store.append(
                [StreamAppend("elsewhere-1", None, batch)], producer="test", recorded_at=1.0
            )
        await loop.catch_up()
        assert store._fast is not None
        reader = store._fast._reading()
        steps = 0

        def count() -> int:
            nonlocal steps
            steps += 1
            return 0

        reader.set_progress_handler(count, 1)
        try:
            assert await loop.catch_up() == 0
        finally:
            reader.set_progress_handler(None, 1)
        return steps, loop.runner.position, await store.head()
    finally:
        await store.close()


async def test_a_step_does_not_scan_again_what_it_does_not_fold(tmp_path: Path) -> None:
    """The queue's position is the head even when the last events were of a category it
    does not fold; a step with nothing new then costs the same after 2 such events as
    after 3,000 (it scanned all of them again, each step, before)."""
    short, position, head = await _steps_of_a_quiet_catch_up(tmp_path, 2)
    assert position == head
    long, position, head = await _steps_of_a_quiet_catch_up(tmp_path, 3000)
    assert position == head
    assert long <= short + 5, (short, long)


async def test_a_catch_up_in_several_reads_folds_as_a_replay(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A catch-up folds each read as a replay folds its reads (``fold(ours=True)``): over
    reads of 3 events, with events of a category neither decider folds between theirs, the
    queue's and intake's view end with the state, position, stream versions and last event
    id of a replay of the whole log."""
    monkeypatch.setattr(loop_module, "READ_BATCH", 3)
    url = f"sqlite:///{tmp_path / 'muster.db'}"
    await upgrade_async(url)
    store = SqlEventStore(url)
    try:
        config = inputs.configuration(
            parse.cluster(gpu_node_cluster("one", nodes=1, gpus=8, nominal=8)), 1.0
        )
        news: list[NewEvent] = list(config)
        for i in range(5):
            _, wid, spec = gpu_job(f"j{i}", 0, 1, 1, 600)
            news += [inputs.submission(wid, spec, 2.0 + i), _elsewhere(i)]
        for new in news:
            await store.append(
                [StreamAppend(new.stream_id, None, [new])], producer="test", recorded_at=1.0
            )
        settings = load({}, store_url=url, kafka_bootstrap="unused:9092", poll_seconds=300)
        for decider in (QueueDecider(), WorkloadsView()):
            loop = DeciderLoop(decider, store, settings, ServiceMetrics())
            folded = await loop.catch_up()
            replay = DeciderRunner(decider)
            replay.fold(await store.read_all(0))
            assert folded == len([n for n in news if category_of(n.stream_id) != "elsewhere"])
            assert loop.runner.position == await store.head()
            assert pickle.dumps(loop.runner.state) == pickle.dumps(replay.state)
            assert loop.runner.versions == replay.versions
            assert loop.runner.last_event_id == replay.last_event_id
    finally:
        await store.close()
