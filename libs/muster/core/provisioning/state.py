"""The provisioner's state: the cloud, its requests and the capacity they claim."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import singledispatch
from typing import Literal

from sortedcontainers import SortedList

from muster.core.decider import advance, unhandled_types
from muster.core.events import Event, Folded
from muster.core.events import provisioning as pev
from muster.core.events import queue as qev
from muster.core.events import workload as wev
from muster.core.model.cluster import ClusterSpec
from muster.core.model.workload import PodSet, Toleration

WAIT_BUCKETS = (10.0, 60.0, 300.0, 900.0, 3600.0, 4 * 3600.0, 86400.0, 7 * 86400.0)

# Pending: not yet accepted (a Wanted). Cancelled may still hold nodes that were booting.
RequestStatus = Literal["Accepted", "Creating", "Provisioned", "Failed", "Cancelled", "Deleted"]


@dataclass(frozen=True, slots=True)
class Wanted:
    """A request not yet accepted: for a quota reservation, or a standalone request."""

    workload_id: str  # "" for a standalone request
    attempt: int
    pod_sets: tuple[PodSet, ...]
    node_selectors: dict[str, dict[str, str]]
    pod_counts: dict[str, int] = field(default_factory=dict)  # partial admission
    tolerations: dict[str, tuple[Toleration, ...]] = field(default_factory=dict)  # injected
    provisioning_class: str = ""
    parameters: dict[str, str] = field(default_factory=dict)
    merge_policy: str = ""
    # Kueue names a workload's request <workload name>-<check>-<attempt>, in its namespace:
    # the admission check that asks ("" without one), the workload's name and namespace.
    check: str = ""
    name: str = ""
    namespace: str = ""


@dataclass(slots=True)
class Request:
    id: str
    workload_id: str  # "" for a standalone request
    pod_sets: tuple[pev.PodSetNodes, ...]
    accepted_at: float
    zones: tuple[str, ...] = ()
    status: RequestStatus = "Accepted"
    zone: str | None = None
    nodes: tuple[pev.NodeSpec, ...] = ()
    ready_at: float | None = None
    waiting: tuple[str, str] | None = None
    provisioning_class: str = ""
    max_run_seconds: float | None = None
    booking_seconds: float = 600.0
    provisioned_at: float | None = None
    held: bool = False  # its nodes exist (booting or Ready) and claim capacity
    consumed: bool = False  # some workload bound pods to its nodes
    consumers: set[str] = field(default_factory=set)  # workloads bound to it now
    idle_since: float | None = None  # its last consumer ended (standalone)
    deleted: bool = False  # a standalone request the user deleted

    @property
    def standalone(self) -> bool:
        return not self.workload_id

    def deadline(self) -> float | None:
        """When a held request's nodes go away if nothing else happens first."""
        if not self.held:
            return None
        times: list[float] = []
        if self.status == "Cancelled" and self.ready_at is not None:
            times.append(self.ready_at + self.booking_seconds)
        if self.provisioned_at is not None:
            if not self.consumed:
                times.append(self.provisioned_at + self.booking_seconds)
            if self.max_run_seconds is not None:
                times.append(self.provisioned_at + self.max_run_seconds)
        if self.standalone and self.consumed and not self.consumers and self.idle_since is not None:
            times.append(self.idle_since + self.booking_seconds)
        return min(times, default=None)


@dataclass(slots=True)
class ProvisionerState:
    now: float = 0.0
    cloud: ClusterSpec | None = None
    cloud_since: float = 0.0
    wanted: dict[str, Wanted] = field(default_factory=dict)  # request id -> not yet accepted
    requests: dict[str, Request] = field(default_factory=dict)
    by_workload: dict[str, list[str]] = field(default_factory=dict)  # workload -> request ids
    # Accepted or Creating, in acceptance order: what each step has to look at.
    open: dict[str, None] = field(default_factory=dict)
    # Requests whose nodes exist, in the order they came to hold them (-> that order's
    # number: a step lists what expires in this order without walking them all).
    held: dict[str, int] = field(default_factory=dict)
    holds: int = 0  # how many times a request came to hold nodes (the next order number)
    # Each held request's ``Request.deadline`` (those that have one), kept as its fields
    # change: a step finds what is due and the next deadline without asking every held
    # request (thousands in a burst) at every step. (deadline, request id), sorted.
    deadlines: dict[str, float] = field(default_factory=dict)
    by_deadline: SortedList = field(default_factory=SortedList)
    released: set[str] = field(default_factory=set)  # to cancel or delete: workload let go
    bound: dict[str, str] = field(default_factory=dict)  # consumer workload -> request
    in_use: dict[tuple[str, str], int] = field(default_factory=dict)  # (pool, zone) -> nodes
    quota_used: dict[str, int] = field(default_factory=dict)  # cloud quota name -> amount
    pod_sets: dict[str, tuple[PodSet, ...]] = field(default_factory=dict)  # workload -> spec
    names: dict[str, tuple[str, str]] = field(default_factory=dict)  # workload -> ns, name
    # Workload requests whose nodes were deleted, forgotten (a request of a workload's
    # attempt is never acted on again once its nodes are gone): how many per final status,
    # so that the summary still counts them and the state does not grow with every workload.
    over: dict[str, int] = field(default_factory=dict)
    # Accepted -> Provisioned: counts per WAIT_BUCKETS (and +Inf), and the sum of seconds.
    waits: tuple[list[int], float] = field(
        default_factory=lambda: ([0] * (len(WAIT_BUCKETS) + 1), 0.0)
    )

    def open_requests(self) -> list[Request]:
        return [self.requests[rid] for rid in self.open]

    def held_requests(self) -> list[Request]:
        return [self.requests[rid] for rid in self.held]

    def due_requests(self) -> list[Request]:
        """Held requests whose deadline has come (``now`` or before), in held order."""
        ends = self.by_deadline
        due = [rid for _, rid in ends.islice(0, ends.bisect_right((self.now, MAX_ID)))]
        return [self.requests[rid] for rid in sorted(due, key=self.held.__getitem__)]

    def next_held_deadline(self) -> float | None:
        """The earliest held request's deadline after ``now``."""
        ends = self.by_deadline
        at = ends.bisect_right((self.now, MAX_ID))
        return ends[at][0] if at < len(ends) else None


MAX_ID = "\U0010ffff"  # after every request id, in (deadline, request id) order


def _redate(state: ProvisionerState, req: Request) -> None:
    """Keep ``state.deadlines`` true after ``req``'s fields changed: every fold that
    changes what ``Request.deadline`` reads of a request ends with this."""
    deadline = req.deadline()
    before = state.deadlines.get(req.id)
    if deadline == before:
        return
    if before is not None:
        state.by_deadline.remove((before, req.id))
        del state.deadlines[req.id]
    if deadline is not None:
        state.deadlines[req.id] = deadline
        state.by_deadline.add((deadline, req.id))


def correlation_id(state: ProvisionerState, rid: str) -> str:
    """What a request's events are correlated with: its workload, or the request itself."""
    req = state.requests.get(rid)
    wanted = state.wanted.get(rid)
    workload = req.workload_id if req is not None else wanted.workload_id if wanted else ""
    if not workload and (parts := pev.split_request_id(rid)) is not None:
        workload = parts[0]
    return workload or rid[:64]


def evolve(state: ProvisionerState, envelope: Folded) -> ProvisionerState:
    advance(state, envelope)
    _apply(envelope.event, state)
    return state


@singledispatch
def _apply(event: Event, state: ProvisionerState) -> None:
    """Other events only move the clock."""


def clock_only_types() -> frozenset[str]:
    """Wire types the provisioner's fold only moves the clock on (``Decider.clock_only``):
    ``evolve`` is ``advance`` then ``_apply``, and ``_apply`` has no handler for them."""
    return unhandled_types(_apply)


@_apply.register
def _(event: pev.CloudConfigured, state: ProvisionerState) -> None:
    state.cloud = event.spec
    state.cloud_since = state.now


@_apply.register
def _(event: wev.WorkloadSubmitted, state: ProvisionerState) -> None:
    state.pod_sets[event.workload_id] = event.spec.pod_sets
    state.names[event.workload_id] = (event.spec.namespace, event.spec.name)


@_apply.register
def _(event: qev.QuotaReserved, state: ProvisionerState) -> None:
    if event.placement is not None:
        return  # placed on existing nodes: nothing to provision
    rid = pev.request_id(event.workload_id, event.attempt)
    ask = event.provisioning
    namespace, name = state.names.get(event.workload_id, ("", ""))
    state.wanted[rid] = Wanted(
        workload_id=event.workload_id,
        attempt=event.attempt,
        pod_sets=state.pod_sets.get(event.workload_id, ()),
        node_selectors={ps: dict(sel) for ps, sel in event.node_selectors.items()},
        pod_counts=dict(event.pod_counts),
        tolerations={p: tuple(t) for p, t in event.tolerations.items()},
        provisioning_class=ask.provisioning_class if ask else "",
        parameters=dict(ask.parameters) if ask else {},
        merge_policy=ask.pod_set_merge_policy if ask else "",
        check=ask.check if ask else "",
        name=name,
        namespace=namespace,
    )


@_apply.register
def _(event: pev.ProvisioningRequested, state: ProvisionerState) -> None:
    spec = event.spec
    state.wanted[event.request_id] = Wanted(
        workload_id="",
        attempt=0,
        pod_sets=spec.pod_sets,
        node_selectors={ps.name: dict(ps.node_selector) for ps in spec.pod_sets},
        provisioning_class=spec.provisioning_class,
        parameters=dict(spec.parameters),
    )


@_apply.register
def _(event: pev.ProvisioningDeleteRequested, state: ProvisionerState) -> None:
    req = state.requests.get(event.request_id)
    if req is not None:
        req.deleted = True
        if req.status in ("Accepted", "Creating"):
            state.released.add(req.id)
    elif event.request_id in state.wanted:
        state.released.add(event.request_id)


def _release(workload_id: str, state: ProvisionerState) -> None:
    """The workload let go of its quota: its requests are cancelled or their nodes deleted."""
    for rid in state.by_workload.get(workload_id, ()):
        if state.requests[rid].status in ("Accepted", "Creating", "Provisioned"):
            state.released.add(rid)
    for rid, w in state.wanted.items():
        if w.workload_id == workload_id:
            state.released.add(rid)
    rid = state.bound.pop(workload_id, "")
    if rid in state.requests:
        req = state.requests[rid]
        req.consumers.discard(workload_id)
        if not req.consumers:
            req.idle_since = state.now
        _redate(state, req)


@_apply.register
def _(event: qev.WorkloadAdmitted, state: ProvisionerState) -> None:
    req = state.requests.get(event.request_id)
    if req is not None:
        req.consumed = True
        req.consumers.add(event.workload_id)
        req.idle_since = None
        if req.standalone:
            state.bound[event.workload_id] = req.id
        _redate(state, req)


def _end(workload_id: str, state: ProvisionerState) -> None:
    """The workload is over for good: released, and its spec and name forgotten (no
    reservation of it comes again), so the state does not grow with every workload."""
    _release(workload_id, state)
    state.pod_sets.pop(workload_id, None)
    state.names.pop(workload_id, None)


@_apply.register
def _(event: qev.WorkloadFinished, state: ProvisionerState) -> None:
    _end(event.workload_id, state)


@_apply.register
def _(event: qev.WorkloadEvicted, state: ProvisionerState) -> None:
    _release(event.workload_id, state)


@_apply.register
def _(event: qev.WorkloadCancelled, state: ProvisionerState) -> None:
    _end(event.workload_id, state)


@_apply.register
def _(event: qev.WorkloadRejected, state: ProvisionerState) -> None:
    _end(event.workload_id, state)


def accepted_request(event: pev.ProvisioningAccepted, now: float) -> Request:
    """The request an acceptance at ``now`` records (the fold and a same-step search)."""
    return Request(
        id=event.request_id,
        workload_id=event.workload_id,
        pod_sets=event.pod_sets,
        accepted_at=now,
        zones=event.zones,
        provisioning_class=event.provisioning_class,
        max_run_seconds=event.max_run_seconds,
        booking_seconds=event.booking_seconds,
    )


@_apply.register
def _(event: pev.ProvisioningAccepted, state: ProvisionerState) -> None:
    state.wanted.pop(event.request_id, None)
    state.requests[event.request_id] = accepted_request(event, state.now)
    if event.workload_id:
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
    _hold(state, req)


@_apply.register
def _(event: pev.ProvisioningProvisioned, state: ProvisionerState) -> None:
    for before in event.stands_for(state.now):  # what it stands for, first
        _apply(before, state)
    req = state.requests[event.request_id]
    req.status = "Provisioned"
    req.provisioned_at = state.now
    waited = state.now - req.accepted_at
    counts, total = state.waits
    counts[next((i for i, b in enumerate(WAIT_BUCKETS) if waited <= b), len(WAIT_BUCKETS))] += 1
    state.waits = (counts, total + waited)
    if event.nodes and not req.held:  # a backend that reports nodes only when Ready
        req.zone, req.nodes = event.zone, event.nodes
        _hold(state, req)
    _redate(state, req)
    state.open.pop(event.request_id, None)


@_apply.register
def _(event: pev.ProvisioningFailed, state: ProvisionerState) -> None:
    wanted = state.wanted.pop(event.request_id, None)
    req = state.requests.get(event.request_id)
    if req is None and wanted is not None:
        # Failed before Accepted: counted as Failed (``_over_without_nodes``).
        req = state.requests[event.request_id] = Request(
            id=event.request_id, workload_id=wanted.workload_id, pod_sets=(), accepted_at=state.now
        )
        if wanted.workload_id:
            state.by_workload.setdefault(wanted.workload_id, []).append(event.request_id)
    if req is not None:
        req.status = "Failed"
        _redate(state, req)
    state.released.discard(event.request_id)
    state.open.pop(event.request_id, None)
    _over_without_nodes(state, req)


@_apply.register
def _(event: pev.ProvisioningCancelled, state: ProvisionerState) -> None:
    state.wanted.pop(event.request_id, None)
    req = state.requests.get(event.request_id)
    if req is not None:
        req.status = "Cancelled"
        _redate(state, req)
    state.released.discard(event.request_id)
    state.open.pop(event.request_id, None)
    _over_without_nodes(state, req)


def _over_without_nodes(state: ProvisionerState, req: Request | None) -> None:
    """A workload's request that failed or was cancelled before it had nodes is over: no
    deletion of its nodes comes to forget it (``_forget``), and it stayed for good (~600 on
    the 1M log). A later delete of its ProvisioningRequest finds it by its stream (the
    kube backend's ``should_delete``)."""
    if req is None or req.standalone or req.nodes or req.held or req.id in state.deadlines:
        return
    _forget(state, req)


@_apply.register
def _(event: pev.NodesDeleted, state: ProvisionerState) -> None:
    req = state.requests[event.request_id]
    if req.held:
        _claim(state, req.nodes, -1)
    req.held = False
    state.held.pop(req.id, None)
    if req.status != "Cancelled":
        req.status = "Deleted"
    _redate(state, req)
    state.released.discard(event.request_id)
    state.open.pop(event.request_id, None)
    if not req.standalone:
        _forget(state, req)


def requests_by_status(state: ProvisionerState) -> dict[str, int]:
    """Requests by status: ``Pending`` (wanted, not yet accepted), then every request's,
    the live ones and those forgotten once their nodes were deleted (``over``)."""
    counts = {"Pending": len(state.wanted)}
    for req in state.requests.values():
        counts[req.status] = counts.get(req.status, 0) + 1
    for status, n in state.over.items():
        counts[status] = counts.get(status, 0) + n
    return counts


def _forget(state: ProvisionerState, req: Request) -> None:
    """A workload's request whose nodes are gone is over: nothing the provisioner decides
    names it again (a retry is another attempt, another request), and what the log may
    still say of it (a late admission, the workload's end) changes nothing of it. It is
    dropped, and counted under its final status, so that the state (and every snapshot of
    it) holds the live requests only, not one more per workload ever provisioned."""
    del state.requests[req.id]
    ids = state.by_workload.get(req.workload_id)
    if ids is not None:
        ids.remove(req.id)
        if not ids:
            del state.by_workload[req.workload_id]
    state.over[req.status] = state.over.get(req.status, 0) + 1


def _hold(state: ProvisionerState, req: Request) -> None:
    req.held = True
    if req.id not in state.held:
        state.held[req.id] = state.holds
        state.holds += 1
    _claim(state, req.nodes, +1)
    _redate(state, req)


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
