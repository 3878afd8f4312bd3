"""Preemption when every candidate is in the preemptor's own ClusterQueue (reference §1.6,
the docs' heuristic step 1): the preemptor may borrow what the cohort lends, up to its
borrowing limit, so it evicts only as many as it needs, as Kueue's
``NoCandidateFromOtherQueues`` case does. Trying "without borrowing" first is for
reclaiming from other queues; with none to reclaim from it only evicted more of its own
queue, and the extra victims were admitted again at once by borrowing."""

from __future__ import annotations

from muster.core.events import queue as qev
from tests.unit.test_queueing_admission import QueueSim, admit, cluster, cq, of, reserved


def test_only_own_queue_candidates_evicts_no_more_than_needed() -> None:
    # a (nominal 4, LowerPriority) borrows 2 of idle b's 4: low1..low3 hold 6. high (3,
    # priority 10) is within a's nominal; evicting low3 alone leaves 4 + 3 = 7 <= 8.
    sim = QueueSim(
        cluster(cq("a", 4, preemption={"withinClusterQueue": "LowerPriority"}), cq("b", 4))
    )
    admit(sim, ("low1", 2, "a"), ("low2", 2, "a"), ("low3", 2, "a"))
    sim.submit("high", 3, priority=10)
    evicted = of(sim.decide(), qev.WorkloadEvicted)
    assert [(e.workload_id, e.preemption_reason) for e in evicted] == [("low3", "InClusterQueue")]
    assert reserved(sim.settle()) == ["high"]
    assert sim.state.workloads["low1"].holds_quota and sim.state.workloads["low2"].holds_quota
