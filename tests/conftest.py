"""Shared fixtures: a real Tansu broker, real SQLite files, PostgreSQL when present."""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from hypothesis import Phase, settings

from muster.bus.broker import EmbeddedBroker
from muster.store import SqlEventStore
from muster.store.migrate import upgrade_async
from tests.postgres import POSTGRES_URL, drop_postgres, fresh_postgres

# Property tests draw the same examples on every run (derandomized from each test's name),
# so `make test` and CI fail on a change, not on a lucky draw; `make fuzz` explores new
# ones. No explain phase: its tracing made a found failure take minutes to report.
_PHASES = [p for p in Phase if p is not Phase.explain]
settings.register_profile("muster", derandomize=True, phases=_PHASES)
settings.register_profile("fuzz", derandomize=False, phases=_PHASES)
settings.load_profile(os.environ.get("MUSTER_HYPOTHESIS_PROFILE", "muster"))

# A `muster up` running on this machine must not answer for the tests: every CLI command
# looks for its state file when no flag or variable names a server or store.
os.environ["MUSTER_STATE"] = str(Path(tempfile.gettempdir()) / f"muster-tests-{os.getpid()}.json")


@pytest.fixture(scope="session")
def broker() -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker() as b:
        yield b


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
async def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[str]:
    """A migrated, empty store: a SQLite file, and a fresh PostgreSQL database when available."""
    if request.param == "postgres":
        async with _migrated_postgres() as url:
            yield url
        return
    url = f"sqlite:///{tmp_path / 'muster.db'}"
    await upgrade_async(url)
    yield url


@pytest.fixture
async def postgres_url() -> AsyncIterator[str]:
    """A migrated, empty PostgreSQL database of its own (skipped where none is configured)."""
    async with _migrated_postgres() as url:
        yield url


@contextlib.asynccontextmanager
async def _migrated_postgres() -> AsyncIterator[str]:
    if not POSTGRES_URL:
        pytest.skip("PostgreSQL not configured (MUSTER_TEST_POSTGRES_URL); CI always sets it")
    url, name = await fresh_postgres()
    await upgrade_async(url)
    try:
        yield url
    finally:
        await drop_postgres(name)


@pytest.fixture
async def store(store_url: str) -> AsyncIterator[SqlEventStore]:
    s = SqlEventStore(store_url)
    try:
        yield s
    finally:
        await s.close()


@pytest.fixture
async def sqlite_store(tmp_path: Path) -> AsyncIterator[SqlEventStore]:
    url = f"sqlite:///{tmp_path / 'muster.db'}"
    await upgrade_async(url)
    s = SqlEventStore(url)
    try:
        yield s
    finally:
        await s.close()
