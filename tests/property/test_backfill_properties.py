"""Properties of reservations and backfill over random load (a ClusterQueue's ``backfill``).

Random busy clusters (nodes of 8 GPUs, running jobs of 1-8 GPUs with declared run
times they honour), a 2-4 node gang that does not fit, then random small jobs, some
declaring a ``maxRunDurationSeconds`` (and running at most that long), some not.
Slurm's sched/backfill promises that backfilled jobs never delay the expected start of
the job holding the reservation (slurm.conf(5): "Backfill scheduling will initiate
lower-priority jobs if doing so does not delay the expected initiation time of any
higher priority job"): every cycle's estimated start for the gang is no later than the
one before, and the gang starts no later than the first estimate. Replay re-derives
every decision (reservations are derived state), and a search from a fresh notebook finds
what the kept one did.
"""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from muster.core.queueing import cycle
from muster.core.queueing import reservations as rsv
from muster.core.verify import verify_decisions
from tests.property.test_core_properties import SETTINGS
from tests.unit.test_queueing_backfill import cluster, job, run, started


@st.composite
def loads(draw: st.DrawFn) -> tuple[int, list[dict[str, Any]]]:
    nodes = draw(st.integers(3, 6))
    running = []
    # Fill every node (one 8-GPU pod each, or smaller ones that bin-pack), so the gang waits.
    for i in range(nodes):
        run_time = draw(st.integers(20, 400))
        running.append(job(0, f"busy{i}", 1, run_time, run_time + draw(st.integers(0, 50))))
    gang_nodes = draw(st.integers(2, min(4, nodes)))
    gang = job(1, "gang", gang_nodes, 100, 100)
    later = []
    for i in range(draw(st.integers(0, 12))):
        at = draw(st.integers(2, 300))
        declared = draw(st.one_of(st.none(), st.integers(5, 400)))
        took = draw(st.integers(1, declared if declared is not None else 400))
        later.append(job(at, f"small{i}", 1, took, declared))
    return nodes, [*running, gang, *later]


@settings(SETTINGS, max_examples=25)  # each example is a harness run and its replay
@given(loads())
def test_the_gangs_estimated_start_never_moves_later(load: tuple[int, list[Any]]) -> None:
    nodes, jobs = load
    seen: list[float | None] = []
    real = cycle.reserve

    def spy(snap: Any) -> list[rsv.Reservation]:
        out = real(snap)
        seen.extend(r.start for r in out if r.name == "gang")
        # The notebook's searches are a cache: a fresh one finds the same.
        notes = snap.state.notes
        kept, notes.reserved = notes.reserved, {}
        fresh = real(snap)
        notes.reserved = kept
        assert [(r.holder, r.nodes, r.start) for r in fresh] == [
            (r.holder, r.nodes, r.start) for r in out
        ]
        return out

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(cycle, "reserve", spy)
        h = run(cluster(backfill={"reserveAfterSeconds": 0}, nodes=nodes), jobs)
    starts = [s for s in seen if s is not None]
    assert len(starts) == len(seen)  # every running job declares its run time
    assert all(b <= a for a, b in itertools.pairwise(starts)), starts
    if starts:
        assert started(h)["gang"][0] <= starts[0]
    for runner in h.runners:
        _, mismatches = verify_decisions(h.log.envelopes, runner.decider)
        assert mismatches == [], mismatches[:1]
