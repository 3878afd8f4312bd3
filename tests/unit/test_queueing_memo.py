"""What the queue remembers across decisions changes no decision.

The cycle remembers which placement shapes found no room on the node book, while no
room has been freed since. A lookalike that joins later gets that verdict without a new
search, but its reason is recorded with the numbers of now, as a decision made from
scratch (a replay) records it.
"""

from __future__ import annotations

from muster.core.events import queue as qev
from muster.core.model import parse
from muster.core.sim.harness import Harness, build
from muster.core.verify import verify_decisions
from tests.unit.harness_inputs import gpu_job, gpu_node_cluster


def _run() -> Harness:
    cluster = parse.cluster(gpu_node_cluster("memo", nodes=2, gpus=2, nominal=16))
    subs = [
        gpu_job("x", 0, 1, 1, 1000),  # n-0 keeps 1 GPU free
        gpu_job("gang", 1, 2, 2, 1000),  # w-0 has n-1, w-1 has nowhere to go
        # n-1 keeps 1 GPU free
        gpu_job("y", 2, 1, 1, 1000, nodeSelector={"kubernetes.io/hostname": "n-1"}),
        gpu_job("gang-2", 3, 2, 2, 1000),  # now already w-0 has nowhere to go
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
