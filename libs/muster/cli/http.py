"""A small JSON-over-HTTP client for the CLI (standard library only)."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any


class ApiError(RuntimeError):
    def __init__(self, status: int, body: Any) -> None:
        err = body.get("error", {}) if isinstance(body, dict) else {}
        where = f" ({err['field']})" if err.get("field") else ""
        super().__init__(f"HTTP {status}: {err.get('message', body)}{where}")
        self.status = status
        self.body = body


def call(
    method: str,
    url: str,
    body: Any = None,
    headers: dict[str, str] | None = None,
    timeout: float = 30.0,
) -> Any:
    return call_status(method, url, body, headers, timeout)[0]


def call_status(
    method: str,
    url: str,
    body: Any = None,
    headers: dict[str, str] | None = None,
    timeout: float = 30.0,
) -> tuple[Any, int]:
    """The decoded answer and its HTTP status; ``ApiError`` for 4xx and 5xx."""
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(
        url,
        data=data,
        method=method,
        headers={"Content-Type": "application/json", **(headers or {})},
    )
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return json.loads(resp.read() or b"null"), resp.status
    except urllib.error.HTTPError as exc:
        raw = exc.read()
        try:
            payload = json.loads(raw)
        except ValueError:
            payload = raw.decode(errors="replace")
        raise ApiError(exc.code, payload) from None
