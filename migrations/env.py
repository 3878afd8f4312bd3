"""Alembic environment: runs the migrations on the async engine muster uses."""

from __future__ import annotations

import asyncio
import os

from alembic import context
from sqlalchemy import text
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import create_async_engine

from muster.store.schema import metadata
from muster.store.sql import normalise_url

config = context.config
target_metadata = metadata


def _url() -> str:
    url = config.attributes.get("url") or os.environ.get("MUSTER_STORE_URL")
    if not url:
        raise SystemExit("MUSTER_STORE_URL is not set: where is the event store?")
    return normalise_url(url)


def _run(connection: Connection) -> None:
    if connection.dialect.name == "postgresql":
        # Several services may migrate at once on start: one at a time.
        connection.execute(text("SELECT pg_advisory_xact_lock(7356201)"))
    context.configure(connection=connection, target_metadata=target_metadata)
    with context.begin_transaction():
        context.run_migrations()


async def _online() -> None:
    engine = create_async_engine(_url())
    async with engine.connect() as conn:
        await conn.run_sync(_run)
        await conn.commit()
    await engine.dispose()


if context.is_offline_mode():
    context.configure(url=_url(), target_metadata=target_metadata, literal_binds=True)
    with context.begin_transaction():
        context.run_migrations()
else:
    asyncio.run(_online())
