"""What intake answers GET with: each workload's current status and reason, and the
local queues that exist (to refuse submissions to unknown ones)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import singledispatch
from typing import Any

from muster.core.decider import own_handlers
from muster.core.events import Event, Folded, NewEvent
from muster.core.events import node as nev
from muster.core.events import queue as qev
from muster.core.events import workload as wev
from muster.core.model.queues import PodSetUpdate
from muster.core.pickling import compact
from muster.core.queueing import state as qs
from muster.core.views import accounting, provisioning
from muster.core.views import conditions as cond
from muster.core.views import nodes as node_view
from muster.core.views.conditions import rfc3339

TERMINAL = frozenset({"Succeeded", "Failed", "Cancelled", "Rejected"})
# Every status a workload view shows, in lifecycle order (list filters name one of them).
STATUSES = (
    "Pending",
    "QuotaReserved",
    "Admitted",
    "Running",
    "Succeeded",
    "Failed",
    "Preempted",
    "Cancelled",
    "Rejected",
)
_BY_LOWER = {s.lower(): s for s in STATUSES}


def status_named(raw: str) -> str | None:
    """The status ``raw`` names in any case (``pending``, ``QUOTARESERVED``), or None."""
    return _BY_LOWER.get(raw.lower())


@compact
@dataclass(slots=True)
class WorkloadView:
    id: str
    name: str
    namespace: str
    queue_name: str
    priority: int
    pods: int
    submitted_at: float
    digest: str | None
    status: str = "Pending"
    reason: str = "Submitted"
    message: str = "waiting for the queue"
    cluster_queue: str | None = None
    attempt: int = 0
    updated_at: float = 0.0
    cancel_requested: bool = False
    pods_started: int = 0
    # A gang member: its gang's name, size and workload (whose status it shows once formed).
    gang: str | None = None
    gang_size: int = 0
    gang_id: str | None = None
    # Kueue's status.conditions, folded by the same code explain runs over a history.
    conditions: cond.Conditions = field(default_factory=cond.Conditions)

    def to_json(self) -> dict[str, Any]:
        out = self._json()
        if self.gang is not None:
            out["gang"] = self.gang_json()
        return out

    def gang_json(self) -> dict[str, Any]:
        """A gang member's gang: its name, size and workload."""
        return {"name": self.gang, "cardinality": self.gang_size, "workloadId": self.gang_id}

    def _json(self) -> dict[str, Any]:
        submitted = rfc3339(self.submitted_at)
        # A fresh submission's two moments are one (every 201 formats it once).
        same = self.updated_at == self.submitted_at
        return {
            "id": self.id,
            "name": self.name,
            "namespace": self.namespace,
            "queueName": self.queue_name,
            "clusterQueue": self.cluster_queue,
            "priority": self.priority,
            "pods": self.pods,
            "status": self.status,
            "reason": self.reason,
            "message": self.message,
            "attempt": self.attempt,
            "submittedAt": self.submitted_at,
            "updatedAt": self.updated_at,
            # The same moments as Kueue shows times (RFC 3339); the numbers stay for clients.
            "submittedTime": submitted,
            "updatedTime": submitted if same else rfc3339(self.updated_at),
            "cancelRequested": self.cancel_requested,
        }


def admission_checks(entry: qs.WorkloadEntry) -> list[dict[str, Any]]:
    """Kueue's ``status.admissionChecks``: each check of the workload's current (or last)
    attempt, with the ``podSetUpdates`` the pods' creator applies to each pod set (the
    ProvisioningRequest check's consume annotations)."""
    return [
        {
            "name": name,
            "state": check.state,
            "message": check.message,
            "lastTransitionTime": rfc3339(check.at),
            "podSetUpdates": [_pod_set_update(u) for u in check.pod_set_updates],
        }
        for name, check in sorted(entry.run.checks.items())
    ]


def _pod_set_update(u: PodSetUpdate) -> dict[str, Any]:
    out: dict[str, Any] = {"name": u.name}
    for key, values in (
        ("labels", u.labels),
        ("annotations", u.annotations),
        ("nodeSelector", u.node_selector),
    ):
        if values:
            out[key] = dict(values)
    return out


def submitted_view(
    event: wev.WorkloadSubmitted | wev.GangMemberSubmitted, at: float
) -> WorkloadView:
    """A workload as it stands right after submission (intake answers POST with it); a gang
    member before its gang's other news."""
    spec = event.spec
    view = WorkloadView(
        id=event.workload_id,
        name=spec.name,
        namespace=spec.namespace,
        queue_name=spec.queue_name,
        priority=spec.priority,
        pods=spec.pod_count,
        submitted_at=at,
        digest=event.request_digest,
        updated_at=at,
    )
    if isinstance(event, wev.GangMemberSubmitted):
        assert spec.gang is not None
        view.id, view.reason, view.gang_id = event.member_id, "GangIncomplete", event.workload_id
        view.gang, view.gang_size = spec.gang.name, spec.gang.cardinality
    return view


@dataclass(slots=True)
class WorkloadsState:
    now: float = 0.0
    local_queues: set[str] = field(default_factory=set)  # "namespace/name"
    workloads: dict[str, WorkloadView] = field(default_factory=dict)
    # The queue's own fold, for the visibility API (positions, current reasons).
    # It keeps ended workloads whole (keep_ended): the pages show a finished one's pods.
    queue: qs.QueueState = field(default_factory=lambda: qs.QueueState(keep_ended=True))
    requests: dict[str, provisioning.RequestView] = field(default_factory=dict)
    gangs: dict[str, list[str]] = field(default_factory=dict)  # gang's workload -> members
    # ``get nodes`` and ``report``: the nodes' states, and each workload's accounting.
    nodes: dict[str, node_view.NodeRecord] = field(default_factory=dict)
    usage: dict[str, accounting.Usage] = field(default_factory=dict)


def evolve(state: WorkloadsState, envelope: Folded) -> WorkloadsState:
    if envelope.occurred_at > state.now:  # ``advance``, inline: intake folds every event
        state.now = envelope.occurred_at
    qs.evolve(state.queue, envelope)
    event = envelope.event
    plan = _PLANS.get(type(event))
    if plan is None:
        plan = _PLANS[type(event)] = _plan(type(event))
    requests, nodes, usage, own, conditions = plan
    if requests is not None:
        requests(event, state.requests, state.now)
    if nodes is not None:
        nodes(event, state.nodes, state.now)
    if usage is not None:
        usage(state.usage, event, envelope.occurred_at)
    if own is not None:
        own(event, state)
    wid = getattr(event, "workload_id", None)
    if conditions is not None and isinstance(wid, str):
        view = state.workloads.get(wid)
        if view is not None:
            conditions(event, view.conditions, envelope.occurred_at)
    if wid in state.gangs and wid in state.workloads:
        _follow(state, wid)
    return state


# What each fold does with an event type, looked up once a type: most types concern a
# few of the folds, and singledispatch's lookup on every call was a tenth of the view's
# fold in a burst. None: that fold ignores the type.
_Plan = tuple[
    Callable[[Any, dict[str, provisioning.RequestView], float], None] | None,
    Callable[[Any, dict[str, node_view.NodeRecord], float], None] | None,
    Callable[[dict[str, accounting.Usage], Any, float], None] | None,
    Callable[[Any, WorkloadsState], None] | None,
    Callable[[Any, cond.Conditions, float], None] | None,
]
_PLANS: dict[type, _Plan] = {}


def _plan(kind: type[Event]) -> _Plan:
    return (
        provisioning.handler(kind),
        node_view.handler(kind),
        accounting.handler(kind),
        _own(kind),
        cond.handler(kind),
    )


def _follow(state: WorkloadsState, gid: str) -> None:
    """A formed gang's members show its workload's status (copied once per change: a gang
    of a thousand pods starts them one event each)."""
    group = state.workloads[gid]
    members = state.gangs[gid]
    shown = _shown(group)
    if _shown(state.workloads[members[0]]) == shown:
        return
    for mid in members:
        member = state.workloads[mid]
        (
            member.status,
            member.reason,
            member.message,
            member.cluster_queue,
            member.attempt,
            member.cancel_requested,
            member.updated_at,
        ) = shown


def _shown(view: WorkloadView) -> tuple[str, str, str, str | None, int, bool, float]:
    """What a gang member shows of its gang's workload."""
    return (
        view.status,
        view.reason,
        view.message,
        view.cluster_queue,
        view.attempt,
        view.cancel_requested,
        view.updated_at,
    )


def _set(state: WorkloadsState, wid: str, status: str, reason: str, message: str) -> None:
    view = state.workloads.get(wid)
    if view is not None:
        view.status, view.reason, view.message, view.updated_at = status, reason, message, state.now


@singledispatch
def _apply(event: Event, state: WorkloadsState) -> None:
    pass


_own = own_handlers(_apply)  # the view's own handler for a type, None if it has none


@_apply.register
def _(event: qev.LocalQueueConfigured, state: WorkloadsState) -> None:
    state.local_queues.add(event.spec.key)


@_apply.register
def _(event: wev.WorkloadSubmitted, state: WorkloadsState) -> None:
    view = submitted_view(event, state.now)
    entry = state.queue.workloads.get(event.workload_id)
    if entry is not None:
        view.priority = entry.priority  # the priority class's value, once resolved
    state.workloads[event.workload_id] = view


@_apply.register
def _(event: wev.GangMemberSubmitted, state: WorkloadsState) -> None:
    members = state.gangs.setdefault(event.workload_id, [])
    members.append(event.member_id)
    view = state.workloads[event.member_id] = submitted_view(event, state.now)
    message = f"gang {view.gang} has {len(members)} of {view.gang_size} members"
    for mid in members:
        _set(state, mid, "Pending", "GangIncomplete", message)


@_apply.register
def _(event: wev.WorkloadCancelRequested, state: WorkloadsState) -> None:
    view = state.workloads.get(event.workload_id)
    if view is not None:
        view.cancel_requested = True
    elif event.workload_id in state.gangs:  # cancelled before it formed: nothing to run
        for mid in state.gangs[event.workload_id]:
            state.workloads[mid].cancel_requested = True
            _set(state, mid, "Cancelled", "Cancelled", "gang cancelled before it was complete")


@_apply.register
def _(event: qev.WorkloadPending, state: WorkloadsState) -> None:
    _set(state, event.workload_id, "Pending", event.reason, event.message)


@_apply.register
def _(event: qev.QuotaReserved, state: WorkloadsState) -> None:
    view = state.workloads[event.workload_id]
    view.cluster_queue, view.attempt, view.pods_started = event.cluster_queue, event.attempt, 0
    entry = state.queue.workloads.get(event.workload_id)
    if entry is not None:
        view.pods = entry.admitted_pods  # fewer when admitted partially
    _set(state, event.workload_id, "QuotaReserved", "QuotaReserved", event.message)


@_apply.register
def _(event: qev.WorkloadAdmitted, state: WorkloadsState) -> None:
    view = state.workloads.get(event.workload_id)
    if view is not None:
        view.attempt, view.pods_started = event.attempt, 0
    _set(state, event.workload_id, "Admitted", "Admitted", event.message)


@_apply.register
def _(event: nev.PodStarted, state: WorkloadsState) -> None:
    view = state.workloads.get(event.workload_id)
    if view is not None and view.attempt == event.attempt and view.status == "Admitted":
        view.pods_started += 1
        if view.pods_started >= view.pods:
            _set(state, view.id, "Running", "Running", f"all {view.pods} pods running")


@_apply.register
def _(event: qev.WorkloadEvicted, state: WorkloadsState) -> None:
    _set(state, event.workload_id, "Pending", "Evicted", event.message)


@_apply.register
def _(event: qev.WorkloadShrunk, state: WorkloadsState) -> None:
    """Surplus pods preempted: it runs on with fewer."""
    view = state.workloads.get(event.workload_id)
    if view is not None and view.attempt == event.attempt:
        view.pods = max(0, view.pods - len(event.pods))
        view.pods_started = min(view.pods_started, view.pods)
        _set(state, view.id, view.status, "PodsPreempted", event.message)


@_apply.register
def _(event: qev.WorkloadGrown, state: WorkloadsState) -> None:
    """Waiting pods added: it is Admitted (not Running) until they start too."""
    view = state.workloads.get(event.workload_id)
    if view is not None and view.attempt == event.attempt:
        view.pods += len(event.pods)
        status = "Admitted" if view.status == "Running" else view.status
        _set(state, view.id, status, "PodsAdmitted", event.message)


@_apply.register
def _(event: qev.WorkloadFinished, state: WorkloadsState) -> None:
    _set(state, event.workload_id, event.outcome, event.reason, event.message)


@_apply.register
def _(event: qev.WorkloadCancelled, state: WorkloadsState) -> None:
    _set(state, event.workload_id, "Cancelled", "Cancelled", event.message)


@_apply.register
def _(event: qev.WorkloadRejected, state: WorkloadsState) -> None:
    _set(state, event.workload_id, "Rejected", event.reason, event.message)


class WorkloadsView:
    """A decider that never decides: intake's read model."""

    name = "intake"
    # cloud: the declared nodes and the topology (get nodes; the queue fold routes by them)
    categories = frozenset({"config", "cloud", "workload", "admission", "provisioning", "node"})
    snapshot_format = "workloads-view-v14"

    def initial(self) -> WorkloadsState:
        return WorkloadsState()

    # The fold itself, not a method calling it: a call fewer on every event intake folds.
    evolve = staticmethod(evolve)

    def decide(self, state: WorkloadsState) -> list[NewEvent]:
        return []

    def next_deadline(self, state: WorkloadsState) -> float | None:
        return None

    def summary(self, state: WorkloadsState) -> dict[str, Any]:
        by_status: dict[str, int] = {}
        for view in state.workloads.values():
            by_status[view.status] = by_status.get(view.status, 0) + 1
        return {"now": state.now, "workloads": dict(sorted(by_status.items()))}
