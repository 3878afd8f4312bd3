"""Gangs as preemption victims (Volcano's gang rule, Kueue's partial admission): a
workload admitted with a ``minCount`` gives up the pods it runs above its minimum and runs
on; it is never taken below its minimum. Other workloads are evicted whole, as in Kueue."""

from __future__ import annotations

from typing import Any

from muster.core.events import node as nev
from muster.core.events import queue as qev
from muster.core.sim.harness import Harness, Submission
from tests.unit.harness_inputs import gpu_job, gpu_node_cluster, run_verified


def _job(
    name: str, at: float, pods: int, priority: int, seconds: float, min_count: int | None = None
) -> Submission:
    extra = {"minCount": min_count} if min_count is not None else {}
    return gpu_job(name, at, pods, 1, seconds, priority=priority, **extra)


def _run(*jobs: Submission) -> Harness:
    cluster = gpu_node_cluster(
        "gangs",
        nodes=1,
        gpus=4,
        nominal=4,
        preemption={"withinClusterQueue": "LowerPriority"},
    )
    return run_verified(cluster, jobs)


def _events(h: Harness, kind: type) -> list[Any]:
    return [e.event for e in h.log.envelopes if isinstance(e.event, kind)]


def test_an_elastic_workload_gives_its_surplus_pods_and_runs_on() -> None:
    h = _run(_job("elastic", 0, 4, 0, 100, min_count=2), _job("urgent", 1, 2, 10, 10))
    shrunk = _events(h, qev.WorkloadShrunk)
    assert [(s.workload_id, s.pods, dict(s.pod_counts)) for s in shrunk] == [
        ("elastic", ("w-2", "w-3"), {"w": 2})
    ]
    assert _events(h, qev.WorkloadEvicted) == []
    reserved = {e.workload_id: at for e, at in _timed(h, qev.QuotaReserved)}
    assert reserved["urgent"] == 1.0
    stopped = {e.pod for e in _events(h, nev.PodStopped) if e.workload_id == "elastic"}
    assert stopped == {"w-2", "w-3"}
    finished = {e.workload_id: e for e in _events(h, qev.WorkloadFinished)}
    assert finished["elastic"].outcome == "Succeeded"
    assert "all 2 pods succeeded" in finished["elastic"].message
    queue = next(r for r in h.runners if r.decider.name == "queue").state
    assert not any(queue.usage["cq"].get("gpu", {}).values())  # all given back at the end


def test_a_gang_at_its_minimum_is_not_taken() -> None:
    h = _run(_job("gang", 0, 4, 0, 100, min_count=4), _job("urgent", 1, 2, 10, 10))
    assert _events(h, qev.WorkloadShrunk) == []
    assert _events(h, qev.WorkloadEvicted) == []
    reserved = {e.workload_id: at for e, at in _timed(h, qev.QuotaReserved)}
    assert reserved["urgent"] == 100.0  # it waits for the gang to finish


def test_a_plain_workload_is_still_evicted_whole() -> None:
    h = _run(_job("plain", 0, 4, 0, 100), _job("urgent", 1, 2, 10, 10))
    assert [e.workload_id for e in _events(h, qev.WorkloadEvicted)] == ["plain"]


def _timed(h: Harness, kind: type) -> list[tuple[Any, float]]:
    return [(e.event, e.occurred_at) for e in h.log.envelopes if isinstance(e.event, kind)]
