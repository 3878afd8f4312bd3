"""What the queue remembers across decisions changes no decision.

The cycle remembers which placement shapes found no room on the node book, while no
room has been freed since. A lookalike that joins later gets that verdict without a new
search, but its reason is recorded with the numbers of now, as a decision made from
scratch (a replay) records it.
"""

from __future__ import annotations

from typing import Any

from muster.core.events import queue as qev
from muster.core.model import parse
from muster.core.sim.harness import Harness, build
from muster.core.verify import verify_decisions

GPU = "nvidia.com/gpu"


def _job(name: str, at: float, pods: int, gpus: int, **extra: Any) -> tuple[float, str, Any]:
    pod_set: dict[str, Any] = {"name": "w", "count": pods, "requests": {GPU: gpus}, **extra}
    doc = {
        "name": name,
        "namespace": "team",
        "queueName": "q",
        "podSets": [pod_set],
        "runtime": {"durationSeconds": 1000},
    }
    return (at, name, parse.workload(doc))


def _run() -> Harness:
    cluster = parse.cluster(
        {
            "name": "memo",
            "zones": ["z"],
            "resourceFlavors": [{"name": "gpu"}],
            "nodes": [{"name": "n", "count": 2, "allocatable": {GPU: 2}}],
            "clusterQueues": [
                {
                    "name": "cq",
                    "resourceGroups": [
                        {
                            "coveredResources": [GPU],
                            "flavors": [
                                {"name": "gpu", "resources": [{"name": GPU, "nominalQuota": 16}]}
                            ],
                        }
                    ],
                }
            ],
            "localQueues": [{"namespace": "team", "name": "q", "clusterQueue": "cq"}],
        }
    )
    subs = [
        _job("x", 0, 1, 1),  # n-0 keeps 1 GPU free
        _job("gang", 1, 2, 2),  # w-0 has n-1, w-1 has nowhere to go
        _job("y", 2, 1, 1, nodeSelector={"kubernetes.io/hostname": "n-1"}),  # n-1: 1 free
        _job("gang-2", 3, 2, 2),  # now already w-0 has nowhere to go
    ]
    h = build(cluster, subs)
    h.run(until=10)
    return h


def test_a_remembered_miss_is_recorded_with_the_numbers_of_now() -> None:
    h = _run()
    reasons = {
        e.event.workload_id: e.event.message
        for e in h.log.envelopes
        if isinstance(e.event, qev.WorkloadPending)
    }
    assert "pod w-1 of pod set w" in reasons["gang"]
    assert "pod w-0 of pod set w" in reasons["gang-2"]
    for runner in h.runners:
        _, mismatches = verify_decisions(h.log.envelopes, runner.decider)
        assert mismatches == [], mismatches[:1]
