"""Kueue's ``Workload.status.conditions``, folded from a workload's own events.

One fold serves every view: intake's read model keeps it per workload (GET, describe,
``get -o yaml``) and ``explain`` runs it over the workload's history up to a past
moment, so both show the same conditions for the same log prefix.

Types as Kueue has them (kueue.md §1.14): QuotaReserved, Admitted, PodsReady, Evicted,
Preempted, Finished. As in Kueue's ``SetStatusCondition``, ``lastTransitionTime``
moves only when a condition's status does, and a new reservation turns Evicted and
Preempted False ("Previously: ...") instead of dropping them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import singledispatch
from typing import Any

from muster.core.decider import own_handlers
from muster.core.events import Event
from muster.core.events import node as nev
from muster.core.events import queue as qev
from muster.core.events import workload as wev
from muster.core.model.times import rfc3339
from muster.core.pickling import compact

__all__ = ["Condition", "Conditions", "fold", "put", "rfc3339"]

ORDER = ("QuotaReserved", "Admitted", "PodsReady", "Evicted", "Preempted", "Finished")


@compact
@dataclass(frozen=True, slots=True)
class Condition:
    """Kubernetes' ``metav1.Condition``, the one type every muster view shows: a
    workload's conditions here, a ProvisioningRequest's (``views/provisioning.py``)."""

    type: str
    status: str  # "True" | "False", as Kubernetes spells them
    reason: str
    message: str
    at: float  # lastTransitionTime, seconds since the epoch; shown in RFC 3339

    def to_json(self) -> dict[str, Any]:
        return {
            "type": self.type,
            "status": self.status,
            "reason": self.reason,
            "message": self.message,
            "lastTransitionTime": rfc3339(self.at),
        }


@compact
@dataclass(slots=True)
class Conditions:
    """One workload's conditions and what PodsReady counts: its current attempt's pods."""

    by_type: dict[str, Condition] = field(default_factory=dict)
    attempt: int = 0
    pods: int = 0  # pods the attempt runs
    started: int = 0
    outcome: str = ""  # Succeeded | Failed | Preempted, once finished

    def ordered(self) -> list[Condition]:
        return [self.by_type[t] for t in ORDER if t in self.by_type]

    def to_json(self) -> list[dict[str, Any]]:
        return [c.to_json() for c in self.ordered()]


def put(
    by_type: dict[str, Condition], type_: str, status: str, reason: str, message: str, now: float
) -> None:
    """apimachinery's ``meta.SetStatusCondition``: ``lastTransitionTime`` moves only when
    the condition's status does; reason and message always take the new values."""
    old = by_type.get(type_)
    at = old.at if old is not None and old.status == status else now
    by_type[type_] = Condition(type_, status, reason, message, at)


def fold(conds: Conditions, event: Event, now: float) -> None:
    """``event`` of this workload, at logical time ``now``."""
    _apply(event, conds, now)



@singledispatch
def _apply(event: Event, conds: Conditions, now: float) -> None:
    pass


# ``fold``'s handler for an event type, or None if it ignores them, looked up once a type.
handler = own_handlers(_apply)


# The handlers ``put`` into ``conds.by_type`` themselves: intake's view folds every
# workload event here, a call a condition fewer.


@_apply.register
def _(event: wev.WorkloadSubmitted, conds: Conditions, now: float) -> None:
    conds.pods = event.spec.pod_count
    put(conds.by_type, "QuotaReserved", "False", "Pending", "waiting for the queue", now)


@_apply.register
def _(event: qev.WorkloadPending, conds: Conditions, now: float) -> None:
    put(conds.by_type, "QuotaReserved", "False", event.reason, event.message, now)


@_apply.register
def _(event: qev.QuotaReserved, conds: Conditions, now: float) -> None:
    by_type = conds.by_type
    put(by_type, "QuotaReserved", "True", "QuotaReserved", event.message, now)
    for type_ in ("Evicted", "Preempted"):
        # One that held turns False on a new reservation, keeping what it said.
        old = by_type.get(type_)
        if old is not None and old.status == "True":
            put(by_type, type_, "False", "QuotaReserved", f"Previously: {old.message}", now)
    if event.pod_counts:
        conds.pods = sum(event.pod_counts.values())


@_apply.register
def _(event: qev.WorkloadAdmitted, conds: Conditions, now: float) -> None:
    by_type = conds.by_type
    put(by_type, "Admitted", "True", "Admitted", event.message, now)
    conds.attempt, conds.started = event.attempt, 0
    if event.placements:
        conds.pods = len(event.placements)
    put(by_type, "PodsReady", "False", "PodsReady", "waiting for the pods to start", now)


@_apply.register
def _(event: nev.PodStarted, conds: Conditions, now: float) -> None:
    if event.attempt != conds.attempt:
        return  # a late report of an earlier attempt's pod
    conds.started += 1
    if conds.started >= conds.pods:
        message = f"all {conds.pods} pods running"
        put(conds.by_type, "PodsReady", "True", "PodsReady", message, now)


@_apply.register
def _(event: qev.WorkloadGrown, conds: Conditions, now: float) -> None:
    if event.attempt == conds.attempt:
        conds.pods += len(event.pods)


@_apply.register
def _(event: qev.WorkloadShrunk, conds: Conditions, now: float) -> None:
    if event.attempt == conds.attempt:
        conds.pods = max(0, conds.pods - len(event.pods))


@_apply.register
def _(event: qev.WorkloadEvicted, conds: Conditions, now: float) -> None:
    by_type, reason, message = conds.by_type, event.reason, event.message
    put(by_type, "Evicted", "True", reason, message, now)
    if event.preemptor is not None:
        put(by_type, "Preempted", "True", event.preemption_reason or reason, message, now)
    put(by_type, "QuotaReserved", "False", reason, message, now)
    for type_ in ("Admitted", "PodsReady"):
        if type_ in by_type:
            put(by_type, type_, "False", reason, message, now)


@_apply.register
def _(event: qev.WorkloadFinished, conds: Conditions, now: float) -> None:
    conds.outcome = event.outcome
    put(conds.by_type, "Finished", "True", event.reason or event.outcome, event.message, now)


@_apply.register
def _(event: qev.WorkloadCancelled, conds: Conditions, now: float) -> None:
    put(conds.by_type, "Finished", "True", "Cancelled", event.message, now)


@_apply.register
def _(event: qev.WorkloadRejected, conds: Conditions, now: float) -> None:
    put(conds.by_type, "Finished", "True", event.reason, event.message, now)
