"""Intake's submission decisions, pure: a batch plans every event or one refusal."""

from __future__ import annotations

import hashlib
from typing import Any

import orjson
from hypothesis import given
from hypothesis import strategies as st

from muster.core import inputs
from muster.core.access.tokens import ANONYMOUS_ADMIN
from muster.core.codec import to_plain
from muster.core.intake import submissions
from muster.core.intake.refusal import Refusal
from muster.core.model import parse

ADMIN = ANONYMOUS_ADMIN


def _item(
    name: str, key: str | None, at: int, body: dict[str, Any] | None = None
) -> submissions.Item:
    doc = body or {
        "name": name,
        "namespace": "team",
        "queueName": "q",
        "podSets": [{"name": "w", "count": 1, "requests": {"cpu": 1}}],
    }
    spec = parse.workload(doc)
    wid = inputs.workload_id("team", key) if key else f"fresh-{at}"
    return submissions.Item(spec, key, wid, f"items[{at}].")


def test_a_batch_of_new_items_appends_each() -> None:
    items = [_item("a", "ka", 0), _item("b", None, 1)]
    plan = submissions.plan(items, {}, 5.0)
    assert isinstance(plan, submissions.Plan)
    assert plan.created == [True, True]
    assert [e.stream_id for e in plan.append] == [f"workload-{i.workload_id}" for i in items]
    assert all(e.occurred_at == 5.0 for e in plan.append)


def test_a_planned_submission_carries_its_request_digest() -> None:
    """The plan computes the digest once (to compare with a stored one) and stores that
    one: what a retry is compared against is the digest of the body."""
    item = _item("a", "ka", 0)
    plan = submissions.plan([item], {}, 5.0)
    assert isinstance(plan, submissions.Plan)
    (new,) = plan.append
    assert new.event.request_digest == inputs.digest(item.spec)  # type: ignore[attr-defined]
    assert new == inputs.submission(item.workload_id, item.spec, 5.0, "ka")


def test_a_retried_item_is_answered_and_a_reused_key_refuses_the_whole_batch() -> None:
    old = _item("a", "ka", 0)
    known = {old.workload_id: inputs.digest(old.spec)}
    plan = submissions.plan([_item("n", "kn", 0), _item("a", "ka", 1)], known, 1.0)
    assert isinstance(plan, submissions.Plan) and plan.created == [True, False]
    assert len(plan.append) == 1
    refused = submissions.plan([_item("n", "kn", 0), _item("other", "ka", 1)], known, 1.0)
    assert refused == Refusal(
        "IdempotencyKeyReused",
        "this idempotency key was used for a different workload",
        "items[1].idempotencyKey",
    )


def test_one_key_twice_in_a_batch() -> None:
    same = submissions.plan([_item("a", "k", 0), _item("a", "k", 1)], {}, 1.0)
    assert isinstance(same, submissions.Plan) and same.created == [True, False]
    other = submissions.plan([_item("a", "k", 0), _item("b", "k", 1)], {}, 1.0)
    assert isinstance(other, Refusal) and other.field == "items[1].idempotencyKey"


def test_reading_a_batch_names_the_item() -> None:
    got = submissions.read_batch(ADMIN, [{"name": "a", "podSets": []}], 10)
    assert isinstance(got, Refusal) and got.code == "InvalidField"
    assert got.field is not None and got.field.startswith("items[0].")
    assert submissions.read_batch(ADMIN, [], 10) == Refusal(
        "InvalidField", "must be a non-empty list of workloads", "items"
    )
    too_many = submissions.read_batch(ADMIN, [{}] * 3, 2)
    assert isinstance(too_many, Refusal) and too_many.code == "BatchTooLarge"


# -- the request digest -------------------------------------------------------------------

_LABEL = st.from_regex(r"[a-z]([a-z0-9.-]{0,10}[a-z0-9])?", fullmatch=True)


@given(
    duration=st.floats(min_value=1e-9, max_value=3e7, allow_nan=False, allow_infinity=False),
    count=st.integers(min_value=1, max_value=100_000),
    labels=st.dictionaries(_LABEL, _LABEL, max_size=4),
    priority=st.integers(min_value=-(10**9), max_value=10**9),
)
def test_the_digest_is_the_bytes_it_always_was(
    duration: float, count: int, labels: dict[str, str], priority: int
) -> None:
    """Digests are stored and compared with a retry's: the fast encoder must write exactly
    what the reflective form wrote (sorted keys, the same numbers and escapes)."""
    body = {
        "name": "w", "namespace": "team-a", "queueName": "q", "priority": priority,
        "labels": labels,
        "podSets": [{"name": "worker", "count": count,
                     "requests": {"nvidia.com/gpu": 1, "cpu": 0.5, "memory": "1Gi"}}],
        "runtime": {"durationSeconds": duration},
    }  # fmt: skip
    spec = parse.workload(body)
    reflective = orjson.dumps(to_plain(spec), option=orjson.OPT_SORT_KEYS)
    assert inputs.digest(spec) == hashlib.sha256(reflective).hexdigest()
