"""The provisioner's state: the cloud, its requests and the capacity they claim."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import singledispatch
from typing import Literal

from muster.core.decider import advance
from muster.core.events import Envelope, Event
from muster.core.events import provisioning as pev
from muster.core.events import queue as qev
from muster.core.events import workload as wev
from muster.core.model.cluster import ClusterSpec
from muster.core.model.workload import Toleration, WorkloadSpec

RequestStatus = Literal["Accepted", "Creating", "Provisioned", "Failed", "Cancelled", "Deleted"]
HOLDS_NODES: frozenset[str] = frozenset({"Creating", "Provisioned"})


@dataclass(frozen=True, slots=True)
class Wanted:
    """A quota reservation that needs nodes."""

    workload_id: str
    attempt: int
    node_selectors: dict[str, dict[str, str]]
    pod_counts: dict[str, int] = field(default_factory=dict)  # partial admission
    tolerations: dict[str, tuple[Toleration, ...]] = field(default_factory=dict)  # injected


@dataclass(slots=True)
class Request:
    id: str
    workload_id: str
    pod_sets: tuple[pev.PodSetNodes, ...]
    accepted_at: float
    zones: tuple[str, ...] = ()
    status: RequestStatus = "Accepted"
    zone: str | None = None
    nodes: tuple[pev.NodeSpec, ...] = ()
    ready_at: float | None = None
    waiting: tuple[str, str] | None = None


@dataclass(slots=True)
class ProvisionerState:
    now: float = 0.0
    cloud: ClusterSpec | None = None
    cloud_since: float = 0.0
    specs: dict[str, WorkloadSpec] = field(default_factory=dict)
    wanted: dict[str, Wanted] = field(default_factory=dict)  # request id -> reservation
    requests: dict[str, Request] = field(default_factory=dict)
    by_workload: dict[str, list[str]] = field(default_factory=dict)  # workload -> request ids
    # Accepted or Creating, in acceptance order: what each step has to look at.
    open: dict[str, None] = field(default_factory=dict)
    released: set[str] = field(default_factory=set)  # requests whose workload let go
    in_use: dict[tuple[str, str], int] = field(default_factory=dict)  # (pool, zone) -> nodes
    quota_used: dict[str, int] = field(default_factory=dict)  # cloud quota name -> amount

    def open_requests(self) -> list[Request]:
        return [self.requests[rid] for rid in self.open]


def request_id(workload_id: str, attempt: int) -> str:
    return f"{workload_id}.{attempt}"


def evolve(state: ProvisionerState, envelope: Envelope) -> ProvisionerState:
    advance(state, envelope)
    _apply(envelope.event, state)
    return state


@singledispatch
def _apply(event: Event, state: ProvisionerState) -> None:
    """Other events only move the clock."""


@_apply.register
def _(event: pev.CloudConfigured, state: ProvisionerState) -> None:
    state.cloud = event.spec
    state.cloud_since = state.now


@_apply.register
def _(event: wev.WorkloadSubmitted, state: ProvisionerState) -> None:
    state.specs[event.workload_id] = event.spec


@_apply.register
def _(event: qev.QuotaReserved, state: ProvisionerState) -> None:
    rid = request_id(event.workload_id, event.attempt)
    selectors = {ps: dict(sel) for ps, sel in event.node_selectors.items()}
    state.wanted[rid] = Wanted(
        event.workload_id,
        event.attempt,
        selectors,
        dict(event.pod_counts),
        {p: tuple(t) for p, t in event.tolerations.items()},
    )


def _release(workload_id: str, state: ProvisionerState) -> None:
    for rid in [r for r, w in state.wanted.items() if w.workload_id == workload_id]:
        del state.wanted[rid]
    for rid in state.by_workload.get(workload_id, ()):
        if state.requests[rid].status in ("Accepted", *HOLDS_NODES):
            state.released.add(rid)


@_apply.register
def _(event: qev.WorkloadFinished, state: ProvisionerState) -> None:
    _release(event.workload_id, state)


@_apply.register
def _(event: qev.WorkloadEvicted, state: ProvisionerState) -> None:
    _release(event.workload_id, state)


@_apply.register
def _(event: qev.WorkloadCancelled, state: ProvisionerState) -> None:
    _release(event.workload_id, state)


@_apply.register
def _(event: qev.WorkloadRejected, state: ProvisionerState) -> None:
    _release(event.workload_id, state)


@_apply.register
def _(event: pev.ProvisioningAccepted, state: ProvisionerState) -> None:
    state.wanted.pop(event.request_id, None)
    state.requests[event.request_id] = Request(
        id=event.request_id,
        workload_id=event.workload_id,
        pod_sets=event.pod_sets,
        accepted_at=state.now,
        zones=event.zones,
    )
    state.by_workload.setdefault(event.workload_id, []).append(event.request_id)
    state.open[event.request_id] = None


@_apply.register
def _(event: pev.ProvisioningWaiting, state: ProvisionerState) -> None:
    state.requests[event.request_id].waiting = (event.reason, event.message)


@_apply.register
def _(event: pev.NodesCreating, state: ProvisionerState) -> None:
    req = state.requests[event.request_id]
    req.status, req.zone, req.nodes, req.ready_at = (
        "Creating",
        event.zone,
        event.nodes,
        event.ready_at,
    )
    _claim(state, req.nodes, +1)


@_apply.register
def _(event: pev.ProvisioningProvisioned, state: ProvisionerState) -> None:
    state.requests[event.request_id].status = "Provisioned"
    state.open.pop(event.request_id, None)


@_apply.register
def _(event: pev.ProvisioningFailed, state: ProvisionerState) -> None:
    state.wanted.pop(event.request_id, None)
    req = state.requests.get(event.request_id)
    if req is not None:
        req.status = "Failed"
    state.released.discard(event.request_id)
    state.open.pop(event.request_id, None)


@_apply.register
def _(event: pev.ProvisioningCancelled, state: ProvisionerState) -> None:
    state.requests[event.request_id].status = "Cancelled"
    state.released.discard(event.request_id)
    state.open.pop(event.request_id, None)


@_apply.register
def _(event: pev.NodesDeleted, state: ProvisionerState) -> None:
    req = state.requests[event.request_id]
    _claim(state, req.nodes, -1)
    req.status = "Deleted"
    state.released.discard(event.request_id)
    state.open.pop(event.request_id, None)


def _claim(state: ProvisionerState, nodes: tuple[pev.NodeSpec, ...], sign: int) -> None:
    for node in nodes:
        key = (node.pool, node.zone)
        state.in_use[key] = state.in_use.get(key, 0) + sign
        for name, amount in node_quota_charge(state.cloud, node).items():
            state.quota_used[name] = state.quota_used.get(name, 0) + sign * amount


def node_quota_charge(cloud: ClusterSpec | None, node: pev.NodeSpec) -> dict[str, int]:
    """What one node counts against each regional quota that covers its pool."""
    if cloud is None:
        return {}
    return {
        q.name: node.allocatable.get(q.resource, 0)
        for q in cloud.quotas
        if q.covers(node.pool) and node.allocatable.get(q.resource, 0)
    }
