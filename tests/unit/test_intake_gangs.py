"""Gangs submitted member by member, as intake plans them (peers.md §1.5, Armada gangId and
gangCardinality: "the total count the scheduler waits for"; §2.4, Volcano PodGroup
minMember; Kueue plain pod groups: one Workload for the group once all its pods exist)."""

from __future__ import annotations

from typing import Any

from muster.core import inputs
from muster.core.access.tokens import ANONYMOUS_ADMIN
from muster.core.events import NewEvent
from muster.core.events import workload as wev
from muster.core.intake import gangs, submissions
from muster.core.intake.cancellations import cancel
from muster.core.intake.refusal import Refusal
from muster.core.model import parse
from muster.core.model.fields import InvalidInput
from muster.core.views.workloads import WorkloadsState, WorkloadsView, evolve
from tests.unit.harness_inputs import envelope

GID = inputs.gang_workload_id("team", "g")
STREAM = wev.stream(GID)


def _member(name: str, key: str | None = None, **extra: Any) -> submissions.Item:
    doc: dict[str, Any] = {
        "name": name,
        "namespace": "team",
        "queueName": "q",
        "gang": {"name": "g", "cardinality": 3},
        "podSets": [{"name": "worker", "count": 1, "requests": {"nvidia.com/gpu": 1}}],
    }
    doc.update(extra)
    spec = parse.workload(doc)
    return submissions.Item(spec, key, inputs.workload_id("team", key or name), "")


def _stored(plan: submissions.Plan | Refusal) -> gangs.GangState:
    """The gang's stream after ``plan`` was appended."""
    assert isinstance(plan, submissions.Plan)
    news = [n for n in plan.append if n.stream_id == STREAM]
    return gangs.fold(STREAM, [envelope(n.event, i + 1, stream=STREAM) for i, n in enumerate(news)])


def _grow(state: gangs.GangState, plan: submissions.Plan | Refusal) -> gangs.GangState:
    assert isinstance(plan, submissions.Plan)
    for new in plan.append:
        if new.stream_id == STREAM:
            gangs.record(state, new.event)
    return state


def test_members_wait_until_the_last_one_submits_the_gang_as_one_workload() -> None:
    plan = submissions.plan([_member("a"), _member("b")], {}, 1.0)
    assert isinstance(plan, submissions.Plan)
    assert plan.created == [True, True] and plan.formed == []
    assert all(isinstance(n.event, wev.GangMemberSubmitted) for n in plan.append)
    assert {n.stream_id for n in plan.append} == {STREAM}
    state = _stored(plan)
    assert len(state.members) == 2 and not state.formed and state.version == 2

    last = submissions.plan([_member("c")], {}, 2.0, {STREAM: state})
    assert isinstance(last, submissions.Plan)
    assert [type(n.event) for n in last.append] == [
        wev.GangMemberSubmitted,
        wev.WorkloadSubmitted,
    ]
    group = last.formed[0].event
    assert isinstance(group, wev.WorkloadSubmitted) and group.workload_id == GID
    # identical pods merged into one pod set of three (as Kueue merges a pod group's pods)
    assert [(ps.name, ps.count) for ps in group.spec.pod_sets] == [("worker", 3)]
    assert group.spec.name == "g" and group.spec.gang is None
    # one append on the gang's stream, at the version it was planned against
    [append] = last.stream_appends()
    assert append.stream_id == STREAM and append.expected_version == 2


def test_different_pods_make_one_pod_set_per_shape() -> None:
    launcher = _member("l", podSets=[{"name": "launcher", "count": 1, "requests": {"cpu": 1}}])
    plan = submissions.plan([_member("a"), launcher, _member("b")], {}, 1.0)
    assert isinstance(plan, submissions.Plan)
    spec = plan.formed[0].event.spec  # type: ignore[attr-defined]
    assert [(ps.name, ps.count) for ps in spec.pod_sets] == [("worker", 2), ("launcher", 1)]


def test_a_retried_member_appends_nothing_and_a_reused_key_is_refused() -> None:
    state = _stored(submissions.plan([_member("a", "ka")], {}, 1.0))
    again = submissions.plan([_member("a", "ka")], {}, 2.0, {STREAM: state})
    assert isinstance(again, submissions.Plan)
    assert again.created == [False] and again.append == []
    other = submissions.plan([_member("b", "ka")], {}, 2.0, {STREAM: state})
    assert isinstance(other, Refusal) and other.code == "IdempotencyKeyReused"


def test_members_must_agree_on_queue_priority_and_cardinality() -> None:
    state = _stored(submissions.plan([_member("a")], {}, 1.0))
    for field, extra in (
        ("queueName", {"queueName": "other"}),
        ("priority", {"priority": 5}),
        ("gang.cardinality", {"gang": {"name": "g", "cardinality": 4}}),
    ):
        refused = submissions.plan([_member("b", **extra)], {}, 2.0, {STREAM: state})
        assert isinstance(refused, Refusal), field
        assert refused.code == "GangMismatch" and refused.field == field
        assert "gang g" in refused.message


def test_two_members_completing_the_gang_at_once_cannot_both_append() -> None:
    """Both plan against version 2; the store takes the first and refuses the second,
    which, planned again, finds the gang formed and becomes a workload of its own."""
    state = _stored(submissions.plan([_member("a"), _member("b")], {}, 1.0))
    first = submissions.plan([_member("c")], {}, 2.0, {STREAM: state})
    second = submissions.plan([_member("d")], {}, 2.0, {STREAM: state})
    assert isinstance(first, submissions.Plan) and isinstance(second, submissions.Plan)
    assert first.stream_appends()[0].expected_version == 2
    assert second.stream_appends()[0].expected_version == 2
    replanned = submissions.plan([_member("d")], {}, 2.0, {STREAM: _grow(state, first)})
    assert isinstance(replanned, submissions.Plan) and replanned.formed == []
    [extra] = replanned.append
    assert isinstance(extra.event, wev.WorkloadSubmitted)
    assert extra.stream_id == wev.stream(_member("d").workload_id)


def test_a_cancelled_gang_refuses_new_members() -> None:
    state = _stored(submissions.plan([_member("a")], {}, 1.0))
    gangs.record(state, wev.WorkloadCancelRequested(workload_id=GID))
    refused = submissions.plan([_member("b")], {}, 2.0, {STREAM: state})
    assert isinstance(refused, Refusal) and refused.code == "GangCancelled"


def test_a_member_may_not_ask_for_partial_admission() -> None:
    try:
        _member("a", podSets=[{"name": "w", "count": 2, "minCount": 1, "requests": {"cpu": 1}}])
    except InvalidInput as exc:
        assert exc.path == "podSets[0].minCount"
    else:
        raise AssertionError("accepted")


# -- intake's view of members ------------------------------------------------------------


def _view(news: list[NewEvent]) -> WorkloadsState:
    state = WorkloadsView().initial()
    for i, new in enumerate(news):
        evolve(state, envelope(new.event, i + 1, stream=new.stream_id))
    return state


def test_members_show_the_gang_incomplete_then_follow_its_workload() -> None:
    a, b, c = _member("a"), _member("b"), _member("c")
    plan = submissions.plan([a, b], {}, 1.0)
    assert isinstance(plan, submissions.Plan)
    state = _view(plan.append)
    view = state.workloads[a.workload_id]
    assert (view.status, view.reason) == ("Pending", "GangIncomplete")
    assert view.message == "gang g has 2 of 3 members"
    assert view.to_json()["gang"] == {"name": "g", "cardinality": 3, "workloadId": GID}

    last = submissions.plan([c], {}, 2.0, {STREAM: _stored(plan)})
    assert isinstance(last, submissions.Plan)
    state = _view(plan.append + last.append)
    assert state.workloads[a.workload_id].reason == "Submitted"
    assert state.workloads[GID].pods == 3


def test_cancelling_a_member_cancels_its_gang() -> None:
    a = _member("a")
    plan = submissions.plan([a, _member("b")], {}, 1.0)
    assert isinstance(plan, submissions.Plan)
    state = _view(plan.append)
    got = cancel(ANONYMOUS_ADMIN, a.workload_id, state.workloads[a.workload_id], 3.0)
    assert isinstance(got, NewEvent) and got.stream_id == STREAM
    assert got.event == wev.WorkloadCancelRequested(workload_id=GID)
    state = _view([*plan.append, got])
    assert {state.workloads[m].status for m in state.gangs[GID]} == {"Cancelled"}
