"""What the admission cycle concludes for a pending workload, and the events it becomes:
evictions (or shrinks) for a preemptor's victims, a reservation, a rejection, or a
pending reason when its kind changed."""

from __future__ import annotations

from dataclasses import dataclass, field

from muster.core.events import Event, NewEvent
from muster.core.events import queue as qev
from muster.core.placement.book import Placement
from muster.core.queueing import checks, placing
from muster.core.queueing import preemption as pre
from muster.core.queueing.flavors import Assignment, Unassignable
from muster.core.queueing.settle import admission
from muster.core.queueing.state import QueueState, WorkloadEntry

# Verdicts that end the workload instead of leaving it waiting: verdict -> rejection reason.
REJECTIONS = {
    "NamespaceQuotaRejected": "NamespaceQuotaExceeded",
    "RequeuingLimitExceeded": "RequeuingLimitExceeded",
}


@dataclass(slots=True)
class Verdict:
    """What the cycle concluded for one pending workload."""

    workload: WorkloadEntry
    cluster_queue: str | None
    outcome: Assignment | Unassignable
    victims: list[pre.Victim] = field(default_factory=list)
    pod_counts: dict[str, int] = field(default_factory=dict)  # partial admission
    placement: Placement | None = None  # on existing nodes
    # An admitted workload's waiting surplus pods added (growth.py): ``outcome`` is their
    # quota, ``placement`` their places, ``pod_counts`` its counts with them.
    grow: bool = False


def to_events(state: QueueState, verdicts: list[Verdict]) -> list[NewEvent]:
    """Evict victims, reserve quota for the assigned, record reasons that changed; then
    admit, in submission order, the reserved that wait for nothing (``_admitted_at_once``)."""
    out: list[NewEvent] = []
    admitted: list[tuple[int, NewEvent]] = []
    for v in verdicts:
        wl = v.workload
        if v.grow:
            out.append(_new(state, wl.id, _grown(wl, v)))
        elif isinstance(v.outcome, Assignment) and v.victims:
            out += [_taken(state, wl, v, victim) for victim in v.victims]
            waiting = (
                "Preempting",
                f"preempting {len(v.victims)} workload(s) to fit in ClusterQueue "
                f"{v.cluster_queue}: {v.outcome.message}",
            )
            out.append(
                _new(
                    state,
                    wl.id,
                    qev.WorkloadPending(
                        workload_id=wl.id,
                        reason=waiting[0],
                        message=waiting[1],
                        flavors=v.outcome.flavors,
                        placement=v.placement,
                    ),
                )
            )
        elif isinstance(v.outcome, Assignment) and v.cluster_queue is not None:
            reservation = checks.for_reservation(
                state,
                state.cluster_queues[v.cluster_queue],
                wl.spec,
                v.outcome.flavors,
                placed=v.placement is not None,
            )
            reserved = qev.QuotaReserved(
                workload_id=wl.id,
                cluster_queue=v.cluster_queue,
                flavors=v.outcome.flavors,
                usage=v.outcome.usage,
                node_selectors=v.outcome.node_selectors,
                attempt=wl.run.attempt + 1,
                message=_reserved_message(wl, v),
                pod_counts=v.pod_counts,
                tolerations=placing.injected_tolerations(state, v.outcome),
                provisioning=reservation.ask,
                placement=v.placement,
                checks=reservation.pending,
                checks_ready=reservation.ready,
            )
            out.append(_new(state, wl.id, reserved))
            if (at_once := _admitted_at_once(wl, reserved)) is not None:
                admitted.append((wl.order, _new(state, wl.id, at_once)))
        elif isinstance(v.outcome, Unassignable):
            if v.outcome.reason in REJECTIONS:
                event: Event = qev.WorkloadRejected(
                    workload_id=wl.id,
                    reason=REJECTIONS[v.outcome.reason],
                    message=v.outcome.message,
                )
                out.append(_new(state, wl.id, event))
            elif _worth_recording(wl, v.outcome):
                event = qev.WorkloadPending(
                    workload_id=wl.id, reason=v.outcome.reason, message=v.outcome.message
                )
                out.append(_new(state, wl.id, event))
    out += [new for _, new in sorted(admitted, key=lambda a: a[0])]
    return out


def _admitted_at_once(wl: WorkloadEntry, reserved: qev.QuotaReserved) -> Event | None:
    """The admission that settle would make on its next look at a workload just reserved
    on existing nodes with no admission check Pending (every check Ready or none): Kueue
    sets QuotaReserved and Admitted in one status update then (kueue.md §1.8, scheduler
    step 5), and so does the cycle, in the same batch after the reservations, in the
    order settle would have admitted them. Same event, same content: a log where they
    came one step apart re-derives too (``verify.verify_decisions``)."""
    placement = reserved.placement
    if placement is None or reserved.checks or reserved.provisioning is not None:
        return None
    if wl.cancel_requested:
        return None  # settle cancels it first
    return admission(
        wl.id,
        reserved.cluster_queue,
        reserved.attempt,
        dict(placement.nodes),
        dict(reserved.checks_ready),
        "",
        dict(placement.devices),
    )


def _reserved_message(wl: WorkloadEntry, v: Verdict) -> str:
    message = f"Quota reserved in ClusterQueue {v.cluster_queue}"
    if v.pod_counts:
        parts = ", ".join(
            f"{ps.name} {v.pod_counts[ps.name]} of {ps.count} pods"
            for ps in wl.spec.pod_sets
            if ps.name in v.pod_counts
        )
        message += f" (partial admission: {parts})"
    return message


def _grown(wl: WorkloadEntry, v: Verdict) -> Event:
    """Waiting surplus pods added to the running workload, with the quota they take."""
    assert isinstance(v.outcome, Assignment) and v.placement is not None
    usage = {f: dict(r) for f, r in wl.run.usage.items()}
    for flavor, resources in v.outcome.usage.items():
        per_flavor = usage.setdefault(flavor, {})
        for resource, qty in resources.items():
            per_flavor[resource] = per_flavor.get(resource, 0) + qty
    pods = tuple(v.placement.nodes)
    total = sum(v.pod_counts.get(ps.name, ps.count) for ps in wl.spec.pod_sets)
    return qev.WorkloadGrown(
        workload_id=wl.id,
        attempt=wl.run.attempt,
        pods=pods,
        pod_counts=v.pod_counts,
        usage=usage,
        placement=v.placement,
        message=(
            f"{len(pods)} waiting pod(s) admitted in ClusterQueue {v.cluster_queue} as room "
            f"appeared ({total} of {wl.spec.pod_count} pods now): {', '.join(pods)}"
        ),
    )


def _worth_recording(wl: WorkloadEntry, outcome: Unassignable) -> bool:
    """A new reason is recorded; new numbers for the same reason are not (they are the
    visibility API's, computed on demand): what a lane's members recorded is then known
    without looking at them, and a waiting workload adds no events while it waits."""
    return wl.pending_reason is None or wl.pending_reason[0] != outcome.reason


def _taken(state: QueueState, preemptor: WorkloadEntry, v: Verdict, victim: pre.Victim) -> NewEvent:
    """A victim's eviction, or, for surplus pods, the workload shrunk to its minimum."""
    shrink = victim.holder.shrink
    if shrink is None:
        return _new(state, victim.holder.id, _eviction(state, preemptor, v, victim))
    holder = state.workloads[victim.holder.id]
    event = qev.WorkloadShrunk(
        workload_id=holder.id,
        attempt=holder.run.attempt,
        pods=shrink.pods,
        pod_counts=shrink.pod_counts,
        usage=shrink.left,
        message=(
            f"{len(shrink.pods)} pod(s) above its minimum preempted to accommodate a workload "
            f"(UID: {preemptor.id}, name: {preemptor.spec.namespace}/{preemptor.spec.name}, "
            f"priority {preemptor.priority}) due to {victim.reason}: {', '.join(shrink.pods)}"
        ),
        preemptor=preemptor.id,
        preemption_reason=victim.reason,
    )
    return _new(state, holder.id, event)


def _eviction(state: QueueState, preemptor: WorkloadEntry, v: Verdict, victim: pre.Victim) -> Event:
    holder = state.workloads[victim.holder.id]
    return qev.WorkloadEvicted(
        workload_id=victim.holder.id,
        reason="Preempted",
        message=(
            f"Preempted to accommodate a workload (UID: {preemptor.id}, "
            f"name: {preemptor.spec.namespace}/{preemptor.spec.name}, priority "
            f"{preemptor.priority}) due to {victim.reason}; preemptor path: "
            f"{v.cluster_queue}; preemptee path: {holder.run.cluster_queue} "
            f"(priority {holder.priority})"
        ),
        preemptor=preemptor.id,
        preemption_reason=victim.reason,
    )


def _new(state: QueueState, correlation: str, event: Event) -> NewEvent:
    return NewEvent(
        stream_id=qev.ADMISSION_STREAM,
        event=event,
        occurred_at=state.now,
        correlation_id=correlation,
    )
