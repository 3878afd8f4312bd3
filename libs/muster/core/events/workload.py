"""Workload stream (``workload-<id>``): what batch platforms asked for. Written by intake."""

from __future__ import annotations

from dataclasses import dataclass

from muster.core.events.base import Event, event_class
from muster.core.model.queues import CheckState, PodSetUpdate
from muster.core.model.workload import WorkloadSpec


def stream(workload_id: str) -> str:
    return f"workload-{workload_id}"


@event_class("workload.submitted")
@dataclass(frozen=True, slots=True, kw_only=True)
class WorkloadSubmitted(Event):
    workload_id: str
    spec: WorkloadSpec
    idempotency_key: str | None = None
    request_digest: str | None = None  # of the submitted body, to spot a reused key


@event_class("workload.cancel_requested")
@dataclass(frozen=True, slots=True, kw_only=True)
class WorkloadCancelRequested(Event):
    workload_id: str
    reason: str = "CancelledByUser"


@event_class("workload.admission_check_updated")
@dataclass(frozen=True, slots=True, kw_only=True)
class AdmissionCheckUpdated(Event):
    """An external admission check's controller set the check's state for the workload
    (Kueue's status.admissionChecks[] entry). ``attempt`` 0: whichever attempt holds quota
    when the queue reads it; otherwise only that attempt (a late word is ignored)."""

    workload_id: str
    check: str
    state: CheckState
    message: str = ""
    attempt: int = 0
    # Retry: not admissible again before this many seconds (KEP-3258's requeueAfterSeconds).
    requeue_after_seconds: float | None = None
    pod_set_updates: tuple[PodSetUpdate, ...] = ()


@event_class("workload.gang_member_submitted")
@dataclass(frozen=True, slots=True, kw_only=True)
class GangMemberSubmitted(Event):
    """One member of a gang, on the gang's stream (that of the workload the gang becomes,
    ``workload_id``): the member that completes the gang is followed there by the gang's
    ``workload.submitted``. Members have no stream of their own."""

    workload_id: str  # the gang's workload
    member_id: str
    spec: WorkloadSpec  # the member's, with its ``gang``
    idempotency_key: str | None = None
    request_digest: str | None = None
