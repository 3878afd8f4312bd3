"""Benchmarks, each runnable as ``python -m bench.<name>`` (see bench/README.md).

They print figures and ratios against a baseline measured in the same process;
they assert nothing about speed. Shared helpers live here.
"""

from __future__ import annotations

import contextlib
import os
import platform
import uuid
from collections.abc import AsyncIterator
from typing import Any

from sqlalchemy.engine import make_url

from muster.core.model import parse
from muster.core.model.workload import WorkloadSpec

POSTGRES_ENV = "MUSTER_TEST_POSTGRES_URL"


def machine() -> str:
    return (f"python {platform.python_version()}, {os.cpu_count()} cpu(s), "
            f"{platform.system()} {platform.release()}")


def per_second(count: float, seconds: float) -> float:
    return count / seconds if seconds > 0 else float("inf")


def ratio(a: float, b: float) -> str:
    return f"{a / b:.2f}x" if b else "n/a"


def workload_body(i: int, *, gpus: int = 1, duration: float = 0.5,
                  namespace: str = "team-a", queue: str = "training") -> dict[str, Any]:
    """A POST /v1/workloads body (the API's camelCase shape)."""
    return {
        "name": f"bench-{i}", "namespace": namespace, "queueName": queue,
        "podSets": [{"name": "worker", "count": 1,
                     "requests": {"nvidia.com/gpu": gpus, "cpu": 1, "memory": "1Gi"}}],
        "runtime": {"durationSeconds": duration},
    }


def workload_spec(i: int, **kwargs: Any) -> WorkloadSpec:
    return parse.workload(workload_body(i, **kwargs))


def postgres_url() -> str | None:
    return os.environ.get(POSTGRES_ENV) or None


@contextlib.asynccontextmanager
async def scratch_postgres(server_url: str) -> AsyncIterator[str]:
    """A database created for the benchmark on the server of ``server_url``, then dropped.

    Only the server is taken from the URL (its database is the one we connect to to
    issue CREATE/DROP DATABASE); nothing else on it is read or written.
    """
    import asyncpg

    base = make_url(server_url)
    dsn = base.set(drivername="postgresql").render_as_string(hide_password=False)
    name = f"muster_bench_{uuid.uuid4().hex[:12]}"
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute(f'CREATE DATABASE "{name}"')
    finally:
        await conn.close()
    try:
        yield base.set(database=name).render_as_string(hide_password=False)
    finally:
        conn = await asyncpg.connect(dsn)
        try:
            force = " WITH (FORCE)" if conn.get_server_version().major >= 13 else ""
            await conn.execute(f'DROP DATABASE IF EXISTS "{name}"{force}')
        finally:
            await conn.close()


def redact(url: str) -> str:
    return make_url(url).render_as_string(hide_password=True)
