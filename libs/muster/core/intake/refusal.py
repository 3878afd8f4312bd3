"""A refused request, as data: the transports turn it into their status (HTTP's in
``services/intake/errors.py``, gRPC's and the ingest topic's from that)."""

from __future__ import annotations

from dataclasses import dataclass

from muster.core.access.policy import Action, authorize
from muster.core.access.tokens import Principal
from muster.core.model.fields import InvalidInput


@dataclass(frozen=True, slots=True)
class Refusal:
    code: str  # a stable name clients switch on: InvalidField, Forbidden, ...
    message: str
    field: str | None = None
    retry_after: float | None = None  # seconds (RateLimited, StoreUnavailable)


def invalid(exc: InvalidInput) -> Refusal:
    return Refusal("InvalidField", exc.problem, exc.path)


def not_found(what: str) -> Refusal:
    return Refusal("NotFound", f"{what} not found")


def forbidden(
    who: Principal, action: Action, namespace: str | None = None, queue: str | None = None
) -> Refusal | None:
    """None when ``who`` may; otherwise the refusal naming the tenant."""
    denied = authorize(who, action, namespace, queue)
    return None if denied is None else Refusal("Forbidden", denied.reason)
