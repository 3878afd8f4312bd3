"""Workload stream (``workload-<id>``): what batch platforms asked for. Written by intake."""

from __future__ import annotations

from dataclasses import dataclass

from muster.core.events.base import Event, event_class
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
