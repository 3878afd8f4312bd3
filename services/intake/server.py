"""Intake's shell: the authenticator from the settings, then the HTTP routes, the gRPC
server and (optionally) the Kafka ingest consumer over one set of operations."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path

from aiohttp import web

from muster.core.access.tokens import Authenticator, load_token_file
from muster.runtime.loop import DeciderLoop
from muster.runtime.settings import Settings, SettingsError
from services.intake import api, grpc_api, ingest


def authenticator(settings: Settings) -> Authenticator:
    """Tokens from MUSTER_AUTH_TOKEN_FILE, the signing key from MUSTER_AUTH_SECRET_FILE."""
    book = secret = None
    try:
        if settings.auth_token_file:
            book = load_token_file(settings.auth_token_file)
        if settings.auth_secret_file:
            secret = Path(settings.auth_secret_file).read_bytes().strip()
    except (OSError, ValueError) as exc:
        raise SettingsError(f"cannot load the auth configuration: {exc}") from None
    return Authenticator(book, secret)


def routes(app: web.Application, loop: DeciderLoop) -> list[Callable[[], Awaitable[None]]]:
    settings = loop.settings
    intake = api.routes(app, loop, authenticator(settings))

    async def grpc_server() -> None:
        await grpc_api.serve(intake, settings)

    async def ingest_topic() -> None:
        await ingest.consume(intake, settings)

    tasks: list[Callable[[], Awaitable[None]]] = []
    if settings.grpc_port:
        tasks.append(grpc_server)
    if settings.ingest_topic:
        tasks.append(ingest_topic)
    return tasks
