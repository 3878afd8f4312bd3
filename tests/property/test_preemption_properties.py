"""Preemption on existing nodes is stable: random clusters of nodes, gangs, cohorts and
every preemption policy reach a fixed point, no preemptor evicts the same workload twice
while it waits, and a preemptor takes the room its victims free.

The clusters are small on purpose (2-4 nodes of 2 or 4 GPUs, 1-4 ClusterQueues in one or
two cohorts), so that quota and placement disagree often: a queue's quota fits where no
node has the room in one piece, which is where quota-only preemption used to evict for
nothing and livelock (../shared/repro/preemption-livelock is the first example).
"""

from __future__ import annotations

import pickle
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml
from hypothesis import example, given, settings
from hypothesis import strategies as st

from muster.core.events import Envelope
from muster.core.events import node as nev
from muster.core.events import queue as qev
from muster.core.events import workload as wev
from muster.core.queueing.decider import QueueDecider
from muster.core.queueing.state import QueueState
from muster.core.runner import DeciderRunner
from muster.core.sim.harness import Harness
from muster.core.verify import verify_decisions
from tests.property.test_core_properties import GPU, SETTINGS, Scenario
from tests.property.test_queueing_properties import (
    _encoded,
    _preemption,
    bounded_rounds,
    nonzero,
    queue_runner,
    run_checked,
)

Doc = dict[str, Any]
# Preemption happens in about one run of seven: draw more of them than elsewhere.
MORE = settings(SETTINGS, max_examples=150)
REPRO = Path(__file__).parents[2] / ".." / "shared" / "repro" / "preemption-livelock"


@st.composite
def node_clusters(draw: st.DrawFn) -> Doc:
    gpus = draw(st.sampled_from([2, 4]))
    racks = draw(st.integers(1, 2))
    nodes = [
        {
            "name": f"r{r}",
            "count": draw(st.integers(1, 2)),
            "allocatable": {GPU: gpus, "cpu": 64},
            "labels": {"rack": f"r{r}"},
        }
        for r in range(racks)
    ]
    cohorts = [f"c{i}" for i in range(draw(st.integers(1, 2)))]
    queues = []
    for q in range(draw(st.integers(1, 4))):
        queue: Doc = {
            "name": f"cq{q}",
            "queueingStrategy": draw(
                st.sampled_from(["BestEffortFIFO", "BestEffortFIFO", "StrictFIFO"])
            ),
            "preemption": _preemption(draw),
            "resourceGroups": [
                {
                    "coveredResources": [GPU],
                    "flavors": [
                        {
                            "name": "gpu",
                            "resources": [{"name": GPU, "nominalQuota": draw(st.integers(0, 6))}],
                        }
                    ],
                }
            ],
        }
        if draw(st.integers(0, 3)):
            queue["cohort"] = draw(st.sampled_from(cohorts))
        if draw(st.booleans()):
            queue["admissionScope"] = {"admissionMode": "UsageBasedAdmissionFairSharing"}
        queues.append(queue)
    return {
        "name": "nodes",
        "zones": ["z"],
        "resourceFlavors": [{"name": "gpu"}],
        "nodes": nodes,
        "topology": {"levels": ["rack", "kubernetes.io/hostname"]},
        "clusterQueues": queues,
        "localQueues": [
            {"namespace": ns, "name": f"lq{q}", "clusterQueue": f"cq{q}"}
            for q in range(len(queues))
            for ns in ("t1", "t2")
        ],
        "fairSharing": {"enable": draw(st.booleans())},
    }


@st.composite
def node_scenarios(draw: st.DrawFn) -> Scenario:
    cluster = draw(node_clusters())
    node_gpus = cluster["nodes"][0]["allocatable"][GPU]
    n_queues = len(cluster["clusterQueues"])
    workloads = []
    for n in range(draw(st.integers(2, 14))):
        count = draw(st.integers(1, 3))
        pod_set: Doc = {
            "name": "w",
            "count": count,
            "requests": {GPU: draw(st.integers(1, node_gpus))},
        }
        if count > 1 and draw(st.integers(0, 2)) == 0:
            pod_set["minCount"] = draw(st.integers(1, count - 1))
            if draw(st.integers(0, 3)):  # Volcano's minAvailable: the other pods wait
                pod_set["surplus"] = "Wait"
        doc = {
            "name": f"job{n}",
            "namespace": draw(st.sampled_from(["t1", "t2"])),
            "queueName": f"lq{draw(st.integers(0, n_queues - 1))}",
            "priority": draw(st.integers(0, 3)),
            "podSets": [pod_set],
            "runtime": {"durationSeconds": draw(st.integers(5, 80))},
        }
        at = float(draw(st.integers(0, 60)))
        workloads.append((at, f"w{n}", doc))
    return Scenario(cluster, tuple(workloads), (), shards=1, feasible=False)


def _repro() -> Scenario:
    cluster = yaml.safe_load((REPRO / "cluster.yaml").read_text())
    items = yaml.safe_load((REPRO / "workloads.yaml").read_text())["workloads"]
    subs = tuple(
        (float(w["at"]), f"{w['workload']['name']}-{i}", w["workload"]) for i, w in enumerate(items)
    )
    return Scenario(cluster, subs, (), shards=1, feasible=False)


def _run(sc: Scenario) -> Harness:
    h = sc.harness()
    with bounded_rounds():
        h.run()  # a livelock raises
    return h


def _periods(log: list[Envelope]) -> Iterator[tuple[str, list[qev.WorkloadEvicted]]]:
    """(preemptor, its evictions) for each time it waited: from its submission or requeue
    to the quota it then got."""
    current: dict[str, list[qev.WorkloadEvicted]] = {}
    for env in log:
        ev = env.event
        if isinstance(ev, qev.WorkloadEvicted) and ev.preemptor is not None:
            current.setdefault(ev.preemptor, []).append(ev)
        elif (
            isinstance(ev, qev.QuotaReserved | qev.WorkloadFinished | qev.WorkloadCancelled)
            and ev.workload_id in current
        ):
            yield ev.workload_id, current.pop(ev.workload_id)
    yield from current.items()


@MORE
@example(_repro())
@given(node_scenarios())
def test_preemption_on_nodes_settles_and_never_evicts_twice_for_one_wait(sc: Scenario) -> None:
    h = _run(sc)
    log = h.log.envelopes
    for preemptor, evictions in _periods(log):
        victims = [e.workload_id for e in evictions]
        assert len(victims) == len(set(victims)), (preemptor, victims)
    # ... nor over the whole run: two queues reclaiming from each other cannot ping-pong.
    pairs = [
        (e.event.preemptor, e.event.workload_id)
        for e in log
        if isinstance(e.event, qev.WorkloadEvicted | qev.WorkloadShrunk) and e.event.preemptor
    ]
    assert len(pairs) == len(set(pairs)), pairs
    # What the cycle remembers across decisions (placements that found no room) changes
    # no decision: replaying the log re-derives every one.
    for runner in h.runners:
        _, mismatches = verify_decisions(log, runner.decider)
        assert mismatches == [], mismatches[:1]


@MORE
@example(_repro())
@given(node_scenarios())
def test_a_preemptor_takes_the_room_its_victims_free(sc: Scenario) -> None:
    """Evictions are issued only where quota and placement then succeed: the preemptor
    gets its quota at the instant its victims are gone (nothing else may take the room)."""
    h = _run(sc)
    preempting: dict[str, float] = {}
    for env in h.log.envelopes:
        ev = env.event
        if isinstance(ev, qev.WorkloadPending) and ev.reason == "Preempting":
            preempting.setdefault(ev.workload_id, env.occurred_at)
        elif isinstance(ev, qev.QuotaReserved) and ev.workload_id in preempting:
            assert env.occurred_at == preempting.pop(ev.workload_id), ev.workload_id
    assert not preempting, f"preempted and never admitted: {preempting}"


@MORE
@given(node_scenarios())
def test_quota_and_nodes_stay_exact_through_growth_shrink_and_eviction(sc: Scenario) -> None:
    """Workloads grown by their waiting pods (admission.grown), shrunk by preemption,
    evicted and finished: quota is never exceeded and charged exactly what the pods ask,
    no node ever holds more than it has, and at the end everything is given back."""
    h, checker = run_checked(sc)
    queue = queue_runner(h).state
    assert not nonzero(queue.usage)
    assert not any(q for used in checker.usage.values() for q in used.values())
    _check_nodes(h.log.envelopes)
    assert not queue.growers and not queue.book.held


def _check_nodes(log: list[Envelope]) -> None:
    """Per node, the GPUs of the pods placed on it never exceed its GPUs."""
    gpus: dict[str, int] = {}
    asks: dict[str, int] = {}  # workload -> GPUs per pod (one pod set)
    placed: dict[str, dict[str, str]] = {}  # workload -> pod -> node
    for env in log:
        ev = env.event
        if isinstance(ev, nev.NodeRegistered):
            gpus[ev.node] = ev.inventory().allocatable.get(GPU, 0)
        elif isinstance(ev, wev.WorkloadSubmitted):
            asks[ev.workload_id] = ev.spec.pod_sets[0].requests.get(GPU, 0)
        elif isinstance(ev, qev.QuotaReserved) and ev.placement is not None:
            placed[ev.workload_id] = dict(ev.placement.nodes)
        elif isinstance(ev, qev.WorkloadGrown) and ev.workload_id in placed:
            assert not set(ev.pods) & set(placed[ev.workload_id]), "a pod placed twice"
            placed[ev.workload_id].update(ev.placement.nodes)
        elif isinstance(ev, qev.WorkloadShrunk) and ev.workload_id in placed:
            for pod in ev.pods:
                placed[ev.workload_id].pop(pod, None)
        elif isinstance(ev, qev.WorkloadEvicted | qev.WorkloadFinished | qev.WorkloadCancelled):
            placed.pop(ev.workload_id, None)
        used: dict[str, int] = {}
        for wid, pods in placed.items():
            for node in pods.values():
                used[node] = used.get(node, 0) + asks[wid]
        over = {n: u for n, u in used.items() if u > gpus.get(n, 0)}
        assert not over, f"after position {env.position}: {over}"


@MORE
@given(node_scenarios())
def test_a_fresh_notebook_decides_as_the_remembering_queue(sc: Scenario) -> None:
    """What the queue remembers (parked lanes, placement misses, growers that found no
    room) is a cache: at every state it decided from, a fresh one decides the same."""
    h = _run(sc)
    log = h.log.envelopes
    bases = {e.causation_id for e in log if e.producer == "queue"}
    runner: DeciderRunner[QueueState] = DeciderRunner(QueueDecider())
    for env in log:
        runner.fold([env])
        if env.event_id in bases:
            kept = pickle.dumps(runner.state)
            remembering = _encoded(runner.decider.decide(runner.state))
            assert _encoded(runner.decider.decide(pickle.loads(kept))) == remembering, env


def test_the_repro_preempts_the_two_workloads_of_one_node() -> None:
    h = _run(_repro())
    evicted = [e for e in h.log.envelopes if isinstance(e.event, qev.WorkloadEvicted)]
    assert len(evicted) == 2
    submitted = {
        e.event.workload_id: e.event.spec.name
        for e in h.log.envelopes
        if isinstance(e.event, wev.WorkloadSubmitted)
    }
    first = evicted[0].position
    nodes = {
        e.event.workload_id: set(e.event.placement.nodes.values())
        for e in h.log.envelopes[: first - 1]
        if isinstance(e.event, qev.QuotaReserved) and e.event.placement is not None
    }
    victims = {e.event.workload_id for e in evicted}
    assert len(set().union(*(nodes[v] for v in victims))) == 1, "victims on one node"
    f = next(w for w, name in submitted.items() if name == "f")
    assert all(e.event.preemptor == f for e in evicted)
