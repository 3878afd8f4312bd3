"""A cancellation, decided purely: who may cancel, and only what has not ended."""

from __future__ import annotations

from muster.core import inputs
from muster.core.access.policy import Action
from muster.core.access.tokens import Principal
from muster.core.events import NewEvent
from muster.core.intake.refusal import Refusal, forbidden, not_found
from muster.core.views.workloads import TERMINAL, WorkloadView


def cancel(who: Principal, wid: str, view: WorkloadView | None, now: float) -> NewEvent | Refusal:
    """The cancel request to append for workload ``wid`` (``view``: as intake knows it). A
    gang member's cancels its gang: the members run together or not at all."""
    if view is None:
        return not_found(f"workload {wid}")
    refused = forbidden(who, Action.CANCEL, view.namespace, view.queue_name)
    if refused is not None:
        return refused
    if view.status in TERMINAL:
        return Refusal("AlreadyFinished", f"workload {wid} is already {view.status}")
    return inputs.cancellation(view.gang_id or wid, now)
