"""``explain``: a workload's state and why, at a point of the log, from the same pure code
(the visibility dry run for the reason, the conditions fold intake keeps).

The logs are the simulation harness's (every decider, virtual time); the queue's state is
folded to a position as a rebuild from the store would fold it.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import pytest

from muster.core.events import Envelope
from muster.core.events import provisioning as pev
from muster.core.events import queue as qev
from muster.core.explain import Explanation, explain
from muster.core.model import parse
from muster.core.model.fields import InvalidInput
from muster.core.queueing import state as qs
from muster.core.queueing.decider import QueueDecider
from muster.core.queueing.state import QueueState, evolve
from muster.core.runner import DeciderRunner
from muster.core.sim.harness import Harness, build
from muster.core.timepoint import At, parse_at
from muster.core.views.conditions import rfc3339
from tests.unit.harness_inputs import GPU, gpu_job, gpu_node_cluster, submissions
from tests.unit.test_core_provisioning import cluster_doc, workload_doc


def run(cluster: dict[str, Any], jobs: Iterable[Any], until: float | None = None) -> Harness:
    h = build(parse.cluster(cluster), list(jobs))
    h.run(until=until)
    return h


def at(h: Harness, wid: str, position: int) -> Explanation:
    """``wid`` explained from the queue's state folded to ``position``."""
    runner: DeciderRunner[Any] = DeciderRunner(QueueDecider())
    runner.fold(e for e in h.log.envelopes if e.position <= position)
    history = [e for e in h.log.envelopes if e.correlation_id == wid]
    return explain(runner.state, wid, history, position)


def first(h: Harness, cls: type, wid: str) -> Envelope:
    return next(
        e
        for e in h.log.envelopes
        if isinstance(e.event, cls) and getattr(e.event, "workload_id", None) == wid
    )


def conditions(x: Explanation) -> dict[str, tuple[str, str]]:
    return {c.type: (c.status, c.reason) for c in x.conditions}


def test_pending_for_quota_shows_the_shortfall_with_numbers() -> None:
    """kueue.md §1.3: a workload that does not fit its ClusterQueue's nominal quota waits
    (WaitingForQuota); explain shows what it asks, the quota, the usage and the gap."""
    cluster = gpu_node_cluster("c", nodes=2, gpus=8, nominal=8)
    h = run(cluster, [gpu_job("a", 0, 1, 8, 100), gpu_job("b", 1, 1, 8, 10)])
    waited = first(h, qev.WorkloadPending, "b")
    x = at(h, "b", waited.position)
    assert (x.status, x.reason) == ("Pending", "WaitingForQuota")
    assert "8 more needed" in x.message
    (s,) = x.shortfall
    assert (s.resource, s.flavor, s.requested, s.nominal, s.used, s.missing) == (
        GPU, "gpu", 8, 8, 8, 8,
    )  # fmt: skip
    assert x.flavors_tried == ("gpu",)
    assert (x.position_in_cluster_queue, x.position_in_local_queue) == (0, 0)
    assert conditions(x)["QuotaReserved"] == ("False", "WaitingForQuota")


def test_the_pending_reason_is_the_dry_runs_not_the_recorded_one() -> None:
    """One source for the current reason: once a's quota is back, b's recorded reason still
    says WaitingForQuota, but the dry run (and so explain) says it fits now."""
    cluster = gpu_node_cluster("c", nodes=2, gpus=8, nominal=8)
    h = run(cluster, [gpu_job("a", 0, 1, 8, 100), gpu_job("b", 1, 1, 8, 10)])
    freed = first(h, qev.WorkloadFinished, "a")
    x = at(h, "b", freed.position)
    assert x.status == "Pending" and x.reason == "Admissible"
    assert x.flavors == {"w": {GPU: "gpu"}}


def test_waiting_behind_a_strict_fifo_head() -> None:
    """kueue.md §1.3, StrictFIFO: a workload that would fit waits behind the head that
    does not."""
    cluster = gpu_node_cluster("c", nodes=2, gpus=8, nominal=16, queueingStrategy="StrictFIFO")
    jobs = [gpu_job("a", 0, 1, 8, 100), gpu_job("big", 1, 2, 8, 10), gpu_job("small", 2, 1, 4, 10)]
    h = run(cluster, jobs)
    x = at(h, "small", first(h, qev.WorkloadPending, "small").position)
    assert (x.status, x.reason) == ("Pending", "BlockedByStrictFIFO")
    assert "waiting behind big" in x.message
    assert x.position_in_cluster_queue == 1


def test_preempted_by_whom_and_why() -> None:
    """kueue.md §1.5/§1.14: a lower-priority workload evicted for a higher one in its
    ClusterQueue shows Evicted (Preempted) and Preempted (InClusterQueue), and who took it."""
    cluster = gpu_node_cluster(
        "c", nodes=1, gpus=8, nominal=8, preemption={"withinClusterQueue": "LowerPriority"}
    )
    h = run(cluster, [gpu_job("low", 0, 1, 8, 100), gpu_job("high", 5, 1, 8, 10, priority=10)])
    evicted = first(h, qev.WorkloadEvicted, "low")
    x = at(h, "low", evicted.position)
    (e,) = x.evictions
    assert (e.preemptor, e.preemptor_name, e.preemption_reason) == (
        "high",
        "team/high",
        "InClusterQueue",
    )
    assert e.at == evicted.occurred_at
    assert conditions(x)["Evicted"] == ("True", "Preempted")
    assert conditions(x)["Preempted"] == ("True", "InClusterQueue")
    assert conditions(x)["Admitted"][0] == "False"
    # Readmitted later: Evicted and Preempted turn False, keeping what they said.
    again = [
        e for e in h.log.envelopes
        if isinstance(e.event, qev.QuotaReserved) and e.event.workload_id == "low"
    ][-1]  # fmt: skip
    later = at(h, "low", again.position)
    assert conditions(later)["Evicted"] == ("False", "QuotaReserved")
    assert later.evictions == x.evictions


def test_admitted_shows_its_flavors_and_nodes() -> None:
    cluster = gpu_node_cluster("c", nodes=2, gpus=8, nominal=16)
    h = run(cluster, [gpu_job("a", 0, 2, 8, 100)])
    admitted = first(h, qev.WorkloadAdmitted, "a")
    x = at(h, "a", admitted.position)
    assert x.status == "Admitted" and x.cluster_queue == "cq"
    assert x.flavors == {"w": {GPU: "gpu"}}
    assert isinstance(admitted.event, qev.WorkloadAdmitted)
    assert x.nodes == dict(admitted.event.placements) and len(x.nodes) == 2
    assert conditions(x)["QuotaReserved"] == ("True", "QuotaReserved")
    assert conditions(x)["Admitted"] == ("True", "Admitted")
    running = at(h, "a", max(e.position for e in h.log.envelopes if e.type == "node.pod_started"))
    assert running.status == "Running" and conditions(running)["PodsReady"][0] == "True"
    done = at(h, "a", h.log.envelopes[-1].position)
    assert done.status == "Succeeded" and conditions(done)["Finished"] == ("True", "Succeeded")


def test_an_ended_workload_is_explained_as_when_the_queue_kept_its_entry() -> None:
    """The queue's state drops a workload's entry when it ends (``QueueState.ended`` keeps
    how it ended); explain rebuilds the entry from the workload's own events, so at every
    point after an end the answer equals the one from a state that kept every entry:
    status, flavors, nodes, and an eviction's preemptor named though it ended too."""
    cluster = gpu_node_cluster(
        "c", nodes=1, gpus=8, nominal=8, preemption={"withinClusterQueue": "LowerPriority"}
    )
    h = run(cluster, [gpu_job("low", 0, 1, 8, 100), gpu_job("high", 5, 1, 8, 10, priority=10)])
    ends = [e.position for e in h.log.envelopes if isinstance(e.event, qev.WorkloadFinished)]
    assert len(ends) == 2
    for position in (*ends, h.log.envelopes[-1].position):
        upto = [e for e in h.log.envelopes if e.position <= position]
        pruned: DeciderRunner[Any] = DeciderRunner(QueueDecider())
        pruned.fold(upto)
        kept = QueueState(keep_ended=True)
        for env in upto:
            evolve(kept, env)
        assert set(pruned.state.ended) == {
            w for w, wl in kept.workloads.items() if wl.status == "Finished"
        }
        assert not set(pruned.state.ended) & set(pruned.state.workloads)
        for wid in ("low", "high"):
            history = [e for e in h.log.envelopes if e.correlation_id == wid]
            got = explain(pruned.state, wid, history, position).to_json()
            assert got == explain(kept, wid, history, position).to_json()
    done = at(h, "low", h.log.envelopes[-1].position)
    assert done.status == "Succeeded" and done.flavors == {"w": {GPU: "gpu"}} and done.nodes
    assert [e.preemptor_name for e in done.evictions] == ["team/high"]


def test_an_ended_workload_the_queue_let_go_of_is_explained_all_the_same(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The queue keeps the latest ended workloads only (``ENDED_KEPT``): one it let go of is
    explained from its own events as well, its preemptor named from intake's state (which
    keeps every workload: ``names``)."""
    cluster = gpu_node_cluster(
        "c", nodes=1, gpus=8, nominal=8, preemption={"withinClusterQueue": "LowerPriority"}
    )
    h = run(cluster, [gpu_job("low", 0, 1, 8, 100), gpu_job("high", 5, 1, 8, 10, priority=10)])
    kept = QueueState(keep_ended=True)
    for env in h.log.envelopes:
        evolve(kept, env)
    monkeypatch.setattr(qs, "ENDED_KEPT", 0)
    pruned: DeciderRunner[Any] = DeciderRunner(QueueDecider())
    pruned.fold(h.log.envelopes)
    assert pruned.state.ended == {} and pruned.state.ended_counts == {"Finished": 2}
    position = h.log.envelopes[-1].position
    for wid in ("low", "high"):
        history = [e for e in h.log.envelopes if e.correlation_id == wid]
        got = explain(pruned.state, wid, history, position, names=kept).to_json()
        assert got == explain(kept, wid, history, position).to_json()
    low = [e for e in h.log.envelopes if e.correlation_id == "low"]
    alone = explain(pruned.state, "low", low, position)
    assert alone.status == "Succeeded" and [e.preemptor for e in alone.evictions] == ["high"]


def test_provisioning_waiting_for_regional_quota_shows_the_check() -> None:
    """GKE DWS (peers.md): the ProvisioningRequest waits (QuotaExceeded) while the workload
    holds quota; explain shows the admission check's state and the cloud's message."""
    h = run(cluster_doc(quota=16), submissions([(0, workload_doc("big", nodes=3))]))
    waiting = next(e for e in h.log.envelopes if isinstance(e.event, pev.ProvisioningWaiting))
    x = at(h, "big", waiting.position)
    assert x.status == "QuotaReserved"
    assert x.provisioning is not None and x.provisioning["id"] == "big.1"
    provisioned = next(c for c in x.provisioning["conditions"] if c["type"] == "Provisioned")
    assert (provisioned["status"], provisioned["reason"]) == ("False", "QuotaExceeded")
    assert provisioned["lastTransitionTime"] == rfc3339(waiting.occurred_at)
    assert "QuotaExceeded" in x.message and "exceeded" in x.message


def test_a_workload_not_yet_submitted_is_said_so() -> None:
    cluster = gpu_node_cluster("c", nodes=1, gpus=8, nominal=8)
    h = run(cluster, [gpu_job("late", 50, 1, 8, 10)])
    x = at(h, "late", 1)
    assert (x.status, x.reason) == ("Unknown", "NotSubmitted")


# -- --at ----------------------------------------------------------------------------------


NOW = 1_764_151_200.0  # 2025-11-26T10:00:00Z


@pytest.mark.parametrize(
    ("raw", "want"),
    [
        ("@12345", At(position=12345)),
        ("12345", At(position=12345)),
        ("2025-11-26T10:03:00Z", At(time=NOW + 180)),
        ("2025-11-26T11:03:00+01:00", At(time=NOW + 180)),
        ("2025-11-26", At(time=NOW - 36_000)),
        ("-5m", At(time=NOW - 300)),
        ("-2h", At(time=NOW - 7200)),
        ("-90s", At(time=NOW - 90)),
    ],
)
def test_at_reads_rfc3339_relative_and_positions(raw: str, want: At) -> None:
    assert parse_at(raw, NOW) == want


@pytest.mark.parametrize("raw", ["", "yesterday", "-5x", "2025-11-26T10:03:00", "@-3", "1.5"])
def test_bad_at_names_the_field(raw: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        parse_at(raw, NOW)
    assert caught.value.path == "at"


def test_rfc3339_is_utc_with_z() -> None:
    assert rfc3339(NOW) == "2025-11-26T10:00:00Z"
    assert rfc3339(NOW + 0.25) == "2025-11-26T10:00:00.250Z"


def test_replay_until_takes_what_explain_at_takes_and_its_old_forms() -> None:
    from muster.cli.commands import _until

    assert _until("@5") == (5, None)
    assert _until("2025-11-26T10:00:00Z") == (None, NOW)
    assert _until("120") == (120, None)  # as before: a small integer is a position
    assert _until(str(NOW)) == (None, NOW)  # and epoch seconds a time
