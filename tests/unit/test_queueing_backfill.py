"""Reservations and backfill (a ClusterQueue's ``backfill``), in virtual time.

From Slurm's sched/backfill: "Backfill scheduling will initiate lower-priority jobs if
doing so does not delay the expected initiation time of any higher priority job"
(slurm.conf(5), SchedulerType), the expected start being worked out from running jobs'
time limits ("considers job run time and resources required to determine if
lower-priority jobs would actually take resources needed by higher-priority jobs",
slurm.schedmd.com/sched_config.html); a job without a time limit runs until it is done,
so it never fits before a reservation. peers.md §2.2 (Volcano's ``backfill`` action fills
only what is left once the gang is placed).

The cluster: 8 nodes of 8 GPUs; four long jobs (1000 s) hold n-0..n-3, two short ones
(100 s) n-4 and n-5, n-6 and n-7 are free. A 4-node gang arrives at t=1: its earliest
nodes are n-4..n-7, free at t=100.
"""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from muster.cli.commands import build_harness
from muster.core.events import queue as qev
from muster.core.events import workload as wev
from muster.core.explain import explain
from muster.core.model import parse
from muster.core.model.fields import InvalidInput
from muster.core.queueing import cycle
from muster.core.queueing import reservations as rsv
from muster.core.queueing.decider import QueueDecider
from muster.core.runner import DeciderRunner
from muster.core.sim.harness import Harness
from muster.core.verify import verify_decisions

GPU = "nvidia.com/gpu"


def cluster(
    strategy: str = "BestEffortFIFO", backfill: dict[str, Any] | None = None, nodes: int = 8
) -> Any:
    cq: dict[str, Any] = {
        "name": "all",
        "queueingStrategy": strategy,
        "resourceGroups": [
            {
                "coveredResources": [GPU],
                "flavors": [
                    {"name": "gpu", "resources": [{"name": GPU, "nominalQuota": nodes * 8}]}
                ],
            }
        ],
    }
    if backfill is not None:
        cq["backfill"] = backfill
    return parse.cluster(
        {
            "name": "c",
            "zones": ["z"],
            "resourceFlavors": [{"name": "gpu"}],
            "nodes": [{"name": "n", "count": nodes, "allocatable": {GPU: 8}}],
            "clusterQueues": [cq],
            "localQueues": [{"namespace": "default", "name": "q", "clusterQueue": "all"}],
        }
    )


def job(at: float, name: str, pods: int, run: float, max_run: int | None = None) -> dict[str, Any]:
    w: dict[str, Any] = {
        "name": name,
        "namespace": "default",
        "queueName": "q",
        "podSets": [{"name": "w", "count": pods, "requests": {GPU: 8}}],
        "runtime": {"durationSeconds": run},
    }
    if max_run is not None:
        w["maxRunDurationSeconds"] = max_run
    return {"at": at, "workload": w}


def busy() -> list[dict[str, Any]]:
    return [job(0, f"long{i}", 1, 1000, 1000) for i in range(4)] + [
        job(0, f"short{i}", 1, 100, 100) for i in range(2)
    ]


def run(cluster_spec: Any, jobs: list[dict[str, Any]]) -> Harness:
    harness = build_harness(cluster_spec, parse.workload_list({"workloads": jobs}))
    harness.run()
    return harness


def started(harness: Harness) -> dict[str, tuple[float, set[str]]]:
    """Workload name -> (when it got quota, its nodes)."""
    names = {
        e.event.workload_id: e.event.spec.name
        for e in harness.log.envelopes
        if isinstance(e.event, wev.WorkloadSubmitted)
    }
    return {
        names[e.event.workload_id]: (
            e.occurred_at,
            set(e.event.placement.nodes.values()) if e.event.placement else set(),
        )
        for e in harness.log.envelopes
        if isinstance(e.event, qev.QuotaReserved)
    }


def reasons(harness: Harness, name: str) -> list[tuple[str, str]]:
    ids = {
        e.event.workload_id
        for e in harness.log.envelopes
        if isinstance(e.event, wev.WorkloadSubmitted) and e.event.spec.name == name
    }
    return [
        (e.event.reason, e.event.message)
        for e in harness.log.envelopes
        if isinstance(e.event, qev.WorkloadPending) and e.event.workload_id in ids
    ]


ON = {"reserveAfterSeconds": 0}
GANG = [job(1, "gang", 4, 500, 500)]
RESERVED = {"n-4", "n-5", "n-6", "n-7"}


def test_the_gang_gets_the_earliest_freeing_nodes_and_starts_when_they_free() -> None:
    """Slurm: the top job's expected start comes from running jobs' time limits; here
    the short jobs' 100 s free n-4 and n-5, which with the free n-6 and n-7 hold the gang."""
    h = run(cluster(backfill=ON), [*busy(), *GANG, job(2, "later", 1, 500)])
    got = started(h)
    assert got["gang"] == (100.0, RESERVED)
    reason, message = reasons(h, "gang")[-1]
    assert reason == "Reserved"
    assert "reserved 4 node(s) (n-4, n-5, n-6, n-7), estimated start at 100" in message


def test_work_without_a_declared_duration_does_not_go_on_reserved_nodes() -> None:
    """Slurm's conservative backfill: a job without a time limit may not start where it
    would delay the reservation. Without backfill it takes a free node and the gang
    waits for it (t=502); with backfill it waits (BlockedByReservation)."""
    jobs = [*busy(), *GANG, job(2, "no-limit", 1, 500)]
    before = started(run(cluster(), jobs))
    assert before["no-limit"][0] == 2.0 and before["gang"][0] == 502.0
    h = run(cluster(backfill=ON), jobs)
    got = started(h)
    assert got["gang"][0] == 100.0
    assert got["no-limit"][0] >= 100.0
    assert not (got["no-limit"][1] & RESERVED and got["no-limit"][0] < 100.0)
    reason, message = reasons(h, "no-limit")[0]
    assert reason == "BlockedByReservation"
    assert "declares no maxRunDurationSeconds" in message and "gang" in message


def test_work_that_ends_before_the_reservation_backfills_on_its_nodes() -> None:
    """Slurm: a lower-priority job whose time limit ends before the reserved job's
    expected start is started on its nodes. One that would end after it is not."""
    jobs = [*busy(), *GANG, job(3, "fits", 1, 40, 50), job(4, "too-long", 1, 40, 150)]
    h = run(cluster(backfill=ON), jobs)
    got = started(h)
    assert got["fits"][0] == 3.0 and got["fits"][1] <= RESERVED
    assert got["too-long"][0] >= 100.0
    assert reasons(h, "too-long")[0][0] == "BlockedByReservation"
    assert got["gang"][0] == 100.0


def test_strict_fifo_with_backfill_starts_the_work_behind_a_reserved_head() -> None:
    """StrictFIFO alone holds everything behind a head that does not fit (Kueue); with
    backfill the head holds a reservation and what fits around it starts (Slurm's
    sched/backfill over its strict priority order)."""
    jobs = [*busy(), *GANG, job(3, "fits", 1, 40, 50)]
    strict = started(run(cluster("StrictFIFO"), jobs))
    assert strict["fits"][0] >= 100.0
    got = started(run(cluster("StrictFIFO", ON), jobs))
    assert got["fits"][0] == 3.0
    assert got["gang"][0] == 100.0


def test_no_reservation_before_the_head_waited_reserve_after_seconds() -> None:
    """reserveAfterSeconds: a head that has waited less is not reserved for (BestEffort
    as before: the no-limit job takes a free node); the queue's timer makes the
    reservation at the bound, not at the next event."""
    jobs = [*busy(), *GANG, job(2, "no-limit", 1, 500), job(60, "after", 1, 500)]
    h = run(cluster(backfill={"reserveAfterSeconds": 30}), jobs)
    got = started(h)
    assert got["no-limit"][0] == 2.0  # before the bound: taken as without backfill
    pending = [
        (e.occurred_at, e.event.reason)
        for e in h.log.envelopes
        if isinstance(e.event, qev.WorkloadPending) and e.event.reason == "Reserved"
    ]
    assert pending and pending[0][0] == 31.0  # the gang queued at 1, reserved at 1 + 30
    # The reservation waits for long0 (known end 1000), not for no-limit (unknown end);
    # "after" stays off the reserved nodes, so when no-limit ends at 502 the gang, ahead
    # of "after" in the queue, has four free nodes and starts.
    assert got["gang"][0] == 502.0
    assert got["after"][0] > 502.0


def test_default_run_seconds_estimates_undeclared_work() -> None:
    """Slurm's DefaultTime: running work that declares no time limit is taken to run
    defaultRunSeconds; without it the estimated start is unknown."""
    undeclared = [job(0, f"long{i}", 1, 1000) for i in range(4)] + [
        job(0, f"short{i}", 1, 100) for i in range(2)
    ]
    h = run(cluster(backfill=ON), [*undeclared, *GANG])
    assert "estimated start unknown" in reasons(h, "gang")[-1][1]
    h = run(cluster(backfill={**ON, "defaultRunSeconds": 200}), [*undeclared, *GANG])
    assert "estimated start at 200" in reasons(h, "gang")[-1][1]


def test_the_estimated_start_never_moves_later(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every cycle's reservation for the gang: its estimated start does not move later
    while backfilled work (declared, honoured durations) comes and goes."""
    seen: list[tuple[float, float | None]] = []
    real = cycle.reserve

    def spy(snap: Any) -> list[rsv.Reservation]:
        out = real(snap)
        seen.extend((snap.state.now, r.start) for r in out if r.name == "gang")
        return out

    monkeypatch.setattr(cycle, "reserve", spy)
    fill = [job(2 + i, f"fill{i}", 1, 20 + i, 30 + i) for i in range(30)]
    h = run(cluster(backfill=ON), [*busy(), *GANG, *fill])
    assert seen and all(s is not None for _, s in seen)
    starts = [s for _, s in seen if s is not None]
    assert all(b <= a for a, b in itertools.pairwise(starts))
    assert started(h)["gang"][0] <= starts[0]


def test_backfill_fields_are_checked_by_name() -> None:
    with pytest.raises(InvalidInput, match=r"backfill\.reserveAfterSecond"):
        cluster(backfill={"reserveAfterSecond": 10})
    with pytest.raises(InvalidInput, match="defaultRunSeconds"):
        cluster(backfill={"defaultRunSeconds": 0})
    spec = cluster(backfill={"reserveAfterSeconds": "10m", "defaultRunSeconds": "1h"})
    policy = spec.cluster_queues[0].backfill
    assert policy is not None
    assert (policy.reserve_after_seconds, policy.default_run_seconds) == (600.0, 3600.0)


def test_explain_shows_the_reservation_and_who_waits_for_it() -> None:
    """Operators see it where they look (docs/api.md, "Explain"): the holder's condition
    says how many nodes it holds and when it should start; the one kept off them says
    whose reservation it would delay."""
    h = run(cluster(backfill=ON), [*busy(), *GANG, job(2, "no-limit", 1, 500)])
    ids = {
        e.event.spec.name: e.event.workload_id
        for e in h.log.envelopes
        if isinstance(e.event, wev.WorkloadSubmitted)
    }
    blocked = next(
        e.position
        for e in h.log.envelopes
        if isinstance(e.event, qev.WorkloadPending) and e.event.reason == "BlockedByReservation"
    )
    runner: DeciderRunner[Any] = DeciderRunner(QueueDecider())
    runner.fold(e for e in h.log.envelopes if e.position <= blocked)
    for name, reason, says in (
        ("gang", "Reserved", "reserved 4 node(s) (n-4, n-5, n-6, n-7), estimated start at 100"),
        ("no-limit", "BlockedByReservation", "it would delay gang"),
    ):
        history = [e for e in h.log.envelopes if e.correlation_id == ids[name]]
        x = explain(runner.state, ids[name], history, blocked)
        assert (x.status, x.reason) == ("Pending", reason)
        assert says in x.message
        assert ("False", reason) in {(c.status, c.reason) for c in x.conditions}


def test_replay_re_derives_every_decision() -> None:
    """Reservations are derived state: a replay of the log decides the same."""
    h = run(
        cluster(backfill=ON), [*busy(), *GANG, job(2, "no-limit", 1, 500), job(3, "f", 1, 9, 9)]
    )
    for runner in h.runners:
        _, mismatches = verify_decisions(h.log.envelopes, runner.decider)
        assert mismatches == [], mismatches[:1]
