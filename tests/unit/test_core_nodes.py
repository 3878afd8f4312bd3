"""Simulated node agents: registration, pod lifecycles, exit codes and sharding."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import replace
from typing import Any, TypeVar

import pytest

from muster.core import inputs
from muster.core.decider import Decider
from muster.core.events import Envelope, Event
from muster.core.events import node as nev
from muster.core.events import provisioning as pev
from muster.core.events import queue as qev
from muster.core.model import parse
from muster.core.model.inventory import NodeInventory
from muster.core.nodes.decider import NodeAgentDecider
from muster.core.nodes.state import NodeAgentState, beating, evolve, owns
from muster.core.provisioning.decider import ProvisionerDecider
from muster.core.queueing.decider import QueueDecider
from muster.core.runner import DeciderRunner
from muster.core.sim.harness import Harness, build
from muster.core.verify import verify_decisions
from tests.unit.harness_inputs import envelope, event_as, gpu_job, gpu_node_cluster, submissions

GPU = "nvidia.com/gpu"
E = TypeVar("E", bound=Event)

CLUSTER: dict[str, Any] = {
    "name": "test",
    "region": "r1",
    "zones": ["r1-a", "r1-b"],
    "nodePools": [
        {"name": "gpu", "machineType": "m", "allocatable": {GPU: 8}, "provisioningDelaySeconds": 5}
    ],
    "resourceFlavors": [{"name": "gpu"}],
    "clusterQueues": [
        {
            "name": "cq",
            "resourceGroups": [
                {
                    "coveredResources": [GPU],
                    "flavors": [
                        {"name": "gpu", "resources": [{"name": GPU, "nominalQuota": 1000}]}
                    ],
                }
            ],
        }
    ],
    "localQueues": [{"namespace": "default", "name": "lq", "clusterQueue": "cq"}],
}


def workload_doc(
    name: str, count: int = 1, gpus: int = 8, duration: float = 30, exit_code: int = 0
) -> dict[str, Any]:
    return {
        "name": name,
        "queueName": "lq",
        "podSets": [{"name": "w", "count": count, "requests": {GPU: gpus}}],
        "runtime": {"durationSeconds": duration, "exitCode": exit_code},
    }


def run(
    workloads: Iterable[tuple[float, dict[str, Any]]],
    agents: Sequence[Decider[Any]] | None = None,
    cancels: Iterable[tuple[float, str]] = (),
) -> Harness:
    deciders: list[Decider[Any]] = [QueueDecider(), ProvisionerDecider()]
    deciders += list(agents) if agents is not None else [NodeAgentDecider()]
    h = build(parse.cluster(CLUSTER), submissions(workloads), cancels, deciders)
    h.run()
    return h


def of(h: Harness, cls: type[E], workload: str | None = None) -> list[tuple[Envelope, E]]:
    """The events of ``cls`` (node creations in either form: ``event_as``)."""
    return [
        (env, ev)
        for env in h.log.envelopes
        if isinstance(ev := event_as(env, cls), cls)
        and (workload is None or getattr(ev, "workload_id", None) == workload)
    ]


def test_pods_start_when_their_nodes_register() -> None:
    h = run([(2, workload_doc("job", count=3, duration=30))])
    registered = {ev.node: env for env, ev in of(h, nev.NodeRegistered)}
    provisioned = {env.stream_id: env for env, _ in of(h, pev.ProvisioningProvisioned)}
    (p_env,) = provisioned.values()
    assert p_env.occurred_at == 7.0  # submitted at 2, 5s boot
    assert len(registered) == 3
    started = of(h, nev.PodStarted, "job")
    assert sorted(ev.pod for _, ev in started) == ["w-0", "w-1", "w-2"]
    for env, ev in started:
        reg = registered[ev.node]
        assert reg.position > p_env.position  # registered once Ready, not before
        assert env.position > reg.position  # started after its node registered
        assert env.stream_id == nev.stream(ev.node)
        assert env.occurred_at == reg.occurred_at == 7.0
        assert ev.finishes_at == 37.0
    # Registration carries what the provisioner created.
    ((_, creating),) = of(h, pev.NodesCreating)
    for spec in creating.nodes:
        env = registered[spec.name]
        assert env.event.allocatable == spec.allocatable  # type: ignore[attr-defined]
        assert env.event.labels == spec.labels  # type: ignore[attr-defined]


def test_pods_are_placed_where_the_provisioner_said() -> None:
    h = run([(0, workload_doc("packed", count=4, gpus=4))])  # two pods a node
    ((_, up),) = of(h, pev.ProvisioningProvisioned)
    ((_, admitted),) = of(h, qev.WorkloadAdmitted, "packed")
    assert admitted.placements == up.assignments
    assert len(set(up.assignments.values())) == 2
    assert {ev.pod: ev.node for _, ev in of(h, nev.PodStarted, "packed")} == dict(up.assignments)


def test_pods_finish_at_start_plus_duration() -> None:
    h = run(
        [(0, workload_doc("a", count=2, duration=30)), (1.5, workload_doc("b", duration=12.25))]
    )
    for wid, duration in (("a", 30.0), ("b", 12.25)):
        started = {
            ev.pod: (env.occurred_at, ev.finishes_at) for env, ev in of(h, nev.PodStarted, wid)
        }
        done = {ev.pod: env.occurred_at for env, ev in of(h, nev.PodSucceeded, wid)}
        assert started.keys() == done.keys()
        for pod, (start, finishes_at) in started.items():
            assert finishes_at == start + duration
            assert done[pod] == finishes_at
        assert of(h, nev.PodFailed, wid) == []
    assert [env.occurred_at for env, _ in of(h, nev.PodSucceeded, "a")] == [35.0, 35.0]
    assert [env.occurred_at for env, _ in of(h, nev.PodSucceeded, "b")] == [18.75]
    ((env, fin),) = of(h, qev.WorkloadFinished, "a")
    assert (env.occurred_at, fin.outcome, fin.reason, fin.message) == (
        35.0,
        "Succeeded",
        "Succeeded",
        "all 2 pods succeeded",
    )


def test_non_zero_exit_code_fails_the_pod_and_the_workload() -> None:
    h = run([(0, workload_doc("bad", count=2, duration=20, exit_code=3))])
    failed = of(h, nev.PodFailed, "bad")
    assert sorted(ev.pod for _, ev in failed) == ["w-0", "w-1"]
    assert all((ev.exit_code, ev.reason) == (3, "Error") for _, ev in failed)
    assert all(env.occurred_at == 25.0 for env, _ in failed)
    assert of(h, nev.PodSucceeded, "bad") == []
    ((env, fin),) = of(h, qev.WorkloadFinished, "bad")
    assert env.occurred_at == 25.0
    assert (fin.outcome, fin.reason) == ("Failed", "PodFailed")
    assert fin.message == "pod w-0 failed: Error (exit code 3)"
    queue = h.runners[0]
    assert queue.state.status_of("bad") == "Finished"
    # Its nodes go away like a success's: with their deletion, having no pods by then.
    assert sum(len(ev.nodes) for _, ev in of(h, pev.NodesDeleted)) == 2
    assert of(h, nev.NodeRemoved) == [] and len(h.runners[2].state.gone) == 2


def test_nodes_are_removed_after_their_pods_end() -> None:
    """Deleted once their pods ended, the nodes go with the deletion: no node.removed."""
    h = run([(0, workload_doc("job", count=2, duration=10))])
    ((d_env, deleted),) = of(h, pev.NodesDeleted)
    last_pod_end = max(env.position for env, _ in of(h, nev.PodSucceeded, "job"))
    assert d_env.position > last_pod_end and of(h, nev.NodeRemoved) == []
    assert h.runners[2].state.nodes == set()
    assert sorted(h.runners[2].state.gone) == sorted(deleted.nodes)


def test_cancel_stops_running_pods() -> None:
    h = run([(0, workload_doc("long", count=2, duration=1000))], cancels=[(100, "long")])
    stopped = of(h, nev.PodStopped, "long")
    assert sorted(ev.pod for _, ev in stopped) == ["w-0", "w-1"]
    assert all(env.occurred_at == 100.0 for env, _ in stopped)
    assert of(h, nev.PodSucceeded, "long") == []
    assert len(of(h, nev.NodeRemoved)) == 2
    agent = h.runners[2].state
    assert agent.pods == {} and agent.nodes == set()


def test_shard_out_of_range_is_refused() -> None:
    with pytest.raises(ValueError, match=r"shard 2 is not in 0\.\.1"):
        NodeAgentDecider(2, 2)


def test_sharded_agents_run_every_pod_exactly_once() -> None:
    shards = [NodeAgentDecider(0, 2), NodeAgentDecider(1, 2)]
    docs = [
        (float(i), workload_doc(f"job{i}", count=1 + i % 3, duration=10 + 3 * i)) for i in range(8)
    ]
    h = run(docs, agents=shards)
    pods = {
        (wid, f"w-{k}")
        for _, d in docs
        for wid in [d["name"]]
        for k in range(d["podSets"][0]["count"])
    }

    for cls in (nev.PodStarted, nev.PodSucceeded):
        seen = Counter((ev.workload_id, ev.pod) for _, ev in of(h, cls))
        assert set(seen) == pods
        assert set(seen.values()) == {1}, cls

    # Each node is registered once, by the shard that owns it; both shards did work.
    created = [n.name for _, ev in of(h, pev.NodesCreating) for n in ev.nodes]
    registered = Counter(ev.node for _, ev in of(h, nev.NodeRegistered))
    assert sorted(registered) == sorted(created) and set(registered.values()) == {1}
    agents = {env.event.node: env.producer for env, _ in of(h, nev.NodeRegistered)}  # type: ignore[attr-defined]
    for node, producer in agents.items():
        shard = 0 if owns(node, 0, 2) else 1
        assert producer == f"node-agent-{shard}"
    assert set(agents.values()) == {"node-agent-0", "node-agent-1"}
    # Pod events are written by the node's owner (NodeRemoved: see the xfail test below).
    for cls in (nev.PodStarted, nev.PodSucceeded):
        for env, ev in of(h, cls):
            assert env.producer == agents[ev.node]

    finished = sorted(ev.workload_id for _, ev in of(h, qev.WorkloadFinished))
    assert finished == sorted(d["name"] for _, d in docs)


def test_sharded_run_matches_a_single_agent_run() -> None:
    docs = [(float(i), workload_doc(f"job{i}", count=1 + i % 2, duration=5 + i)) for i in range(6)]
    single = run(docs)
    sharded = run(docs, agents=[NodeAgentDecider(0, 2), NodeAgentDecider(1, 2)])

    def timeline(h: Harness) -> list[tuple[float, str, str]]:
        keep = (
            qev.QuotaReserved,
            qev.WorkloadAdmitted,
            qev.WorkloadFinished,
            nev.PodStarted,
            nev.PodSucceeded,
        )
        return sorted(
            (env.occurred_at, env.type, str(getattr(env.event, "pod", "")) + env.event.workload_id)  # type: ignore[attr-defined]
            for env in h.log.envelopes
            if isinstance(env.event, keep)
        )

    assert timeline(single) == timeline(sharded)


def test_only_the_owning_shard_removes_a_node_and_only_after_its_pods_ended() -> None:
    shards = [NodeAgentDecider(0, 2), NodeAgentDecider(1, 2)]
    h = run(
        [(0, workload_doc("job2", count=2, duration=1000))], agents=shards, cancels=[(100, "job2")]
    )
    ((_, creating),) = of(h, pev.NodesCreating)
    owner = {n.name: 0 if owns(n.name, 0, 2) else 1 for n in creating.nodes}
    pod_ends: dict[str, int] = {}
    for cls in (nev.PodSucceeded, nev.PodFailed, nev.PodStopped):
        for env, ev in of(h, cls):
            pod_ends[ev.node] = max(pod_ends.get(ev.node, 0), env.position)
    removed = of(h, nev.NodeRemoved)
    assert len(removed) == 2
    for env, ev in removed:
        assert env.producer == f"node-agent-{owner[ev.node]}"
        assert env.position > pod_ends[ev.node]


def test_each_replacement_is_the_next_run_even_when_the_last_never_started() -> None:
    """On a real cluster a replacement can fail before it starts (no ``PodStarted``): the
    next one is still a new run, not that failed pod again."""
    state = NodeAgentDecider(simulated=False).initial()
    key = ("w1", 1, "main-0")
    events: list[Event] = [
        nev.NodeRegistered(node="n1", allocatable={GPU: 8}, agent=state.agent),
        qev.WorkloadAdmitted(
            workload_id="w1", cluster_queue="cq", attempt=1, placements={"main-0": "n1"}, message=""
        ),
    ]
    for _ in range(2):  # fails (never having started), replaced
        events += [
            nev.PodFailed(
                node="n1", workload_id="w1", attempt=1, pod="main-0", exit_code=1, reason="Error"
            ),
            qev.PodReplaced(
                workload_id="w1", attempt=1, pod="main-0", node="n1", failures=1, message=""
            ),
        ]
    runs = []
    for i, ev in enumerate(events, 1):
        evolve(state, envelope(ev, i, stream=nev.stream("n1")))
        if isinstance(ev, qev.PodReplaced):
            runs.append(state.pods[key].run)
    assert runs == [1, 2]


def test_an_agent_keeps_who_registered_a_node_only_where_the_hash_says_otherwise() -> None:
    """``registrant`` only where it changes ``mine`` (a GPU host's agent registered a node
    the hash gives another shard, or this shard's node went to a GPU host's agent), and
    not once the node is removed: the embedded agents registered every node ever
    provisioned, and kept each for good."""
    decider = NodeAgentDecider(shard=0, shards=2)
    ours = next(f"n{i}" for i in range(99) if owns(f"n{i}", 0, 2))
    theirs = next(f"n{i}" for i in range(99) if not owns(f"n{i}", 0, 2))
    host = "node-agent-gpu-host"

    def registered(node: str, agent: str) -> nev.NodeRegistered:
        return nev.NodeRegistered(node=node, allocatable={GPU: 8}, agent=agent)

    state = _fold(decider, [registered(ours, decider.name), registered(theirs, "node-agent-1")])
    assert state.registrant == {} and state.nodes == {ours}
    state = _fold(decider, [registered(ours, host), registered(theirs, decider.name)])
    assert state.registrant == {ours: host, theirs: decider.name} and state.nodes == {theirs}
    state = _fold(
        decider,
        [
            registered(ours, host),
            registered(theirs, decider.name),
            nev.NodeRemoved(node=ours, reason="Deleted"),
            registered(theirs, "node-agent-1"),  # back to what the hash says
        ],
    )
    assert state.registrant == {}


def _fold(decider: NodeAgentDecider, events: Sequence[Event]) -> Any:
    state = decider.initial()
    for i, ev in enumerate(events, 1):
        state = decider.evolve(state, envelope(ev, i, at=float(i)))
    return state


@pytest.mark.parametrize("deleted_first", [True, False])
def test_a_deletion_wins_over_a_registration_in_either_order(deleted_first: bool) -> None:
    """Ghost nodes: the agent decided to register a node, the provisioner deleted it, and
    the deletion was logged first. The late registration must not keep the node live."""
    spec = pev.NodeSpec(name="n-1", pool="gpu", zone="z", machine_type="m", allocatable={GPU: 8})
    agent = NodeAgentDecider()
    registered = nev.NodeRegistered.of(
        NodeInventory(name="n-1", allocatable={GPU: 8}), agent.name, "req-1"
    )
    deleted = pev.NodesDeleted(request_id="req-1", nodes=("n-1",), reason="Cancelled", message="")
    events: list[Event] = [
        pev.NodesCreating(request_id="req-1", zone="z", nodes=(spec,), ready_at=1.0),
        pev.ProvisioningProvisioned(
            request_id="req-1", zone="z", assignments={"p-0": "n-1"}, message=""
        ),
    ]
    events += [deleted, registered] if deleted_first else [registered, deleted]
    state = _fold(agent, events)
    if not deleted_first:  # registered, without pods: its deletion removed it (``gone``)
        assert agent.decide(state) == [] and not state.nodes and not state.doomed
        assert state.gone == {"n-1": ("Cancelled", False)}
        state = replace(state, nodes={"n-1"}, doomed={"n-1": "Cancelled"})  # as an older agent's
    decided = [e.event for e in agent.decide(state)]
    assert [(type(e).__name__, e.node) for e in decided] == [("NodeRemoved", "n-1")]
    assert isinstance(decided[0], nev.NodeRemoved) and decided[0].reason == "Cancelled"
    assert beating(state) == []
    state = _fold(agent, [*events, decided[0]])
    assert agent.decide(state) == [] and not state.nodes and not state.deleted


def test_a_deletion_removes_a_node_without_pods_and_one_with_pods_once_they_stop() -> None:
    """Deleted together, the node without pods goes with the deletion (``gone``: no
    node.removed of its own; an older agent's, ``decided_before``, until it is folded) and
    the one running a pod once the pod is stopped, in the same decision, as before."""
    agent = NodeAgentDecider()
    spec = pev.NodeSpec(name="n-1", pool="gpu", zone="z", machine_type="m", allocatable={GPU: 8})
    idle = replace(spec, name="n-2")
    events: list[Event] = [
        pev.ProvisioningProvisioned(
            request_id="req-1",
            zone="z",
            assignments={"p-0": "n-1"},
            message="",
            nodes=(spec, idle),
            created=True,
        ),
        qev.WorkloadAdmitted(
            workload_id="w", cluster_queue="cq", attempt=0, placements={"p-0": "n-1"}, message=""
        ),
        pev.NodesDeleted(request_id="req-1", nodes=("n-1", "n-2"), reason="Gone", message=""),
    ]
    state = _fold(agent, events)
    assert state.gone == {"n-2": ("Gone", True)} and state.doomed == {"n-1": "Gone"}
    now = [(type(n.event).__name__, n.event.node) for n in agent.decide(state)]
    assert now == [("PodStopped", "n-1"), ("NodeRemoved", "n-1")]
    before = [(type(n.event).__name__, n.event.node) for n in agent.decided_before(state)]
    assert before == [("PodStopped", "n-1"), ("NodeRemoved", "n-1"), ("NodeRemoved", "n-2")]
    state = _fold(agent, [*events, nev.NodeRemoved(node="n-2", reason="Gone")])
    assert state.gone == {}


# -- node-bound agents: a DaemonSet pod per node (MUSTER_NODE_NAME from spec.nodeName) ----


def _bound_run(agents: Sequence[Decider[Any]], losses: Iterable[tuple[float, str]] = ()) -> Harness:
    """Two declared nodes n-0, n-1 of 8 GPUs; four jobs that fill both over time."""
    cluster = parse.cluster(gpu_node_cluster("bound", nodes=2, gpus=8, nominal=16))
    jobs = [gpu_job(f"j{i}", 10.0 * i, pods=1 + i % 2, gpus=4, seconds=50) for i in range(4)]
    deciders: list[Decider[Any]] = [QueueDecider(), ProvisionerDecider(), *agents]
    h = build(cluster, jobs, deciders=deciders, node_losses=losses)
    h.run(until=1000)
    return h


def test_a_node_bound_agent_acts_for_its_own_node_only() -> None:
    """docs/operations.md: each DaemonSet pod is the agent of the node it runs on, as
    Kubernetes' kubelet is: it registers that node and starts, ends and stops only the pods
    placed there; two agents over one store run every pod exactly once."""
    agents = [NodeAgentDecider(node="n-0"), NodeAgentDecider(node="n-1")]
    assert [a.name for a in agents] == ["node-agent-n-0", "node-agent-n-1"]
    h = _bound_run(agents)
    registered = {ev.node: env.producer for env, ev in of(h, nev.NodeRegistered)}
    assert registered == {"n-0": "node-agent-n-0", "n-1": "node-agent-n-1"}
    for cls in (nev.PodStarted, nev.PodSucceeded):
        seen = Counter((ev.workload_id, ev.pod) for _, ev in of(h, cls))
        assert sum(seen.values()) == 6 and set(seen.values()) == {1}, cls
        for env, ev in of(h, cls):
            assert env.producer == f"node-agent-{ev.node}"
    assert {ev.node for _, ev in of(h, nev.PodStarted)} == {"n-0", "n-1"}  # both did work
    # The same run as one agent for every node (the embedded, simulated stack's).
    single = _bound_run([NodeAgentDecider()])
    keep = (qev.WorkloadAdmitted, qev.WorkloadFinished, nev.PodStarted, nev.PodSucceeded)

    def timeline(run: Harness) -> list[tuple[float, str, str]]:
        return sorted(
            (env.occurred_at, env.type, f"{getattr(env.event, 'pod', '')}{env.correlation_id}")
            for env in run.log.envelopes
            if isinstance(env.event, keep)
        )

    assert timeline(h) == timeline(single)
    # Every decision of either agent replays from the log (a restart reaches the same).
    for agent in (NodeAgentDecider(node="n-0"), NodeAgentDecider(node="n-1")):
        checked, mismatches = verify_decisions(h.log.envelopes, agent)
        assert checked > 0 and mismatches == []


def test_a_node_bound_agent_registers_again_only_its_own_lost_node() -> None:
    """Another node's agent restarting says nothing about this node; this node's agent
    restarting registers it again (as the hash-sharded agents do for their share)."""
    agents = [NodeAgentDecider(node="n-0"), NodeAgentDecider(node="n-1")]
    cluster = parse.cluster(gpu_node_cluster("bound", nodes=2, gpus=8, nominal=16))
    deciders: list[Decider[Any]] = [QueueDecider(), ProvisionerDecider(), *agents]
    h = build(cluster, [], deciders=deciders, node_losses=[(5.0, "n-0")])
    h.schedule(inputs.agent_started("node-agent-n-1", 0, 10.0), producer="node-agent-n-1")
    h.run(until=20)
    assert [ev.node for _, ev in of(h, nev.NodeRegistered)] == ["n-0", "n-1"]
    h.schedule(inputs.agent_started("node-agent-n-0", 0, 30.0), producer="node-agent-n-0")
    h.run(until=40)
    again = [(env.producer, ev.node) for env, ev in of(h, nev.NodeRegistered)][2:]
    assert again == [("node-agent-n-0", "n-0")]


def test_a_node_bound_agent_is_not_a_shard() -> None:
    with pytest.raises(ValueError, match="not one of several shards"):
        NodeAgentDecider(0, 2, node="n-0")


def test_registration_and_first_pods_are_one_decision_when_both_are_due() -> None:
    """peers.md §4.4: pods bound to a Provisioned request's nodes run once the nodes are
    Ready. When the agent folds Provisioned and the admission together (the queue was
    quicker than the agent's step), it registers the node and starts its pods in one
    decision, registration first: one append, not two."""
    spec = pev.NodeSpec(name="n-1", pool="gpu", zone="z", machine_type="m", allocatable={GPU: 8})
    agent = NodeAgentDecider()
    events: list[Event] = [
        pev.NodesCreating(request_id="job.1", zone="z", nodes=(spec,), ready_at=1.0),
        pev.ProvisioningProvisioned(
            request_id="job.1", zone="z", assignments={"w-0": "n-1"}, message=""
        ),
        qev.WorkloadAdmitted(
            workload_id="job", attempt=1, cluster_queue="cq", message="", placements={"w-0": "n-1"}
        ),
    ]
    decided = [e.event for e in agent.decide(_fold(agent, events))]
    assert [(type(e).__name__, e.node) for e in decided] == [  # type: ignore[attr-defined]
        ("NodeRegistered", "n-1"),
        ("PodStarted", "n-1"),
    ]
    # Without the node's registration due (nor done), nothing starts on it.
    state = _fold(agent, [events[0], events[2]])
    assert agent.decide(state) == []


def test_the_pods_by_node_index_is_the_pods_grouped_by_node_after_every_event() -> None:
    """A deleted node's pods are stopped and a lost node's dropped by looking at that node's
    pods only (``by_node``): the index must be exactly the pods grouped by their node, after
    every event of a run with overlapping workloads, a cancellation (pods stopped on a node
    being deleted) and several nodes a workload; and the run re-derives."""
    h = run(
        [(i, workload_doc(f"j{i}", count=1 + i % 3, duration=20 + 7 * (i % 4))) for i in range(12)],
        cancels=[(15.0, "j5")],
    )
    runner: DeciderRunner[NodeAgentState] = DeciderRunner(NodeAgentDecider())
    for env in h.log.envelopes:
        runner.fold([env])
        grouped: dict[str, set[tuple[str, int, str]]] = {}
        for key, pod in runner.state.pods.items():
            grouped.setdefault(pod.node, set()).add(key)
        assert runner.state.by_node == grouped, env.type
    assert of(h, pev.NodesDeleted) and of(h, nev.PodStopped)
    _, mismatches = verify_decisions(h.log.envelopes, NodeAgentDecider())
    assert mismatches == []
