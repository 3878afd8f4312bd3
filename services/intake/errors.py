"""Refusals at intake's edge: the one error shape, whatever the transport.

Intake's operations raise ``Refused`` with the core's ``Refusal`` (or one of their own:
a malformed query, a body too large). HTTP answers ``{"error": {"code", "message",
"field"}}`` with the code's status from ``STATUS``; gRPC answers the status code it maps
that to, with the code and field in trailing metadata; the ingest topic replies with the
status and the same body.
"""

from __future__ import annotations

import math
from typing import Any

from aiohttp import web

from muster.core.intake.refusal import Refusal

# The HTTP status of each refusal code (gRPC maps the status on).
STATUS = {
    "MalformedJSON": 400,
    "MalformedYAML": 400,
    "MalformedProtobuf": 400,
    "InvalidQuery": 400,
    "Unauthenticated": 401,
    "Forbidden": 403,
    "NotFound": 404,
    "UnknownKind": 404,
    "IdempotencyKeyReused": 409,
    "AlreadyExists": 409,
    "AlreadyFinished": 409,
    "AlreadyDeleted": 409,
    "CheckNotApplicable": 409,
    "GangCancelled": 409,
    "PayloadTooLarge": 413,
    "BatchTooLarge": 413,
    "InvalidField": 422,
    "UnknownField": 422,
    "UnknownQueue": 422,
    "UnknownFlavor": 422,
    "GangMismatch": 422,
    "GangTooLarge": 422,
    "RateLimited": 429,
    "StoreUnavailable": 503,
}
# The store cannot be reached right now (intake waits for it; the client retries).
STORE_AWAY = Refusal("StoreUnavailable", "the event store is unavailable; retry", None, 1.0)


class Refused(Exception):
    """An operation's refusal on its way to the transport."""

    def __init__(self, refusal: Refusal) -> None:
        super().__init__(refusal.message)
        self.refusal = refusal


def refuse(code: str, message: str, field: str | None = None) -> Refused:
    """A refusal decided at the edge (the request's shape, not its meaning)."""
    return Refused(Refusal(code, message, field))


def status(r: Refusal) -> int:
    return STATUS[r.code]


def to_json(r: Refusal) -> dict[str, Any]:
    body: dict[str, Any] = {"code": r.code, "message": r.message}
    if r.field:
        body["field"] = r.field
    return {"error": body}


def retry_after(r: Refusal) -> str | None:
    """Whole seconds, rounded up (HTTP's Retry-After; gRPC's retry-after metadata)."""
    return None if r.retry_after is None else str(max(1, math.ceil(r.retry_after)))


def response(r: Refusal) -> web.Response:
    headers = {}
    if (retry := retry_after(r)) is not None:
        headers["Retry-After"] = retry
    if r.code == "Unauthenticated":
        headers["WWW-Authenticate"] = 'Bearer realm="muster"'
    return web.json_response(to_json(r), status=status(r), headers=headers)
