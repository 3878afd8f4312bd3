"""A bounded schemathesis run against the served OpenAPI document: for every operation,
requests that fit the schema and requests that break it, as the admin and as a tenant.
No answer may be a 5xx, every answer must be JSON in the documented shape, and a
refusal (4xx) must leave the event store as it was."""

from __future__ import annotations

import asyncio

import pytest

from tests.api.conftest import Api, bearer, head_from, workload
from tests.api.hostile import HeadJudge, http_operations

EXAMPLES = 12  # per operation and mode: bounded, so the run stays a few seconds


@pytest.mark.timeout(600)
async def test_no_5xx_and_no_stray_events(api_: Api) -> None:
    # Something to find: a workload, so generated ids sometimes hit the positive paths.
    resp = await api_.http.post("/v1/workloads", json=workload("seed"), headers=bearer("team-a"))
    assert resp.status == 201
    document = await (await api_.http.get("/openapi.json")).json()
    base_url = str(api_.http.make_url("")).rstrip("/")
    judge = HeadJudge(head_from(api_, asyncio.get_running_loop()))
    await asyncio.to_thread(
        http_operations, base_url, document, EXAMPLES, ("admin", "team-a"), judge
    )
    assert {"200", "400", "401", "403", "404", "422"} <= set(judge.statuses), judge.statuses
    assert not judge.problems, "\n".join(judge.problems[:20])
