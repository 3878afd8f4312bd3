"""Gangs whose members are submitted separately, in virtual time (issue 17 item 4a; peers.md
§1.5, Armada gangCardinality: "the total count the scheduler waits for"; §2.4, Volcano
PodGroup minMember: "if there's not enough resources to start all tasks, the scheduler will
not start anyone")."""

from __future__ import annotations

from typing import Any

from muster.core import inputs
from muster.core.events import node as nev
from muster.core.events import queue as qev
from muster.core.model import parse
from muster.core.sim.harness import Harness, Submission, build
from muster.core.views.workloads import WorkloadsView, evolve
from tests.unit.harness_inputs import GPU, gpu_node_cluster, run_verified

GID = inputs.gang_workload_id("team", "g")


def member(name: str, at: float, cardinality: int = 4, gpus: int = 1) -> Submission:
    doc: dict[str, Any] = {
        "name": name,
        "namespace": "team",
        "queueName": "q",
        "gang": {"name": "g", "cardinality": cardinality},
        "podSets": [{"name": "worker", "count": 1, "requests": {GPU: gpus}}],
        "runtime": {"durationSeconds": 50},
    }
    return (at, name, parse.workload(doc))


def starts(h: Harness, wid: str) -> list[float]:
    return [
        e.occurred_at
        for e in h.log.envelopes
        if isinstance(e.event, nev.PodStarted) and e.event.workload_id == wid
    ]


def test_three_of_four_members_never_start_and_the_fourth_starts_all_at_once() -> None:
    cluster = gpu_node_cluster("c", nodes=4, gpus=1, nominal=4)
    three = [member(f"m{i}", 10.0 * i) for i in range(3)]
    h = build(parse.cluster(cluster), three)
    h.run(until=10_000)
    assert starts(h, GID) == [] and not any(
        isinstance(e.event, nev.PodStarted) for e in h.log.envelopes
    )

    h = run_verified(cluster, [*three, member("m3", 100.0)])
    assert starts(h, GID) == [100.0] * 4
    finished = [e.event for e in h.log.envelopes if isinstance(e.event, qev.WorkloadFinished)]
    assert [(f.workload_id, f.outcome) for f in finished] == [(GID, "Succeeded")]
    # intake's view: each member ends as its gang did
    view = WorkloadsView().initial()
    for env in h.log.envelopes:
        evolve(view, env)
    assert {view.workloads[f"m{i}"].status for i in range(4)} == {"Succeeded"}


def test_a_complete_gang_that_does_not_fit_waits_whole() -> None:
    """Four members of 2 GPUs on 3 nodes of 2: the gang's 4 pods never start, not even 3
    of them; a member submitted afterwards runs on its own (Volcano: beyond minMember)."""
    cluster = gpu_node_cluster("c", nodes=3, gpus=2, nominal=100)
    gang = [member(f"m{i}", float(i), gpus=2) for i in range(4)]
    h = build(parse.cluster(cluster), [*gang, member("late", 10.0, gpus=2)])
    h.run(until=1_000)
    assert starts(h, GID) == []
    assert starts(h, "late") == [10.0]


def test_cancelling_a_member_before_the_gang_forms_leaves_nothing_to_run() -> None:
    cluster = gpu_node_cluster("c", nodes=4, gpus=1, nominal=4)
    subs = [member(f"m{i}", float(i)) for i in range(3)] + [member("m3", 20.0)]
    h = build(parse.cluster(cluster), subs, cancels=[(10.0, "m1")])
    h.run(until=1_000)
    assert not any(isinstance(e.event, nev.PodStarted) for e in h.log.envelopes)
