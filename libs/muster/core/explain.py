"""Why a workload is where it is, at one point of the log.

``explain`` reads the queue's state folded up to a position and the workload's own
events up to the same position. It decides nothing of its own: a pending workload's
reason, flavors, shortfall and place in its queues are the visibility API's dry run of
the admission cycle (``queueing/visibility.py``), the one source every view takes the
current reason from; its conditions are the fold intake keeps (``views/conditions.py``);
the numbers beside a shortfall (nominal quota, usage) are read off the same state.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Any

from muster.core.events import Envelope
from muster.core.events import queue as qev
from muster.core.model.resources import format_quantity
from muster.core.queueing import state as qs
from muster.core.queueing.flavors import Assignment, Unassignable
from muster.core.queueing.state import QueueState, WorkloadEntry
from muster.core.queueing.visibility import PendingItem, pending_one
from muster.core.views import conditions as cond
from muster.core.views import provisioning as prov
from muster.core.views.conditions import rfc3339
from muster.core.views.workloads import admission_checks


@dataclass(frozen=True, slots=True)
class Shortfall:
    """One resource the workload lacks in one flavor of its ClusterQueue."""

    resource: str
    flavor: str
    requested: int  # the workload's total request
    nominal: int  # the ClusterQueue's nominal quota in the flavor
    used: int  # the ClusterQueue's usage in the flavor
    missing: int  # what the dry run found short (borrowing counted)

    def to_json(self) -> dict[str, Any]:
        q = lambda v: format_quantity(self.resource, v)  # noqa: E731
        return {
            "resource": self.resource,
            "flavor": self.flavor,
            "requested": q(self.requested),
            "nominalQuota": q(self.nominal),
            "used": q(self.used),
            "missing": q(self.missing),
        }


@dataclass(frozen=True, slots=True)
class Eviction:
    at: float
    kind: str  # Evicted | PodsPreempted (surplus pods taken, it ran on)
    reason: str
    message: str
    preemptor: str | None = None
    preemptor_name: str | None = None  # namespace/name
    preemption_reason: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "time": rfc3339(self.at),
            "kind": self.kind,
            "reason": self.reason,
            "message": self.message,
            "preemptor": self.preemptor,
            "preemptorName": self.preemptor_name,
            "preemptionReason": self.preemption_reason,
        }


@dataclass(frozen=True, slots=True)
class Explanation:
    workload_id: str
    position: int  # the log position the state was folded to
    at: float  # the state's logical time there
    status: str  # as GET shows it: Pending, QuotaReserved, Admitted, Running, Succeeded, ...
    reason: str
    message: str
    name: str = ""
    namespace: str = ""
    local_queue: str = ""
    cluster_queue: str | None = None
    priority: int = 0
    submitted_at: float | None = None
    conditions: tuple[cond.Condition, ...] = ()
    position_in_cluster_queue: int | None = None
    position_in_local_queue: int | None = None
    flavors: dict[str, dict[str, str]] = field(default_factory=dict)  # pod set -> res -> flavor
    flavors_tried: tuple[str, ...] = ()
    shortfall: tuple[Shortfall, ...] = ()
    victims: tuple[str, ...] = ()  # whom its preemption would take
    nodes: dict[str, str] = field(default_factory=dict)  # pod -> node
    checks: tuple[dict[str, Any], ...] = ()  # admission checks
    provisioning: dict[str, Any] | None = None  # its latest ProvisioningRequest's conditions
    evictions: tuple[Eviction, ...] = ()

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "id": self.workload_id,
            "name": self.name,
            "namespace": self.namespace,
            "localQueue": self.local_queue,
            "clusterQueue": self.cluster_queue,
            "priority": self.priority,
            "position": self.position,
            "time": rfc3339(self.at),
            "submittedAt": rfc3339(self.submitted_at) if self.submitted_at is not None else None,
            "status": self.status,
            "reason": self.reason,
            "message": self.message,
            "conditions": [c.to_json() for c in self.conditions],
            "flavors": self.flavors,
            "flavorsTried": list(self.flavors_tried),
            "shortfall": [s.to_json() for s in self.shortfall],
            "victims": list(self.victims),
            "nodes": self.nodes,
            "admissionChecks": list(self.checks),
            "provisioningRequest": self.provisioning,
            "evictions": [e.to_json() for e in self.evictions],
        }
        if self.position_in_cluster_queue is not None:
            out["queue"] = {
                "positionInClusterQueue": self.position_in_cluster_queue,
                "positionInLocalQueue": self.position_in_local_queue,
            }
        return out


def pending_item(state: QueueState, wid: str) -> PendingItem | None:
    """The visibility dry run's item for a pending workload (None if it is not pending)."""
    return pending_one(state, wid)


def explain(
    state: QueueState,
    wid: str,
    history: Iterable[Envelope],
    position: int,
    item: PendingItem | None = None,
    names: QueueState | None = None,
) -> Explanation:
    """``wid`` as the state folded to ``position`` shows it; ``history``: its events (those
    past ``position`` are left out). ``item``: the dry run's item when the caller has it
    (intake caches the dry run); computed here otherwise. ``names``: a state that knows
    the preemptors ``state`` let go of (``ENDED_KEPT``): intake's, which keeps them all."""
    events = [e for e in history if e.position <= position]
    wl = state.workloads.get(wid)
    if wl is None and (wid in state.ended or events):  # ended (the latest kept: ENDED_KEPT)
        wl = ended_entry(state, wid, events)
    if wl is None:
        return Explanation(
            wid, position, state.now, "Unknown", "NotSubmitted",
            f"not in the log up to position {position}",
        )  # fmt: skip
    conds = cond.Conditions()
    requests: dict[str, prov.RequestView] = {}
    for env in events:
        cond.fold(conds, env.event, env.occurred_at)
        prov.fold(requests, env.event, env.occurred_at)
    latest = list(requests.values())[-1] if requests else None
    request = latest.to_json() if latest is not None else None
    if item is None:
        item = pending_item(state, wid)
    status, reason, message = _status(wl, conds, item, latest)
    if item is not None:
        # One source: the pending reason is the dry run's, in the condition too.
        cond.put(conds.by_type, "QuotaReserved", "False", reason, message, state.now)
    base = Explanation(
        wid, position, state.now, status, reason, message,
        name=wl.spec.name,
        namespace=wl.spec.namespace,
        local_queue=wl.local_queue,
        cluster_queue=wl.run.cluster_queue or state.cluster_queue_of(wl.spec),
        priority=wl.priority,
        submitted_at=wl.submitted_at,
        conditions=tuple(conds.ordered()),
        checks=tuple(admission_checks(wl)),
        provisioning=request,
        evictions=tuple(_evictions(state, events, names)),
    )  # fmt: skip
    if item is not None:
        return _pending(state, base, wl, item)
    if wl.holds_quota or wl.status == "Finished":
        return _held(base, wl)
    return base


def ended_entry(state: QueueState, wid: str, history: Iterable[Envelope]) -> WorkloadEntry | None:
    """An ended workload's entry as it was when it ended: the queue's state keeps only
    how it ended (``QueueState.ended``), so its own events are folded again, against the
    state's configuration (its priority is its class's value now)."""
    scratch = QueueState(
        keep_ended=True,
        flavors=state.flavors,
        cluster_queues=state.cluster_queues,
        local_queues=state.local_queues,
        cohorts=state.cohorts,
        priority_classes=state.priority_classes,
        namespace_quotas=state.namespace_quotas,
        fair_sharing=state.fair_sharing,
        wait_for_pods_ready=state.wait_for_pods_ready,
        admission_checks=state.admission_checks,
        provisioning_configs=state.provisioning_configs,
    )
    for env in history:
        if env.event.TYPE.startswith("config."):
            continue  # never a workload's; the shared configuration must not move
        qs.evolve(scratch, env)
    return scratch.workloads.get(wid)


def _request_line(view: prov.RequestView | None) -> str:
    """The request's newest condition, as one line."""
    if view is None or not view.conditions:
        return ""
    # The newest; of conditions set at one moment, the one set last.
    _, _, c = max((c.at, i, c) for i, c in enumerate(view.conditions.values()))
    return f"ProvisioningRequest {view.id} {c.type}={c.status} ({c.reason}): {c.message}"


def _status(
    wl: WorkloadEntry,
    conds: cond.Conditions,
    item: PendingItem | None,
    request: prov.RequestView | None,
) -> tuple[str, str, str]:
    """Status, reason and message as GET shows them; a pending one's from the dry run."""
    if item is not None:
        return "Pending", item.reason, item.message
    by = conds.by_type
    if wl.status in ("Finished", "Cancelled", "Rejected"):
        end = by.get("Finished")
        status = conds.outcome or wl.status
        return status, end.reason if end else status, end.message if end else ""
    if wl.status == "Admitted":
        if wl.run.pods_ready:
            return "Running", "Running", by["PodsReady"].message if "PodsReady" in by else ""
        return "Admitted", "Admitted", by["Admitted"].message if "Admitted" in by else ""
    if wl.status == "QuotaReserved":
        waiting = [f"{n} {c.state}: {c.message}" for n, c in sorted(wl.run.checks.items())]
        message = "; ".join(waiting) or _request_line(request) or "waiting for its nodes"
        return "QuotaReserved", "QuotaReserved", message
    recorded = wl.pending_reason or ("Pending", "not yet considered")
    return "Pending", recorded[0], recorded[1]


def _pending(
    state: QueueState, base: Explanation, wl: WorkloadEntry, item: PendingItem
) -> Explanation:
    v = item.verdict
    out = replace(
        base,
        cluster_queue=item.cluster_queue,
        position_in_cluster_queue=item.position_in_cluster_queue,
        position_in_local_queue=item.position_in_local_queue,
    )
    if v is None:
        return out
    if isinstance(v.outcome, Assignment):
        return replace(
            out,
            flavors=v.outcome.flavors,
            shortfall=_shortfall(state, wl, v.cluster_queue, v.outcome.shortfall, v.outcome),
            victims=tuple(victim.holder.id for victim in v.victims),
        )
    return replace(
        out,
        flavors_tried=v.outcome.tried,
        shortfall=_shortfall(state, wl, v.cluster_queue, v.outcome.shortfall, v.outcome),
    )


def _shortfall(
    state: QueueState,
    wl: WorkloadEntry,
    cq_name: str | None,
    missing: dict[str, int],
    outcome: Assignment | Unassignable,
) -> tuple[Shortfall, ...]:
    """The dry run's missing quantities, beside the queue's quota and usage in the
    flavors looked at (the one chosen, or each one tried)."""
    cq = state.cluster_queues.get(cq_name or "")
    if cq is None or not missing:
        return ()
    requested = wl.spec.total_requests()
    requested.setdefault("pods", wl.spec.pod_count)
    out = []
    for resource, short in sorted(missing.items()):
        group = cq.group_for(resource)
        if group is None:
            continue
        if isinstance(outcome, Assignment):
            names = sorted(
                {f for m in outcome.flavors.values() for r, f in m.items() if r == resource}
            )
        else:
            names = [f for f in outcome.tried if any(fq.name == f for fq in group.flavors)]
        for fq in group.flavors:
            quota = next((rq for rq in fq.resources if rq.name == resource), None)
            if fq.name not in names or quota is None:
                continue
            used = state.usage.get(cq.name, {}).get(fq.name, {}).get(resource, 0)
            want = requested.get(resource, 0)
            out.append(Shortfall(resource, fq.name, want, quota.nominal_quota, used, short))
    return tuple(out)


def _held(base: Explanation, wl: WorkloadEntry) -> Explanation:
    return replace(base, flavors=dict(wl.run.flavors), nodes=dict(wl.run.placements or {}))


def _evictions(
    state: QueueState, events: list[Envelope], names: QueueState | None
) -> list[Eviction]:
    def name(wid: str | None) -> str | None:
        return _name(state, wid) or (_name(names, wid) if names is not None else None)

    out = []
    for env in events:
        ev = env.event
        if isinstance(ev, qev.WorkloadEvicted):
            out.append(
                Eviction(
                    env.occurred_at,
                    "Evicted",
                    ev.reason,
                    ev.message,
                    ev.preemptor,
                    name(ev.preemptor),
                    ev.preemption_reason,
                )
            )
        elif isinstance(ev, qev.WorkloadShrunk):
            out.append(
                Eviction(
                    env.occurred_at,
                    "PodsPreempted",
                    "Preempted",
                    ev.message,
                    ev.preemptor,
                    name(ev.preemptor),
                    ev.preemption_reason,
                )
            )
    return out


def _name(state: QueueState, wid: str | None) -> str | None:
    wl = state.workloads.get(wid or "")
    if wl is not None:
        return f"{wl.spec.namespace}/{wl.spec.name}"
    gone = state.ended.get(wid or "")
    return f"{gone.local_queue.split('/')[0]}/{gone.name}" if gone is not None else None
