"""Standalone ProvisioningRequests, decided purely. A request's spec is immutable, as in
Kubernetes: the same spec again answers with the request, another spec is refused, and
a deleted request's name is not reused."""

from __future__ import annotations

from muster.core import inputs
from muster.core.access.policy import Action
from muster.core.access.tokens import Principal
from muster.core.events import NewEvent
from muster.core.intake.refusal import Refusal, forbidden, invalid, not_found
from muster.core.model import parse
from muster.core.model.fields import InvalidInput
from muster.core.model.workload import ProvisioningRequestSpec
from muster.core.views.provisioning import RequestView


def read(who: Principal, body: object) -> ProvisioningRequestSpec | Refusal:
    """Parse a request and check the caller may create it in its namespace."""
    try:
        spec = parse.provisioning_request(body)
    except InvalidInput as exc:
        return invalid(exc)
    return forbidden(who, Action.SUBMIT, spec.namespace) or spec


def conflict(spec: ProvisioningRequestSpec, stored: object) -> Refusal | None:
    """``stored``: the spec that created the request's stream (None: not created yet)."""
    if stored is None or stored == spec:
        return None
    return Refusal(
        "AlreadyExists",
        f"ProvisioningRequest {spec.key} already exists with another spec; a request's spec "
        "is immutable (and names are not reused after deletion)",
    )


def delete(
    who: Principal, namespace: str, name: str, view: RequestView | None, now: float
) -> NewEvent | Refusal:
    """The delete request to append for a standalone request (``view``: as intake knows
    it): node creation stops; nodes already there go when unneeded (GKE's rules). Access
    is checked first, so a stranger learns nothing of what exists."""
    rid = f"{namespace}/{name}"
    refused = forbidden(who, Action.CANCEL, namespace)
    if refused is not None:
        return refused
    if view is None or view.spec is None:
        return not_found(f"ProvisioningRequest {rid}")
    if view.deleted:
        return Refusal("AlreadyDeleted", f"ProvisioningRequest {rid} is already deleted")
    return inputs.provisioning_deletion(rid, now)
