"""bench.kueue_baseline's breakdown of the total and its bound for Kueue's preemption.

The total beyond the capacity bound is split into work lost to evictions, quota held
beyond the runtime (the hops) and idle capacity; the parts must add up to the total, or
the breakdown explains nothing. The preemptive bound is the figure that says 1.10x is out
of reach with Kueue's configuration (kueue.md §1.6 LowerPriority / reclaimWithinCohort Any,
§3.1 "baseline"), so it is checked against a hand count and against the engine's own run.
"""

from __future__ import annotations

import pytest

from bench import kueue_baseline as kb
from bench import run_bounded
from muster.core.model import parse
from muster.core.sim import harness as sim


def run(scale: float, protect: str | None) -> kb.Figures:
    plan = kb.arrivals(scale)
    harness = sim.build(
        parse.cluster(kb.cluster_doc(protect)),
        [(a.at, a.key, parse.workload(a.body)) for a in plan],
    )
    assert run_bounded(harness, 500 * len(plan)) is None
    return kb.figures(
        harness.log.envelopes,
        {a.key: a.cls for a in plan},
        lambda e: e.occurred_at,
        {a.key: kb.cohort_of(a) for a in plan},
    )


def test_preemptive_bound_full_shape_by_hand() -> None:
    # Larges fill the 600 units for 1 s of every 1.2 s until 61 s; only the 30 mediums
    # created at 0.5 s finish before the first larges; the other 2,970 (2.5 unit-s each)
    # run after 61 s: 61 + 7,425 / 600 = 73.375, less the first submission at 0.1 s.
    assert kb.preemptive_bound(1.0) == pytest.approx(73.275)
    _, by_work, by_arrival = kb.capacity_bound(1.0)
    assert kb.preemptive_bound(1.0) > 1.10 * max(by_work, by_arrival)


@pytest.mark.parametrize("protect", [None, "2s"])
def test_breakdown_adds_up_to_the_total(protect: str | None) -> None:
    f = run(0.05, protect)
    work, _, _ = kb.capacity_bound(0.05)
    gaps = kb.idle(f)
    capacity = kb.NOMINAL * kb.COHORTS * kb.QUEUES_PER_COHORT
    parts = work + sum(f.lost.values()) + f.overhead + gaps.fitting + gaps.too_big + gaps.nothing
    assert parts == pytest.approx(f.total * capacity, rel=1e-6)
    if protect is None:
        # Priority preemption throws work away; the engine in virtual time ends no sooner
        # than the bound for schedulers that start each large on arrival.
        assert sum(f.lost.values()) > 0 and f.lost_n["medium"] > 0
        assert f.total >= kb.preemptive_bound(0.05) - 1e-9
    else:
        # minAdmitDuration longer than any runtime: nothing admitted is lost.
        assert sum(f.lost.values()) == pytest.approx(0.0)
