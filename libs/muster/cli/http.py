"""A small JSON-over-HTTP client for the CLI (standard library only).

The bearer token comes from ``--token`` or ``MUSTER_TOKEN``; ``configure`` sets it once.
"""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from typing import Any

_token: str | None = os.environ.get("MUSTER_TOKEN") or None


def configure(token: str | None) -> None:
    global _token
    _token = token or None


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
    *,
    raw: bytes | None = None,
    content_type: str = "application/json",
) -> Any:
    return call_status(method, url, body, headers, timeout, raw=raw, content_type=content_type)[0]


def call_status(
    method: str,
    url: str,
    body: Any = None,
    headers: dict[str, str] | None = None,
    timeout: float = 30.0,
    *,
    raw: bytes | None = None,
    content_type: str = "application/json",
) -> tuple[Any, int]:
    """The decoded answer and its HTTP status; ``ApiError`` for 4xx and 5xx. ``raw`` sends
    bytes as they are (manifests as YAML) instead of ``body`` as JSON."""
    data = raw if raw is not None else json.dumps(body).encode() if body is not None else None
    sent = {"Content-Type": content_type, **(headers or {})}
    if _token:
        sent.setdefault("Authorization", f"Bearer {_token}")
    req = urllib.request.Request(url, data=data, method=method, headers=sent)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return json.loads(resp.read() or b"null"), resp.status
    except urllib.error.HTTPError as exc:
        payload_raw = exc.read()
        try:
            payload = json.loads(payload_raw)
        except ValueError:
            payload = payload_raw.decode(errors="replace")
        raise ApiError(exc.code, payload) from None
