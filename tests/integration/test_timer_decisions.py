"""A timer's event and what the decider decides on it commit in one append (runtime/loop.py
``_fire_deciding``), and the log says the same as when they were two: each decision caused
by the timer's event, ``verify_decisions`` re-deriving every batch."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from muster.core import inputs
from muster.core.events import NewEvent, StreamAppend
from muster.core.events import node as nev
from muster.core.events import timer as tev
from muster.core.model import parse
from muster.core.nodes.decider import NodeAgentDecider
from muster.core.queueing.decider import QueueDecider
from muster.core.verify import verify_decisions
from muster.runtime.loop import DeciderLoop
from muster.runtime.metrics import ServiceMetrics
from muster.runtime.settings import load
from muster.store import Overtaken, SqlEventStore
from muster.store.migrate import upgrade_async
from tests.unit.harness_inputs import gpu_job, gpu_node_cluster


async def _append(store: SqlEventStore, news: list[NewEvent]) -> None:
    await store.append(
        [StreamAppend(n.stream_id, None, [n]) for n in news], producer="test", recorded_at=0.0
    )


async def _running_pod(tmp_path: Path) -> tuple[SqlEventStore, DeciderLoop, float]:
    """A node agent whose one pod runs until the deadline returned."""
    url = f"sqlite:///{tmp_path / 'muster.db'}"
    await upgrade_async(url)
    store = SqlEventStore(url)
    settings = load({}, store_url=url, kafka_bootstrap="unused:9092", poll_seconds=300)
    agent = DeciderLoop(NodeAgentDecider(), store, settings, ServiceMetrics())
    queue = DeciderLoop(QueueDecider(), store, settings, ServiceMetrics())
    now = time.time()
    cluster = parse.cluster(gpu_node_cluster("one", nodes=1, gpus=2, nominal=2))
    await _append(store, list(inputs.configuration(cluster, now)))
    await agent.step()  # registers the declared node
    _, wid, spec = gpu_job("a", 0, 1, 2, 30)
    await _append(store, [inputs.submission(wid, spec, now)])
    await queue.step()  # admits it on the node
    await agent.step()  # starts its pod
    deadline = agent.runner.next_deadline()
    assert deadline is not None
    return store, agent, deadline


async def _checked(store: SqlEventStore, *deciders: Any) -> list[Any]:
    log = await store.read_all()
    for decider in deciders:
        checked, mismatches = verify_decisions(log, decider)
        assert checked and mismatches == []
    return log


async def test_a_timer_and_the_decision_on_it_are_one_append(tmp_path: Path) -> None:
    """peers.md's simulated pod ends at its finish time: the node agent's timer fires and
    the pod's success is decided from it, in the same transaction."""
    store, agent, deadline = await _running_pod(tmp_path)
    try:
        await agent._fire(deadline)
        log = await _checked(store, NodeAgentDecider(), QueueDecider())
        fired = [e for e in log if isinstance(e.event, tev.TimerFired)]
        done = [e for e in log if isinstance(e.event, nev.PodSucceeded)]
        assert len(fired) == 1 and len(done) == 1
        assert done[0].position == fired[0].position + 1
        assert done[0].recorded_at == fired[0].recorded_at  # one commit
        assert done[0].causation_id == fired[0].event_id
        assert agent.runner.position == done[0].position
        assert agent.runner.state.now == deadline
        assert not agent.runner.state.pods
    finally:
        await store.close()


async def test_an_overtaken_timer_is_undone_and_appended_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another writer committed first (``Overtaken``): the clock-only fold of the timer is
    undone and the timer goes alone, the decision on it after, as before."""
    store, agent, deadline = await _running_pod(tmp_path)
    try:
        before = (agent.runner.position, agent.runner.state.now, agent.runner.last_event_id)
        real = store.append

        async def overtaken_once(*args: Any, **kwargs: Any) -> Any:
            if kwargs.get("unmoved_since") is not None:
                raise Overtaken(kwargs["unmoved_since"][0])
            return await real(*args, **kwargs)

        monkeypatch.setattr(store, "append", overtaken_once)
        assert not await agent._fire_deciding(agent.runner.timer_event(deadline))
        assert (agent.runner.position, agent.runner.state.now, agent.runner.last_event_id) == (
            before
        )
        await agent._fire(deadline)
        log = await _checked(store, NodeAgentDecider(), QueueDecider())
        fired = [e for e in log if isinstance(e.event, tev.TimerFired)]
        done = [e for e in log if isinstance(e.event, nev.PodSucceeded)]
        assert len(fired) == 1 and len(done) == 1
        assert done[0].causation_id == fired[0].event_id
    finally:
        await store.close()
