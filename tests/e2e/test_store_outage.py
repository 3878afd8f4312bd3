"""A PostgreSQL outage rides out: the services behind a proxy that drops and refuses
every connection for a while (what a database restart does to its clients) stay up,
report degraded, answer submissions 503 instead of 500, and go on where they were once
the database is back: every workload finishes once, quota is never exceeded, replay
re-derives every decision. No service process exits (the stack would restart it)."""

from __future__ import annotations

import asyncio
import json
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.engine import make_url

from muster.cli.commands import deciders
from muster.core.events import queue as qev
from muster.core.events import workload as wev
from muster.core.verify import verify_decisions
from muster.runtime import admin
from muster.runtime.stack import Stack
from tests.e2e.tcp_proxy import TcpProxy
from tests.e2e.test_stack import (
    CLUSTER,
    ROOM,
    _log,
    _submit,
    _wait_finished,
    body,
    quota_violations,
)
from tests.postgres import POSTGRES_URL, drop_postgres, fresh_postgres

pytestmark = [pytest.mark.e2e, pytest.mark.postgres]

WORKLOADS = 20


def _status(url: str, method: str = "GET", data: dict[str, Any] | None = None) -> tuple[int, Any]:
    req = urllib.request.Request(
        url,
        method=method,
        data=json.dumps(data).encode() if data is not None else None,
        headers={"Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def _until(what: str, check: Any, timeout: float = 60.0) -> Any:
    deadline = time.monotonic() + timeout
    while not (got := check()):
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} not seen in {timeout}s")
        time.sleep(0.1)
    return got


@pytest.mark.skipif(POSTGRES_URL is None, reason="needs MUSTER_TEST_POSTGRES_URL")
def test_a_database_outage_is_ridden_out(tmp_path: Path) -> None:
    url, name = asyncio.run(fresh_postgres())
    real = make_url(url)
    try:
        with TcpProxy(real.host or "127.0.0.1", real.port or 5432) as proxy:
            via = real.set(host="127.0.0.1", port=proxy.port).render_as_string(False)
            env = {"MUSTER_HEARTBEAT_SECONDS": "0.2"}
            with Stack(tmp_path, store_url=via, poll_seconds=0.3, extra_env=env) as stack:
                asyncio.run(admin.configure(via, CLUSTER, stack.broker.bootstrap))
                ids = _submit(stack, range(WORKLOADS // 2))
                _wait_finished(stack, 2)
                proxy.cut()
                # Submissions are refused as "retry", not as a server error.
                status, answer = _status(
                    f"{stack.url()}/v1/workloads", "POST", {**body(99), "name": "during"}
                )
                assert (status, answer["error"]["code"]) == (503, "StoreUnavailable")
                # Every service says it is degraded, and stays up.
                for service in stack.services:
                    health = _until(
                        f"{service} degraded",
                        lambda s=service: (h := _status(f"{stack.url(s)}/healthz"))[0] == 503 and h,
                    )
                    assert health[1]["degraded"].startswith("store unavailable")
                time.sleep(2.0)  # the outage lasts: several backoffs pass
                proxy.restore()
                stack.wait_healthy()
                ids += _submit(stack, range(WORKLOADS // 2, WORKLOADS))
                _wait_finished(stack, WORKLOADS)
                assert stack.restarts == {}  # ridden out, not crashed and restarted
                log = asyncio.run(_log(via))
        submitted = [e.event.workload_id for e in log if isinstance(e.event, wev.WorkloadSubmitted)]
        assert sorted(submitted) == sorted(ids) and len(set(ids)) == WORKLOADS
        finished = [e.event.workload_id for e in log if isinstance(e.event, qev.WorkloadFinished)]
        assert sorted(finished) == sorted(ids)
        reserved = [e.event.workload_id for e in log if isinstance(e.event, qev.QuotaReserved)]
        assert sorted(reserved) == sorted(ids)
        assert quota_violations(log, ROOM) == []
        for decider in deciders().values():
            checked, mismatches = verify_decisions(log, decider)
            assert checked > 0 and mismatches == [], decider.name
    finally:
        asyncio.run(drop_postgres(name))
