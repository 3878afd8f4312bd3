"""The admission cycle: an explicit pipeline of small phases over the folded state.

heads -> nominate (flavor assignment) -> admit in order -> requeue with reasons.
Unlike Kueue's one pop per ClusterQueue per cycle, a BestEffortFIFO queue admits
every workload that fits in one cycle; a StrictFIFO queue stops at its first
workload that does not fit. Deterministic for a given state: iteration is over
sorted keys and the order is (priority descending, submission order).
"""

from __future__ import annotations

from dataclasses import dataclass

from muster.core.events import Event, NewEvent
from muster.core.events import queue as qev
from muster.core.queueing.flavors import Assignment, Unassignable, assign
from muster.core.queueing.state import QueueState, Usage, WorkloadEntry


@dataclass(frozen=True, slots=True)
class Verdict:
    """What the cycle concluded for one pending workload."""

    workload: WorkloadEntry
    cluster_queue: str | None
    outcome: Assignment | Unassignable


def heads(state: QueueState) -> dict[str | None, list[WorkloadEntry]]:
    """Pending workloads per ClusterQueue, in admission order."""
    queues: dict[str | None, list[WorkloadEntry]] = {}
    for wid in state.pending:
        wl = state.workloads[wid]
        queues.setdefault(state.cluster_queue_of(wl.spec), []).append(wl)
    for entries in queues.values():
        entries.sort(key=lambda w: (-w.spec.priority, w.order))
    return queues


def nominate(state: QueueState, cq_name: str | None, entries: list[WorkloadEntry]) -> list[Verdict]:
    """Assign flavors in order against the usage left after the ones before in this cycle."""
    cq = state.cluster_queues.get(cq_name) if cq_name else None
    if cq is None:
        return [_missing_queue(state, cq_name, wl) for wl in entries]
    used: Usage = {f: dict(r) for f, r in state.usage.get(cq.name, {}).items()}
    verdicts: list[Verdict] = []
    blocked_by: str | None = None
    for wl in entries:
        if blocked_by is not None:
            verdicts.append(
                Verdict(
                    wl,
                    cq.name,
                    Unassignable(
                        "BlockedByStrictFIFO",
                        f"waiting behind {blocked_by} in StrictFIFO ClusterQueue {cq.name}",
                    ),
                )
            )
            continue
        outcome = assign(cq, state.flavors, wl.spec, used)
        if isinstance(outcome, Assignment):
            for flavor, resources in outcome.usage.items():
                per_flavor = used.setdefault(flavor, {})
                for resource, qty in resources.items():
                    per_flavor[resource] = per_flavor.get(resource, 0) + qty
        elif cq.queueing_strategy == "StrictFIFO":
            blocked_by = wl.spec.name
        verdicts.append(Verdict(wl, cq.name, outcome))
    return verdicts


def _missing_queue(state: QueueState, cq_name: str | None, wl: WorkloadEntry) -> Verdict:
    if cq_name is None:
        message = f"LocalQueue {wl.spec.queue_name} doesn't exist in namespace {wl.spec.namespace}"
        return Verdict(wl, None, Unassignable("LocalQueueNotFound", message))
    return Verdict(
        wl, cq_name, Unassignable("ClusterQueueNotFound", f"ClusterQueue {cq_name} doesn't exist")
    )


def to_events(state: QueueState, verdicts: list[Verdict]) -> list[NewEvent]:
    """Reserve quota for the assigned; record a reason for the rest when it changed."""
    out: list[NewEvent] = []
    for v in verdicts:
        wl = v.workload
        if isinstance(v.outcome, Assignment) and v.cluster_queue is not None:
            out.append(
                _new(
                    state,
                    wl,
                    qev.QuotaReserved(
                        workload_id=wl.id,
                        cluster_queue=v.cluster_queue,
                        flavors=v.outcome.flavors,
                        usage=v.outcome.usage,
                        node_selectors=v.outcome.node_selectors,
                        attempt=wl.attempt + 1,
                        message=f"Quota reserved in ClusterQueue {v.cluster_queue}",
                    ),
                )
            )
        elif isinstance(v.outcome, Unassignable):
            reason = (v.outcome.reason, v.outcome.message)
            if wl.pending_reason != reason:
                out.append(
                    _new(
                        state,
                        wl,
                        qev.WorkloadPending(workload_id=wl.id, reason=reason[0], message=reason[1]),
                    )
                )
    return out


def admission_cycle(state: QueueState) -> list[NewEvent]:
    queues = heads(state)
    verdicts: list[Verdict] = []
    for cq_name in sorted(queues, key=lambda n: n or ""):
        verdicts.extend(nominate(state, cq_name, queues[cq_name]))
    return to_events(state, verdicts)


def _new(state: QueueState, wl: WorkloadEntry, event: Event) -> NewEvent:
    return NewEvent(
        stream_id=qev.ADMISSION_STREAM, event=event, occurred_at=state.now, correlation_id=wl.id
    )
