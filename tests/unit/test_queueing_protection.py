"""A minimum runtime before preemption (``preemption.minAdmitDuration``): a workload its
ClusterQueue admitted less than that long ago is no victim for any preemptor; the
preemptor waits, is told why, and is judged again when the first protection ends."""

from __future__ import annotations

from typing import Any

import pytest

from muster.core.events import queue as qev
from muster.core.model import parse
from muster.core.model.fields import InvalidInput
from muster.core.sim.harness import Harness, Submission
from tests.unit.harness_inputs import gpu_job, gpu_node_cluster, run_verified


def _run(*jobs: Submission, protect: object = None) -> Harness:
    preemption: dict[str, Any] = {"withinClusterQueue": "LowerPriority"}
    if protect is not None:
        preemption["minAdmitDuration"] = protect
    cluster = gpu_node_cluster("protect", nodes=1, gpus=4, nominal=4, preemption=preemption)
    return run_verified(cluster, jobs)


def _timed(h: Harness, kind: type) -> list[tuple[Any, float]]:
    return [(e.event, e.occurred_at) for e in h.log.envelopes if isinstance(e.event, kind)]


def test_a_protected_workload_is_evicted_only_once_its_minimum_runtime_is_over() -> None:
    h = _run(
        gpu_job("long", 0, 4, 1, 100), gpu_job("urgent", 1, 4, 1, 10, priority=10), protect="30s"
    )
    evicted = _timed(h, qev.WorkloadEvicted)
    assert [(e.workload_id, e.preemptor, at) for e, at in evicted] == [("long", "urgent", 30.0)]
    reserved = [(e.workload_id, at) for e, at in _timed(h, qev.QuotaReserved)]
    assert ("urgent", 30.0) in reserved  # woken by the protection's end, nothing else moved
    waiting = [e for e, _ in _timed(h, qev.WorkloadPending) if e.workload_id == "urgent"]
    assert waiting and "protected by minAdmitDuration, the first for another 29s" in (
        waiting[0].message
    )


def test_a_workload_that_ends_within_its_protection_is_never_evicted() -> None:
    h = _run(gpu_job("short", 0, 4, 1, 20), gpu_job("urgent", 1, 4, 1, 10, priority=10), protect=60)
    assert _timed(h, qev.WorkloadEvicted) == []
    reserved = {e.workload_id: at for e, at in _timed(h, qev.QuotaReserved)}
    assert reserved["urgent"] == 20.0  # it waited for the finish


def test_without_protection_the_preemptor_evicts_at_once() -> None:
    h = _run(gpu_job("long", 0, 4, 1, 100), gpu_job("urgent", 1, 4, 1, 10, priority=10))
    assert [(e.workload_id, at) for e, at in _timed(h, qev.WorkloadEvicted)] == [("long", 1.0)]


def test_an_unprotected_candidate_is_taken_before_waiting_for_a_protected_one() -> None:
    # "old" has run past its protection by the time "urgent" comes; "fresh" has not.
    h = _run(
        gpu_job("old", 0, 2, 1, 100),
        gpu_job("fresh", 25, 2, 1, 100),
        gpu_job("urgent", 30, 2, 1, 10, priority=10),
        protect="20s",
    )
    evicted = [(e.workload_id, at) for e, at in _timed(h, qev.WorkloadEvicted)]
    assert evicted == [("old", 30.0)]


@pytest.mark.parametrize("bad", ["soon", -5, True])
def test_a_bad_min_admit_duration_names_the_field(bad: object) -> None:
    cluster = gpu_node_cluster(
        "protect", nodes=1, gpus=4, nominal=4, preemption={"minAdmitDuration": bad}
    )
    with pytest.raises(InvalidInput) as err:
        parse.cluster(cluster)
    assert "preemption.minAdmitDuration" in str(err.value)
