"""Bring a store's schema to the newest Alembic revision (idempotent, safe to race)."""

from __future__ import annotations

import asyncio
import fcntl
import sqlite3
from pathlib import Path

from alembic import command
from alembic.config import Config
from sqlalchemy.engine import make_url

from muster.store.sql import BUSY_WAIT_MS, normalise_url, switch_to_wal

ROOT = Path(__file__).resolve().parents[3]


def alembic_config(url: str) -> Config:
    config = Config(str(ROOT / "alembic.ini"))
    config.set_main_option("script_location", str(ROOT / "migrations"))
    config.attributes["url"] = normalise_url(url)
    return config


def upgrade(url: str) -> None:
    """Run in a thread: Alembic drives its own event loop."""
    parsed = make_url(normalise_url(url))
    if parsed.drivername.startswith("sqlite") and parsed.database:
        Path(parsed.database).parent.mkdir(parents=True, exist_ok=True)
        lock_path = Path(f"{parsed.database}.migrate.lock")
        with open(lock_path, "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # SQLite: one migrating process at a time
            command.upgrade(alembic_config(url), "head")
            _wal(parsed.database)
    else:
        command.upgrade(alembic_config(url), "head")


async def upgrade_async(url: str) -> None:
    await asyncio.to_thread(upgrade, url)


def _wal(path: str) -> None:
    """The file in WAL mode from its first append on. The engine's connections switch it
    (sql.py), but the stdlib driver's path does not (it cannot wait for the lock the switch
    needs), so a process whose first store call was an append (bench.store_appends, a CLI)
    committed in rollback-journal mode, with two fsyncs an append."""
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute(f"PRAGMA busy_timeout={BUSY_WAIT_MS}")
        switch_to_wal(conn)
    finally:
        conn.close()
