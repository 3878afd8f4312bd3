"""Attained-service priority (``attainedService``, Tiresias' discretised 2D-LAS) and
preemption with a checkpoint cost.

Tiresias (Gu et al., NSDI'19) §3.2-§4.1: a job's priority drops as its attained service
(GPUs x time) passes the thresholds of a few discretised queues; within a queue jobs go in
FIFO order; a job of a higher queue preempts one of a lower queue, so short jobs pass long
ones without anyone declaring a duration; a job that waited STARVELIMIT x its executed time
is promoted back to the highest queue (§4.2). Helios (Hu et al., SC'21) §5: a preempted job
resumes from its last checkpoint after a restore of 7 / 30 / 60 s for 1 / up to 8 / more GPUs.
"""

from __future__ import annotations

import pickle
from typing import Any

import pytest

from muster.core.events import BareEnvelope
from muster.core.events import queue as qev
from muster.core.model import parse
from muster.core.model.cluster import Checkpointing, kept
from muster.core.model.fields import InvalidInput
from muster.core.model.queues import AttainedService
from muster.core.queueing.attained import rank_of
from muster.core.queueing.decider import QueueDecider
from muster.core.runner import DeciderRunner
from muster.core.sim.figures import figures
from muster.core.sim.harness import Harness, Submission
from tests.unit.harness_inputs import gpu_job, gpu_node_cluster, run_verified


def _cluster(
    las: dict[str, Any] | None, *, checkpoint: float | None = None, **preemption: Any
) -> dict[str, Any]:
    extra: dict[str, Any] = {"preemption": {"withinClusterQueue": "LowerPriority", **preemption}}
    if las is not None:
        extra["attainedService"] = las
    doc = gpu_node_cluster("las", nodes=1, gpus=4, nominal=4, **extra)
    if checkpoint is not None:
        doc["checkpointing"] = {"intervalSeconds": checkpoint}
    return doc


def _at(h: Harness, kind: type, wid: str) -> list[float]:
    return [
        e.occurred_at
        for e in h.log.envelopes
        if isinstance(e.event, kind) and e.event.workload_id == wid
    ]


def _finished(h: Harness, wid: str) -> float:
    (at,) = _at(h, qev.WorkloadFinished, wid)
    return at


# -- levels and ranks ---------------------------------------------------------------------


def test_the_level_is_the_number_of_thresholds_passed() -> None:
    las = AttainedService(levels=(100.0, 1000.0))
    assert [las.level(s) for s in (0, 99.9, 100, 999, 1000, 1e9)] == [0, 0, 1, 1, 2, 2]


def test_a_higher_priority_class_outranks_every_level_of_a_lower_one() -> None:
    """Priority classes dominate; the level orders within a class (lower level first)."""
    las = AttainedService(levels=(100.0, 1000.0))
    assert rank_of(las, 1, 2) > rank_of(las, 0, 0)
    assert rank_of(las, 0, 0) > rank_of(las, 0, 1) > rank_of(las, 0, 2)
    assert rank_of(las, -1, 0) < rank_of(las, 0, 2)
    assert rank_of(None, 7, 3) == 7  # no attained service: the priority alone


def test_checkpoints_keep_whole_intervals_and_restores_go_by_size() -> None:
    """Helios §5: progress up to the last checkpoint; restore 7 / 30 / 60 s."""
    assert kept(95, 30) == 90 and kept(29, 30) == 0 and kept(95, None) == 0
    c = Checkpointing(interval_seconds=600)
    assert (c.restore(1), c.restore(8), c.restore(16)) == (7, 30, 60)
    assert c.interval(None) == 600 and c.interval(60) == 60


@pytest.mark.parametrize(
    ("las", "where"),
    [
        ({"levels": []}, "attainedService.levels"),
        ({"levels": [100, 50]}, "attainedService.levels[1]"),
        ({"levels": [-1]}, "attainedService.levels[0]"),
        ({"levels": [100], "starvationFactor": -2}, "attainedService.starvationFactor"),
        ({"levels": [100], "quantum": 3}, "attainedService.quantum"),
        ({"levels": [100], "preemptForPlacement": "yes"}, "attainedService.preemptForPlacement"),
        (
            {"levels": [100], "starvationLimitSeconds": -1},
            "attainedService.starvationLimitSeconds",
        ),
        ({"levels": [100], "maxPreemptions": 1.5}, "attainedService.maxPreemptions"),
        ({"levels": [100], "maxPreemptions": -1}, "attainedService.maxPreemptions"),
        (
            {"levels": [100], "maxCrossTenantPreemptions": "2"},
            "attainedService.maxCrossTenantPreemptions",
        ),
        (
            {"levels": [100], "maxCrossTenantPreemptions": -1},
            "attainedService.maxCrossTenantPreemptions",
        ),
        (
            {"levels": [100], "maxPreemptionsMinDevices": 1.5},
            "attainedService.maxPreemptionsMinDevices",
        ),
    ],
)
def test_a_bad_attained_service_names_the_field(las: dict[str, Any], where: str) -> None:
    with pytest.raises(InvalidInput) as err:
        parse.cluster(_cluster(las))
    assert where in str(err.value)


@pytest.mark.parametrize(
    ("doc", "where"),
    [
        ({"checkpointIntervalSeconds": 0}, "checkpointIntervalSeconds"),
        ({"checkpointIntervalSeconds": "often"}, "checkpointIntervalSeconds"),
        ({"terminationGracePeriodSeconds": -1}, "terminationGracePeriodSeconds"),
    ],
)
def test_a_bad_checkpoint_or_grace_field_is_refused_by_name(
    doc: dict[str, Any], where: str
) -> None:
    base = {"name": "w", "queueName": "q", "podSets": [{"name": "w", "count": 1}]}
    with pytest.raises(InvalidInput) as err:
        parse.workload({**base, **doc})
    assert where in str(err.value)


def test_a_bad_cluster_checkpointing_names_the_field() -> None:
    doc = _cluster(None)
    doc["checkpointing"] = {"intervalSeconds": 60, "restoreSeconds": {"oneGPU": 5}}
    with pytest.raises(InvalidInput) as err:
        parse.cluster(doc)
    assert "checkpointing.restoreSeconds.oneGPU" in str(err.value)


# -- scenarios ----------------------------------------------------------------------------


def _long_and_short(las: dict[str, Any] | None, **kw: Any) -> Harness:
    # long: 4 GPUs x 1000 s from t=0, past 100 GPU-s at t=25; short: 4 GPUs x 20 s at t=50.
    jobs = [gpu_job("long", 0, 1, 4, 1000), gpu_job("short", 50, 1, 4, 20)]
    return run_verified(_cluster(las, **kw), jobs)


def test_a_short_job_passes_a_long_one_that_attained_more_service() -> None:
    """Tiresias §3.2/§4.1: the long job is at a lower-priority queue once past the threshold,
    the newcomer (no service yet) preempts it and finishes first; the long one resumes."""
    h = _long_and_short({"levels": [100]})
    assert _at(h, qev.WorkloadEvicted, "long") == [50.0]
    assert _finished(h, "short") == 70.0
    assert _finished(h, "long") == 1070.0  # no checkpoints: it ran from the beginning again


def test_without_attained_service_the_short_job_waits_for_the_long_one() -> None:
    h = _long_and_short(None)
    assert _at(h, qev.WorkloadEvicted, "long") == []
    assert _finished(h, "short") == 1020.0


def test_a_job_at_its_first_level_is_not_preempted_by_a_newcomer() -> None:
    """Both at level 0 (the long job has not passed 10,000 GPU-s): FIFO within a level."""
    h = _long_and_short({"levels": [10_000]})
    assert _at(h, qev.WorkloadEvicted, "long") == []


def test_a_higher_priority_class_is_never_preempted_for_its_level() -> None:
    jobs = [gpu_job("long", 0, 1, 4, 1000, priority=5), gpu_job("short", 50, 1, 4, 20)]
    h = run_verified(_cluster({"levels": [100]}), jobs)
    assert _at(h, qev.WorkloadEvicted, "long") == []
    assert _finished(h, "short") == 1020.0


def test_min_admit_duration_keeps_a_level_change_from_preempting_at_once() -> None:
    """The minimum run before preemption (issue 14's ``minAdmitDuration``) holds for LAS."""
    h = _long_and_short({"levels": [100]}, minAdmitDuration=300)
    assert _at(h, qev.WorkloadEvicted, "long") == [300.0]


def test_a_level_crossing_wakes_a_waiting_newcomer() -> None:
    """The newcomer comes while the long job is still at level 0, and waits; the long
    job's crossing (at 250 s x 4 GPUs = 1000 GPU-s) is a time the decider wakes for."""
    jobs = [gpu_job("long", 0, 1, 4, 1000), gpu_job("short", 50, 1, 4, 20)]
    h = run_verified(_cluster({"levels": [1000]}), jobs)
    assert _at(h, qev.WorkloadEvicted, "long") == [250.0]
    assert _finished(h, "short") == 270.0


def _day_and_week(levels: list[float]) -> Harness:
    # day: 4 GPUs x 200 s from t=0, past 100 GPU-s at 25; week: 4 GPUs x 2000 s from t=30
    # (level 0) preempts it; day keeps 120 GPU-s (level 1), week passes 100 at 55, 1000 at 280.
    jobs = [gpu_job("day", 0, 1, 4, 200), gpu_job("week", 30, 1, 4, 2000)]
    return run_verified(_cluster({"levels": levels}), jobs)


def test_a_further_threshold_lets_a_shorter_job_pass_a_much_longer_one() -> None:
    """Tiresias §4.1 (K queues, thresholds spread over the jobs' attained service): with
    one threshold both jobs share the last level once past it, in FIFO order, and the
    preempted shorter one waits for the whole long one; a threshold a decade higher puts
    the long one below it, and the shorter one finishes first (bench.traces' third level,
    bench/README.md: ITP cluster 6, where half the jobs pass 36,000 GPU-s)."""
    one = _day_and_week([100])
    assert _at(one, qev.WorkloadEvicted, "day") == [30.0]
    assert _at(one, qev.WorkloadEvicted, "week") == []
    assert _finished(one, "day") == 2230.0
    two = _day_and_week([100, 1000])
    assert _at(two, qev.WorkloadEvicted, "week") == [280.0]
    assert _finished(two, "day") == 480.0
    assert _finished(two, "week") == 2480.0  # no checkpoints: it ran from the beginning again


def test_a_starving_job_goes_back_to_the_first_level() -> None:
    """Tiresias §4.2: long (at level 1) is preempted at 50 by a higher class after running
    50 s; with starvationFactor 1 it is back at level 0 at t=100 and, by FIFO within the
    level, goes before ``later`` (level 0, submitted at 60) when ``urgent`` ends. Without
    the guard ``later`` goes first."""

    def run(factor: float) -> Harness:
        jobs = [
            gpu_job("long", 0, 1, 4, 1000),
            gpu_job("urgent", 50, 1, 4, 200, priority=10),
            gpu_job("later", 60, 1, 4, 200),
        ]
        return run_verified(_cluster({"levels": [100], "starvationFactor": factor}), jobs)

    guarded = run(1)
    assert _at(guarded, qev.QuotaReserved, "long")[:2] == [0.0, 250.0]
    # Once it passes 100 GPU-s again (t=275) ``later`` may take its turn: LAS time-slices
    # (minAdmitDuration bounds how often).
    assert _at(guarded, qev.QuotaReserved, "later")[0] >= 275.0
    unguarded = run(0)
    assert _at(unguarded, qev.QuotaReserved, "later") == [250.0]
    assert _at(unguarded, qev.QuotaReserved, "long") == [0.0, 450.0]


def test_the_starvation_limit_caps_the_wait_after_a_long_run() -> None:
    """Tiresias §4.2's guard waits STARVELIMIT x the executed time, so a job preempted after
    a long run waits that much longer; ``starvationLimitSeconds`` caps it. ``long`` ran 50 s
    when ``urgent`` (a higher class) took its GPUs; with factor 2 it is back at level 0 at
    150, with a limit of 30 s at 80, and goes before ``later`` (level 0, submitted at 60)
    when ``urgent`` ends at 250 either way; with the limit it also passes ``later`` when
    ``urgent`` ends early."""

    def run(limit: float, urgent: float) -> Harness:
        jobs = [
            gpu_job("long", 0, 1, 4, 1000),
            gpu_job("urgent", 50, 1, 4, urgent, priority=10),
            gpu_job("later", 60, 1, 4, 200),
        ]
        las = {"levels": [100], "starvationFactor": 2, "starvationLimitSeconds": limit}
        return run_verified(_cluster(las), jobs)

    assert _at(run(0, 200), qev.QuotaReserved, "long")[:2] == [0.0, 250.0]
    # urgent ends at 100: without a limit long (promoted at 150) is still at level 1, and
    # ``later`` goes first; with the limit long was promoted at 80 and goes first.
    assert _at(run(0, 50), qev.QuotaReserved, "later")[0] == 100.0
    assert _at(run(30, 50), qev.QuotaReserved, "long")[:2] == [0.0, 100.0]


def test_a_workload_evicted_max_preemptions_times_keeps_its_place() -> None:
    """``maxPreemptions: 1``: ``long`` (past its level at 25 s) gives way to ``short`` at 50
    as Tiresias §3.2 would, but not to ``short-2`` at 200, which waits for it to end; without
    the bound it is preempted again."""

    def run(most: int) -> Harness:
        jobs = [
            gpu_job("long", 0, 1, 4, 1000),
            gpu_job("short", 50, 1, 4, 20),
            gpu_job("short-2", 200, 1, 4, 20),
        ]
        return run_verified(_cluster({"levels": [100], "maxPreemptions": most}), jobs)

    bounded = run(1)
    assert _at(bounded, qev.WorkloadEvicted, "long") == [50.0]
    assert _at(bounded, qev.QuotaReserved, "short-2") == [1070.0]
    assert _at(run(0), qev.WorkloadEvicted, "long") == [50.0, 200.0]


def test_max_preemptions_min_devices_bounds_only_large_workloads() -> None:
    """``maxPreemptions: 1`` with ``maxPreemptionsMinDevices: 8``: an 8-GPU job past its
    level gives way once to a newcomer (Tiresias §3.2) and then keeps its GPUs to its end,
    as ``maxPreemptions`` alone would have it; a 4-GPU one is not bound and is preempted
    again. Large jobs are the costly ones to preempt (Helios §5: restores grow with the
    GPUs; Tiresias §3.3: a consolidated gang has to be placed again)."""

    def run(gpus: int) -> Harness:
        jobs = [
            gpu_job("long", 0, 1, gpus, 1000),
            gpu_job("short", 50, 1, gpus, 20),
            gpu_job("short-2", 200, 1, gpus, 20),
        ]
        las = {"levels": [100], "maxPreemptions": 1, "maxPreemptionsMinDevices": 8}
        doc = gpu_node_cluster(
            "las",
            nodes=1,
            gpus=8,
            nominal=gpus,
            attainedService=las,
            preemption={"withinClusterQueue": "LowerPriority"},
        )
        return run_verified(doc, jobs)

    large = run(8)
    assert _at(large, qev.WorkloadEvicted, "long") == [50.0]
    assert _at(large, qev.QuotaReserved, "short-2") == [_finished(large, "long")]
    small = run(4)
    assert _at(small, qev.WorkloadEvicted, "long") == [50.0, 200.0]


def _two_tenants(las: dict[str, Any], jobs: list[Submission], fair: bool = False) -> Harness:
    """One node of 4 GPUs, 4 of quota, LocalQueues (tenants) ``a`` and ``b``, one level at
    100 GPU-s. Without tenant fair sharing LAS preempts across tenants by level alone;
    ``fair``: with it (weight 1 each: a nominal share of 2 GPUs)."""
    scope = {"admissionScope": {"admissionMode": "UsageBasedAdmissionFairSharing"}} if fair else {}
    doc = gpu_node_cluster(
        "las",
        nodes=1,
        gpus=4,
        nominal=4,
        namespaces=("a", "b"),
        attainedService={"levels": [100], **las},
        preemption={"withinClusterQueue": "LowerPriority"},
        **scope,
    )
    return run_verified(doc, jobs)


def test_only_other_tenants_preemptions_count_toward_the_cross_tenant_bound() -> None:
    """``maxCrossTenantPreemptions: 1`` protects a tenant's job from other tenants' work
    after one preemption, as Volcano keeps preemption within a queue (its ``preempt``
    action) apart from taking across queues (``reclaim``, which Armada's
    ``protectedFractionOfFairShare`` bounds per queue; peers.md §1.5, §2.2); Tiresias §3.2
    preempts a job of a higher level whoever's it is. ``a-long`` (past its level at 25 s)
    gives way to its own tenant's ``a-short`` at 50 (not counted) and to ``b-short`` at 200
    (counted), not to ``b-short-2`` at 400, which waits for its end. ``maxPreemptions: 1``
    counts every eviction: ``b-short`` waits too."""
    jobs = [
        gpu_job("a-long", 0, 1, 4, 1000, namespace="a"),
        gpu_job("a-short", 50, 1, 4, 20, namespace="a"),
        gpu_job("b-short", 200, 1, 4, 20, namespace="b"),
        gpu_job("b-short-2", 400, 1, 4, 20, namespace="b"),
    ]
    across = _two_tenants({"maxCrossTenantPreemptions": 1}, jobs)
    assert _at(across, qev.WorkloadEvicted, "a-long") == [50.0, 200.0]
    assert _at(across, qev.QuotaReserved, "b-short-2") == [_finished(across, "a-long")]
    every = _two_tenants({"maxPreemptions": 1}, jobs)
    assert _at(every, qev.WorkloadEvicted, "a-long") == [50.0]
    assert _at(every, qev.QuotaReserved, "b-short") == [_finished(every, "a-long")]
    unbounded = _two_tenants({}, jobs)
    assert _at(unbounded, qev.WorkloadEvicted, "a-long") == [50.0, 200.0, 400.0]


def test_a_job_spent_for_other_tenants_is_still_preempted_by_its_own_tenants_work() -> None:
    """The cross-tenant bound protects tenants from each other, not a long job from the
    shorter work of its own tenant (Tiresias §3.2 within a tenant): once ``b-short`` has
    preempted ``a-long``, ``b-short-2`` (at 200) may not, but ``a-short`` (at 300) still
    does, and ``b-short-2``, level 0 like it, goes next; ``a-long`` (level 1) last."""
    jobs = [
        gpu_job("a-long", 0, 1, 4, 1000, namespace="a"),
        gpu_job("b-short", 50, 1, 4, 20, namespace="b"),
        gpu_job("b-short-2", 200, 1, 4, 20, namespace="b"),
        gpu_job("a-short", 300, 1, 4, 20, namespace="a"),
    ]
    h = _two_tenants({"maxCrossTenantPreemptions": 1}, jobs)
    assert _at(h, qev.WorkloadEvicted, "a-long") == [50.0, 300.0]
    assert _finished(h, "a-short") == 320.0
    assert _at(h, qev.QuotaReserved, "b-short-2") == [320.0]
    assert _at(h, qev.QuotaReserved, "a-long") == [0.0, 70.0, 340.0]


def test_the_cross_tenant_count_is_the_folds() -> None:
    """Each eviction whose preemptor is another LocalQueue's adds one to the count (its own
    tenant's do not), in the fold: a state rebuilt from the log has it as the service
    had it (``run_verified`` also re-derives every decision from the log)."""
    jobs = [
        gpu_job("a-long", 0, 1, 4, 1000, namespace="a"),
        gpu_job("a-short", 50, 1, 4, 20, namespace="a"),
        gpu_job("b-short", 200, 1, 4, 20, namespace="b"),
    ]
    h = _two_tenants({"maxCrossTenantPreemptions": 3}, jobs)
    runner = DeciderRunner(QueueDecider())
    for env in h.log.envelopes:
        if isinstance(env.event, qev.WorkloadFinished) and env.event.workload_id == "a-long":
            break  # an ended workload leaves the state: look before
        runner.fold([env])
    wl = runner.state.workloads["a-long"]
    assert (wl.evictions, wl.cross_tenant_evictions) == (2, 1)


# -- checkpoints --------------------------------------------------------------------------


def test_a_preempted_job_resumes_from_its_last_checkpoint_after_a_restore() -> None:
    """Preempted at 50 after 50 s with a checkpoint every 15 s it keeps 45 s; it resumes
    at 70 with 955 s to go plus a 30 s restore (4 GPUs); figures count the 5 s since the
    checkpoint and the restore, x 4 GPUs, as lost."""
    h = _long_and_short({"levels": [100]}, checkpoint=15)
    assert _finished(h, "long") == 70 + 955 + 30
    assert figures(h.log.envelopes)["preemption_lost_gpu_seconds"] == (5 + 30) * 4


def test_a_workloads_own_interval_wins_over_the_clusters() -> None:
    spec = parse.workload(
        {
            "name": "long",
            "namespace": "team",
            "queueName": "q",
            "checkpointIntervalSeconds": 50,
            "podSets": [{"name": "w", "count": 1, "requests": {"nvidia.com/gpu": 4}}],
            "runtime": {"durationSeconds": 1000},
        }
    )
    subs: list[Submission] = [(0.0, "long", spec), gpu_job("short", 50, 1, 4, 20)]
    h = run_verified(_cluster({"levels": [100]}, checkpoint=15), subs)
    assert _finished(h, "long") == 70 + 950 + 30  # kept 50 s: its own interval
    assert figures(h.log.envelopes)["preemption_lost_gpu_seconds"] == 30 * 4


def test_without_an_interval_a_preempted_job_loses_everything() -> None:
    h = _long_and_short({"levels": [100]})
    assert figures(h.log.envelopes)["preemption_lost_gpu_seconds"] == 50 * 4


def test_between_tenants_attained_service_preempts_only_down_to_a_fair_share() -> None:
    """With tenant fair sharing, LAS takes from another tenant only while that tenant keeps
    at least the preemptor's tenant's share after it (Kueue's LessThanOrEqualToFinalShare,
    reference §1.6, between LocalQueues): b's newcomer takes b's own long job, not a's,
    although a's was admitted last (Kueue's order would take it first)."""
    jobs = [
        gpu_job("b-long", 0, 1, 2, 1000, namespace="b"),
        gpu_job("a-long", 1, 1, 2, 1000, namespace="a"),
        gpu_job("b-short", 100, 1, 2, 20, namespace="b"),
    ]
    h = _two_tenants({}, jobs, fair=True)
    assert _at(h, qev.WorkloadEvicted, "b-long") == [100.0]
    assert _at(h, qev.WorkloadEvicted, "a-long") == []


def _nominal_case() -> Harness:
    """One node of 8 GPUs, 8 of quota; tenants ``a`` (weight 1), ``b`` (1) and ``c`` (2): a
    nominal share of 2, 2 and 4 GPUs. ``c`` holds 6 (4 + 2), ``a`` its 2 (1 + 1), all past
    100 GPU-s by 200 s, when ``b``'s 1-GPU newcomer comes to a full node."""
    doc = gpu_node_cluster(
        "las",
        nodes=1,
        gpus=8,
        nominal=8,
        namespaces=("a", "b", "c"),
        attainedService={"levels": [100]},
        preemption={"withinClusterQueue": "LowerPriority"},
        admissionScope={"admissionMode": "UsageBasedAdmissionFairSharing"},
    )
    for lq in doc["localQueues"]:
        lq["fairSharing"] = {"weight": 2 if lq["namespace"] == "c" else 1}
    jobs = [
        gpu_job("c-1", 0, 1, 4, 1000, namespace="c"),
        gpu_job("c-2", 1, 1, 2, 1000, namespace="c"),
        gpu_job("a-1", 2, 1, 1, 1000, namespace="a"),
        gpu_job("a-2", 3, 1, 1, 1000, namespace="a"),
        gpu_job("b-short", 200, 1, 1, 20, namespace="b"),
    ]
    return run_verified(doc, jobs)


def test_between_tenants_attained_service_never_takes_a_tenant_below_its_nominal_share() -> None:
    """docs/architecture.md, "Choices": the per-tenant bound. Kueue reclaims only from a
    queue borrowing above its nominal quota and fair sharing counts a queue within it as
    share 0 (reference §1.6-§1.7): ``a`` at its nominal 2 GPUs keeps both jobs, although
    after losing one its share (1/8) would still equal the newcomer's tenant's (the
    LessThanOrEqualToFinalShare rule alone took ``a-2``, the most recently admitted);
    ``c``, 2 GPUs above its nominal, gives ``c-2`` and stays at it (not ``c-1``, which
    would leave it below)."""
    h = _nominal_case()
    assert _at(h, qev.WorkloadEvicted, "a-1") == _at(h, qev.WorkloadEvicted, "a-2") == []
    assert _at(h, qev.WorkloadEvicted, "c-1") == []
    assert _at(h, qev.WorkloadEvicted, "c-2") == [200.0]
    assert _finished(h, "b-short") == 220.0


def test_one_tenants_lack_of_candidates_does_not_hold_back_anothers_lookalike() -> None:
    """With tenant fair sharing a preemptor's candidates depend on its tenant: ``a``'s
    newcomer may not take ``b``'s only job (``b`` would fall below its nominal share of 2
    GPUs), ``b``'s own newcomer of the same shape and level may (LAS within a tenant,
    Tiresias §3.2). A "no candidates" verdict is kept for the cycle by shape, which names
    the namespace and LocalQueue: ``a``'s must not park ``b``'s until ``b-long`` ends."""
    jobs = [
        gpu_job("b-long", 0, 1, 4, 1000, namespace="b"),
        gpu_job("a-new", 200, 1, 2, 20, namespace="a"),
        gpu_job("b-new", 200, 1, 2, 20, namespace="b"),
    ]
    h = _two_tenants({}, jobs, fair=True)
    assert _at(h, qev.WorkloadEvicted, "b-long") == [200.0]
    assert _at(h, qev.QuotaReserved, "b-new") == [200.0]


# -- replay -------------------------------------------------------------------------------


def test_a_replay_that_reads_events_bare_folds_the_levels_as_the_service_did() -> None:
    """A rebuild reads the queue's clock-only events without payload (``BareEnvelope``:
    ``timer.fired``, a provisioning request's ``node.registered``). Folding one still applies
    the level changes time made due at that moment, as ``evolve`` does: the state after
    every event equals the service's, which folded them whole (Tiresias §4.1's crossing at
    250 s is a timer the decider woke for)."""
    jobs = [gpu_job("long", 0, 1, 4, 1000), gpu_job("short", 50, 1, 4, 20)]
    h = run_verified(_cluster({"levels": [1000]}), jobs)
    decider = QueueDecider()
    whole, bare = DeciderRunner(decider), DeciderRunner(decider)
    read_bare = 0
    for env in h.log.envelopes:
        whole.fold([env])
        if env.type in decider.clock_only:
            read_bare += 1
            env = BareEnvelope.of(env)
        bare.fold([env])
        assert pickle.dumps(bare.state) == pickle.dumps(whole.state), env
    assert read_bare and whole.state.las_due == bare.state.las_due


# -- preemption for a place (attainedService.preemptForPlacement) -------------------------


def _fragmented(las: dict[str, Any], **preemption: Any) -> Harness:
    """Two nodes of 4 GPUs, 8 of quota: ``a`` and ``b`` (3 GPUs x 1000 s, past 100 GPU-s
    at 34 s) leave one GPU free on each node; ``gang`` (one pod of 2 GPUs x 20 s) comes
    at 50: the quota is there, a place is not."""
    doc = gpu_node_cluster(
        "frag",
        nodes=2,
        gpus=4,
        nominal=8,
        attainedService=las,
        preemption={"withinClusterQueue": "LowerPriority", **preemption},
    )
    jobs = [
        gpu_job("a", 0, 1, 3, 1000),
        gpu_job("b", 0, 1, 3, 1000),
        gpu_job("gang", 50, 1, 2, 20),
    ]
    return run_verified(doc, jobs)


def test_a_gang_with_quota_but_no_place_preempts_a_higher_level_to_gather_one() -> None:
    """Tiresias §4.1 (a job of a higher-priority queue preempts lower ones) placed as its
    §3.3 consolidation wants; Volcano's preempt action (peers.md §2.2: a starving job
    evicts lower-priority tasks on a node) and Armada's node choice (§1.5: preempt the
    lowest priority on the node it then binds to): one victim frees a node for it."""
    h = _fragmented({"levels": [100], "preemptForPlacement": True})
    evicted = _at(h, qev.WorkloadEvicted, "a") + _at(h, qev.WorkloadEvicted, "b")
    assert evicted == [50.0]  # one of them, not both: the fill-back spares the other
    assert _finished(h, "gang") == 70.0


def test_without_preempt_for_placement_the_gang_waits_for_a_node_to_free() -> None:
    """muster's default (docs/architecture.md, "Choices"): preemption is for quota only."""
    h = _fragmented({"levels": [100]})
    assert _at(h, qev.WorkloadEvicted, "a") == _at(h, qev.WorkloadEvicted, "b") == []
    assert _finished(h, "gang") == 1020.0


def test_preemption_for_a_place_takes_only_a_lower_rank() -> None:
    """At one level (neither has passed 10,000 GPU-s), FIFO within the level: no victim."""
    h = _fragmented({"levels": [10_000], "preemptForPlacement": True})
    assert _at(h, qev.WorkloadEvicted, "a") == _at(h, qev.WorkloadEvicted, "b") == []
    assert _finished(h, "gang") == 1020.0


def test_preemption_for_a_place_respects_min_admit_duration() -> None:
    """The minimum run (``minAdmitDuration``) protects victims of this preemption too."""
    h = _fragmented({"levels": [100], "preemptForPlacement": True}, minAdmitDuration=300)
    evicted = _at(h, qev.WorkloadEvicted, "a") + _at(h, qev.WorkloadEvicted, "b")
    assert evicted == [300.0]
    assert _finished(h, "gang") == 320.0
