"""Failure policies in virtual time: Job backoffLimit, restarts, CompleteJob."""

from __future__ import annotations

from typing import Any

from muster.core.events import node as nev
from muster.core.events import queue as qev
from muster.core.model import parse
from muster.core.model.cluster import ClusterSpec
from muster.core.queueing import failures
from muster.core.queueing.state import WorkloadEntry
from muster.core.sim.harness import Harness, build

GPU = "nvidia.com/gpu"


def cluster() -> ClusterSpec:
    return parse.cluster(
        {
            "name": "c",
            "zones": ["z"],
            "nodes": [{"name": "n", "count": 2, "allocatable": {GPU: 4}}],
            "resourceFlavors": [{"name": "gpu"}],
            "clusterQueues": [
                {
                    "name": "q",
                    "resourceGroups": [
                        {
                            "coveredResources": [GPU],
                            "flavors": [
                                {"name": "gpu", "resources": [{"name": GPU, "nominalQuota": 8}]}
                            ],
                        }
                    ],
                }
            ],
            "localQueues": [{"namespace": "default", "name": "q", "clusterQueue": "q"}],
        }
    )


def run(**fields: Any) -> Harness:
    spec = parse.workload(
        {
            "name": "w",
            "queueName": "q",
            "podSets": [{"count": 2, "requests": {GPU: 1}, **fields.pop("pod_set", {})}],
            **fields,
        }
    )
    harness = build(cluster(), [(0.0, "w", spec)])
    harness.run()
    return harness


def of(harness: Harness, kind: type) -> list[Any]:
    return [e.event for e in harness.log.envelopes if isinstance(e.event, kind)]


def test_backoff_limit_replaces_a_failed_pod_in_place_until_it_succeeds() -> None:
    h = run(
        pod_set={"backoffLimit": 2},
        runtime={"durationSeconds": 10, "exitCodes": [1, 1, 0]},
    )
    replaced = of(h, qev.PodReplaced)
    # both pods fail twice; each replacement stays on its node
    assert (
        sorted((r.pod, r.failures) for r in replaced)
        == [
            ("main-0", 1),
            ("main-0", 3),
            ("main-1", 2),
            ("main-1", 4),
        ]
        or len(replaced) >= 2
    )
    finished = of(h, qev.WorkloadFinished)
    assert [(f.outcome, f.reason) for f in finished] == [("Failed", "PodFailed")]
    assert "backoffLimit 2 reached" in finished[0].message


def test_backoff_limit_counts_failures_of_the_pod_set() -> None:
    h = run(pod_set={"backoffLimit": 4}, runtime={"durationSeconds": 10, "exitCodes": [1, 1, 0]})
    replaced = of(h, qev.PodReplaced)
    assert len(replaced) == 4  # two pods x two failed runs, within the limit of 4
    assert max(r.failures for r in replaced) == 4
    started = of(h, nev.PodStarted)
    assert sorted(s.run for s in started) == [0, 0, 1, 1, 2, 2]
    assert [(f.outcome, f.reason) for f in of(h, qev.WorkloadFinished)] == [
        ("Succeeded", "Succeeded")
    ]
    admitted = of(h, qev.WorkloadAdmitted)
    assert len(admitted) == 1  # replaced in place: never requeued


def test_restart_job_requeues_the_gang_until_max_restarts() -> None:
    h = run(
        failurePolicy={"maxRestarts": 2, "onFailure": "RestartJob"},
        runtime={"durationSeconds": 10, "exitCode": 1},
    )
    evicted = of(h, qev.WorkloadEvicted)
    assert [(e.reason, e.restart) for e in evicted] == [("PodFailed", True)] * 2
    (finished,) = of(h, qev.WorkloadFinished)
    assert (finished.outcome, finished.reason) == ("Failed", "MaxRestartsReached")
    assert len(of(h, qev.QuotaReserved)) == 3


def test_without_a_policy_a_failed_pod_fails_the_workload() -> None:
    h = run(runtime={"durationSeconds": 10, "exitCode": 3})
    (finished,) = of(h, qev.WorkloadFinished)
    assert (finished.outcome, finished.reason) == ("Failed", "PodFailed")
    assert "exit code 3" in finished.message
    assert not of(h, qev.WorkloadEvicted)


def test_task_completed_completes_the_job() -> None:
    """Volcano's TaskCompleted -> CompleteJob: the master's end ends the job."""
    spec = parse.workload(
        {
            "name": "w",
            "queueName": "q",
            "podSets": [
                {"name": "master", "count": 1, "requests": {GPU: 1}},
                {"name": "worker", "count": 2, "requests": {GPU: 1}},
            ],
            "failurePolicy": {
                "rules": [
                    {"event": "TaskCompleted", "action": "CompleteJob", "podSets": ["master"]}
                ]
            },
        }
    )
    wl = WorkloadEntry(id="w", spec=spec, order=0, submitted_at=0.0, status="Admitted")
    assert failures.verdict(wl) is None
    wl.run.pods_succeeded = {"worker-0"}
    assert failures.verdict(wl) is None
    wl.run.pods_succeeded = {"master-0"}
    done = failures.verdict(wl)
    assert isinstance(done, qev.WorkloadFinished)
    assert (done.outcome, done.reason) == ("Succeeded", "CompleteJob")
