"""A bounded schemathesis run against the served OpenAPI document: for every operation,
requests that fit the schema and requests that break it, as the admin and as a tenant.
No answer may be a 5xx, every answer must be JSON in the documented shape, and a
refusal (4xx) must leave the event store as it was."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import requests
from hypothesis import HealthCheck, given, settings
from schemathesis import GenerationMode, openapi

from tests.api.conftest import Api, bearer, head_from, hostile_answer_problem, workload

EXAMPLES = 12  # per operation and mode: bounded, so the run stays a few seconds
STATS: dict[tuple[str, int], int] = {}  # (method, status) -> calls


def _run(
    api: Api, base_url: str, document: dict[str, Any], loop: asyncio.AbstractEventLoop
) -> list[str]:
    schema = openapi.from_dict(document)
    session = requests.Session()
    problems: list[str] = []

    head = head_from(api, loop)

    for result in schema.get_all_operations():
        op = result.ok()
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):

            @settings(
                max_examples=EXAMPLES,
                deadline=None,
                derandomize=True,
                database=None,
                suppress_health_check=list(HealthCheck),
            )
            @given(case=op.as_strategy(generation_mode=mode))
            def check(case: Any) -> None:
                if case.query and "watch" in case.query:
                    case.query["watch"] = "false"  # a watch streams until the client leaves
                for who in ("admin", "team-a"):
                    before = head()
                    resp = case.call(
                        base_url=base_url, session=session, headers=bearer(who), timeout=30
                    )
                    STATS[(case.method, resp.status_code)] = (
                        STATS.get((case.method, resp.status_code), 0) + 1
                    )
                    label = f"{case.method} {case.formatted_path} as {who}: {resp.status_code}"
                    found = hostile_answer_problem(label, resp.status_code, resp.text, before, head)
                    if found:
                        problems.append(found)

            check()
    return problems


@pytest.mark.timeout(600)
async def test_no_5xx_and_no_stray_events(api_: Api) -> None:
    # Something to find: a workload, so generated ids sometimes hit the positive paths.
    resp = await api_.http.post("/v1/workloads", json=workload("seed"), headers=bearer("team-a"))
    assert resp.status == 201
    document = await (await api_.http.get("/openapi.json")).json()
    base_url = str(api_.http.make_url("")).rstrip("/")
    problems = await asyncio.to_thread(_run, api_, base_url, document, asyncio.get_running_loop())
    statuses = {status for _, status in STATS}
    assert {200, 400, 401, 403, 404, 422} <= statuses, STATS  # it reached every outcome
    assert not problems, "\n".join(problems[:20])
