"""A refused request, as data: the transports turn it into their status (HTTP's in
``services/intake/errors.py``, gRPC's from that)."""

from __future__ import annotations

from dataclasses import dataclass

from muster.core.model.fields import InvalidInput


@dataclass(frozen=True, slots=True)
class Refusal:
    code: str  # a stable name clients switch on: InvalidField, Forbidden, ...
    message: str
    field: str | None = None
    retry_after: float | None = None  # seconds (RateLimited)


def invalid(exc: InvalidInput) -> Refusal:
    return Refusal("InvalidField", exc.problem, exc.path)
