"""A service folds its own appends from what ``append`` returned, not read back from the
store, also when others committed between its decision and its append: it reads only
what came before its own rows (issue 16: the queue re-read and decoded its own events
whenever intake had committed meanwhile). The state is the one a replay of the log
folds, event for event."""

from __future__ import annotations

import pickle
import time
from pathlib import Path
from typing import Any

from muster.core import inputs
from muster.core.events import NewEvent, StreamAppend
from muster.core.events import timer as tev
from muster.core.model import parse
from muster.core.queueing.decider import QueueDecider
from muster.core.runner import DeciderRunner
from muster.runtime.loop import DeciderLoop
from muster.runtime.metrics import ServiceMetrics
from muster.runtime.settings import load
from muster.store import SqlEventStore
from muster.store.migrate import upgrade_async
from tests.unit.harness_inputs import gpu_job, gpu_node_cluster


async def _append(store: SqlEventStore, news: list[NewEvent]) -> None:
    await store.append(
        [StreamAppend(n.stream_id, None, [n]) for n in news], producer="test", recorded_at=1.0
    )


def _other_category(now: float) -> NewEvent:
    """An event of a category the queue does not fold."""
    return NewEvent(
        stream_id="elsewhere-1", event=tev.TimerFired(owner="x", deadline=now), occurred_at=now
    )


async def _run(tmp_path: Path, meanwhile: list[NewEvent]) -> None:
    sent = list(meanwhile)
    url = f"sqlite:///{tmp_path / 'muster.db'}"
    await upgrade_async(url)
    store = SqlEventStore(url)
    try:
        settings = load({}, store_url=url, kafka_bootstrap="unused:9092", poll_seconds=300)
        loop = DeciderLoop(QueueDecider(), store, settings, ServiceMetrics())
        doc = gpu_node_cluster("one", nodes=1, gpus=2, nominal=2)
        doc["nodePools"] = [
            {"name": "pool", "machineType": "m", "allocatable": doc["nodes"][0]["allocatable"]}
        ]
        del doc["nodes"]
        now = time.time()
        await _append(store, list(inputs.configuration(parse.cluster(doc), now)))
        _, wid, spec = gpu_job("a", 0, 1, 2, 600)
        await _append(store, [inputs.submission(wid, spec, now)])

        # Others commit between the queue's decision and its append.
        real_append, real_read = store.append, store.read_folding
        own: list[int] = []  # positions the queue appended, as they were appended
        reads: list[tuple[int, int | None, int]] = []  # (after, until, own rows by then)

        async def append_after_others(batch: Any, **kw: Any) -> Any:
            if kw.get("producer") == "queue" and meanwhile:
                await _append(store, [meanwhile.pop(0) for _ in range(len(meanwhile))])
            rows = await real_append(batch, **kw)
            if kw.get("producer") == "queue":
                own.extend(env.position for env in rows)
            return rows

        async def read_folding(after: int = 0, **kw: Any) -> Any:
            reads.append((after, kw.get("until"), len(own)))
            return await real_read(after, **kw)

        real_read_to_head = store.read_folding_to_head

        async def read_folding_to_head(after: int = 0, **kw: Any) -> Any:
            head, got = await real_read_to_head(after, **kw)
            reads.append((after, head, len(own)))
            return head, got

        store.append = append_after_others  # type: ignore[method-assign]
        store.read_folding = read_folding  # type: ignore[method-assign]
        store.read_folding_to_head = read_folding_to_head  # type: ignore[method-assign]
        await loop.step()

        assert own, "the queue decided nothing"
        # What came before its first append was read up to its rows, not past them ...
        assert (own[0] - len(sent) - 1, own[0] - 1) in [r[:2] for r in reads if r[2]], reads
        # ... and no read covered a row the queue had appended by then: those were folded
        # from what append returned.
        for after, until, appended in reads:
            assert not [p for p in own[:appended] if after < p <= (until or p)], (reads, own)
        head = (await store.read_all(0))[-1].position
        assert loop.runner.position == head
        # The same state as a replay of the whole log.
        replay = DeciderRunner(QueueDecider())
        replay.fold(await store.read_all(0))
        assert pickle.dumps(loop.runner.state) == pickle.dumps(replay.state)
        assert loop.runner.versions == replay.versions
        assert loop.runner.last_event_id == replay.last_event_id
    finally:
        await store.close()


async def test_others_commit_between_a_decision_and_its_append(tmp_path: Path) -> None:
    """A submission committed meanwhile is read and folded first, then the queue's own."""
    _, wid, spec = gpu_job("b", 0, 1, 2, 600)
    await _run(tmp_path, [inputs.submission(wid, spec, time.time())])


async def test_what_came_meanwhile_is_of_another_category(tmp_path: Path) -> None:
    """Nothing the queue folds came between: its position moves past it unread, and its
    own rows are next."""
    now = time.time()
    _, wid, spec = gpu_job("b", 0, 1, 2, 600)
    await _run(tmp_path, [inputs.submission(wid, spec, now), _other_category(now)])
