"""Hostile manifests of every kind the seeds hold: each seed document, with one field
replaced by a hostile value (wrong types, huge or non-finite numbers, long or odd
strings, deep nesting), a field removed or an unknown one added, applied as the admin
and as a tenant. No answer may be a 5xx; a refusal is the error shape and leaves the
store as it was."""

from __future__ import annotations

import asyncio
import copy
from typing import Any

import pytest
import requests
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.api.conftest import Api, bearer, head_from, hostile_answer_problem
from tests.api.test_cli import SEED_FILES

EXAMPLES = 150
SEEDS = [doc for f in SEED_FILES for doc in yaml.safe_load_all(f.read_text()) if doc]

leaf = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=40),
    st.sampled_from(["", "-1", "1e400", "0x10", "1Gi", "99999999999Ei", "\u202e", "a" * 300]),
)
hostile = st.recursive(
    leaf,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)


def _paths(node: Any, at: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [at]
    if isinstance(node, dict):
        for k, v in node.items():
            out += _paths(v, (*at, k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            out += _paths(v, (*at, i))
    return out


@st.composite
def mutated(draw: st.DrawFn) -> dict[str, Any]:
    doc = copy.deepcopy(draw(st.sampled_from(SEEDS)))
    path = draw(st.sampled_from(_paths(doc)[1:]))  # never the document itself
    parent = doc
    for step in path[:-1]:
        parent = parent[step]
    how = draw(st.sampled_from(["replace", "replace", "remove", "add"]))
    if how == "replace":
        parent[path[-1]] = draw(hostile)
    elif how == "remove" and isinstance(parent, dict):
        del parent[path[-1]]
    elif isinstance(parent, dict):
        parent[draw(st.text(min_size=1, max_size=12))] = draw(hostile)
    return doc


def _run(api: Api, base_url: str, loop: asyncio.AbstractEventLoop) -> tuple[list[str], set[int]]:
    session = requests.Session()
    problems: list[str] = []
    seen: set[int] = set()

    head = head_from(api, loop)

    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(doc=mutated())
    def check(doc: dict[str, Any]) -> None:
        text = yaml.safe_dump(doc)
        for who in ("admin", "team-a"):
            before = head()
            resp = session.post(
                f"{base_url}/v1/apply", data=text.encode(), headers=bearer(who), timeout=30
            )
            seen.add(resp.status_code)
            label = f"{doc.get('kind')} as {who}: {resp.status_code}"
            found = hostile_answer_problem(label, resp.status_code, resp.text, before, head)
            if found:
                problems.append(f"{found}\n{text[:500]}")

    check()
    return problems, seen


@pytest.mark.timeout(600)
async def test_hostile_manifests_get_no_5xx_and_leave_nothing_when_refused(api_: Api) -> None:
    kinds = {doc["kind"] for doc in SEEDS}
    assert len(kinds) >= 8  # the seeds cover the manifest kinds muster reads
    base_url = str(api_.http.make_url("")).rstrip("/")
    problems, seen = await asyncio.to_thread(_run, api_, base_url, asyncio.get_running_loop())
    assert {200, 403, 422} <= seen, seen  # accepted, forbidden and invalid were all reached
    assert not problems, "\n".join(problems[:10])
