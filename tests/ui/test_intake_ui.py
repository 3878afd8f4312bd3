"""The UI's JSON under /v1/ui/ and its pages with authentication on, against intake alone
over a real SQLite store (tests/api's intake): a tenant sees only its namespaces, a past
position shows the log as it was, and in the browser the page asks for a token and shows
what that token may see."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from muster.store import SqlEventStore
from tests.api.conftest import Api, bearer, serve, workload
from tests.ui.browser import ARTIFACTS, CHROMIUM, browser_or_skip


@pytest.fixture
async def api_(sqlite_store: SqlEventStore, tmp_path: Path) -> AsyncIterator[Api]:
    async for a in serve(sqlite_store, tmp_path):
        yield a


async def _submit(api: Api, name: str, who: str) -> dict[str, Any]:
    resp = await api.http.post("/v1/workloads", json=workload(name, who), headers=bearer(who))
    assert resp.status == 201
    return dict(await resp.json())


async def _get(api: Api, path: str, who: str | None, status: int = 200) -> Any:
    resp = await api.http.get(path, headers=bearer(who))
    assert resp.status == status, await resp.text()
    return await resp.json()


async def test_tenants_see_their_own_workloads_and_need_a_token(api_: Api) -> None:
    a = await _submit(api_, "mine", "team-a")
    await _submit(api_, "theirs", "team-b")
    await _get(api_, "/v1/ui/workloads", None, 401)
    names = {w["name"] for w in (await _get(api_, "/v1/ui/workloads", "team-a"))["items"]}
    assert names == {"mine"}
    await _get(api_, f"/v1/ui/workloads/{a['id']}", "team-b", 403)
    admin = {w["name"] for w in (await _get(api_, "/v1/ui/workloads", "admin"))["items"]}
    assert admin == {"mine", "theirs"}
    first = await _get(api_, "/v1/ui/workloads?limit=1", "admin")
    assert (len(first["items"]), first["total"]) == (1, 2)
    # Live mode's stream: a tenant's holds its own workloads' events and nothing else.
    events = (await _get(api_, "/v1/ui/events", "team-a"))["events"]
    assert {e["workloadId"] for e in events} == {a["id"]}
    everything = (await _get(api_, "/v1/ui/events", "admin"))["events"]
    assert any(e["type"].startswith("config.") for e in everything)
    # ClusterQueues are cluster-scoped: every tenant sees them (as `muster get cq`).
    cqs = (await _get(api_, "/v1/ui/queues", "team-b"))["clusterQueues"]
    assert [q["name"] for q in cqs] == ["cq"]


async def test_a_past_position_shows_the_log_as_it_was(api_: Api) -> None:
    first = await _submit(api_, "first", "team-a")
    before = (await _get(api_, "/v1/ui/clock", "admin"))["head"]
    second = await _submit(api_, "second", "team-a")
    then = await _get(api_, f"/v1/ui/workloads?at={before}", "admin")
    assert then["position"] == before
    assert [w["name"] for w in then["items"]] == ["first"]
    await _get(api_, f"/v1/ui/workloads/{second['id']}?at={before}", "admin", 404)
    page = await _get(api_, f"/v1/ui/workloads/{first['id']}?at={before}", "admin")
    assert [e["type"] for e in page["events"]] == ["workload.submitted"]
    # Later again (folded forward), and earlier again (rebuilt from the start).
    assert len((await _get(api_, "/v1/ui/workloads?at=999999", "admin"))["items"]) == 2
    assert len((await _get(api_, f"/v1/ui/workloads?at={before}", "admin"))["items"]) == 1
    # A time: the last position before the first event after it.
    at = (await _get(api_, f"/v1/ui/clock?time={first['submittedAt']}", "admin"))["at"]
    assert at >= 1 and at < before + 1
    # A day ago: only the configuration (applied at time 1.0 here), no workload yet.
    assert (await _get(api_, "/v1/ui/workloads?time=-1d", "admin"))["items"] == []
    await _get(api_, "/v1/ui/workloads?at=-1", "admin", 400)
    await _get(api_, "/v1/ui/clock?time=yesterday", "admin", 400)


async def test_moving_forward_equals_rebuilding_from_the_start(api_: Api) -> None:
    """The kept state folded forward shows at each position what a fresh rebuild does."""
    for i in range(3):
        await _submit(api_, f"w{i}", "team-a")
    resp = await api_.http.post(
        f"/v1/workloads/{(await _submit(api_, 'gone', 'team-a'))['id']}/cancel",
        headers=bearer("team-a"),
    )
    assert resp.status == 202
    head = (await _get(api_, "/v1/ui/clock", "admin"))["head"]
    forward = [await _get(api_, f"/v1/ui/workloads?at={p}", "admin") for p in range(head + 1)]
    for p in reversed(range(head + 1)):  # each earlier one rebuilt from the start
        assert await _get(api_, f"/v1/ui/workloads?at={p}", "admin") == forward[p]
    assert len(forward[-1]["items"]) == 4
    assert {w["status"] for w in forward[-1]["items"] if w["name"] == "gone"} <= {
        "Cancelled",
        "Pending",
    }


async def test_the_page_asks_for_a_token_and_shows_what_it_may_see(api_: Api) -> None:
    browser_or_skip()
    from playwright.async_api import async_playwright, expect

    await _submit(api_, "a-job", "team-a")
    await _submit(api_, "b-job", "team-b")
    url = str(api_.http.make_url("/ui/"))
    async with async_playwright() as p:
        browser = await p.chromium.launch(executable_path=CHROMIUM)
        try:
            page = await browser.new_page(viewport={"width": 1200, "height": 700})
            await page.goto(url + "#/workloads")
            await expect(page.locator("#banner")).to_contain_text("enter a token")
            await page.fill("#token", "tok-a")
            await page.click("text=Use token")
            table = page.get_by_test_id("workloads")
            await expect(table).to_contain_text("a-job")
            await expect(table).not_to_contain_text("b-job")
            await expect(page.locator("#token")).to_have_attribute(
                "placeholder", "token in use (empty: forget it)"
            )
            stored = await page.evaluate("sessionStorage.getItem('muster-token')")
            assert stored == "tok-a"  # this tab only, sent as a Bearer token
            ARTIFACTS.mkdir(exist_ok=True)
            await page.screenshot(path=str(ARTIFACTS / "token_team_a_workloads.png"))
        finally:
            await browser.close()
