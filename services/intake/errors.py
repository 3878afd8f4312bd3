"""One JSON error shape for every refusal: ``{"error": {"code", "message", "field"}}``."""

from __future__ import annotations

from aiohttp import web


def error(status: int, code: str, message: str, field: str | None = None) -> web.Response:
    body: dict[str, object] = {"code": code, "message": message}
    if field:
        body["field"] = field
    return web.json_response({"error": body}, status=status)
