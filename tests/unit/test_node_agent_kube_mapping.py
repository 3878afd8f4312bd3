"""The node agent's Kubernetes backend, pure part: a pod object plus the agent's folded state
give the node events to append, each once; and the decider that runs beside it
(``simulated=False``) starts and ends no pod itself.
"""

from __future__ import annotations

import copy
import itertools
from datetime import UTC, datetime
from typing import Any

import pytest

from muster.core.events import Event
from muster.core.events import node as nev
from muster.core.events import queue as qev
from muster.core.events import timer as tev
from muster.core.events import workload as wev
from muster.core.model.workload import PodSet, Runtime, WorkloadSpec
from muster.core.nodes import kube
from muster.core.nodes.decider import NodeAgentDecider
from muster.core.nodes.state import NodeAgentState, evolve, owns
from muster.runtime.settings import SettingsError, load
from tests.unit.harness_inputs import envelope
from tests.unit.test_core_nodes import of, run, workload_doc

W = "0123456789abcdef"
NOW = 1_750_000_000.0
T0 = "2025-06-15T15:06:40Z"  # NOW
T1 = "2025-06-15T15:06:45Z"  # NOW + 5
PLACEMENTS = {"main-0": "n1", "main-1": "n2"}
_positions = itertools.count(1)


# --------------------------------------------------------------------------- helpers


def fold(state: NodeAgentState, *events: Event, at: float = NOW) -> NodeAgentState:
    for ev in events:
        n = next(_positions)
        evolve(state, envelope(ev, n, at=at))
    return state


def placed(
    placements: dict[str, str] | None = None, state: NodeAgentState | None = None
) -> NodeAgentState:
    """An agent whose nodes are registered and that expects W's pods (attempt 1)."""
    if state is None:
        state = NodeAgentDecider(simulated=False).initial()
    placements = PLACEMENTS if placements is None else placements
    spec = WorkloadSpec(
        name="train",
        namespace="team",
        queue_name="lq",
        pod_sets=(PodSet(name="main", count=len(placements), requests={"cpu": 1000}),),
    )
    for node in sorted(set(placements.values())):  # each by the agent of its shard
        shard = next(i for i in range(state.shards) if owns(node, i, state.shards))
        agent = "node-agent" if state.shards == 1 else f"node-agent-{shard}"
        fold(state, nev.NodeRegistered(node=node, allocatable={"cpu": 8000}, agent=agent))
    return fold(
        state,
        wev.WorkloadSubmitted(workload_id=W, spec=spec),
        qev.WorkloadAdmitted(
            workload_id=W, cluster_queue="cq", attempt=1, placements=placements, message=""
        ),
    )


def running(started: str = T0) -> dict[str, Any]:
    return {"state": {"running": {"startedAt": started}}}


def terminated(code: int, reason: str = "", started: str = T0) -> dict[str, Any]:
    term: dict[str, Any] = {"exitCode": code, "startedAt": started, "finishedAt": T1}
    if reason:
        term["reason"] = reason
    return {"state": {"terminated": term}}


def pod_obj(
    pod: str = "main-0",
    node: str = "n1",
    phase: str = "Pending",
    *containers: dict[str, Any],
    workload: str = W,
    attempt: str = "1",
    run: str | None = None,
    name: str | None = None,
    created: str = T0,
    status: dict[str, Any] | None = None,
) -> dict[str, Any]:
    labels = {kube.WORKLOAD_LABEL: workload, kube.ATTEMPT_LABEL: attempt, kube.POD_LABEL: pod}
    if run is not None:
        labels[kube.RUN_LABEL] = run
    statuses = [
        {"name": f"c{i}", "image": "busybox", "imageID": "", "ready": False, "restartCount": 0} | c
        for i, c in enumerate(containers)
    ]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name or f"train-{pod}",
            "namespace": "team",
            "uid": f"uid-{name or pod}",
            "labels": labels,
            "creationTimestamp": created,
        },
        "spec": {"nodeName": node, "containers": [{"name": "c0", "image": "busybox"}]},
        "status": {"phase": phase, "containerStatuses": statuses, **(status or {})},
    }


def seen(*objs: dict[str, Any], deleted: bool = False) -> list[kube.ObservedPod]:
    out = [kube.observe_pod(o, deleted=deleted) for o in objs]
    assert all(p is not None for p in out)
    return [p for p in out if p is not None]


def plan(state: NodeAgentState, *objs: dict[str, Any], now: float = NOW + 10) -> list[Event]:
    return [ev for _, ev in kube.plan_events(state, seen(*objs), now)]


def record(state: NodeAgentState, *objs: dict[str, Any]) -> list[Event]:
    """Plan, then fold what was planned (as appending it would), and check nothing is left."""
    events = plan(state, *objs)
    fold(state, *events)
    assert plan(state, *objs) == []
    return events


# --------------------------------------------------------------------------- observing


def test_a_pod_without_the_labels_is_not_a_muster_pod() -> None:
    good = pod_obj()
    assert kube.observe_pod(good) is not None
    for label in (kube.WORKLOAD_LABEL, kube.ATTEMPT_LABEL, kube.POD_LABEL):
        bad = copy.deepcopy(good)
        del bad["metadata"]["labels"][label]
        assert kube.observe_pod(bad) is None, label
    assert kube.observe_pod(pod_obj(attempt="one")) is None
    assert kube.observe_pod(pod_obj(run="x")) is None
    assert kube.observe_pod({}) is None


def test_observe_reads_labels_phase_times_and_exit() -> None:
    (p,) = seen(
        pod_obj("main-1", "n2", "Failed", terminated(0), terminated(3, "Error"), run="2"),
        deleted=True,
    )
    assert p.key == (W, 1, "main-1")
    assert (p.node, p.run, p.phase, p.ran, p.deleted) == ("n2", 2, "Failed", True, True)
    assert p.started_at == NOW
    assert (p.exit_code, p.exit_reason) == (3, "Error")
    assert p.ended

    (pending,) = seen(pod_obj(status={"startTime": T1}))
    assert (pending.ran, pending.ended, pending.exit_code) == (False, False, None)
    assert pending.started_at == NOW + 5  # no container started: the pod's startTime
    assert datetime.fromtimestamp(NOW, UTC).strftime("%Y-%m-%dT%H:%M:%SZ") == T0


# --------------------------------------------------------------------------- started / ended


def test_a_running_pod_is_started_once_at_its_start_time() -> None:
    state = placed()
    assert plan(state, pod_obj()) == []  # Pending
    (started,) = record(state, pod_obj("main-0", "n1", "Running", running(T1)))
    assert started == nev.PodStarted(
        node="n1", workload_id=W, attempt=1, pod="main-0", finishes_at=NOW + 5, run=0
    )
    assert state.pods[(W, 1, "main-0")].finishes_at == NOW + 5


def test_started_without_any_time_is_the_time_of_observation() -> None:
    state = placed()
    (started,) = plan(state, pod_obj("main-0", "n1", "Running"), now=NOW + 42)
    assert isinstance(started, nev.PodStarted) and started.finishes_at == NOW + 42
    # A container started, phase not Running yet: started too, at the container's start.
    (early,) = plan(state, pod_obj("main-0", "n1", "Pending", running(T1)))
    assert isinstance(early, nev.PodStarted) and early.finishes_at == NOW + 5


def test_succeeded_after_started_is_only_succeeded() -> None:
    state = placed()
    record(state, pod_obj("main-0", "n1", "Running", running()))
    (done,) = record(state, pod_obj("main-0", "n1", "Succeeded", terminated(0, "Completed")))
    assert done == nev.PodSucceeded(node="n1", workload_id=W, attempt=1, pod="main-0")
    assert (W, 1, "main-0") not in state.pods


def test_a_pod_first_seen_ended_is_started_and_ended_at_once() -> None:
    state = placed()
    events = record(
        state,
        pod_obj("main-0", "n1", "Succeeded", terminated(0, "Completed")),
        pod_obj("main-1", "n2", "Failed", terminated(2, "Error")),
    )
    assert [type(e).__name__ for e in events] == [
        "PodStarted",
        "PodSucceeded",
        "PodStarted",
        "PodFailed",
    ]
    assert state.pods == {}


@pytest.mark.parametrize(
    ("containers", "status", "expected"),
    [
        ([terminated(3, "Error")], {}, (3, "Error")),
        ([terminated(137, "OOMKilled")], {}, (137, "OOMKilled")),
        # The first container that failed, not a sidecar that exited cleanly before it.
        ([terminated(0, "Completed"), terminated(7, "Error")], {}, (7, "Error")),
        ([terminated(1)], {}, (1, "Error")),  # no reason given
        # The pod's own reason wins.
        ([terminated(137, "Error")], {"reason": "Evicted"}, (137, "Evicted")),
        ([], {"reason": "Evicted", "message": "low on memory"}, (137, "Evicted")),
        ([terminated(143)], {"reason": "DeadlineExceeded"}, (143, "DeadlineExceeded")),
    ],
)
def test_failed_carries_the_exit_code_and_reason(
    containers: list[dict[str, Any]], status: dict[str, Any], expected: tuple[int, str]
) -> None:
    state = placed()
    record(state, pod_obj("main-0", "n1", "Running", running()))
    (failed,) = record(state, pod_obj("main-0", "n1", "Failed", *containers, status=status))
    assert isinstance(failed, nev.PodFailed)
    assert (failed.exit_code, failed.reason) == expected


def test_a_pod_that_never_ran_fails_without_starting() -> None:
    state = placed()
    init = {"initContainerStatuses": [terminated(1, "Error")]}
    waiting = {"state": {"waiting": {"reason": "PodInitializing"}}}
    (failed,) = record(state, pod_obj("main-0", "n1", "Failed", waiting, status=init))
    assert isinstance(failed, nev.PodFailed)
    assert (failed.exit_code, failed.reason) == (1, "Error")  # the init container's


def test_a_pod_deleted_before_it_ended_failed() -> None:
    state = placed()
    record(state, pod_obj("main-0", "n1", "Running", running()))
    (gone,) = kube.plan_events(state, seen(pod_obj("main-0", "n1", "Running"), deleted=True), NOW)
    assert gone == (
        "n1",
        nev.PodFailed(
            node="n1", workload_id=W, attempt=1, pod="main-0", exit_code=137, reason="Deleted"
        ),
    )
    # Deleted once it had succeeded: it succeeded.
    done = seen(pod_obj("main-1", "n2", "Succeeded", terminated(0)), deleted=True)
    assert [type(e).__name__ for _, e in kube.plan_events(state, done, NOW)] == [
        "PodStarted",
        "PodSucceeded",
    ]


# --------------------------------------------------------------------------- not expected


def test_pods_the_agent_does_not_expect_are_not_reported() -> None:
    state = placed()
    up = ("Running", running())
    assert plan(state, pod_obj("main-0", "n2", *up)) == []  # not where it was placed
    assert plan(state, pod_obj("main-0", "", *up)) == []  # not bound
    assert plan(state, pod_obj("main-0", "n1", *up, workload="other")) == []
    assert plan(state, pod_obj("main-0", "n1", *up, attempt="2")) == []
    assert plan(state, pod_obj("main-9", "n1", *up)) == []


def test_only_the_nodes_of_this_shard() -> None:
    nodes = [f"node-{i}" for i in range(8)]
    placements = {f"main-{i}": n for i, n in enumerate(nodes)}
    ours = {n for n in nodes if owns(n, 0, 2)}
    assert ours and ours != set(nodes)
    state = placed(placements, NodeAgentDecider(0, 2, simulated=False).initial())
    pods = [pod_obj(p, n, "Running", running()) for p, n in placements.items()]
    assert {e.node for e in plan(state, *pods)} == ours  # type: ignore[attr-defined]


def test_stopping_pods_are_left_to_the_decider() -> None:
    state = placed()
    record(state, pod_obj("main-0", "n1", "Running", running()))
    fold(state, qev.WorkloadCancelled(workload_id=W, message="cancelled"))
    assert plan(state, pod_obj("main-0", "n1", "Failed", terminated(143))) == []
    news = NodeAgentDecider(simulated=False).decide(state)
    assert {type(n.event).__name__ for n in news} == {"PodStopped"}


# --------------------------------------------------------------------------- replaced pods


def replaced(state: NodeAgentState, pod: str = "main-0", node: str = "n1") -> None:
    fold(
        state,
        qev.PodReplaced(workload_id=W, attempt=1, pod=pod, node=node, failures=1, message=""),
    )


def test_a_replacement_is_the_next_pod_created_not_the_failed_one() -> None:
    state = placed()
    first = pod_obj("main-0", "n1", "Failed", terminated(3, "Error"), name="a")
    record(state, pod_obj("main-0", "n1", "Running", running(), name="a"))
    (failed,) = record(state, first)
    assert isinstance(failed, nev.PodFailed) and failed.exit_code == 3
    replaced(state)
    assert state.pods[(W, 1, "main-0")].run == 1
    # The failed pod is still there; its replacement is not yet: nothing to say.
    assert plan(state, first) == []
    # Created in the same second, still Pending: nothing either.
    second = pod_obj("main-0", "n1", "Pending", name="b")
    assert plan(state, first, second) == []
    (started,) = record(state, first, pod_obj("main-0", "n1", "Running", running(T1), name="b"))
    assert isinstance(started, nev.PodStarted)
    assert (started.run, started.finishes_at) == (1, NOW + 5)
    (done,) = record(state, first, pod_obj("main-0", "n1", "Succeeded", terminated(0), name="b"))
    assert isinstance(done, nev.PodSucceeded)


def test_a_replacement_that_ended_unseen_counts_once_it_exists() -> None:
    state = placed()
    first = pod_obj("main-0", "n1", "Failed", terminated(3), name="z-first", created=T0)
    record(state, first)
    replaced(state)
    # Its replacement ran and failed before the agent looked: a second pod, so run 1's.
    second = pod_obj("main-0", "n1", "Failed", terminated(4), name="a-second", created=T1)
    events = record(state, first, second)
    assert [type(e).__name__ for e in events] == ["PodStarted", "PodFailed"]
    assert events[1].exit_code == 4  # type: ignore[attr-defined]


def test_the_run_label_names_the_run() -> None:
    state = placed()
    record(state, pod_obj("main-0", "n1", "Failed", terminated(3), run="0", name="a"))
    replaced(state)
    # The failed pod was deleted: creation order alone would take run 1's pod for run 0's.
    second = pod_obj("main-0", "n1", "Running", running(), run="1", name="b")
    (started,) = record(state, second)
    assert isinstance(started, nev.PodStarted) and started.run == 1
    # A pod labelled with another run is not this run's.
    stale = pod_obj("main-0", "n1", "Failed", terminated(9), run="0", name="a")
    assert plan(state, stale, second) == []


# --------------------------------------------------------------------------- the decider


def test_the_decider_on_a_cluster_neither_starts_nor_ends_pods() -> None:
    simulated = placed(state=NodeAgentDecider().initial())
    on_cluster = placed()
    assert {type(n.event).__name__ for n in NodeAgentDecider().decide(simulated)} == {"PodStarted"}
    decider = NodeAgentDecider(simulated=False)
    assert decider.decide(on_cluster) == []
    record(on_cluster, pod_obj("main-0", "n1", "Running", running()))
    assert decider.next_deadline(on_cluster) is None  # no pod deadline: ends are observed
    assert decider.decide(on_cluster) == []
    assert decider.summary(on_cluster)["pods_running"] == 1


def test_the_decider_on_a_cluster_still_registers_and_removes_nodes() -> None:
    h = run(
        [(0, workload_doc("job", count=2, duration=30))],
        agents=[NodeAgentDecider(simulated=False)],
    )
    assert len(of(h, nev.NodeRegistered)) == 2
    assert of(h, nev.PodStarted) == of(h, nev.PodSucceeded) == of(h, nev.PodFailed) == []


# --------------------------------------------------------------------------- settings


def test_the_backend_setting() -> None:
    base = {"MUSTER_STORE_URL": "sqlite:///x.db", "MUSTER_KAFKA_BOOTSTRAP": "k:9092"}
    assert load(base).node_agent_backend == "simulated"
    assert load(base | {"MUSTER_NODE_AGENT_BACKEND": "kubernetes"}).node_agent_backend == (
        "kubernetes"
    )
    with pytest.raises(SettingsError, match="MUSTER_NODE_AGENT_BACKEND='k8s': use simulated or"):
        load(base | {"MUSTER_NODE_AGENT_BACKEND": "k8s"})


def test_the_service_wires_the_backend() -> None:
    from services.node_agent.__main__ import _routines
    from services.node_agent.__main__ import decider as _decider
    from services.node_agent.kube import kube_pods

    base = {"MUSTER_STORE_URL": "sqlite:///x.db", "MUSTER_KAFKA_BOOTSTRAP": "k:9092"}
    simulated = load(base)
    cluster = load(base | {"MUSTER_NODE_AGENT_BACKEND": "kubernetes"})
    assert _routines(simulated) == [] and _decider(simulated).simulated
    assert _routines(cluster) == [kube_pods] and not _decider(cluster).simulated
    # A DaemonSet pod (MUSTER_NODE_NAME) is its node's agent; without it, all nodes by hash.
    assert (_decider(simulated).node, _decider(simulated).name) == ("", "node-agent")
    bound = _decider(load(base | {"MUSTER_NODE_NAME": "gpu-7"}))
    assert (bound.node, bound.name) == ("gpu-7", "node-agent-gpu-7")
    with pytest.raises(SettingsError, match="MUSTER_NODE_NAME binds the node agent"):
        load(base | {"MUSTER_NODE_NAME": "gpu-7", "MUSTER_NODE_AGENT_SHARDS": "2"})


def test_runtime_is_not_what_ends_a_pod_on_a_cluster() -> None:
    """A declared duration and exit code are the simulation's; a cluster ignores them."""
    state = placed()
    state.runtimes[W] = Runtime(duration_seconds=1.0, exit_code=5)
    record(state, pod_obj("main-0", "n1", "Running", running()))
    fold(state, tev.TimerFired(owner="node-agent", deadline=NOW + 100), at=NOW + 100)
    assert NodeAgentDecider(simulated=False).decide(state) == []
    assert NodeAgentDecider().decide(state) != []  # simulated, it would have ended by now
