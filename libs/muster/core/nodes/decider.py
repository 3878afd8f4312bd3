"""The node agent's decider for simulated nodes.

Register nodes once they are Ready, stop pods whose workload or node went away,
start the pods placed on registered nodes, and end each pod at its finish time
with the exit code its workload declared.

With ``simulated=False`` (``MUSTER_NODE_AGENT_BACKEND=kubernetes``) pods run on a real cluster:
the state is folded the same way and nodes are still registered, removed, and pods stopped, but
no pod is started or ended here: the backend's shell (``services/node_agent/kube.py``) appends
what the cluster's pods report.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from muster.core.events import Event, Folded, NewEvent
from muster.core.events import node as nev
from muster.core.events import workload as wev
from muster.core.nodes.state import (
    NO_RUNTIME,
    NodeAgentState,
    Pod,
    PodKey,
    clock_only_types,
    evolve,
    run_seconds,
)


class NodeAgentDecider:
    categories = frozenset({"cloud", "workload", "admission", "provisioning", "node", "timer"})
    snapshot_format = "node-agent-state-v11"
    clock_only = clock_only_types()  # folded without their payload (core/decider.py)
    # A workload's runtime and grace are kept for its admission, which wakes the loop itself.
    wakes_later = frozenset({wev.WorkloadSubmitted.TYPE})

    def __init__(
        self, shard: int = 0, shards: int = 1, *, simulated: bool = True, node: str = ""
    ) -> None:
        """``node``: a node-bound agent (a DaemonSet pod, ``MUSTER_NODE_NAME``) acting for
        that node only, named ``node-agent-<node>``; else one of ``shards`` by hash."""
        if not 0 <= shard < shards:
            raise ValueError(f"shard {shard} is not in 0..{shards - 1}")
        if node and shards != 1:
            raise ValueError("a node-bound agent is not one of several shards")
        self.shard, self.shards, self.node = shard, shards, node
        self.simulated = simulated
        if node:
            self.name = f"node-agent-{node}"
        else:
            self.name = "node-agent" if shards == 1 else f"node-agent-{shard}"

    def initial(self) -> NodeAgentState:
        return NodeAgentState(shard=self.shard, shards=self.shards, agent=self.name, node=self.node)

    def evolve(self, state: NodeAgentState, envelope: Folded) -> NodeAgentState:
        return evolve(state, envelope)

    def decide(self, state: NodeAgentState) -> list[NewEvent]:
        out: list[tuple[str, str, Event]] = []  # (node, workload, event)
        for name in sorted(state.unregistered):
            reg = state.unregistered[name]
            out.append((name, "", nev.NodeRegistered.of(reg.inventory, self.name, reg.request_id)))
        for key in sorted(state.stopping):
            pod = state.pods[key]
            out.append(
                (
                    pod.node,
                    pod.workload_id,
                    nev.PodStopped(
                        node=pod.node,
                        workload_id=pod.workload_id,
                        attempt=pod.attempt,
                        pod=pod.name,
                        reason=state.stopping[key],
                        grace_seconds=state.graces.get(pod.workload_id, 30.0),
                    ),
                )
            )
        stopping = set(state.stopping)
        on = state.by_node
        busy = {n for n in state.doomed if any(k not in stopping for k in on.get(n, ()))}
        for name in sorted(state.doomed):
            if name not in busy:
                out.append((name, "", nev.NodeRemoved(node=name, reason=state.doomed[name])))
        # On a real cluster (not simulated) pods start and end when its pods say so.
        for key in _due(state, stopping) if self.simulated else []:
            pod = state.pods[key]
            if pod.finishes_at is None:
                out.append(
                    (
                        pod.node,
                        pod.workload_id,
                        nev.PodStarted(
                            node=pod.node,
                            workload_id=pod.workload_id,
                            attempt=pod.attempt,
                            pod=pod.name,
                            finishes_at=state.now + run_seconds(state, pod.workload_id),
                            run=pod.run,
                        ),
                    )
                )
            else:
                runtime = state.runtimes.get(pod.workload_id, NO_RUNTIME)
                out.append((pod.node, pod.workload_id, _exit(pod, runtime.exit_code_of(pod.run))))
        return [
            NewEvent(
                stream_id=nev.stream(node),
                event=event,
                occurred_at=state.now,
                correlation_id=workload or None,
            )
            for node, workload, event in out
        ]

    def decided_before(self, state: NodeAgentState) -> list[NewEvent]:
        """What an older agent decided in ``state`` (``verify``). A deleted node without pods
        (``gone``) stayed registered and doomed until its ``node.removed`` was folded. Before
        that, the agent registered the nodes a Provisioned created Ready (``implied``)
        itself, so until its registration was folded such a node was not registered but
        registering (its pods starting with it), and one deleted meanwhile was not doomed
        (it went once its registration was folded). A node gone with its registration
        implied is of a log of the agent between the two, which registered none itself."""
        gone = state.gone
        older = state
        if gone:
            older = replace(
                state,
                nodes=state.nodes | gone.keys(),
                doomed={**state.doomed, **{n: why for n, (why, _) in gone.items()}},
            )
            if any(implied for _, implied in gone.values()):
                return self.decide(older)
        if not older.implied:
            return self.decide(older)
        implied = older.implied
        older = replace(
            older,
            nodes=older.nodes - implied.keys(),
            unregistered={
                **older.unregistered,
                **{n: r for n, r in implied.items() if n not in older.doomed},
            },
            doomed={n: why for n, why in older.doomed.items() if n not in implied},
        )
        return self.decide(older)

    def summary(self, state: NodeAgentState) -> dict[str, Any]:
        running = sum(1 for p in state.pods.values() if p.finishes_at is not None)
        return {"now": state.now, "nodes": len(state.nodes), "pods_running": running}

    def next_deadline(self, state: NodeAgentState) -> float | None:
        if not self.simulated:
            return None  # pod ends are observed, not scheduled
        ends = state.ends
        at = ends.bisect_right((state.now, MAX_KEY))
        return ends[at][0] if at < len(ends) else None


MAX_KEY = ("\U0010ffff", 1 << 62, "")  # after every pod key, in (finishes_at, key) order


def _due(state: NodeAgentState, stopping: set[PodKey]) -> list[PodKey]:
    """Pods to start (placed on a registered node, or on one this same decision registers
    first: its registration and its first pods are one append) and pods whose run is over,
    in key order."""
    ends = state.ends
    over = ends.islice(0, ends.bisect_right((state.now, MAX_KEY)))
    nodes, registering = state.nodes, state.unregistered
    due = [k for k in state.to_start if (n := state.pods[k].node) in nodes or n in registering]
    due += [k for _, k in over]
    return sorted(k for k in due if k not in stopping)


def _exit(pod: Pod, code: int) -> Event:
    if code == 0:
        return nev.PodSucceeded(
            node=pod.node, workload_id=pod.workload_id, attempt=pod.attempt, pod=pod.name
        )
    return nev.PodFailed(
        node=pod.node,
        workload_id=pod.workload_id,
        attempt=pod.attempt,
        pod=pod.name,
        exit_code=code,
        reason="Error",
    )
