"""One error shape for every refusal, whatever the transport.

HTTP answers ``{"error": {"code", "message", "field"}}`` with ``status``; gRPC answers
the status code ``GRPC`` maps it to, with the code and field in trailing metadata.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from muster.core.intake.refusal import Refusal

# The HTTP status of each refusal code the core decides (gRPC maps the status on).
STATUS = {
    "MalformedYAML": 400,
    "InvalidField": 422,
    "UnknownQueue": 422,
    "UnknownFlavor": 422,
    "BatchTooLarge": 413,
    "Forbidden": 403,
    "NotFound": 404,
    "IdempotencyKeyReused": 409,
    "AlreadyExists": 409,
    "RateLimited": 429,
}


@dataclass(slots=True)
class ApiError(Exception):
    status: int  # the HTTP status
    code: str  # a stable name clients can switch on: InvalidField, Forbidden, ...
    message: str
    field: str | None = None
    retry_after: float | None = None  # seconds (429)

    def __str__(self) -> str:
        return self.message

    @classmethod
    def store_away(cls) -> ApiError:
        """The store cannot be reached right now (intake waits for it; the client retries)."""
        return cls(503, "StoreUnavailable", "the event store is unavailable; retry", None, 1.0)

    @classmethod
    def refused(cls, r: Refusal) -> ApiError:
        """A refusal the core decided, with its transport status."""
        return cls(STATUS[r.code], r.code, r.message, r.field, r.retry_after)

    def to_json(self) -> dict[str, Any]:
        body: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.field:
            body["field"] = self.field
        return {"error": body}

    def retry_after_header(self) -> str | None:
        """Whole seconds, rounded up (HTTP's Retry-After; gRPC's retry-after metadata)."""
        return None if self.retry_after is None else str(max(1, math.ceil(self.retry_after)))

    def response(self) -> web.Response:
        headers = {}
        if (retry := self.retry_after_header()) is not None:
            headers["Retry-After"] = retry
        if self.status == 401:
            headers["WWW-Authenticate"] = 'Bearer realm="muster"'
        return web.json_response(self.to_json(), status=self.status, headers=headers)
