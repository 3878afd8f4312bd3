"""Preemption (reference §1.6; SEMANTICS.md §4): who may be evicted, in which order,
how few, and what happens to the victims afterwards.

Most tests step the queue decider alone (``QueueSim``); the candidate order and the
minimal set are checked on ``preemption.victims`` directly; one test runs the whole
virtual-time harness to see the victim's pods stop and the victim come back.
"""

from __future__ import annotations

import copy
from dataclasses import replace
from typing import Any

import pytest

from muster.core.events import node as nev
from muster.core.events import queue as qev
from muster.core.model import parse
from muster.core.queueing import preemption as pre
from muster.core.queueing import quota as qt
from muster.core.queueing.decider import QueueDecider
from muster.core.queueing.flavors import PREEMPT, Assignment
from muster.core.sim.harness import build
from muster.core.verify import verify_decisions
from tests.unit.harness_inputs import submissions
from tests.unit.test_queueing_admission import (
    GPU,
    QueueSim,
    admit,
    cluster,
    cq,
    of,
    reserved,
    why,
)

# -- within a ClusterQueue --------------------------------------------------------------


def one_queue(within: str, nominal: int = 4) -> QueueSim:
    return QueueSim(
        cluster(cq("a", nominal, cohort=None, preemption={"withinClusterQueue": within}))
    )


def test_lower_priority_is_preempted_then_the_preemptor_admitted() -> None:
    sim = one_queue("LowerPriority")
    admit(sim, ("low", 4, "a"))
    sim.submit("high", 4, priority=10)
    events = sim.decide()
    (evicted,) = of(events, qev.WorkloadEvicted)
    assert evicted.workload_id == "low"
    assert evicted.reason == "Preempted"
    assert evicted.preemptor == "high"
    assert evicted.preemption_reason == "InClusterQueue"
    assert "high" in evicted.message and "InClusterQueue" in evicted.message
    # Kueue never preempts and admits the same workload in one cycle.
    assert reserved(events) == []
    (pending,) = of(events, qev.WorkloadPending, "high")
    assert pending.reason == "Preempting"
    # Once the eviction is folded, the next decision admits the preemptor.
    assert sim.state.workloads["low"].status == "Pending"
    assert reserved(sim.decide()) == ["high"]
    assert why(sim, "low") == "WaitingForQuota"


@pytest.mark.parametrize(
    ("within", "preempts"),
    [("LowerPriority", True), ("LowerOrNewerEqualPriority", True), ("Never", False)],
)
def test_within_cluster_queue_policy_for_a_lower_priority(within: str, preempts: bool) -> None:
    sim = one_queue(within)
    admit(sim, ("low", 4, "a"))
    sim.submit("high", 4, priority=10)
    events = sim.settle()
    assert [e.workload_id for e in of(events, qev.WorkloadEvicted)] == (["low"] if preempts else [])
    assert reserved(events) == (["high"] if preempts else [])
    if not preempts:
        assert why(sim, "high") == "WaitingForQuota"


def equal_priority_newer_holder(within: str) -> QueueSim:
    """``early`` (priority 5) waits for 4 GPUs behind a priority-9 workload; ``late``, also
    priority 5 but submitted after ``early``, takes the 1 GPU left; then the priority-9
    workload finishes and ``early`` is 1 GPU short, which only ``late`` holds."""
    sim = one_queue(within)
    sim.submit("blocker", 3, priority=9)
    sim.settle()
    sim.submit("early", 4, priority=5)
    sim.settle()
    sim.submit("late", 1, priority=5)
    assert reserved(sim.settle()) == ["late"]
    sim.finish("blocker")
    return sim


@pytest.mark.parametrize(
    ("within", "preempts"), [("LowerPriority", False), ("LowerOrNewerEqualPriority", True)]
)
def test_equal_priority_is_taken_only_when_newer_under_lower_or_newer_equal(
    within: str, preempts: bool
) -> None:
    sim = equal_priority_newer_holder(within)
    events = sim.settle()
    evicted = of(events, qev.WorkloadEvicted)
    if preempts:
        assert [(e.workload_id, e.preemptor) for e in evicted] == [("late", "early")]
        assert reserved(events) == ["early"]
    else:
        assert evicted == [] and reserved(events) == []
        assert why(sim, "early") == "WaitingForQuota"


def test_an_older_equal_priority_is_never_taken() -> None:
    sim = one_queue("LowerOrNewerEqualPriority")
    admit(sim, ("old", 4, "a"))
    sim.submit("new", 4)
    events = sim.settle()
    assert of(events, qev.WorkloadEvicted) == [] and reserved(events) == []


def test_two_preemptors_in_one_cycle_do_not_share_a_victim() -> None:
    # low holds the whole queue; h1 and h2 both want it. h1 (older) evicts low; the room is
    # held for h1, and h2 finds no other candidate: one eviction, not two.
    sim = one_queue("LowerPriority")
    admit(sim, ("low", 4, "a"))
    sim.submit("h1", 4, priority=10)
    sim.submit("h2", 4, priority=10)
    events = sim.decide()
    assert [(e.workload_id, e.preemptor) for e in of(events, qev.WorkloadEvicted)] == [
        ("low", "h1")
    ]
    assert why(sim, "h2") == "WaitingForQuota"
    assert reserved(sim.decide()) == ["h1"]


def two_flavors() -> QueueSim:
    return QueueSim(
        cluster(
            cq(
                "a",
                {"f1": 4, "f2": 4},
                cohort=None,
                preemption={"withinClusterQueue": "LowerPriority"},
            )
        )
    )


def test_candidates_must_use_the_contested_flavor() -> None:
    # mid (5) holds f1, low (0) holds f2. high (10) needs preemption in both; with equal
    # modes the first flavor, f1, wins, and only f1's holder can make room there: mid
    # goes although low has the lower priority. Then mid, requeued, finds no candidate
    # in f1 (high, 10) and goes on to f2, where it may preempt low (0).
    sim = two_flavors()
    for name, prio in (("mid", 5), ("low", 0)):
        sim.submit(name, 4, priority=prio)
        assert reserved(sim.settle()) == [name]
    sim.submit("high", 4, priority=10)
    events = sim.settle()
    assert [(e.workload_id, e.preemptor) for e in of(events, qev.WorkloadEvicted)] == [
        ("mid", "high"),
        ("low", "mid"),
    ]
    (got,) = of(events, qev.QuotaReserved, "high")
    assert got.usage == {"f1": {GPU: 4}}
    (again,) = of(events, qev.QuotaReserved, "mid")
    assert again.usage == {"f2": {GPU: 4}}


def test_a_flavor_with_preemption_candidates_beats_one_without() -> None:
    # vip (10) holds f1, low (0) holds f2. high (5) cannot preempt vip, can preempt low.
    # Kueue ranks f1 "no candidates" below f2 "preempt": low goes and high gets f2.
    sim = two_flavors()
    for name, prio in (("vip", 10), ("low", 0)):
        sim.submit(name, 4, priority=prio)
        assert reserved(sim.settle()) == [name]
    sim.submit("high", 4, priority=5)
    events = sim.settle()
    assert [e.workload_id for e in of(events, qev.WorkloadEvicted)] == ["low"]
    (got,) = of(events, qev.QuotaReserved, "high")
    assert got.usage == {"f2": {GPU: 4}}


def test_a_request_above_nominal_does_not_preempt_to_borrow() -> None:
    # a (4, LowerPriority) and b (4, idle) in a cohort. a runs low and low2 (4 each,
    # borrowing b's 4). high (10) wants 6 > a's nominal 4: preemption is only considered
    # for requests within nominal, or with borrowWithinCohort (reference 1.3). It waits.
    sim = QueueSim(
        cluster(cq("a", 4, preemption={"withinClusterQueue": "LowerPriority"}), cq("b", 4))
    )
    admit(sim, ("low", 4, "a"), ("low2", 4, "a"))
    sim.submit("high", 6, priority=10)
    events = sim.settle()
    assert of(events, qev.WorkloadEvicted) == []
    assert why(sim, "high") == "WaitingForQuota"


def test_the_preemptor_goes_first_once_its_victims_are_gone() -> None:
    # h1 evicted low; before h1 is admitted, top (priority 20) arrives. The preemptor is
    # the sticky head (Kueue PR #7157): it takes the room it made, top waits.
    sim = one_queue("LowerPriority")
    admit(sim, ("low", 4, "a"))
    sim.submit("h1", 4, priority=10)
    assert [e.workload_id for e in of(sim.decide(), qev.WorkloadEvicted)] == ["low"]
    sim.submit("top", 4, priority=20)
    assert reserved(sim.decide()) == ["h1"]


# -- in the cohort: reclaiming nominal quota -------------------------------------------


def reclaim_sim(reclaim: str, **a_spec: Any) -> QueueSim:
    """a (4) and b (4): b runs two workloads of priority 10, b2 on a's idle quota."""
    sim = QueueSim(
        cluster(cq("a", 4, preemption={"reclaimWithinCohort": reclaim}, **a_spec), cq("b", 4))
    )
    for name in ("b1", "b2"):
        sim.submit(name, 4, "b", priority=10)
        assert reserved(sim.settle()) == [name]
    return sim


@pytest.mark.parametrize(
    ("reclaim", "priority", "victim"),
    [
        ("Any", 0, "b2"),  # Any: whatever b2's priority
        ("LowerPriority", 0, None),  # b2 (10) is not lower than 0
        ("LowerPriority", 20, "b2"),
        ("Never", 20, None),
    ],
)
def test_reclaim_within_cohort(reclaim: str, priority: int, victim: str | None) -> None:
    sim = reclaim_sim(reclaim)
    sim.submit("a1", 4, "a", priority=priority)  # within a's own nominal quota
    events = sim.settle()
    evicted = of(events, qev.WorkloadEvicted)
    if victim is None:
        assert evicted == [] and reserved(events) == []
        assert why(sim, "a1") == "WaitingForQuota"
    else:
        # b2, not b1: same priority, b2 was admitted more recently. One is enough.
        assert [(e.workload_id, e.preemption_reason) for e in evicted] == [
            (victim, "InCohortReclamation")
        ]
        assert reserved(events) == ["a1"]
        assert sim.state.workloads["b1"].holds_quota


def test_a_reclaim_after_a_borrow_in_the_same_cycle_waits_for_it_to_be_a_candidate() -> None:
    """a (20) and b (20) in one cohort. b runs its large L (20, priority 200), a runs x
    (10). In one cycle a1 fits a's nominal, then b1 borrows the last 5, then a2 (within a's
    nominal) must reclaim them. b1 is no holder before its reservation is folded, so judged
    in that cycle the only candidate would be L, though b borrows only because of b1. As
    Kueue nominates preemptions against the cycle's starting state, a2 waits for the next
    cycle, where b1 (lower priority, most recently reserved) is the victim and L runs on."""
    sim = QueueSim(cluster(cq("a", 20, preemption={"reclaimWithinCohort": "Any"}), cq("b", 20)))
    sim.submit("large", 20, "b", priority=200)
    assert reserved(sim.settle()) == ["large"]
    sim.submit("x", 10, "a", priority=50)
    assert reserved(sim.settle()) == ["x"]
    sim.submit("a1", 5, "a", priority=100)
    sim.submit("a2", 5, "a", priority=100)
    sim.submit("b1", 5, "b", priority=100)
    first = sim.decide()
    assert sorted(reserved(first)) == ["a1", "b1"]
    assert of(first, qev.WorkloadEvicted) == []
    assert why(sim, "a2") == "WaitingForQuota"
    events = sim.settle()
    assert [(e.workload_id, e.preemption_reason) for e in of(events, qev.WorkloadEvicted)] == [
        ("b1", "InCohortReclamation")
    ]
    assert reserved(events) == ["a2"]
    assert sim.state.workloads["large"].holds_quota


def test_a_log_of_the_reclaim_in_the_same_cycle_still_verifies() -> None:
    """A log written before the wait (the large evicted in the cycle of the borrow) re-derives
    at 0 mismatches through ``QueueDecider.decided_before``, and only through it."""
    sim = QueueSim(cluster(cq("a", 20, preemption={"reclaimWithinCohort": "Any"}), cq("b", 20)))

    def settle_as_before() -> None:
        while news := sim.decider.decided_before(sim.state) or sim.decider.decide(sim.state):
            cause = sim.envelopes[-1].event_id
            sim.feed([replace(n, causation_id=cause) for n in news], producer="queue")

    for name, gpus, queue, priority in (("large", 20, "b", 200), ("x", 10, "a", 50)):
        sim.submit(name, gpus, queue, priority=priority)
        settle_as_before()
    for name, queue in (("a1", "a"), ("a2", "a"), ("b1", "b")):
        sim.submit(name, 5, queue, priority=100)
    settle_as_before()
    log = sim.envelopes
    evicted = [e.event.workload_id for e in log if isinstance(e.event, qev.WorkloadEvicted)]
    assert evicted[0] == "large"  # as the queue decided before
    checked, mismatches = verify_decisions(log, QueueDecider())
    assert checked > 0 and mismatches == [], mismatches[:1]

    class Today(QueueDecider):
        decided_before = None  # type: ignore[assignment]

    assert verify_decisions(log, Today())[1] != []


def test_reclaim_never_takes_from_a_queue_within_its_nominal_quota() -> None:
    # a (4) runs a0 at its nominal; b (4) runs b1 at its nominal. a1 would have to
    # borrow: b is not borrowing, so nothing is reclaimable even with Any.
    sim = QueueSim(cluster(cq("a", 4, preemption={"reclaimWithinCohort": "Any"}), cq("b", 4)))
    admit(sim, ("a0", 4, "a"), ("b1", 4, "b"))
    sim.submit("a1", 2, "a", priority=100)
    events = sim.settle()
    assert of(events, qev.WorkloadEvicted) == [] and reserved(events) == []
    assert why(sim, "a1") == "WaitingForQuota"


# -- in the cohort: preempting while borrowing -------------------------------------------


@pytest.mark.parametrize(
    ("threshold", "b_priority", "victim"),
    [
        (5, 3, "b2"),  # lower than the preemptor and at most the threshold
        (5, 7, None),  # lower than the preemptor but above the threshold
        (None, 7, "b2"),  # no threshold: any lower priority
        (None, 10, None),  # equal priority: only reclaim, and a1 would still borrow
    ],
)
def test_borrow_within_cohort(threshold: int | None, b_priority: int, victim: str | None) -> None:
    # a (4) and b (8). b runs b1 (4) and b2 (8): 12, borrowing a's 4. a1 (priority 10)
    # wants 6, more than a's nominal: after any preemption a still borrows 2, so only
    # borrowWithinCohort lets it take b's workloads.
    bwc: dict[str, Any] = {"policy": "LowerPriority"}
    if threshold is not None:
        bwc["maxPriorityThreshold"] = threshold
    a = cq("a", 4, preemption={"reclaimWithinCohort": "Any", "borrowWithinCohort": bwc})
    sim = QueueSim(cluster(a, cq("b", 8)))
    for name, size in (("b1", 4), ("b2", 8)):
        sim.submit(name, size, "b", priority=b_priority)
        assert reserved(sim.settle()) == [name]
    sim.submit("a1", 6, "a", priority=10)
    events = sim.settle()
    evicted = of(events, qev.WorkloadEvicted)
    if victim is None:
        assert evicted == [] and reserved(events) == []
    else:
        # b2 is the most recently admitted; evicting it leaves 8 free, enough for 6.
        assert [(e.workload_id, e.preemption_reason) for e in evicted] == [
            (victim, "InCohortReclaimWhileBorrowing")
        ]
        assert reserved(events) == ["a1"]


# -- candidate order and the minimal set (preemption.victims directly) -----------------


def spec(name: str, nominal: int, cohort: str | None = None, **preemption: str) -> Any:
    return parse.cluster_queue(cq(name, nominal, cohort=cohort, preemption=preemption))


def holder(hid: str, queue: str, gpus: int, priority: int, seq: int) -> pre.Holder:
    return pre.Holder(
        id=hid,
        cluster_queue=queue,
        priority=priority,
        order=seq,
        reserved_seq=seq,
        usage={"f": {GPU: gpus}},
    )


def preemptor(queue: Any, gpus: int, priority: int = 10) -> pre.Preemptor:
    assignment = Assignment(
        flavors={"w": {GPU: "f"}},
        usage={"f": {GPU: gpus}},
        node_selectors={"w": {}},
        mode=PREEMPT,
        borrow=0,
        contested=frozenset({("f", GPU)}),
    )
    return pre.Preemptor("p", queue, priority, 1000, assignment)


def quota_tree(queues: list[Any], holders: list[pre.Holder]) -> qt.QuotaTree:
    usage: dict[str, dict[str, dict[str, int]]] = {}
    for h in holders:
        per = usage.setdefault(h.cluster_queue, {}).setdefault("f", {})
        per[GPU] = per.get(GPU, 0) + h.usage["f"][GPU]
    return qt.build({q.name: q for q in queues}, {}, usage)


def test_other_queues_borrowing_workloads_go_before_own_lower_priority_ones() -> None:
    # a (8) holds own (priority 0); b (0) borrows 4 of a's quota with "other" (priority 5).
    # Either one frees enough, but other queues' borrowing workloads come first.
    a = spec("a", 8, "co", withinClusterQueue="LowerPriority", reclaimWithinCohort="Any")
    b = spec("b", 0, "co")
    holders = [holder("own", "a", 4, 0, 1), holder("other", "b", 4, 5, 2)]
    got = pre.victims(quota_tree([a, b], holders), preemptor(a, 4), holders)
    assert got is not None
    assert [(v.holder.id, v.reason) for v in got] == [("other", "InCohortReclamation")]


@pytest.mark.parametrize(
    ("x", "y", "victim"),
    [
        ((2, 2), (1, 1), "y"),  # lowest priority first, however recent
        ((1, 1), (1, 2), "y"),  # equal priority: most recently admitted first
        ((1, 2), (1, 1), "x"),
    ],
)
def test_candidates_lowest_priority_then_most_recently_admitted(
    x: tuple[int, int], y: tuple[int, int], victim: str
) -> None:
    a = spec("a", 8, withinClusterQueue="LowerPriority")
    holders = [holder("x", "a", 4, *x), holder("y", "a", 4, *y)]
    got = pre.victims(quota_tree([a], holders), preemptor(a, 4), holders)
    assert got is not None and [v.holder.id for v in got] == [victim]


def assert_irreducible(t: qt.QuotaTree, p: pre.Preemptor, chosen: list[pre.Victim]) -> None:
    """Evicting all of ``chosen`` makes room; sparing any single one of them does not."""
    sim = copy.deepcopy(t)
    for v in chosen:
        sim.add(v.holder.cluster_queue, v.holder.usage, -1)
    assert pre.fits(sim, p, allow_borrowing=True)
    for v in chosen:
        sim.add(v.holder.cluster_queue, v.holder.usage, +1)
        assert not pre.fits(sim, p, allow_borrowing=True), v.holder.id
        sim.add(v.holder.cluster_queue, v.holder.usage, -1)


@pytest.mark.parametrize(
    ("need", "expected"),
    [
        # Candidate order A (1), B (4), C (3); 8 of 8 used. For 4 the greedy prefix is
        # A, B (5 free); fill-back gives A back, since with B gone alone 4 are free.
        (4, ["B"]),
        # For 6 the prefix is A, B, C (8 free); B is needed (without it 4 free), A is not
        # (7 free without it).
        (6, ["B", "C"]),
        # For 8 everything goes.
        (8, ["A", "B", "C"]),
    ],
)
def test_victims_are_a_minimal_set(need: int, expected: list[str]) -> None:
    a = spec("a", 8, withinClusterQueue="LowerPriority")
    holders = [
        holder("A", "a", 1, 0, 3),
        holder("B", "a", 4, 1, 2),
        holder("C", "a", 3, 2, 1),
    ]
    t = quota_tree([a], holders)
    p = preemptor(a, need)
    got = pre.victims(t, p, holders)
    assert got is not None
    assert [v.holder.id for v in got] == expected
    assert_irreducible(t, p, got)


def test_no_victims_when_even_all_candidates_are_not_enough() -> None:
    # Only the priority-0 workload (4) may go; the priority-20 one (4) may not: 4 < 6.
    a = spec("a", 8, withinClusterQueue="LowerPriority")
    holders = [holder("low", "a", 4, 0, 1), holder("high", "a", 4, 20, 2)]
    assert pre.victims(quota_tree([a], holders), preemptor(a, 6), holders) is None


# -- what happens to a victim ---------------------------------------------------------------


def test_victim_keeps_its_queue_position_and_returns_after_the_preemptor() -> None:
    sim = one_queue("LowerPriority")
    admit(sim, ("victim", 4, "a"))
    sim.submit("later", 4)  # same priority, submitted after the victim
    sim.submit("boss", 4, priority=10)
    sim.settle()
    assert sim.state.workloads["boss"].holds_quota
    v = sim.state.workloads["victim"]
    assert (v.status, v.evictions, v.order) == ("Pending", 1, 0)
    sim.finish("boss")
    # The victim is older than "later": it goes first although it was just requeued.
    assert reserved(sim.settle()) == ["victim"]


def test_preempted_pods_stop_and_the_victim_runs_again_in_the_harness() -> None:
    doc = cluster(cq("a", 4, cohort=None, preemption={"withinClusterQueue": "LowerPriority"}))
    doc["nodePools"] = [
        {"name": "pool", "machineType": "m", "allocatable": {GPU: 4}, "maxNodes": 10}
    ]

    def wl(name: str, priority: int, duration: float) -> dict[str, Any]:
        return {
            "name": name,
            "queueName": "a",
            "priority": priority,
            "podSets": [{"name": "w", "count": 1, "requests": {GPU: 4}}],
            "runtime": {"durationSeconds": duration},
        }

    h = build(parse.cluster(doc), submissions([(0, wl("low", 0, 100)), (30, wl("high", 9, 50))]))
    h.run()
    events = [(env.occurred_at, env.event) for env in h.log.envelopes]

    def times(cls: type, wid: str) -> list[float]:
        return [t for t, e in events if isinstance(e, cls) and getattr(e, "workload_id", "") == wid]

    evictions = [e for _, e in events if isinstance(e, qev.WorkloadEvicted)]
    assert [(e.workload_id, e.preemptor) for e in evictions] == [("low", "high")]
    assert times(qev.WorkloadEvicted, "low") == [30.0]
    assert times(nev.PodStopped, "low") == [30.0]
    assert times(qev.QuotaReserved, "high") == [30.0]
    # high runs 50 s from 30; low then starts over from scratch: 100 s more.
    assert times(qev.WorkloadFinished, "high") == [80.0]
    assert times(qev.QuotaReserved, "low") == [0.0, 80.0]
    assert times(qev.WorkloadFinished, "low") == [180.0]


# -- fair sharing ------------------------------------------------------------------------


def fair_cohort(enable: bool) -> QueueSim:
    """a, b, c (4 each). b runs b1 (4) then b2 (3): 3 over; c runs c1 (4) then c2 (1): 1
    over. Shares: b 1000*3/12 = 250, c 1000*1/12 = 83. c2 is the most recent."""
    reclaim = {"reclaimWithinCohort": "Any"}
    sim = QueueSim(
        cluster(
            cq("a", 4, preemption=reclaim),
            cq("b", 4, preemption=reclaim),
            cq("c", 4, preemption=reclaim),
            fairSharing={"enable": enable},
        )
    )
    admit(sim, ("b1", 4, "b"), ("c1", 4, "c"), ("b2", 3, "b"), ("c2", 1, "c"))
    return sim


@pytest.mark.parametrize(("enable", "victim"), [(True, "b2"), (False, "c2")])
def test_fair_sharing_preemption_takes_from_the_highest_share(enable: bool, victim: str) -> None:
    # a1 wants 1 of a's own 4. With fair sharing the queue with the highest share (b)
    # gives; in classic mode the most recently admitted borrowing workload (c2) goes.
    sim = fair_cohort(enable)
    sim.submit("a1", 1, "a")
    events = sim.settle()
    assert [(e.workload_id, e.preemption_reason) for e in of(events, qev.WorkloadEvicted)] == [
        (victim, "InCohortReclamation")
    ]
    assert reserved(events) == ["a1"]


@pytest.mark.parametrize(("size", "victim"), [(2, "b3"), (4, None)])
def test_fair_sharing_preemption_only_towards_equal_shares(size: int, victim: str | None) -> None:
    # a, b, c (4 each; lendable 12). a runs a0 (4); b runs b1 (4), b2 (2), b3 (2): b
    # borrows 4 -> share 333. a1 makes a borrow:
    # * 2: a's share after = 1000*2/12 = 167; b after losing b3 (2) = 167: 167 <= 167
    #   (LessThanOrEqualToFinalShare) -> b3 goes.
    # * 4: a after = 333; b after losing b3 = 167, b2 = 167, b1 = 0: never >= 333; and
    #   333 < b's 333 before is false too (LessThanInitialShare): nothing goes.
    sim = QueueSim(
        cluster(
            cq("a", 4, preemption={"reclaimWithinCohort": "Any"}),
            cq("b", 4),
            cq("c", 4),
            fairSharing={"enable": True},
        )
    )
    admit(sim, ("a0", 4, "a"), ("b1", 4, "b"), ("b2", 2, "b"), ("b3", 2, "b"))
    sim.submit("a1", size, "a")
    events = sim.settle()
    evicted = of(events, qev.WorkloadEvicted)
    if victim is None:
        assert evicted == [] and reserved(events) == []
    else:
        assert [(e.workload_id, e.preemption_reason) for e in evicted] == [
            (victim, "InCohortFairSharing")
        ]
        assert reserved(events) == ["a1"]


# -- preemption policy users ask for ------------------------------------------------------


def classes_queue(**preemption: Any) -> QueueSim:
    classes = [
        {"name": "batch", "value": 0, "preemptible": False},  # Armada's preemptible: false
        {"name": "opportunistic", "value": 0},
        {"name": "urgent", "value": 100},
        {"name": "polite", "value": 100, "preemptionPolicy": "Never"},  # Kubernetes
    ]
    spec = cq("a", 4, cohort=None, preemption={"withinClusterQueue": "LowerPriority", **preemption})
    return QueueSim(cluster(spec, priorityClasses=classes))


def test_a_non_preemptible_priority_class_is_never_preempted() -> None:
    """Armada (reference/peers.md): a job of a priority class with preemptible: false is
    never preempted; the higher-priority job waits for the room instead."""
    sim = classes_queue()
    sim.submit("steady", 4, priority_class="batch")
    assert reserved(sim.settle()) == ["steady"]
    sim.submit("urgent", 4, priority_class="urgent")
    events = sim.settle()
    assert of(events, qev.WorkloadEvicted) == []
    assert why(sim, "urgent") == "WaitingForQuota"
    # The same priority in a preemptible class is taken.
    sim = classes_queue()
    sim.submit("spare", 4, priority_class="opportunistic")
    sim.settle()
    sim.submit("urgent", 4, priority_class="urgent")
    assert [e.workload_id for e in of(sim.settle(), qev.WorkloadEvicted)] == ["spare"]


def test_a_priority_class_with_preemption_policy_never_does_not_preempt() -> None:
    """Kubernetes PriorityClass.preemptionPolicy: Never: its workloads wait for room, ahead
    of lower priorities, and never evict anyone; a class of the same value that may
    preempt does (and the two do not share a verdict)."""
    sim = classes_queue()
    sim.submit("spare", 4, priority_class="opportunistic")
    sim.settle()
    sim.submit("polite", 4, priority_class="polite")
    assert of(sim.settle(), qev.WorkloadEvicted) == []
    assert why(sim, "polite") == "WaitingForQuota"
    sim.submit("urgent", 4, priority_class="urgent")
    assert [e.workload_id for e in of(sim.settle(), qev.WorkloadEvicted)] == ["spare"]


def test_a_queue_may_end_what_it_preempts() -> None:
    """Armada's terminal Preempted: with preemption.onPreempted End the victim is not
    requeued; it finishes with outcome Preempted and the preemptor is admitted."""
    sim = classes_queue(onPreempted="End")
    sim.submit("spare", 4, priority_class="opportunistic")
    sim.settle()
    sim.submit("urgent", 4, priority_class="urgent")
    events = sim.settle()
    (evicted,) = of(events, qev.WorkloadEvicted)
    (ended,) = of(events, qev.WorkloadFinished)
    assert (ended.workload_id, ended.outcome, ended.reason) == ("spare", "Preempted", "Preempted")
    assert ended.message == evicted.message
    assert reserved(events) == ["urgent"]
    assert sim.state.status_of("spare") == "Finished"
    assert "spare" not in sim.state.pending
    # The default requeues it.
    sim = classes_queue()
    sim.submit("spare", 4, priority_class="opportunistic")
    sim.settle()
    sim.submit("urgent", 4, priority_class="urgent")
    assert of(sim.settle(), qev.WorkloadFinished) == []
    assert "spare" in sim.state.pending


def test_fair_sharing_weights_order_admission_without_preemption() -> None:
    """Kueue's fair-sharing tournament (reference/kueue.md §1.7): when room frees up, the
    ClusterQueue with the lower weighted share after admitting goes first; no preemption
    is configured, so the weights act through that order alone. a (weight 3) and b
    (weight 1) borrow a lender's 12 GPUs with 200 one-GPU jobs each pending, their GPUs
    freed one at a time (room for both heads at once admits both, one per ClusterQueue per
    cycle, as in Kueue)."""

    def queue(name: str, nominal: int, weight: float) -> dict[str, Any]:
        return cq(name, nominal, fairSharing={"weight": weight})

    doc = cluster(queue("lender", 12, 1), queue("a", 0, 3), queue("b", 0, 1))
    doc["fairSharing"] = {"enable": True}
    doc["nodes"] = [{"name": "n", "count": 2, "allocatable": {GPU: 8}}]
    jobs = []
    for i in range(200):
        for name in ("b", "a"):
            seconds = 50 + (37 * i + (11 if name == "a" else 0)) % 100 + 0.1 * i
            body = {
                "name": f"{name}{i}",
                "queueName": name,
                "podSets": [{"count": 1, "requests": {GPU: 1}}],
                "runtime": {"durationSeconds": seconds},
            }
            jobs.append((0.0, body))
    h = build(parse.cluster(doc), submissions(jobs))
    h.run(until=1000)
    log = [e.event for e in h.log.envelopes]
    assert of(log, qev.WorkloadEvicted) == []
    counts = {q: 0 for q in ("a", "b")}
    for e in of(log, qev.QuotaReserved):
        counts[e.cluster_queue] += 1
    assert counts["a"] >= 2.5 * counts["b"], counts
