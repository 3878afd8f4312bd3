"""Scenarios S3 (quota part), S4, S9 and S10, applied as the seed manifests, in virtual time.

The manifests are the seed documents verbatim (examples/scenarios/, copied from
the scenario pack); the clusters they run on are written here. Expectations are
checked on the decision log with an independent fold of who holds what, when.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from muster.core.events import Envelope
from muster.core.events import queue as qev
from muster.core.events import workload as wev
from muster.core.model import manifests, parse
from muster.core.model.cluster import ClusterSpec
from muster.core.model.workload import WorkloadSpec
from muster.core.sim.harness import Harness, build

SCENARIOS = Path(__file__).resolve().parents[2] / "examples" / "scenarios"
TPU = "google.com/tpu"
GPU = "nvidia.com/gpu"


def docs(*names: str) -> list[Any]:
    out: list[Any] = []
    for name in names:
        out += list(yaml.safe_load_all((SCENARIOS / name).read_text()))
    return out


def tpu_cluster(hosts: int = 6) -> ClusterSpec:
    """One TPU v5e pool (2x4 topology): ``hosts`` hosts of 4 chips, in one zone."""
    labels = {
        "cloud.google.com/gke-tpu-accelerator": "tpu-v5-lite-podslice",
        "cloud.google.com/gke-tpu-topology": "2x4",
    }
    return parse.cluster(
        {
            "name": "tpu",
            "region": "us-west4",
            "zones": ["us-west4-a"],
            "nodePools": [
                {
                    "name": "tpu-v5e",
                    "machineType": "ct5lp-hightpu-4t",
                    "allocatable": {TPU: 4},
                    "labels": labels,
                    "maxNodes": hosts,
                }
            ],
        }
    )


@dataclass
class Timeline:
    """Who holds quota when, folded independently of the queue's own state."""

    names: dict[str, str] = field(default_factory=dict)  # workload id -> namespace/name
    held: dict[str, dict[str, int]] = field(default_factory=dict)  # id -> resource -> qty
    intervals: dict[str, list[tuple[float, float | None]]] = field(default_factory=dict)
    peaks: dict[str, int] = field(default_factory=dict)  # resource -> max held at once
    samples: list[tuple[float, dict[str, dict[str, int]]]] = field(default_factory=list)

    def fold(self, log: Iterable[Envelope]) -> Timeline:
        for env in log:
            ev = env.event
            if isinstance(ev, wev.WorkloadSubmitted):
                self.names[ev.workload_id] = f"{ev.spec.namespace}/{ev.spec.name}"
            elif isinstance(ev, qev.QuotaReserved):
                totals: dict[str, int] = {}
                for resources in ev.usage.values():
                    for r, q in resources.items():
                        totals[r] = totals.get(r, 0) + q
                self.held[ev.workload_id] = totals
                self.intervals.setdefault(self.name(ev.workload_id), []).append(
                    (env.occurred_at, None)
                )
            elif (
                isinstance(
                    ev,
                    qev.WorkloadEvicted | qev.WorkloadFinished | qev.WorkloadCancelled,
                )
                and ev.workload_id in self.held
            ):
                del self.held[ev.workload_id]
                spans = self.intervals[self.name(ev.workload_id)]
                spans[-1] = (spans[-1][0], env.occurred_at)
            else:
                continue
            for r in {r for h in self.held.values() for r in h}:
                total = sum(h.get(r, 0) for h in self.held.values())
                self.peaks[r] = max(self.peaks.get(r, 0), total)
            self.samples.append((env.occurred_at, self.by_namespace()))
        return self

    def name(self, wid: str) -> str:
        return self.names[wid]

    def by_namespace(self) -> dict[str, dict[str, int]]:
        out: dict[str, dict[str, int]] = {}
        for wid, res in self.held.items():
            ns = self.names[wid].split("/")[0]
            per = out.setdefault(ns, {})
            for r, q in res.items():
                per[r] = per.get(r, 0) + q
        return out


def overlaps(a: list[tuple[float, float | None]], b: list[tuple[float, float | None]]) -> bool:
    inf = float("inf")
    return any(
        s1 < (e2 if e2 is not None else inf) and s2 < (e1 if e1 is not None else inf)
        for s1, e1 in a
        for s2, e2 in b
    )


def run(
    cluster: ClusterSpec, m: manifests.Manifests, subs: list[tuple[float, WorkloadSpec]]
) -> Harness:
    spec = manifests.merge(cluster, m)
    harness = build(spec, [(at, wl.name, wl) for at, wl in subs])
    harness.run()
    return harness


def events_of(harness: Harness, kind: type, wid: str) -> list[Any]:
    return [
        e.event
        for e in harness.log.envelopes
        if isinstance(e.event, kind) and getattr(e.event, "workload_id", None) == wid
    ]


# -- S3: multislice quota ---------------------------------------------------------------


def test_s3_three_slices_alone_one_and_two_together_never_over_24_chips() -> None:
    m = manifests.read(docs("multislice/kueue.yaml", "multislice/jobsets.yaml"))
    assert [w.name for w in m.workloads] == [
        "multislice-1slice",
        "multislice-2slice",
        "multislice-3slice",
    ]
    harness = run(tpu_cluster(), m, m.submissions())
    t = Timeline().fold(harness.log.envelopes)
    assert t.peaks[TPU] == 24  # full, never over
    one, two, three = (t.intervals[f"default/multislice-{n}slice"] for n in (1, 2, 3))
    assert overlaps(one, two)
    assert not overlaps(three, one) and not overlaps(three, two)
    finished = [
        e.event.workload_id
        for e in harness.log.envelopes
        if isinstance(e.event, qev.WorkloadFinished) and e.event.outcome == "Succeeded"
    ]
    assert sorted(finished) == sorted(w.name for w in m.workloads)


def test_s3_three_slices_first_then_one_and_two_together_after() -> None:
    m = manifests.read(docs("multislice/kueue.yaml", "multislice/jobsets.yaml"))
    order = {"multislice-3slice": 0.0, "multislice-1slice": 1.0, "multislice-2slice": 2.0}
    subs = [(order[wl.name], wl) for wl in m.workloads]
    harness = run(tpu_cluster(), m, subs)
    t = Timeline().fold(harness.log.envelopes)
    assert t.peaks[TPU] == 24
    one, two, three = (t.intervals[f"default/multislice-{n}slice"] for n in (1, 2, 3))
    assert three[0][0] == 0.0
    assert overlaps(one, two) and not overlaps(three, one) and not overlaps(three, two)
    assert one[0][0] >= three[0][1]  # type: ignore[operator]
    # While the 3-slice runs, the others wait with a reason that has the numbers.
    pending = events_of(harness, qev.WorkloadPending, "multislice-1slice")
    assert pending[0].reason == "WaitingForQuota"
    assert "insufficient quota for google.com/tpu in flavor vlp-24, 8 more needed" in (
        pending[0].message
    )


# -- S4: preemption -------------------------------------------------------------------


def _high_priority_three_slices() -> dict[str, Any]:
    doc = copy.deepcopy(docs("multislice/jobsets.yaml")[2])
    doc["metadata"]["name"] = "high-priority"
    doc["metadata"].setdefault("annotations", {})["muster.dev/submit-at"] = "10s"
    doc["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"][
        "priorityClassName"
    ] = "very-high"
    return doc


def _no_priority_three_slices() -> dict[str, Any]:
    doc = copy.deepcopy(docs("multislice/jobsets.yaml")[2])
    doc["metadata"]["name"] = "no-priority"
    doc["metadata"].setdefault("annotations", {})["muster.dev/submit-at"] = "5s"
    return doc


PRIORITY_1000 = {
    "apiVersion": "scheduling.k8s.io/v1",
    "kind": "PriorityClass",
    "metadata": {"name": "very-high"},
    "value": 1000,
}


def test_s4_higher_priority_preempts_and_the_victim_runs_again_after() -> None:
    m = manifests.read(
        [
            *docs("multislice/kueue.yaml", "multislice/preemption.yaml"),
            PRIORITY_1000,
            _high_priority_three_slices(),
        ]
    )
    harness = run(tpu_cluster(), m, m.submissions())
    t = Timeline().fold(harness.log.envelopes)
    assert t.peaks[TPU] == 24
    evictions = events_of(harness, qev.WorkloadEvicted, "low-priority")
    assert len(evictions) == 1
    ev = evictions[0]
    assert ev.reason == "Preempted" and ev.preemptor == "high-priority"
    assert ev.preemption_reason == "InClusterQueue"
    assert "high-priority" in ev.message and "priority 1000" in ev.message
    low, high = t.intervals["default/low-priority"], t.intervals["default/high-priority"]
    assert len(low) == 2  # ran, was evicted, ran again
    assert low[0][1] == 10.0 and high[0][0] >= 10.0
    assert low[1][0] >= high[0][1]  # type: ignore[operator]
    assert not overlaps(low, high)
    # Requeued keeping its place: the victim's second reservation comes right after.
    assert events_of(harness, qev.WorkloadFinished, "low-priority")[0].outcome == "Succeeded"


def test_s4_a_workload_without_priority_class_never_preempts() -> None:
    m = manifests.read(
        [*docs("multislice/kueue.yaml", "multislice/preemption.yaml"), _no_priority_three_slices()]
    )
    harness = run(tpu_cluster(), m, m.submissions())
    assert not [e for e in harness.log.envelopes if isinstance(e.event, qev.WorkloadEvicted)]
    pending = events_of(harness, qev.WorkloadPending, "no-priority")
    assert pending and pending[0].reason == "WaitingForQuota"
    assert "no preemption candidates" in pending[0].message
    t = Timeline().fold(harness.log.envelopes)
    low, zero = t.intervals["default/low-priority"], t.intervals["default/no-priority"]
    assert zero[0][0] >= low[0][1]  # type: ignore[operator]


# -- S9: namespace quota ------------------------------------------------------------------


def gpu_cluster(gpus: int = 8) -> ClusterSpec:
    return parse.cluster(
        {
            "name": "gpu",
            "region": "us-central1",
            "zones": ["us-central1-a"],
            "nodePools": [
                {
                    "name": "a100",
                    "machineType": "a2-highgpu-1g",
                    "allocatable": {GPU: 1},
                    "maxNodes": gpus,
                }
            ],
            "resourceFlavors": [{"name": "a100"}],
            "clusterQueues": [
                {
                    "name": "gpus",
                    "resourceGroups": [
                        {
                            "coveredResources": [GPU],
                            "flavors": [
                                {"name": "a100", "resources": [{"name": GPU, "nominalQuota": gpus}]}
                            ],
                        }
                    ],
                }
            ],
            "localQueues": [{"namespace": "default", "name": "default", "clusterQueue": "gpus"}],
        }
    )


def _pods(n: int, base: dict[str, Any], seconds: int = 60) -> list[dict[str, Any]]:
    out = []
    for i in range(n):
        doc = copy.deepcopy(base)
        doc["metadata"]["name"] = f"gpu-pod-{i}"
        doc["metadata"]["annotations"] = {
            "muster.dev/submit-at": f"{i}s",
            "muster.dev/runtime-seconds": str(seconds),
        }
        out.append(doc)
    return out


def test_s9_fifth_gpu_in_the_namespace_waits_naming_the_quota() -> None:
    pc, pod, quota = docs("gpu-operator/priority-and-quota.yaml")
    m = manifests.read([pc, quota, *_pods(5, pod)])
    assert m.namespace_quotas[0].hard == {GPU: 4}
    harness = run(gpu_cluster(8), m, m.submissions())
    t = Timeline().fold(harness.log.envelopes)
    assert t.peaks[GPU] == 4  # 8 GPUs in the cluster, 4 allowed to the namespace
    waiting = events_of(harness, qev.WorkloadPending, "gpu-pod-4")
    assert waiting[0].reason == "NamespaceQuotaExceeded"
    assert waiting[0].message == (
        "exceeded quota: gpu-quota, requested: nvidia.com/gpu=1, used: nvidia.com/gpu=4, "
        "limited: nvidia.com/gpu=4"
    )
    # It runs once one of the first four finishes.
    fifth = t.intervals["default/gpu-pod-4"]
    first_end = min(t.intervals[f"default/gpu-pod-{i}"][0][1] for i in range(4))  # type: ignore[type-var]
    assert fifth[0][0] == first_end


def test_s9_with_reject_enforcement_the_fifth_is_refused() -> None:
    pc, pod, quota = docs("gpu-operator/priority-and-quota.yaml")
    quota = copy.deepcopy(quota)
    quota["metadata"]["annotations"] = {"muster.dev/enforcement": "Reject"}
    m = manifests.read([pc, quota, *_pods(5, pod)])
    harness = run(gpu_cluster(8), m, m.submissions())
    rejected = events_of(harness, qev.WorkloadRejected, "gpu-pod-4")
    assert len(rejected) == 1 and "exceeded quota: gpu-quota" in rejected[0].message
    assert not events_of(harness, qev.QuotaReserved, "gpu-pod-4")


# -- S10: fairness against volume and priority ----------------------------------------------


def _tenant_jobs(ns: str, n: int, *, at: float, priority: int, first_seconds: int) -> list[Any]:
    return [
        (
            at,
            parse.workload(
                {
                    "name": f"{ns}-{i}",
                    "namespace": ns,
                    "queueName": "jobs",
                    "priority": priority,
                    "podSets": [{"count": 1, "requests": {GPU: 1}}],
                    "runtime": {"durationSeconds": first_seconds + 7 * i},
                }
            ),
        )
        for i in range(n)
    ]


def _fairness_cluster(fair: dict[str, Any]) -> ClusterSpec:
    doc = {
        "name": "gpu",
        "region": "us-central1",
        "zones": ["us-central1-a"],
        "nodePools": [
            {"name": "a100", "machineType": "a2", "allocatable": {GPU: 1}, "maxNodes": 16}
        ],
        "resourceFlavors": [{"name": "a100"}],
        **fair,
    }
    return parse.cluster(doc)


def _fairness_run(cluster: ClusterSpec) -> Timeline:
    subs = _tenant_jobs("team-a", 100, at=0.0, priority=1_000_000, first_seconds=30)
    subs += _tenant_jobs("team-b", 10, at=60.0, priority=0, first_seconds=600)
    harness = build(cluster, [(at, wl.name, wl) for at, wl in subs])
    harness.run()
    return Timeline().fold(harness.log.envelopes)


def _quota(n: int) -> list[dict[str, Any]]:
    return [
        {
            "coveredResources": [GPU],
            "flavors": [{"name": "a100", "resources": [{"name": GPU, "nominalQuota": n}]}],
        }
    ]


def test_s10_tenants_in_one_queue_share_by_usage_not_priority_or_volume() -> None:
    cluster = _fairness_cluster(
        {
            "clusterQueues": [
                {
                    "name": "shared",
                    "resourceGroups": _quota(16),
                    "admissionScope": {"admissionMode": "UsageBasedAdmissionFairSharing"},
                }
            ],
            "localQueues": [
                {"namespace": "team-a", "name": "jobs", "clusterQueue": "shared"},
                {"namespace": "team-b", "name": "jobs", "clusterQueue": "shared"},
            ],
        }
    )
    _assert_b_reaches_half(_fairness_run(cluster))


def test_s10_queues_in_a_cohort_with_fair_sharing() -> None:
    cluster = _fairness_cluster(
        {
            "fairSharing": {"enable": True},
            "clusterQueues": [
                {"name": "team-a", "cohort": "all", "resourceGroups": _quota(8)},
                {"name": "team-b", "cohort": "all", "resourceGroups": _quota(8)},
            ],
            "localQueues": [
                {"namespace": "team-a", "name": "jobs", "clusterQueue": "team-a"},
                {"namespace": "team-b", "name": "jobs", "clusterQueue": "team-b"},
            ],
        }
    )
    _assert_b_reaches_half(_fairness_run(cluster))


def _assert_b_reaches_half(t: Timeline) -> None:
    assert t.peaks[GPU] == 16
    before_b = [s for at, s in t.samples if at < 60.0]
    assert max(s.get("team-a", {}).get(GPU, 0) for s in before_b) == 16  # A alone: all 16
    b_held = [(at, s.get("team-b", {}).get(GPU, 0)) for at, s in t.samples if at >= 60.0]
    reached = [at for at, n in b_held if n >= 8]
    assert reached, "team-b never got its fair half"
    # ... and got it as A's jobs finished (A's jobs last 30 s + 7 s per index), not later
    # than the eight A jobs running at 60 s have all ended.
    assert reached[0] <= 30 + 7 * 23
    # B keeps its half while it has work waiting: A (higher priority, more work) never
    # takes more than the other half until B's last job got its GPU.
    last_b = max(start for i in range(10) for start, _ in t.intervals[f"team-b/team-b-{i}"])
    a_after = [s.get("team-a", {}).get(GPU, 0) for at, s in t.samples if reached[0] <= at < last_b]
    assert a_after and max(a_after) <= 8
