"""Hostile manifests of every kind the seeds hold: each seed document, with one field
replaced by a hostile value (wrong types, huge or non-finite numbers, long or odd
strings, deep nesting), a field removed or an unknown one added, applied as the admin
and as a tenant. No answer may be a 5xx; a refusal is the error shape and leaves the
store as it was."""

from __future__ import annotations

import asyncio

import pytest
import yaml

from tests.api.conftest import Api, head_from
from tests.api.hostile import HeadJudge, manifests
from tests.api.test_cli import SEED_FILES

EXAMPLES = 150
SEEDS = [doc for f in SEED_FILES for doc in yaml.safe_load_all(f.read_text()) if doc]


@pytest.mark.timeout(600)
async def test_hostile_manifests_get_no_5xx_and_leave_nothing_when_refused(api_: Api) -> None:
    kinds = {doc["kind"] for doc in SEEDS}
    assert len(kinds) >= 8  # the seeds cover the manifest kinds muster reads
    base_url = str(api_.http.make_url("")).rstrip("/")
    judge = HeadJudge(head_from(api_, asyncio.get_running_loop()))
    await asyncio.to_thread(manifests, base_url, SEEDS, EXAMPLES, ("admin", "team-a"), judge)
    seen = set(judge.statuses)
    assert {"200", "403", "422"} <= seen, seen  # accepted, forbidden and invalid were reached
    assert not judge.problems, "\n".join(judge.problems[:10])
