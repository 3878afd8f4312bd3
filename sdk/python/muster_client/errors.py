"""The API's refusals as exceptions: each carries the API's ``code``, ``message``, ``field``
(the path of the bad input, e.g. ``podSets[0].count``) and, when the server said so, the
seconds to wait (``retry_after``). The class follows the code, so HTTP and gRPC raise alike."""

from __future__ import annotations

from typing import Any

# The HTTP status of each error code (docs/api.md, "Errors"; a test keeps it equal to
# intake's own table).
CODE_STATUS: dict[str, int] = {
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


class MusterError(Exception):
    """Anything this client raises."""


class TransportError(MusterError, OSError):
    """The server could not be reached, or the connection broke, after every retry."""


class ApiError(MusterError):
    """The server refused the call (a 4xx or 5xx answer, or a gRPC error status)."""

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        field: str | None = None,
        retry_after: float | None = None,
        body: Any = None,
    ) -> None:
        where = f" ({field})" if field else ""
        super().__init__(f"HTTP {status}: {message}{where}")
        self.status = status
        self.code = code
        self.message = message
        self.field = field
        self.retry_after = retry_after
        self.body = body


class BadRequest(ApiError):
    """400: the request did not parse (``MalformedJSON``, ``InvalidQuery``...)."""


class InvalidInput(ApiError):
    """422: the input is wrong; ``field`` names where."""


class Unauthenticated(ApiError):
    """401: no token, or one the server does not know."""


class Forbidden(ApiError):
    """403: the token may not do this."""


class NotFound(ApiError):
    """404: no such workload, queue or object."""


class Conflict(ApiError):
    """409: e.g. ``IdempotencyKeyReused`` (the key with another body), ``AlreadyFinished``."""


class TooLarge(ApiError):
    """413: ``PayloadTooLarge``, ``BatchTooLarge``."""


class RateLimited(ApiError):
    """429: over the tenant's submission rate (after every retry); see ``retry_after``."""


class Unavailable(ApiError):
    """5xx: the server (or its store) could not serve the call (after every retry)."""


_BY_STATUS: dict[int, type[ApiError]] = {
    400: BadRequest,
    401: Unauthenticated,
    403: Forbidden,
    404: NotFound,
    409: Conflict,
    413: TooLarge,
    422: InvalidInput,
    429: RateLimited,
}


def api_error(
    status: int | None,
    code: str | None,
    message: str,
    field: str | None = None,
    retry_after: float | None = None,
    body: Any = None,
) -> ApiError:
    """The typed exception for a refusal: by its code when known, else by its status."""
    if status is None:
        status = CODE_STATUS.get(code or "", 500)
    cls = _BY_STATUS.get(status) or (Unavailable if status >= 500 else ApiError)
    return cls(status, code or f"HTTP{status}", message, field, retry_after, body)


def from_http(status: int, body: Any, retry_after: float | None) -> ApiError:
    """The exception for an HTTP answer's status and decoded body (the API's
    ``{"error": {code, message, field}}``, or whatever a proxy in front of it said)."""
    err = body.get("error") if isinstance(body, dict) else None
    if isinstance(err, dict):
        return api_error(
            status,
            str(err.get("code") or f"HTTP{status}"),
            str(err.get("message", "")),
            err.get("field"),
            retry_after,
            body,
        )
    return api_error(status, None, str(body) if body else f"HTTP {status}", None, retry_after, body)
