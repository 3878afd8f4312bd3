"""A node agent's state: the nodes it runs and the pods on them."""

from __future__ import annotations

import zlib
from dataclasses import dataclass, field
from functools import singledispatch

from sortedcontainers import SortedList

from muster.core.bounded import keep_latest
from muster.core.decider import advance, unhandled_types
from muster.core.events import Event, Folded
from muster.core.events import node as nev
from muster.core.events import provisioning as pev
from muster.core.events import queue as qev
from muster.core.events import workload as wev
from muster.core.model.cluster import Checkpointing
from muster.core.model.cluster import kept as checkpoint_kept
from muster.core.model.inventory import ACCELERATORS, NodeInventory
from muster.core.model.workload import Runtime


def owns(node: str, shard: int, shards: int) -> bool:
    """Nodes are spread over agents by a stable hash, so every replay agrees."""
    return zlib.crc32(node.encode()) % shards == shard


PodKey = tuple[str, int, str]  # (workload, attempt, pod)
NO_RUNTIME = Runtime()  # a forgotten workload's runtime: built once, not per pod decided


@dataclass(slots=True)
class Pod:
    workload_id: str
    attempt: int
    name: str
    node: str
    finishes_at: float | None = None  # set once started
    run: int = 0  # replacements before this one
    started_at: float | None = None


@dataclass(frozen=True, slots=True)
class Registration:
    """A node to register: an existing (declared) node, or one a request provisioned."""

    inventory: NodeInventory
    request_id: str = ""


@dataclass(slots=True)
class NodeAgentState:
    shard: int = 0
    shards: int = 1
    agent: str = "node-agent"
    # A node-bound agent (MUSTER_NODE_NAME: a DaemonSet pod on that node) acts for this node
    # only; "" spreads the nodes over the shards by hash (the embedded, simulated agents).
    node: str = ""
    # node -> the agent that registered it, where that overrides the hash (``mine``): an
    # agent on a GPU host registers its own node (NVML), whatever the hash says; other
    # nodes go by the hash. Not kept where it says what the hash says (the embedded
    # agents: every node), nor once the node is gone: it grew with every node provisioned.
    registrant: dict[str, str] = field(default_factory=dict)
    now: float = 0.0
    runtimes: dict[str, Runtime] = field(default_factory=dict)  # workload -> runtime
    # Checkpoints (simulated): the cluster's default; per workload its interval (None: it
    # keeps nothing when stopped) and accelerators; the progress it kept over its stopped
    # attempts and the restore its current (next) attempt spends first.
    checkpointing: Checkpointing = field(default_factory=Checkpointing)
    checkpoints: dict[str, tuple[float | None, int]] = field(default_factory=dict)
    progress: dict[str, tuple[float, float]] = field(default_factory=dict)
    graces: dict[str, float] = field(default_factory=dict)  # workload -> SIGTERM..SIGKILL
    unregistered: dict[str, Registration] = field(default_factory=dict)
    nodes: set[str] = field(default_factory=set)  # registered, not yet removed or lost
    declared: dict[str, NodeInventory] = field(default_factory=dict)  # existing, owned
    lost: set[str] = field(default_factory=set)  # declared nodes declared lost
    runs: dict[tuple[str, int, str], int] = field(default_factory=dict)  # pod -> replacements
    doomed: dict[str, str] = field(default_factory=dict)  # node -> why it goes away
    # Nodes deleted while their registration was pending (node -> why): the registration
    # may be on its way already, and when it is folded the node goes at once. A deletion
    # wins over a registration, whatever their order in the log.
    deleted: dict[str, str] = field(default_factory=dict)
    # Nodes a Provisioned registered by creating them Ready (``created``: the simulated
    # cloud), with no ``node.registered`` of their own, until one is folded (a log an older
    # agent wrote) or the node goes: an older agent would still have registered them
    # (``NodeAgentDecider.decided_before``).
    implied: dict[str, Registration] = field(default_factory=dict)
    # Nodes a deletion removed at once, having no pod (node -> (why, whether its
    # registration was ``implied``)): an older agent logged their ``node.removed`` in its
    # next decision (``NodeAgentDecider.decided_before``). Kept until that event is folded
    # (a log an older agent wrote), the latest ``GONE_KEPT`` (to twice as many) only.
    gone: dict[str, tuple[str, bool]] = field(default_factory=dict)
    creating: dict[str, tuple[pev.NodeSpec, ...]] = field(default_factory=dict)  # request -> nodes
    pods: dict[tuple[str, int, str], Pod] = field(default_factory=dict)  # to start or running
    stopping: dict[tuple[str, int, str], str] = field(default_factory=dict)  # pod -> reason
    # Indexes over ``pods``, so a decision costs the pods it acts on: those not started
    # yet, the running ones by finish time, each workload's and each node's (a node's
    # deletion or loss, and whether a doomed node is still busy, look at its pods only:
    # a scan of every pod per deleted node grew with the pods running at once).
    to_start: set[PodKey] = field(default_factory=set)
    ends: SortedList = field(default_factory=SortedList)  # (finishes_at, pod key)
    by_workload: dict[str, set[PodKey]] = field(default_factory=dict)
    by_node: dict[str, set[PodKey]] = field(default_factory=dict)


def claims(node: str, state: NodeAgentState) -> bool:
    """Whether this agent acts for ``node`` before anyone registered it: its own node for a
    node-bound agent, its share by hash otherwise."""
    if state.node:
        return node == state.node
    return owns(node, state.shard, state.shards)


def mine(node: str, state: NodeAgentState) -> bool:
    if state.node:
        return node == state.node
    who = state.registrant.get(node)
    if who:
        return who == state.agent
    # One agent owns every node (no hash: asked of every pod event's node).
    return state.shards == 1 or owns(node, state.shard, state.shards)


def beating(state: NodeAgentState) -> list[str]:
    """The nodes this agent vouches for: registered, owned, not on their way out."""
    return sorted(n for n in state.nodes if n not in state.doomed)


def evolve(state: NodeAgentState, envelope: Folded) -> NodeAgentState:
    advance(state, envelope)
    _apply(envelope.event, state)
    return state


def add_pod(state: NodeAgentState, key: PodKey, pod: Pod) -> None:
    drop_pod(state, key)
    state.pods[key] = pod
    state.to_start.add(key)
    state.by_workload.setdefault(key[0], set()).add(key)
    state.by_node.setdefault(pod.node, set()).add(key)


def drop_pod(state: NodeAgentState, key: PodKey) -> None:
    pod = state.pods.pop(key, None)
    state.stopping.pop(key, None)
    if pod is None:
        return
    state.to_start.discard(key)
    if pod.finishes_at is not None:
        state.ends.discard((pod.finishes_at, key))
    on_node = state.by_node.get(pod.node)
    if on_node is not None:
        on_node.discard(key)
        if not on_node:
            del state.by_node[pod.node]
    keys = state.by_workload.get(key[0])
    if keys is not None:
        keys.discard(key)
        if not keys:
            del state.by_workload[key[0]]
            if key[0] not in state.runtimes:  # over (``_forget``): its last pod is gone
                state.graces.pop(key[0], None)


@singledispatch
def _apply(event: Event, state: NodeAgentState) -> None:
    """Other events only move the clock."""


def clock_only_types() -> frozenset[str]:
    """Wire types the node agent's fold only moves the clock on (``Decider.clock_only``):
    ``evolve`` is ``advance`` then ``_apply``, and ``_apply`` has no handler for them."""
    return unhandled_types(_apply)


@_apply.register
def _(event: wev.WorkloadSubmitted, state: NodeAgentState) -> None:
    state.runtimes[event.workload_id] = event.spec.runtime
    if event.spec.termination_grace_seconds != 30.0:
        state.graces[event.workload_id] = event.spec.termination_grace_seconds
    total = event.spec.total_requests()
    state.checkpoints[event.workload_id] = (
        event.spec.checkpoint_interval_seconds,
        sum(total.get(d, 0) for d in ACCELERATORS),
    )


def run_seconds(state: NodeAgentState, workload_id: str) -> float:
    """How long a simulated pod of the workload's next attempt runs: what is left after
    the progress it kept, plus the restore it spends first."""
    runtime = state.runtimes.get(workload_id, NO_RUNTIME)
    kept, restore = state.progress.get(workload_id, (0.0, 0.0))
    return max(0.0, runtime.duration_seconds - kept) + restore


def _checkpointed(state: NodeAgentState, workload_id: str) -> None:
    """Its attempt is stopped: it keeps its progress up to its last checkpoint (the
    restore it spent is none) and its next attempt restores first (with an interval)."""
    own, devices = state.checkpoints.get(workload_id, (None, 0))
    interval = state.checkpointing.interval(own)
    if interval is None:
        return  # it keeps nothing: the next attempt starts from the beginning
    pods = (state.pods[k] for k in state.by_workload.get(workload_id, ()))
    starts = [p.started_at for p in pods if p.started_at is not None]
    kept, restore = state.progress.get(workload_id, (0.0, 0.0))
    if starts:
        progress = max(0.0, state.now - min(starts) - restore)
        kept += checkpoint_kept(progress, interval)
    state.progress[workload_id] = (kept, state.checkpointing.restore(devices))


@_apply.register
def _(event: pev.NodesCreating, state: NodeAgentState) -> None:
    mine = tuple(n for n in event.nodes if claims(n.name, state))
    if mine:
        state.creating[event.request_id] = mine


@_apply.register
def _(event: pev.ProvisioningProvisioned, state: NodeAgentState) -> None:
    for before in event.stands_for(state.now):  # what it stands for, first
        _apply(before, state)
    for node in state.creating.pop(event.request_id, ()):
        inv = NodeInventory(name=node.name, allocatable=node.allocatable, labels=node.labels)
        registration = Registration(inv, event.request_id)
        if event.created:
            # Created Ready in this instant by the (simulated) cloud, which names them here:
            # registered by this event (Kubernetes: a Provisioned request's nodes are Ready
            # nodes), not by a node.registered of this agent's for every service to store,
            # fold and publish. A node that boots first registers as before.
            state.nodes.add(node.name)
            state.implied[node.name] = registration
        else:
            state.unregistered[node.name] = registration


@_apply.register
def _(event: pev.CloudConfigured, state: NodeAgentState) -> None:
    """Declared (simulated) existing nodes: this agent registers the ones it owns."""
    state.checkpointing = event.spec.checkpointing
    for inv in event.spec.nodes:
        if not claims(inv.name, state):
            continue
        state.declared[inv.name] = inv
        if inv.name not in state.nodes and inv.name not in state.lost:
            state.unregistered[inv.name] = Registration(inv)


@_apply.register
def _(event: nev.NodeLost, state: NodeAgentState) -> None:
    """Its pods died with it; nothing is reported for them (the queue evicts them)."""
    if not mine(event.node, state):
        return
    state.nodes.discard(event.node)
    state.unregistered.pop(event.node, None)
    state.implied.pop(event.node, None)
    state.doomed.pop(event.node, None)
    if event.node in state.declared:
        state.lost.add(event.node)
    for key in sorted(state.by_node.get(event.node, ())):
        drop_pod(state, key)


@_apply.register
def _(event: nev.AgentStarted, state: NodeAgentState) -> None:
    """A (re)started agent registers again the declared nodes that were lost."""
    if event.agent != state.agent if state.node else event.shard != state.shard:
        return  # another agent's start (node-bound agents all run as shard 0)
    for name in sorted(state.lost):
        state.unregistered[name] = Registration(state.declared[name])
    state.lost.clear()


@_apply.register
def _(event: qev.PodReplaced, state: NodeAgentState) -> None:
    if mine(event.node, state):
        key = (event.workload_id, event.attempt, event.pod)
        run = state.runs[key] = state.runs.get(key, 0) + 1
        add_pod(state, key, Pod(event.workload_id, event.attempt, event.pod, event.node, run=run))


@_apply.register
def _(event: pev.NodesDeleted, state: NodeAgentState) -> None:
    state.creating.pop(event.request_id, None)
    for name in event.nodes:
        if state.unregistered.pop(name, None) is not None:
            state.deleted[name] = event.reason
        if name in state.nodes:
            state.doomed[name] = event.reason
    for name in event.nodes:
        for key in sorted(state.by_node.get(name, ())):
            state.stopping[key] = f"node {name} removed"
        if name in state.doomed and not state.by_node.get(name):
            _gone(name, state)


GONE_KEPT = 1024  # an older agent's node.removed came in its decision after the deletion


def _gone(name: str, state: NodeAgentState) -> None:
    """A deleted node without pods is removed by its deletion (``node.removed`` only for a
    node whose pods end first): one event a provisioned node fewer for every service to
    store, fold and publish. No later event names the node: the queue's and intake's folds
    of its removal did nothing (the queue's book never held a request's node; intake's
    nodes view drops it at the deletion)."""
    state.gone[name] = (state.doomed.pop(name), state.implied.pop(name, None) is not None)
    state.registrant.pop(name, None)
    state.nodes.discard(name)
    state.deleted.pop(name, None)
    keep_latest(state.gone, GONE_KEPT)


@_apply.register
def _(event: nev.NodeRegistered, state: NodeAgentState) -> None:
    if event.agent:
        _registered_by(event.node, event.agent, state)
    if mine(event.node, state):
        state.unregistered.pop(event.node, None)
        state.implied.pop(event.node, None)
        state.nodes.add(event.node)
        state.lost.discard(event.node)
        late = state.deleted.pop(event.node, None)
        if late is not None:  # registered after its deletion: it goes at once
            state.doomed[event.node] = late


def _registered_by(node: str, agent: str, state: NodeAgentState) -> None:
    """Keep who registered ``node`` only where ``mine`` would say otherwise without it."""
    by_hash = state.shards == 1 or owns(node, state.shard, state.shards)  # as ``mine``
    if not state.node and (agent == state.agent) != by_hash:
        state.registrant[node] = agent
    else:
        state.registrant.pop(node, None)


@_apply.register
def _(event: nev.NodeRemoved, state: NodeAgentState) -> None:
    state.gone.pop(event.node, None)
    state.registrant.pop(event.node, None)
    state.nodes.discard(event.node)
    state.implied.pop(event.node, None)
    state.doomed.pop(event.node, None)
    state.deleted.pop(event.node, None)


@_apply.register
def _(event: qev.WorkloadAdmitted, state: NodeAgentState) -> None:
    for pod, node in event.placements.items():
        if mine(node, state):
            key = (event.workload_id, event.attempt, pod)
            add_pod(state, key, Pod(event.workload_id, event.attempt, pod, node))


def _stop_workload(workload_id: str, reason: str, state: NodeAgentState) -> None:
    if state.runs:
        state.runs = {k: v for k, v in state.runs.items() if k[0] != workload_id}
    for key in state.by_workload.get(workload_id, ()):
        state.stopping[key] = reason


@_apply.register
def _(event: qev.WorkloadEvicted, state: NodeAgentState) -> None:
    _checkpointed(state, event.workload_id)
    _stop_workload(event.workload_id, f"workload evicted: {event.reason}", state)


@_apply.register
def _(event: qev.WorkloadShrunk, state: NodeAgentState) -> None:
    """Preemption took these pods: they stop, the workload's others run on."""
    for pod in event.pods:
        key = (event.workload_id, event.attempt, pod)
        if key in state.pods:
            state.stopping[key] = f"preempted: {event.message}"


@_apply.register
def _(event: qev.WorkloadGrown, state: NodeAgentState) -> None:
    """Waiting pods of a running workload were placed: they start like admitted ones."""
    for pod, node in event.placement.nodes.items():
        if mine(node, state):
            key = (event.workload_id, event.attempt, pod)
            add_pod(state, key, Pod(event.workload_id, event.attempt, pod, node))


@_apply.register
def _(event: qev.WorkloadCancelled, state: NodeAgentState) -> None:
    _stop_workload(event.workload_id, "workload cancelled", state)
    _forget(state, event.workload_id)


@_apply.register
def _(event: qev.WorkloadFinished, state: NodeAgentState) -> None:
    _stop_workload(event.workload_id, f"workload finished: {event.outcome}", state)
    _forget(state, event.workload_id)


def _forget(state: NodeAgentState, workload_id: str) -> None:
    """The workload is over: what its next attempts would need goes. Its grace period
    stays while pods of it are still to stop (their PodStopped carries it), and goes with
    the last of them (``drop_pod``)."""
    state.runtimes.pop(workload_id, None)
    state.checkpoints.pop(workload_id, None)
    state.progress.pop(workload_id, None)
    if workload_id not in state.by_workload:
        state.graces.pop(workload_id, None)


@_apply.register
def _(event: nev.PodStarted, state: NodeAgentState) -> None:
    key = (event.workload_id, event.attempt, event.pod)
    pod = state.pods.get(key)
    if pod is not None:
        if pod.finishes_at is not None:
            state.ends.discard((pod.finishes_at, key))
        pod.finishes_at = event.finishes_at
        pod.started_at = state.now
        state.to_start.discard(key)
        state.ends.add((event.finishes_at, key))


def _end_pod(state: NodeAgentState, workload_id: str, attempt: int, name: str) -> None:
    drop_pod(state, (workload_id, attempt, name))


@_apply.register
def _(event: nev.PodSucceeded, state: NodeAgentState) -> None:
    _end_pod(state, event.workload_id, event.attempt, event.pod)


@_apply.register
def _(event: nev.PodFailed, state: NodeAgentState) -> None:
    _end_pod(state, event.workload_id, event.attempt, event.pod)


@_apply.register
def _(event: nev.PodStopped, state: NodeAgentState) -> None:
    key = (event.workload_id, event.attempt, event.pod)
    if key in state.stopping:  # not a pod of that name placed again since (admission.grown)
        _end_pod(state, event.workload_id, event.attempt, event.pod)
