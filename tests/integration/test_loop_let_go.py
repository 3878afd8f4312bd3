"""Two queue replicas on one store, each keeping the version of one stream only
(``DeciderRunner.versions_kept``): the one that decides second appends to streams it holds
no version of as of its position (``StreamAppend.folded_to``), is refused since the first
one's append moved them, reads that, and decides nothing more. Each decision is logged
once, and both states are a replay's."""

from __future__ import annotations

import dataclasses
import pickle
import time
from pathlib import Path
from typing import Any

from muster.core import inputs
from muster.core.events import NewEvent, StreamAppend
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


async def test_a_replica_that_let_go_of_a_version_is_refused_once_another_moved_it(
    tmp_path: Path,
) -> None:
    url = f"sqlite:///{tmp_path / 'muster.db'}"
    await upgrade_async(url)
    first, second = SqlEventStore(url), SqlEventStore(url)
    try:
        settings = load({}, store_url=url, kafka_bootstrap="unused:9092", poll_seconds=300)
        loops = []
        for store in (first, second):
            loop = DeciderLoop(QueueDecider(), store, settings, ServiceMetrics())
            loop.runner.versions_kept = 1
            loops.append(loop)
        winner, loser = loops
        now = time.time()
        cluster = parse.cluster(gpu_node_cluster("one", nodes=1, gpus=8, nominal=8))
        await _append(first, list(inputs.configuration(cluster, now)))
        _, wid, spec = gpu_job("a", 0, 1, 8, 600)
        await _append(first, [inputs.submission(wid, spec, now)])
        await loser.catch_up()
        assert len(loser.runner.versions) <= 2  # let go of the configuration's streams

        real_append = second.append
        refused: list[StreamAppend] = []

        async def append_after_the_winner(batch: Any, **kw: Any) -> Any:
            if not refused:  # the winner decides the same and commits first
                refused.extend(batch)
                await winner.step()
            return await real_append(batch, **kw)

        second.append = append_after_the_winner  # type: ignore[method-assign]
        await loser.step()

        assert any(item.folded_to is not None for item in refused), refused
        assert loser.metrics.conflicts.labels("queue")._value.get() == 1
        log = await first.read_all(0)
        decided = [(e.stream_id, e.type) for e in log if e.producer == "queue"]
        assert decided and len(set(decided)) == len(decided)  # the winner's, once each
        replay: DeciderRunner[Any] = DeciderRunner(QueueDecider())
        replay.fold(log)
        for loop in loops:
            assert loop.runner.position == log[-1].position
            assert loop.runner.versions.items() <= replay.versions.items()
            # A replay's, but for the caches its decisions filled in the book (as on integ).
            state = loop.runner.state
            assert [
                f.name
                for f in dataclasses.fields(state)
                if pickle.dumps(getattr(state, f.name))
                != pickle.dumps(getattr(replay.state, f.name))
            ] in ([], ["book"])
        assert pickle.dumps(loser.runner.state) == pickle.dumps(winner.runner.state)
    finally:
        await first.close()
        await second.close()
