"""Settle workloads that hold quota: cancel, admit once provisioned, apply the admission
check's verdict, bind consumers of standalone requests, finish, or reject.

Each rule looks at one workload and returns at most one event; the order of
``state.active`` does not matter because the rules are per workload, and the
output is sorted by submission order so the log is deterministic. Only the workloads
an event touched since settle last looked (``state.notes``) and those whose
waitForPodsReady timeout passed are looked at: the others would give what they gave.
"""

from __future__ import annotations

from muster.core.events import Event, NewEvent
from muster.core.events import provisioning as pev
from muster.core.events import queue as qev
from muster.core.placement.devices import DeviceShare
from muster.core.queueing import checks, failures
from muster.core.queueing.state import QueueState, WorkloadEntry, pods_ready_clock


def settle(state: QueueState) -> list[NewEvent]:
    out: list[NewEvent] = []
    quiet: list[str] = []
    busy: list[str] = []
    for wl in sorted((state.workloads[w] for w in _to_look_at(state)), key=lambda w: w.order):
        event = (
            _next_step(wl)
            or failures.verdict(wl)
            or checks.outcome(state, wl)
            or checks.bind(state, wl)
            or _admit(wl)
            or _drain(state, wl)
            or _pods_ready_timeout(state, wl)
        )
        if event is None:
            quiet.append(wl.id)
            continue
        busy.append(wl.id)
        out.append(
            NewEvent(
                stream_id=qev.ADMISSION_STREAM,
                event=event,
                occurred_at=state.now,
                correlation_id=wl.id,
            )
        )
    notes = state.notes
    quiet += [w for w in notes.touched if w not in state.active]
    notes.looked(quiet, busy)
    return out


def _to_look_at(state: QueueState) -> set[str]:
    if state.notes.full:
        return set(state.active)
    looked = state.notes.touched & state.active
    config = state.wait_for_pods_ready
    if config.enable:
        due = state.now - config.timeout_seconds
        looked.update(
            w
            for w in state.awaiting_pods
            if (at := pods_ready_clock(state.workloads[w])) is not None and at <= due
        )
    return looked


def _pods_ready_timeout(state: QueueState, wl: WorkloadEntry) -> Event | None:
    """waitForPodsReady: a workload whose pods did not all start in time after its clock
    started (``pods_ready_clock``) is evicted and requeued with backoff (the cycle rejects
    it past the backoff limit)."""
    config = state.wait_for_pods_ready
    started = pods_ready_clock(wl)
    if not config.enable or started is None or state.now < started + config.timeout_seconds:
        return None
    name = f"{wl.spec.namespace}/{wl.spec.name}"
    if wl.status == "Admitted":
        detail = f"{len(wl.run.pods_started)} of {wl.admitted_pods} pods running"
    else:
        detail = f"quota reserved, its {wl.admitted_pods} pods' nodes not ready"
    return qev.WorkloadEvicted(
        workload_id=wl.id,
        reason="PodsReadyTimeout",
        message=(
            f"Exceeded the PodsReady timeout {name}: {detail} after {config.timeout_seconds:g}s"
        ),
    )


def _drain(state: QueueState, wl: WorkloadEntry) -> Event | None:
    """stopPolicy HoldAndDrain evicts what the queue admitted (it stays queued, held)."""
    if not wl.holds_quota:
        return None
    cq = state.cluster_queues.get(wl.run.cluster_queue or "")
    if cq is not None and cq.stop_policy == "HoldAndDrain":
        return qev.WorkloadEvicted(
            workload_id=wl.id,
            reason="ClusterQueueStopped",
            message=f"ClusterQueue {cq.name} is stopped (stopPolicy HoldAndDrain)",
        )
    lq = state.local_queues.get(wl.local_queue)
    if lq is not None and lq.stop_policy == "HoldAndDrain":
        return qev.WorkloadEvicted(
            workload_id=wl.id,
            reason="LocalQueueStopped",
            message=f"LocalQueue {lq.name} is stopped (stopPolicy HoldAndDrain)",
        )
    return None


def _admit(wl: WorkloadEntry) -> Event | None:
    """Quota reserved, every node of its request Ready and every admission check Ready:
    admitted onto the nodes (kueue.md §1.8). One placed on existing nodes with no check
    Pending was admitted by the cycle with its reservation (verdicts.py); this admits it
    too when a log of before (the admission one step later) is replayed."""
    if (
        wl.status != "QuotaReserved"
        or wl.run.placements is None
        or wl.run.check_event is not None
        or not checks.ready(wl)
    ):
        return None
    return admission(
        wl.id,
        wl.run.cluster_queue or "",
        wl.run.attempt,
        wl.run.placements,
        {n: c.message for n, c in wl.run.checks.items()},
        "" if wl.run.placed else pev.request_id(wl.id, wl.run.attempt),
        wl.run.devices,
    )


def admission(
    workload_id: str,
    cluster_queue: str,
    attempt: int,
    placements: dict[str, str],
    ready: dict[str, str],
    request_id: str,
    devices: dict[str, tuple[DeviceShare, ...]],
) -> qev.WorkloadAdmitted:
    """The admission of an attempt whose checks (name -> Ready message) are all Ready;
    the message names those that were waited for (not those found not needed)."""
    message = f"Admitted by ClusterQueue {cluster_queue}"
    waited = [n for n, why in ready.items() if not why.endswith(checks.NOT_NEEDED)]
    if len(waited) == 1:
        message += f"; AdmissionCheck {waited[0]}: Ready"
    elif waited:
        message += f"; AdmissionChecks {', '.join(sorted(waited))}: Ready"
    return qev.WorkloadAdmitted(
        workload_id=workload_id,
        cluster_queue=cluster_queue,
        attempt=attempt,
        placements=placements,
        message=message,
        request_id=request_id,
        devices=devices,
    )


def _next_step(wl: WorkloadEntry) -> Event | None:
    if wl.cancel_requested:
        return qev.WorkloadCancelled(workload_id=wl.id, message="cancelled on request")
    if wl.problem is not None and wl.status == "Pending":
        reason, message = wl.problem
        if reason == "Preempted":  # its ClusterQueue ends what is preempted (onPreempted: End)
            return qev.WorkloadFinished(
                workload_id=wl.id, outcome="Preempted", reason=reason, message=message
            )
        return qev.WorkloadRejected(workload_id=wl.id, reason=reason, message=message)
    if (
        wl.status == "Admitted"
        and not wl.run.pods_failed
        and not wl.run.pods_evicted
        and len(wl.run.pods_succeeded) >= wl.admitted_pods
    ):
        return qev.WorkloadFinished(
            workload_id=wl.id,
            outcome="Succeeded",
            reason="Succeeded",
            message=f"all {wl.admitted_pods} pods succeeded",
        )
    return None
