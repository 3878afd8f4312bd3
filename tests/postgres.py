"""Throwaway PostgreSQL databases on the test server (``MUSTER_TEST_POSTGRES_URL``), so
tests and chaos runs never see each other's events."""

from __future__ import annotations

import os
import uuid

from sqlalchemy.engine import make_url

POSTGRES_URL = os.environ.get("MUSTER_TEST_POSTGRES_URL")


async def fresh_postgres(server: str | None = None) -> tuple[str, str]:
    """(URL, name) of a new empty database on ``server`` (default: the test server)."""
    import asyncpg

    server = server or POSTGRES_URL
    assert server is not None
    base = make_url(server)
    name = f"muster_t_{uuid.uuid4().hex[:10]}"
    conn = await asyncpg.connect(base.set(drivername="postgresql").render_as_string(False))
    try:
        await conn.execute(f'CREATE DATABASE "{name}"')
    finally:
        await conn.close()
    return base.set(database=name).render_as_string(False), name


async def drop_postgres(name: str, server: str | None = None) -> None:
    import asyncpg

    server = server or POSTGRES_URL
    assert server is not None
    base = make_url(server).set(drivername="postgresql")
    conn = await asyncpg.connect(base.render_as_string(False))
    try:
        await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        await conn.close()
