"""The CLI's way to intake: muster's Python client (``sdk/python``, ``muster_client``) with
the CLI's bearer token (``--token`` or ``MUSTER_TOKEN``; ``configure`` sets it once).

``call`` (a method and a full URL) is the one-shot form of a call (the CLI's commands and
the end-to-end tests); a command making several calls uses ``client``.
"""

from __future__ import annotations

import os
from typing import Any
from urllib.parse import urlsplit

from muster_client import ApiError, Client

__all__ = ["ApiError", "call", "client", "configure", "split_url"]

_token: str | None = os.environ.get("MUSTER_TOKEN") or None


def configure(token: str | None) -> None:
    global _token
    _token = token or None


def client(server: str, timeout: float = 30.0) -> Client:
    """A blocking client for intake at ``server`` with the CLI's token (close it after)."""
    return Client(server, _token, timeout=timeout)


def split_url(url: str) -> tuple[str, str]:
    """``http://host:8080/v1/x?y=1`` as the server and the rest: (``http://host:8080``,
    ``/v1/x?y=1``)."""
    parts = urlsplit(url)
    rest = parts.path + (f"?{parts.query}" if parts.query else "")
    return f"{parts.scheme}://{parts.netloc}", rest


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
    """The decoded answer; ``ApiError`` for 4xx and 5xx (after the client's retries), an
    ``OSError`` when the server cannot be reached. ``raw`` sends bytes as they are
    (manifests as YAML) instead of ``body`` as JSON."""
    server, path = split_url(url)
    with client(server, timeout) as c:
        return c.request(
            method, path, json=body, data=raw, content_type=content_type, headers=headers
        )
