"""Partial admission (Kueue's minCount): the largest count that fits now, at least minCount."""

from __future__ import annotations

from typing import Any

import pytest

from muster.core.events import queue as qev
from muster.core.model import parse
from muster.core.model.fields import InvalidInput
from muster.core.sim.harness import build
from tests.unit.harness_inputs import submissions

GPU = "nvidia.com/gpu"
CLUSTER = {
    "name": "t",
    "zones": ["a"],
    "nodePools": [{"name": "p", "machineType": "m", "allocatable": {GPU: 1}, "maxNodes": 64}],
    "resourceFlavors": [{"name": "f"}],
    "clusterQueues": [
        {
            "name": "cq",
            "resourceGroups": [
                {
                    "coveredResources": [GPU],
                    "flavors": [{"name": "f", "resources": [{"name": GPU, "nominalQuota": 8}]}],
                }
            ],
        }
    ],
    "localQueues": [{"namespace": "default", "name": "lq", "clusterQueue": "cq"}],
}


def job(name: str, count: int, min_count: int | None = None, seconds: float = 100) -> Any:
    ps: dict[str, Any] = {"count": count, "requests": {GPU: 1}}
    if min_count is not None:
        ps["minCount"] = min_count
    return {
        "name": name,
        "queueName": "lq",
        "podSets": [ps],
        "runtime": {"durationSeconds": seconds},
    }


def run(*jobs: tuple[float, dict[str, Any]]) -> list[Any]:
    h = build(parse.cluster(CLUSTER), submissions(jobs))
    h.run()
    return [e.event for e in h.log.envelopes]


def test_admits_the_largest_count_that_fits() -> None:
    # 5 of 8 GPUs taken: a job of 8 with minCount 2 gets the remaining 3 pods.
    events = run((0, job("first", 5)), (1, job("elastic", 8, min_count=2)))
    reserved = [
        e for e in events if isinstance(e, qev.QuotaReserved) and e.workload_id == "elastic"
    ]
    assert len(reserved) == 1
    assert reserved[0].pod_counts == {"main": 3}
    assert reserved[0].usage == {"f": {GPU: 3}}
    assert "partial admission: main 3 of 8 pods" in reserved[0].message
    done = [e for e in events if isinstance(e, qev.WorkloadFinished) and e.workload_id == "elastic"]
    assert done[0].outcome == "Succeeded" and done[0].message == "all 3 pods succeeded"


def test_waits_when_not_even_min_count_fits() -> None:
    events = run((0, job("first", 7)), (1, job("elastic", 8, min_count=2)))
    reserved = [
        e for e in events if isinstance(e, qev.QuotaReserved) and e.workload_id == "elastic"
    ]
    # Only after "first" ends (t=100) does it get quota, then the whole 8.
    assert len(reserved) == 1 and reserved[0].pod_counts == {}
    pending = [
        e for e in events if isinstance(e, qev.WorkloadPending) and e.workload_id == "elastic"
    ]
    assert pending[0].reason == "WaitingForQuota"


def test_full_count_when_it_fits() -> None:
    events = run((0, job("elastic", 6, min_count=2)))
    reserved = [e for e in events if isinstance(e, qev.QuotaReserved)]
    assert reserved[0].pod_counts == {} and reserved[0].usage == {"f": {GPU: 6}}


def test_only_one_pod_set_may_have_min_count() -> None:
    doc = job("two", 4, min_count=1)
    doc["podSets"] = [
        {"name": "a", "count": 4, "minCount": 1, "requests": {GPU: 1}},
        {"name": "b", "count": 4, "minCount": 1, "requests": {GPU: 1}},
    ]
    with pytest.raises(InvalidInput) as err:
        parse.workload(doc)
    assert err.value.path == "podSets" and "only one pod set" in err.value.problem


def test_a_count_over_the_queues_maximum_is_admitted_partially() -> None:
    """Kueue's partial admission runs whenever the full size does not fit, whatever the
    reason (reference/kueue.md §1.11): 12 pods where the ClusterQueue can never give more
    than 8 (ExceedsMaxQuota), minCount 4, are admitted as 8 instead of waiting for ever."""
    events = run((0, job("big", 12, min_count=4)))
    (reserved,) = [e for e in events if isinstance(e, qev.QuotaReserved)]
    assert reserved.pod_counts == {"main": 8}
    assert "partial admission: main 8 of 12 pods" in reserved.message
    (done,) = [e for e in events if isinstance(e, qev.WorkloadFinished)]
    assert done.message == "all 8 pods succeeded"


def test_over_the_maximum_it_waits_for_quota_in_use_then_takes_what_the_queue_gives() -> None:
    # 6 of 8 GPUs taken until "first" ends: minCount 4 does not fit beside them; then 8 of 12.
    h = build(parse.cluster(CLUSTER), submissions([(0, job("first", 6)), (1, job("big", 12, 4))]))
    h.run()
    log = h.log.envelopes
    (first_done,) = [e for e in log if isinstance(e.event, qev.WorkloadFinished)][:1]
    (reserved,) = [
        e for e in log if isinstance(e.event, qev.QuotaReserved) and e.event.workload_id == "big"
    ]
    assert reserved.event.pod_counts == {"main": 8}
    assert reserved.occurred_at == first_done.occurred_at
    assert first_done.event.workload_id == "first"


def test_a_min_count_over_the_maximum_never_fits() -> None:
    events = run((0, job("big", 12, min_count=10)))
    assert not [e for e in events if isinstance(e, qev.QuotaReserved)]
    (pending,) = [e for e in events if isinstance(e, qev.WorkloadPending)]
    assert pending.reason == "ExceedsMaxQuota"
