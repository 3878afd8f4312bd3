"""A service's catch-up reads through the log's head, so its position moves past the
events of categories it does not fold: the next step starts after them instead of
scanning them again (issue 16, store queries whose cost grows with the log)."""

from __future__ import annotations

from pathlib import Path

from muster.core import inputs
from muster.core.events import NewEvent, StreamAppend
from muster.core.events import timer as tev
from muster.core.model import parse
from muster.core.queueing.decider import QueueDecider
from muster.runtime.loop import DeciderLoop
from muster.runtime.metrics import ServiceMetrics
from muster.runtime.settings import load
from muster.store import SqlEventStore
from muster.store.migrate import upgrade_async
from tests.unit.harness_inputs import gpu_node_cluster


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
