"""An external admission check's word on a workload, decided purely (kueue.md §1.8).

A check whose controller is not muster's ProvisioningRequest controller is external: its
controller sets the check's state for each workload whose quota reservation the check
gates, as Kueue's controllers write ``status.admissionChecks[]``. It needs the admin
credential (a controller, not a tenant). A word for a workload that holds no quota, or
whose attempt does not list the check, is refused: it would gate nothing.
"""

from __future__ import annotations

from muster.core import inputs
from muster.core.access.policy import Action
from muster.core.access.tokens import Principal
from muster.core.events import NewEvent
from muster.core.events import workload as wev
from muster.core.intake.refusal import Refusal, forbidden, invalid, not_found
from muster.core.model.fields import InvalidInput, Obj
from muster.core.model.queues import CHECK_STATES, PodSetUpdate
from muster.core.queueing.state import QueueState

MAX_MESSAGE = 32_768  # Kueue's AdmissionCheckState.message limit
MAX_REQUEUE_SECONDS = 7 * 86400


def update(
    who: Principal, wid: str, check: str, body: object, queue: QueueState, now: float
) -> NewEvent | Refusal:
    """The ``workload.admission_check_updated`` event to append, or why not."""
    refused = forbidden(who, Action.ADMIN)
    if refused is not None:
        return refused
    wl = queue.workloads.get(wid)
    if wl is None:
        return not_found(f"workload {wid}")
    spec = queue.admission_checks.get(check)
    if spec is None:
        return not_found(f"AdmissionCheck {check}")
    if not spec.external:
        return Refusal(
            "CheckNotApplicable",
            f"AdmissionCheck {check} is run by muster's ProvisioningRequest controller: its "
            "state follows its ProvisioningRequest",
        )
    if not wl.holds_quota or check not in wl.run.checks:
        return Refusal(
            "CheckNotApplicable",
            f"workload {wid} ({wl.status}) holds no quota reservation that AdmissionCheck "
            f"{check} gates",
        )
    try:
        event = read(wid, check, body, {ps.name for ps in wl.spec.pod_sets})
    except InvalidInput as exc:
        return invalid(exc)
    if event.attempt not in (0, wl.run.attempt):
        return Refusal(
            "CheckNotApplicable",
            f"attempt {event.attempt} of workload {wid} is over; its current attempt is "
            f"{wl.run.attempt}",
        )
    return inputs.admission_check_updated(event, now)


def read(wid: str, check: str, body: object, pod_sets: set[str]) -> wev.AdmissionCheckUpdated:
    """``{state, message?, attempt?, requeueAfterSeconds?, podSetUpdates?}``."""
    o = Obj(body)
    state = o.req_text("state")
    if state not in CHECK_STATES:
        raise InvalidInput("state", f"must be one of {', '.join(CHECK_STATES)}, not {state!r}")
    requeue = o.integer("requeueAfterSeconds", lo=0, hi=MAX_REQUEUE_SECONDS)
    if requeue is not None and state != "Retry":
        raise InvalidInput("requeueAfterSeconds", "is only for state Retry")
    event = wev.AdmissionCheckUpdated(
        workload_id=wid,
        check=check,
        state=state,
        message=o.text("message", default="", max_len=MAX_MESSAGE) or "",
        attempt=o.integer("attempt", default=0, lo=1, hi=2**31) or 0,
        requeue_after_seconds=None if requeue is None else float(requeue),
        pod_set_updates=tuple(
            _pod_set_update(item, at, pod_sets) for item, at in o.items("podSetUpdates")
        ),
    )
    o.done()
    names = [u.name for u in event.pod_set_updates]
    if len(names) != len(set(names)):
        raise InvalidInput("podSetUpdates", "names a pod set twice")
    return event


def _pod_set_update(data: object, path: str, pod_sets: set[str]) -> PodSetUpdate:
    o = Obj(data, path)
    name = o.req_text("name")
    if name not in pod_sets:
        raise InvalidInput(o.at("name"), f"the workload has no pod set {name}")
    if o.raw("tolerations") is not None:
        raise InvalidInput(
            o.at("tolerations"), "is not supported (labels, annotations and nodeSelector are)"
        )
    update = PodSetUpdate(
        name=name,
        labels=o.labels("labels"),
        annotations=_annotations(o),
        node_selector=o.labels("nodeSelector"),
    )
    o.done()
    return update


def _annotations(o: Obj) -> dict[str, str]:
    """Annotation values may be long (a request name is up to 253 characters)."""
    raw = o.raw("annotations")
    if raw is None:
        return {}
    if not isinstance(raw, dict) or len(raw) > 64:
        raise InvalidInput(o.at("annotations"), "must be an object of at most 64 strings")
    for key, value in raw.items():
        if not isinstance(key, str) or not 0 < len(key) <= 253:
            raise InvalidInput(o.at("annotations"), f"{key!r} is not a valid annotation key")
        if not isinstance(value, str) or len(value) > 4096:
            raise InvalidInput(
                f"{o.at('annotations')}.{key}", "must be a string of at most 4096 characters"
            )
    return dict(raw)
