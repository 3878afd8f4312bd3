"""Surplus pods that wait (peers.md §2.4, Volcano's minAvailable: "the job starts once
minAvailable pods can be scheduled; the others stay Pending and are scheduled as resources
free up"): a workload whose pod set says ``surplus: Wait`` runs with the pods that fit and
gets the others (``admission.grown``) when room appears, after a partial admission or a
shrink. Kueue's partial admission (``surplus: Drop``, the default) drops them for good."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from muster.core.events import node as nev
from muster.core.events import queue as qev
from muster.core.model import manifests, parse
from muster.core.model.fields import InvalidInput
from muster.core.sim.figures import figures
from muster.core.sim.harness import Harness, build
from muster.core.verify import verify_decisions
from muster.core.views.workloads import WorkloadsView
from tests.unit.harness_inputs import gpu_job, gpu_node_cluster, run_verified


def _cluster(**queue: Any) -> dict[str, Any]:
    return gpu_node_cluster("grow", nodes=1, gpus=4, nominal=4, **queue)


def _elastic(name: str, at: float, pods: int, min_count: int, seconds: float, **kw: Any) -> Any:
    return gpu_job(name, at, pods, 1, seconds, minCount=min_count, surplus="Wait", **kw)


def _events(h: Harness, kind: type) -> list[Any]:
    return [e.event for e in h.log.envelopes if isinstance(e.event, kind)]


def _timed(h: Harness, kind: type) -> list[tuple[Any, float]]:
    return [(e.event, e.occurred_at) for e in h.log.envelopes if isinstance(e.event, kind)]


def _queue(h: Harness) -> Any:
    return next(r for r in h.runners if r.decider.name == "queue").state


def _started(h: Harness, wid: str) -> dict[str, float]:
    return {e.pod: at for e, at in _timed(h, nev.PodStarted) if e.workload_id == wid}


def test_surplus_pods_wait_and_start_when_another_workload_finishes() -> None:
    """The issue's case: 4 replicas, minAvailable 2, room for 2: 2 start, the other 2
    start when the workload holding the room finishes."""
    h = run_verified(_cluster(), [gpu_job("other", 0, 2, 1, 50), _elastic("elastic", 1, 4, 2, 100)])
    reserved = {e.workload_id: e for e in _events(h, qev.QuotaReserved)}
    assert dict(reserved["elastic"].pod_counts) == {"w": 2}
    grown = _timed(h, qev.WorkloadGrown)
    assert [(e.workload_id, e.pods, dict(e.pod_counts), at) for e, at in grown] == [
        ("elastic", ("w-2", "w-3"), {"w": 4}, 50.0)
    ]
    assert grown[0][0].usage == {"gpu": {"nvidia.com/gpu": 4}}
    started = _started(h, "elastic")
    assert started == {"w-0": 1.0, "w-1": 1.0, "w-2": 50.0, "w-3": 50.0}
    finished = {e.workload_id: (e, at) for e, at in _timed(h, qev.WorkloadFinished)}
    assert finished["elastic"][0].outcome == "Succeeded"
    assert "all 4 pods succeeded" in finished["elastic"][0].message
    assert finished["elastic"][1] == 150.0  # the added pods ran their full duration
    assert not any(_queue(h).usage["cq"].get("gpu", {}).values())


def test_the_run_figures_count_what_a_grown_workload_holds() -> None:
    """``muster sim --summary``'s utilisation follows the quota held: 2 GPUs, then 4 once
    grown. Window 0..100 on 4 GPUs (400 GPU-s): other 2x50, elastic 2x49 + 4x50."""
    h = run_verified(
        _cluster(),
        [
            gpu_job("other", 0, 2, 1, 50),
            _elastic("elastic", 1, 4, 2, 100),
            gpu_job("late", 100, 1, 1, 10),
        ],
    )
    assert figures(h.log.envelopes)["utilisation"] == pytest.approx(398 / 400)


def test_intake_shows_the_added_pods_until_they_run() -> None:
    h = run_verified(_cluster(), [gpu_job("other", 0, 2, 1, 50), _elastic("elastic", 1, 4, 2, 100)])
    view = WorkloadsView()
    state = view.initial()
    seen = []
    for env in h.log.envelopes:
        state = view.evolve(state, env)
        if env.correlation_id == "elastic" or getattr(env.event, "workload_id", "") == "elastic":
            w = state.workloads["elastic"]
            seen.append((w.status, w.reason, w.pods))
    assert ("Running", "Running", 2) in seen
    grown = seen.index(("Admitted", "PodsAdmitted", 4))
    assert ("Running", "Running", 4) in seen[grown:]
    assert seen[-1][0] == "Succeeded"


def test_a_grown_workload_that_loses_a_node_restarts_whole_and_gives_back_everything() -> None:
    """Grown at 50 on 2 nodes of 2 GPUs; a node lost at 60 takes pods of it: the gang
    restarts whole (an evicted pod restarts the workload by default, as a Volcano Job's
    PodEvicted -> RestartJob), and at the end no quota and no node room is held."""
    cluster = gpu_node_cluster("grow", nodes=2, gpus=2, nominal=4)
    subs = [gpu_job("other", 0, 2, 1, 50), _elastic("elastic", 1, 4, 2, 100)]
    h = build(parse.cluster(cluster), subs, node_losses=[(60.0, "n-1")], agent_restarts=[70.0])
    h.run()
    for runner in h.runners:
        _, mismatches = verify_decisions(h.log.envelopes, runner.decider)
        assert mismatches == [], mismatches[:1]
    assert [at for _, at in _timed(h, qev.WorkloadGrown)][:1] == [50.0]
    evicted = [(e.workload_id, e.reason, at) for e, at in _timed(h, qev.WorkloadEvicted)]
    assert evicted == [("elastic", "NodeLost", 60.0)]
    finished = {e.workload_id: e.outcome for e in _events(h, qev.WorkloadFinished)}
    assert finished["elastic"] == "Succeeded"
    queue = _queue(h)
    assert not any(queue.usage["cq"].get("gpu", {}).values())
    assert not queue.book.held and not queue.growers


def test_added_pods_get_their_shares_of_shared_gpus() -> None:
    """HAMi's GPU sharing holds for added pods: each gets a quarter of the one card's
    cores, once the other workload's two quarters are free."""
    cluster = _cluster()
    cluster["nodes"] = [
        {
            "name": "n",
            "count": 1,
            "allocatable": {"nvidia.com/gpu": 4},
            "gpus": {"count": 1, "model": "A100", "memory": "80Gi", "split": 4},
        }
    ]
    quarter = {"nvidia.com/gpu": 1, "nvidia.com/gpucores": 25, "nvidia.com/gpumem": 1000}
    group = cluster["clusterQueues"][0]["resourceGroups"][0]
    for resource, qty in list(quarter.items())[1:]:
        group["coveredResources"].append(resource)
        group["flavors"][0]["resources"].append({"name": resource, "nominalQuota": 4 * qty})
    h = run_verified(
        cluster,
        [
            gpu_job("other", 0, 2, 1, 50, requests=quarter),
            _elastic("elastic", 1, 4, 2, 100, requests=quarter),
        ],
    )
    [(grown, at)] = _timed(h, qev.WorkloadGrown)
    assert at == 50.0
    assert grown.usage == {
        "gpu": {"nvidia.com/gpu": 4, "nvidia.com/gpucores": 100, "nvidia.com/gpumem": 4000}
    }
    assert set(grown.placement.devices) == {"w-2", "w-3"}
    assert all(s.cores == 25 for p in grown.placement.devices.values() for s in p)
    assert set(_started(h, "elastic")) == {"w-0", "w-1", "w-2", "w-3"}


def test_kueue_partial_admission_still_drops_the_surplus() -> None:
    """kueue.md §1.11: the reduced count is the admitted count; the rest never starts."""
    h = run_verified(
        _cluster(), [gpu_job("other", 0, 2, 1, 50), gpu_job("partial", 1, 4, 1, 100, minCount=2)]
    )
    assert _events(h, qev.WorkloadGrown) == []
    assert set(_started(h, "partial")) == {"w-0", "w-1"}


def test_it_finishes_when_its_running_pods_succeed_and_the_waiting_ones_are_dropped() -> None:
    """As a shrunk workload does: its admitted pods all succeeded, it is done."""
    h = run_verified(_cluster(), [gpu_job("other", 0, 2, 1, 100), _elastic("elastic", 1, 4, 2, 10)])
    assert _events(h, qev.WorkloadGrown) == []
    finished = {e.workload_id: (e, at) for e, at in _timed(h, qev.WorkloadFinished)}
    assert finished["elastic"][1] == 11.0
    assert "all 2 pods succeeded" in finished["elastic"][0].message


def test_it_grows_by_what_fits_one_step_at_a_time() -> None:
    """Volcano schedules pending tasks as resources free up: one GPU free, one pod."""
    h = run_verified(
        _cluster(),
        [
            gpu_job("a", 0, 1, 1, 30),
            gpu_job("b", 0, 2, 1, 60),
            _elastic("elastic", 1, 4, 1, 100),
        ],
    )
    grown = [(e.pods, at) for e, at in _timed(h, qev.WorkloadGrown)]
    assert grown == [(("w-1",), 30.0), (("w-2", "w-3"), 60.0)]


def test_pods_given_up_to_a_preemptor_come_back_when_it_ends() -> None:
    """peers.md §2.4: Volcano keeps the preempted tasks of an elastic job pending."""
    cluster = _cluster(preemption={"withinClusterQueue": "LowerPriority"})
    h = run_verified(
        cluster, [_elastic("elastic", 0, 4, 2, 100), gpu_job("urgent", 1, 2, 1, 10, priority=10)]
    )
    shrunk = _timed(h, qev.WorkloadShrunk)
    assert [(e.pods, at) for e, at in shrunk] == [(("w-2", "w-3"), 1.0)]
    grown = _timed(h, qev.WorkloadGrown)
    assert [(e.pods, dict(e.pod_counts), at) for e, at in grown] == [
        (("w-2", "w-3"), {"w": 4}, 11.0)
    ]
    assert _started(h, "elastic")["w-2"] == 11.0
    finished = {e.workload_id: e for e in _events(h, qev.WorkloadFinished)}
    assert "all 4 pods succeeded" in finished["elastic"].message
    assert not any(_queue(h).usage["cq"].get("gpu", {}).values())


def test_a_pending_workload_of_the_same_priority_goes_before_surplus_pods() -> None:
    """Volcano's job order: priority, then jobs not ready (pending gangs) before ready
    ones (a running gang's pending tasks): the freed room goes to the pending gang."""
    h = run_verified(
        _cluster(),
        [
            gpu_job("holder", 0, 2, 1, 50),
            _elastic("elastic", 1, 4, 2, 100),
            gpu_job("waiting", 2, 2, 1, 20),
        ],
    )
    reserved = {e.workload_id: at for e, at in _timed(h, qev.QuotaReserved)}
    assert reserved["waiting"] == 50.0
    assert [at for _, at in _timed(h, qev.WorkloadGrown)] == [70.0]


def test_surplus_pods_of_a_higher_priority_go_before_a_lower_priority_workload() -> None:
    h = run_verified(
        _cluster(),
        [
            gpu_job("holder", 0, 2, 1, 50),
            _elastic("elastic", 1, 4, 2, 100, priority=10),
            gpu_job("low", 2, 2, 1, 20),
        ],
    )
    assert [at for _, at in _timed(h, qev.WorkloadGrown)] == [50.0]
    reserved = {e.workload_id: at for e, at in _timed(h, qev.QuotaReserved)}
    assert reserved["low"] == 150.0  # when the elastic job (its quota) is done


@pytest.mark.parametrize(
    ("strategy", "grown", "big"), [("StrictFIFO", [], 101.0), ("BestEffortFIFO", [50.0], 150.0)]
)
def test_a_strict_fifo_head_that_waits_holds_back_surplus_pods(
    strategy: str, grown: list[float], big: float
) -> None:
    """kueue.md: a StrictFIFO head that does not fit blocks its queue; the room freed at
    50 is not given to the running job's waiting pods while it waits for more."""
    h = run_verified(
        _cluster(queueingStrategy=strategy),
        [
            gpu_job("holder", 0, 2, 1, 50),
            _elastic("elastic", 1, 4, 2, 100),
            gpu_job("big", 2, 4, 1, 10),
        ],
    )
    assert [at for _, at in _timed(h, qev.WorkloadGrown)] == grown
    reserved = {e.workload_id: at for e, at in _timed(h, qev.QuotaReserved)}
    assert reserved["big"] == big


def test_surplus_pods_never_preempt() -> None:
    """A running gang is not starving (Volcano's jobStarving: Waiting + Ready <
    minAvailable), so its pending pods evict nobody, not even a lower priority."""
    cluster = _cluster(preemption={"withinClusterQueue": "LowerPriority"})
    h = run_verified(
        cluster,
        [
            gpu_job("holder", 0, 1, 1, 50, priority=10),
            gpu_job("elastic", 1, 2, 2, 200, priority=10, minCount=1, surplus="Wait"),
            gpu_job("low", 2, 1, 1, 100),
        ],
    )
    reserved = {e.workload_id: e for e in _events(h, qev.QuotaReserved)}
    assert dict(reserved["elastic"].pod_counts) == {"w": 1}
    assert _events(h, qev.WorkloadEvicted) == []
    assert [(e.pods, at) for e, at in _timed(h, qev.WorkloadGrown)] == [(("w-1",), 102.0)]


def test_a_waiting_gang_preempts_only_for_its_minimum() -> None:
    """Volcano preempts for a job only while it is starving (Waiting + Ready <
    minAvailable): one victim makes room for the minimum; the other pods come when the
    second low-priority workload ends. Kueue's partial admission (surplus Drop) preempts
    for the full count when it can."""
    cluster = _cluster(preemption={"withinClusterQueue": "LowerPriority"})
    low = [gpu_job("low-a", 0, 2, 1, 50), gpu_job("low-b", 0, 2, 1, 80)]
    h = run_verified(cluster, [*low, _elastic("elastic", 1, 4, 2, 100, priority=10)])
    assert [e.workload_id for e in _events(h, qev.WorkloadEvicted)] == ["low-b"]
    reserved = [(e.workload_id, dict(e.pod_counts)) for e in _events(h, qev.QuotaReserved)]
    assert ("elastic", {"w": 2}) in reserved
    assert [at for _, at in _timed(h, qev.WorkloadGrown)] == [50.0]
    kueue = run_verified(cluster, [*low, gpu_job("partial", 1, 4, 1, 100, minCount=2, priority=10)])
    assert sorted(e.workload_id for e in _events(kueue, qev.WorkloadEvicted)) == ["low-a", "low-b"]


def test_a_waiting_gang_larger_than_its_queue_preempts_for_its_minimum() -> None:
    """8 pods on a queue of 4 GPUs can never all run (ExceedsMaxQuota), 2 can: Volcano
    preempts for those; the job grows to 4 when the other low-priority workload ends."""
    cluster = _cluster(preemption={"withinClusterQueue": "LowerPriority"})
    low = [gpu_job("low-a", 0, 2, 1, 50), gpu_job("low-b", 0, 2, 1, 80)]
    h = run_verified(cluster, [*low, _elastic("elastic", 1, 8, 2, 100, priority=10)])
    assert [e.workload_id for e in _events(h, qev.WorkloadEvicted)] == ["low-b"]
    grown = [(dict(e.pod_counts), at) for e, at in _timed(h, qev.WorkloadGrown)]
    assert grown == [({"w": 4}, 50.0)]


def test_a_waiting_gang_with_room_for_its_minimum_preempts_nobody() -> None:
    cluster = _cluster(preemption={"withinClusterQueue": "LowerPriority"})
    h = run_verified(
        cluster, [gpu_job("low", 0, 2, 1, 50), _elastic("elastic", 1, 4, 2, 100, priority=10)]
    )
    assert _events(h, qev.WorkloadEvicted) == []
    assert [at for _, at in _timed(h, qev.WorkloadGrown)] == [50.0]


def test_the_api_takes_surplus_only_with_min_count() -> None:
    doc = {"name": "w", "queueName": "q", "podSets": [{"count": 4, "surplus": "Wait"}]}
    with pytest.raises(InvalidInput) as e:
        parse.workload(doc)
    assert e.value.path == "podSets[0].surplus"
    doc["podSets"] = [{"count": 4, "minCount": 2, "surplus": "Later"}]
    with pytest.raises(InvalidInput) as e:
        parse.workload(doc)
    assert e.value.path == "podSets[0].surplus"
    doc["podSets"] = [{"count": 4, "minCount": 2, "surplus": "Wait"}]
    assert parse.workload(doc).pod_sets[0].surplus == "Wait"
    doc["podSets"] = [{"count": 4, "minCount": 2}]
    assert parse.workload(doc).pod_sets[0].surplus == "Drop"


SEED = Path(__file__).resolve().parents[2] / "examples" / "scenarios" / "volcano"
MX = "metax-tech.com/gpu"


def test_scenario_a_volcano_job_starts_with_min_available_and_the_rest_follow() -> None:
    """The seed Volcano Job (examples/scenarios/volcano/job-regular.yaml) with 4 replicas
    and minAvailable 2, on room for 2 of its pods (another job holds the rest): 2 start
    at once, the other 2 when that job finishes (peers.md §2.4)."""
    job = yaml.safe_load((SEED / "job-regular.yaml").read_text())
    job["spec"]["minAvailable"] = 2
    job["spec"]["tasks"][0]["replicas"] = 4
    job["metadata"]["annotations"] = {"muster.dev/runtime-seconds": "100"}
    other = parse.workload(
        {
            "name": "other",
            "queueName": "default",
            "podSets": [{"count": 2, "requests": {MX: 2}}],
            "runtime": {"durationSeconds": 40},
        }
    )
    cluster = {
        "name": "volcano",
        "zones": ["z"],
        "nodes": [{"name": "node", "count": 4, "allocatable": {MX: 2}}],
        "resourceFlavors": [{"name": "mx"}],
        "clusterQueues": [
            {
                "name": "mx",
                "resourceGroups": [
                    {
                        "coveredResources": [MX],
                        "flavors": [{"name": "mx", "resources": [{"name": MX, "nominalQuota": 8}]}],
                    }
                ],
            }
        ],
        "localQueues": [{"namespace": "default", "name": "default", "clusterQueue": "mx"}],
    }
    m = manifests.read([job])
    subs = [(0.0, "other", other), *((1.0, wl.name, wl) for _, wl in m.submissions())]
    h = run_verified(cluster, subs)
    started = _started(h, "job-demo")
    assert started == {
        "gpu-vectoradd-0": 1.0,
        "gpu-vectoradd-1": 1.0,
        "gpu-vectoradd-2": 40.0,
        "gpu-vectoradd-3": 40.0,
    }
    finished = {e.workload_id: e for e in _events(h, qev.WorkloadFinished)}
    assert finished["job-demo"].outcome == "Succeeded"
    assert "all 4 pods succeeded" in finished["job-demo"].message
