"""Scenarios S3 (pool exclusivity), S5, S6, S7 and S8 on existing nodes, in virtual time.

The manifests are the seed documents (examples/scenarios/); the clusters they run on
are declared here (``nodes`` and ``topology`` of the cluster description). What must
hold is checked on the decision log: where each pod ran and who held what, when.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import yaml

from muster.core.events import Envelope
from muster.core.events import node as nev
from muster.core.events import queue as qev
from muster.core.model import manifests, parse
from muster.core.model.cluster import ClusterSpec
from muster.core.sim.harness import Harness, build

SCENARIOS = Path(__file__).resolve().parents[2] / "examples" / "scenarios"
TPU = "google.com/tpu"
POOL = "cloud.google.com/gke-nodepool"


def docs(*names: str) -> list[Any]:
    out: list[Any] = []
    for name in names:
        out += list(yaml.safe_load_all((SCENARIOS / name).read_text()))
    return out


def run(
    cluster: ClusterSpec, m: manifests.Manifests, until: float | None = None, **inputs: Any
) -> Harness:
    spec = manifests.merge(cluster, m)
    harness = build(spec, [(at, wl.name, wl) for at, wl in m.submissions()], **inputs)
    harness.run(until)
    return harness


def of(harness: Harness, kind: type) -> list[Any]:
    return [e.event for e in harness.log.envelopes if isinstance(e.event, kind)]


def timed(harness: Harness, kind: type) -> list[tuple[float, Any]]:
    return [(e.occurred_at, e.event) for e in harness.log.envelopes if isinstance(e.event, kind)]


def outcomes(harness: Harness) -> dict[str, str]:
    return {e.workload_id: e.outcome for e in of(harness, qev.WorkloadFinished)}


def held_nodes(log: Iterable[Envelope]) -> list[tuple[float, dict[str, set[str]]]]:
    """After each change: workload -> the nodes its reserved placement holds."""
    held: dict[str, set[str]] = {}
    out = []
    for env in log:
        ev = env.event
        if isinstance(ev, qev.QuotaReserved) and ev.placement is not None:
            held[ev.workload_id] = set(ev.placement.nodes.values())
        elif isinstance(ev, qev.WorkloadEvicted | qev.WorkloadFinished | qev.WorkloadCancelled):
            held.pop(ev.workload_id, None)
        else:
            continue
        out.append((env.occurred_at, {w: set(n) for w, n in held.items()}))
    return out


def one_queue(name: str, flavor: str, quotas: dict[str, int]) -> dict[str, Any]:
    """The queue part of a cluster description: a flavor, a ClusterQueue ``name`` with
    ``quotas`` of it, and the LocalQueue default/default that feeds it."""
    return {
        "resourceFlavors": [{"name": flavor}],
        "clusterQueues": [
            {
                "name": name,
                "resourceGroups": [
                    {
                        "coveredResources": list(quotas),
                        "flavors": [
                            {
                                "name": flavor,
                                "resources": [
                                    {"name": r, "nominalQuota": q} for r, q in quotas.items()
                                ],
                            }
                        ],
                    }
                ],
            }
        ],
        "localQueues": [{"namespace": "default", "name": "default", "clusterQueue": name}],
    }


# -- S3: each slice owns a whole node pool -----------------------------------------------


def tpu_pools(pools: int = 3) -> ClusterSpec:
    labels = {
        "cloud.google.com/gke-tpu-accelerator": "tpu-v5-lite-podslice",
        "cloud.google.com/gke-tpu-topology": "2x4",
    }
    return parse.cluster(
        {
            "name": "multislice",
            "zones": ["us-west4-a"],
            "nodes": [
                {
                    "name": f"pool{p}",
                    "count": 2,
                    "allocatable": {TPU: 4, "cpu": 24},
                    "labels": {**labels, POOL: f"pool{p}"},
                }
                for p in range(pools)
            ],
        }
    )


def pool_of(node: str) -> str:
    return node.rsplit("-", 1)[0]


def test_s3_every_slice_owns_one_whole_pool_and_pools_are_never_shared() -> None:
    m = manifests.read(docs("multislice/kueue.yaml", "multislice/jobsets.yaml"))
    harness = run(tpu_pools(), m)
    assert outcomes(harness) == {
        "multislice-1slice": "Succeeded",
        "multislice-2slice": "Succeeded",
        "multislice-3slice": "Succeeded",
    }
    reserved = {e.workload_id: e for e in of(harness, qev.QuotaReserved)}
    for wid, ev in reserved.items():
        assert ev.placement is not None
        slices: dict[str, set[str]] = {}
        for pod, node in ev.placement.nodes.items():
            index = int(pod.rsplit("-", 1)[1])
            slices.setdefault(str(index // 2), set()).add(pool_of(node))
        # one pool per slice (both hosts of it), a different pool for every slice
        assert all(len(p) == 1 for p in slices.values()), wid
        pools = [next(iter(p)) for p in slices.values()]
        assert len(set(pools)) == len(pools), wid
        assert len(ev.placement.exclusive) == len(pools)
    for _, held in held_nodes(harness.log.envelopes):
        seen: dict[str, str] = {}
        for wid, nodes in held.items():
            for pool in {pool_of(n) for n in nodes}:
                assert seen.setdefault(pool, wid) == wid, f"{pool} shared at once"
        assert sum(len(n) for n in held.values()) * 4 <= 24
    # the 1- and 2-slice JobSets together, then the 3-slice one alone (60 s each)
    finished = dict((e.workload_id, t) for t, e in timed(harness, qev.WorkloadFinished))
    assert finished["multislice-1slice"] == finished["multislice-2slice"] == 60.0
    assert finished["multislice-3slice"] == 120.0


def test_s3_a_pool_with_another_jobs_pod_is_not_taken_as_a_slice() -> None:
    """A loose pod on pool0 leaves two whole pools: the 3-slice JobSet waits for it."""
    queues = docs("multislice/kueue.yaml")
    quota = queues[1]["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]
    quota["nominalQuota"] = 25  # room in quota for both: only placement keeps it waiting
    m = manifests.read([*queues, *docs("multislice/jobsets.yaml")])
    loose = parse.workload(
        {
            "name": "loose",
            "queueName": "multislice-queue",
            "podSets": [{"count": 1, "requests": {TPU: 1}}],
            "runtime": {"durationSeconds": 300},
        }
    )
    three = [wl for _, wl in m.submissions() if wl.name == "multislice-3slice"]
    spec = manifests.merge(tpu_pools(), m)
    harness = build(spec, [(0.0, "loose", loose), (1.0, three[0].name, three[0])])
    harness.run()
    started = dict((e.workload_id, t) for t, e in timed(harness, qev.QuotaReserved))
    assert started["multislice-3slice"] == 300.0  # only once the loose pod is gone
    waits = [e for e in of(harness, qev.WorkloadPending) if e.workload_id == "multislice-3slice"]
    assert waits and waits[0].reason == "TopologyPlacementFailed"
    assert "no whole cloud.google.com/gke-nodepool" in waits[0].message


# -- S7: GPU sharing ---------------------------------------------------------------------

SHARED = ("metax-tech.com/sgpu", "metax-tech.com/vcore", "metax-tech.com/vmemory")


def sgpu_cluster() -> ClusterSpec:
    return parse.cluster(
        {
            "name": "sgpu",
            "zones": ["z"],
            "nodes": [
                {
                    "name": "sgpu-node",
                    "allocatable": {"metax-tech.com/sgpu": 16, "cpu": 32},
                    "gpus": {"count": 1, "model": "MXC500", "memory": "64Gi", "split": 16},
                }
            ],
            **one_queue("shared", "sgpu", dict(zip(SHARED, (16, 1600, 1024), strict=True))),
        }
    )


def sample_pod(name: str, vcore: int, vmemory: int, at: int = 0) -> dict[str, Any]:
    (pod,) = docs("hami/sample-pod.yaml")
    pod["metadata"] = {
        "name": name,
        "annotations": {"muster.dev/submit-at": f"{at}s", "muster.dev/runtime-seconds": "100"},
    }
    limits = pod["spec"]["containers"][0]["resources"]["limits"]
    limits["metax-tech.com/vcore"] = vcore
    limits["metax-tech.com/vmemory"] = vmemory
    return pod


def shares_over_time(harness: Harness) -> list[tuple[int, int]]:
    """(cores, memory MiB) in use on the one GPU after every change."""
    held: dict[str, tuple[int, int]] = {}
    out = []
    for env in harness.log.envelopes:
        ev = env.event
        if isinstance(ev, qev.QuotaReserved) and ev.placement is not None:
            shares = [s for pod in ev.placement.devices.values() for s in pod]
            held[ev.workload_id] = (
                sum(s.cores for s in shares),
                sum(s.memory_mib for s in shares),
            )
        elif isinstance(ev, qev.WorkloadFinished | qev.WorkloadEvicted):
            held.pop(ev.workload_id, None)
        else:
            continue
        out.append((sum(c for c, _ in held.values()), sum(m for _, m in held.values())))
    return out


def test_s7_the_seed_pod_runs_on_a_share_of_the_gpu() -> None:
    m = manifests.read(docs("hami/sample-pod.yaml"))
    harness = run(sgpu_cluster(), m)
    (admitted,) = of(harness, qev.WorkloadAdmitted)
    assert admitted.placements == {"main-0": "sgpu-node"}
    (share,) = admitted.devices["main-0"]
    assert (share.uuid, share.cores, share.memory_mib) == ("GPU-sgpu-node-0", 60, 4096)


def test_s7_two_60_percent_pods_cannot_share_one_gpu() -> None:
    m = manifests.read([sample_pod("a", 60, 4), sample_pod("b", 60, 4)])
    harness = run(sgpu_cluster(), m)
    starts = dict((e.workload_id, t) for t, e in timed(harness, qev.QuotaReserved))
    assert starts == {"a": 0.0, "b": 100.0}  # b waits until a is done
    waits = [e for e in of(harness, qev.WorkloadPending) if e.workload_id == "b"]
    # before the node registered, then because a holds 60 % of the GPU's cores
    assert [w.reason for w in waits] == ["WaitingForNodes", "Unschedulable"]
    assert waits[1].message == (
        "couldn't place the gang: pod main-0 of pod set main: 0/1 nodes are available: "
        "1 CardInsufficientCore"
    )
    assert max(c for c, _ in shares_over_time(harness)) == 60


def test_s7_a_60_and_a_40_percent_pod_share_it() -> None:
    m = manifests.read([sample_pod("a", 60, 4), sample_pod("b", 40, 4)])
    harness = run(sgpu_cluster(), m)
    starts = dict((e.workload_id, t) for t, e in timed(harness, qev.QuotaReserved))
    assert starts == {"a": 0.0, "b": 0.0}
    assert max(c for c, _ in shares_over_time(harness)) == 100


def test_s7_vmemory_sums_never_exceed_the_gpu_memory() -> None:
    m = manifests.read(
        [sample_pod(f"p{i}", 10, mem, at=i) for i, mem in enumerate((30, 20, 16, 15, 4))]
    )
    harness = run(sgpu_cluster(), m)
    peaks = shares_over_time(harness)
    assert max(mem for _, mem in peaks) <= 64 * 1024
    starts = dict((e.workload_id, t) for t, e in timed(harness, qev.QuotaReserved))
    assert starts["p0"] == 0 and starts["p1"] == 1 and starts["p4"] == 4  # 30+20+4 fit
    assert starts["p2"] >= 100 and starts["p3"] >= 100  # 16 or 15 more would not


# -- S8: GPU model ------------------------------------------------------------------------

MODEL = "feature.node.kubernetes.io/gpu-model.nvidia.com"


def model_cluster() -> ClusterSpec:
    def group(name: str, model: str, count: int) -> dict[str, Any]:
        return {
            "name": name,
            "count": count,
            "allocatable": {"nvidia.com/gpu": 4},
            "labels": {MODEL: model},
            "gpus": {"count": 4, "model": model, "memory": "32Gi"},
        }

    return parse.cluster(
        {
            "name": "models",
            "zones": ["z"],
            "nodes": [group("a100", "A100-SXM4-80GB", 3), group("v100", "Tesla-V100", 1)],
            **one_queue("gpus", "gpu", {"nvidia.com/gpu": 16}),
        }
    )


def test_s8_the_pod_only_ever_lands_on_a_v100_node() -> None:
    (pod,) = docs("gpu-operator/model-affinity-pod.yaml")
    pods = []
    for i in range(6):  # more than the V100 node holds: the rest wait, never go to A100s
        doc = yaml.safe_load(yaml.safe_dump(pod))
        doc["metadata"] = {
            "name": f"gpu-pod-{i}",
            "annotations": {"muster.dev/runtime-seconds": "50"},
        }
        pods.append(doc)
    harness = run(model_cluster(), manifests.read(pods))
    admitted = of(harness, qev.WorkloadAdmitted)
    assert len(admitted) == 6
    assert {n for a in admitted for n in a.placements.values()} == {"v100"}
    starts = sorted(t for t, _ in timed(harness, qev.WorkloadAdmitted))
    assert starts == [0.0] * 4 + [50.0] * 2  # 4 GPUs on the V100 node
    started = of(harness, nev.PodStarted)
    assert {s.node for s in started} == {"v100"}


# -- S5: supernode group -------------------------------------------------------------------


def supernode_cluster() -> ClusterSpec:
    """switchbox-sample1 -> dragonfly-sample1 (8 nodes x 8 GPUs = 64);
    switchbox-sample2 -> two dragonflies of 4 nodes (32 each: cannot hold 64)."""

    def df(name: str, members: list[str]) -> dict[str, Any]:
        return {
            "name": name,
            "kind": "dragonfly",
            "status": "Ready",
            "child": [{"name": m, "kind": "node", "status": "Ready"} for m in members],
        }

    tree = [
        {
            "name": "switchbox-sample1",
            "kind": "switchbox",
            "child": [df("dragonfly-sample1", [f"big-{i}" for i in range(8)])],
        },
        {
            "name": "switchbox-sample2",
            "kind": "switchbox",
            "child": [
                df("dragonfly-sample2", [f"small-{i}" for i in range(4)]),
                df("dragonfly-sample3", [f"small-{i}" for i in range(4, 8)]),
            ],
        },
    ]
    node = {
        "allocatable": {"metax-tech.com/gpu": 8},
        "gpus": {"count": 8, "model": "MXC550", "memory": "64Gi"},
    }
    return parse.cluster(
        {
            "name": "supernode",
            "zones": ["z"],
            "nodes": [{"name": "big", "count": 8, **node}, {"name": "small", "count": 8, **node}],
            "topology": {"hyperNodes": tree},
            **one_queue("mx", "mx", {"metax-tech.com/gpu": 128}),
        }
    )


def supernode_jobs(n: int) -> manifests.Manifests:
    (job,) = docs("volcano/job-supernode.yaml")
    out = []
    for i in range(n):
        doc = yaml.safe_load(yaml.safe_dump(job))
        doc["metadata"] = {
            "name": f"pytorch-demo-{i}",
            "annotations": {"muster.dev/runtime-seconds": "600", "muster.dev/submit-at": f"{i}s"},
        }
        out.append(doc)
    return manifests.read(out)


def test_s5_all_8_pods_start_together_inside_one_64_gpu_group_or_wait() -> None:
    harness = run(supernode_cluster(), supernode_jobs(2))
    admitted = {a.workload_id: a for a in of(harness, qev.WorkloadAdmitted)}
    assert set(admitted) == {"pytorch-demo-0", "pytorch-demo-1"}
    for a in admitted.values():
        assert len(a.placements) == 8
        # all in dragonfly-sample1, never across the two smaller dragonflies
        assert {n.split("-")[0] for n in a.placements.values()} == {"big"}
    starts = {w: t for t, e in timed(harness, qev.WorkloadAdmitted) for w in [e.workload_id]}
    assert starts == {"pytorch-demo-0": 0.0, "pytorch-demo-1": 600.0}
    # never a pod of the gang on a "small" node, and every pod started at once
    by_time: dict[str, set[float]] = {}
    for t, s in timed(harness, nev.PodStarted):
        assert s.node.startswith("big")
        by_time.setdefault(s.workload_id, set()).add(t)
    assert all(len(ts) == 1 for ts in by_time.values())
    waits = [e for e in of(harness, qev.WorkloadPending) if e.workload_id == "pytorch-demo-1"]
    assert waits[0].reason == "TopologyPlacementFailed" and "dragonfly" in waits[0].message


# -- Volcano partitionPolicy: each partition inside one HyperNode of its tier ------------


def hypernode_cluster(switchboxes: dict[str, dict[str, int]]) -> ClusterSpec:
    """Switchboxes (tier 2) of dragonflies (tier 1) of that many 8-GPU nodes each."""

    def leaf(name: str, nodes: int) -> dict[str, Any]:
        members = [{"name": f"{name}-{i}", "kind": "node"} for i in range(nodes)]
        return {"name": name, "kind": "dragonfly", "child": members}

    tree = [
        {"name": sw, "kind": "switchbox", "child": [leaf(df, n) for df, n in dfs.items()]}
        for sw, dfs in switchboxes.items()
    ]
    node = {
        "allocatable": {"metax-tech.com/gpu": 8},
        "gpus": {"count": 8, "model": "MXC550", "memory": "64Gi"},
    }
    return parse.cluster(
        {
            "name": "hypernodes",
            "zones": ["z"],
            "nodes": [
                {"name": df, "count": n, **node}
                for dfs in switchboxes.values()
                for df, n in dfs.items()
            ],
            "topology": {"hyperNodes": tree},
            **one_queue("mx", "mx", {"metax-tech.com/gpu": 1024}),
        }
    )


def partitioned_job(
    job_tier: int | None = None, mode: str = "hard", min_available: int | None = None
) -> manifests.Manifests:
    """A task of 8 pods x 8 GPUs in 2 partitions of 4, each within one tier-1 HyperNode."""
    spec: dict[str, Any] = {
        "schedulerName": "volcano",
        "tasks": [
            {
                "name": "worker",
                "replicas": 8,
                "partitionPolicy": {
                    "totalPartitions": 2,
                    "partitionSize": 4,
                    "networkTopology": {"mode": "hard", "highestTierAllowed": 1},
                },
                "template": {
                    "spec": {
                        "containers": [
                            {"name": "w", "resources": {"limits": {"metax-tech.com/gpu": 8}}}
                        ]
                    }
                },
            }
        ],
    }
    if job_tier is not None:
        spec["networkTopology"] = {"mode": mode, "highestTierAllowed": job_tier}
    if min_available is not None:
        spec["minAvailable"] = min_available
    doc = {
        "apiVersion": "batch.volcano.sh/v1alpha1",
        "kind": "Job",
        "metadata": {"name": "parted", "annotations": {"muster.dev/runtime-seconds": "60"}},
        "spec": spec,
    }
    return manifests.read([doc])


def partitions(placement: dict[str, str]) -> list[set[str]]:
    """The dragonflies each partition's pods (worker-0..3, worker-4..7) landed in."""
    return [
        {placement[f"worker-{i}"].rsplit("-", 1)[0] for i in p} for p in (range(4), range(4, 8))
    ]


def test_volcano_partitions_each_land_inside_one_tier_1_hypernode() -> None:
    """peers.md §2.7: partitionPolicy {totalPartitions 2, partitionSize 4, tier 1}: the
    task of 8 lands as two groups of 4, each inside one tier-1 HyperNode; the dragonfly of
    3 nodes (which could take part of a group) is never used."""
    cluster = hypernode_cluster({"sw-a": {"df-a": 4, "df-b": 3}, "sw-b": {"df-c": 4}})
    harness = run(cluster, partitioned_job())
    (admitted,) = of(harness, qev.WorkloadAdmitted)
    groups = partitions(dict(admitted.placements))
    assert all(len(g) == 1 for g in groups), groups
    assert sorted(g.pop() for g in groups) == ["df-a", "df-c"]
    assert outcomes(harness) == {"parted": "Succeeded"}


def test_volcano_partitions_wait_rather_than_split_across_hypernodes() -> None:
    """Only one dragonfly holds 4 pods: the second partition has no tier-1 HyperNode,
    so the job waits (Volcano's hard mode keeps it Pending) rather than split it."""
    cluster = hypernode_cluster({"sw-a": {"df-a": 4, "df-b": 2, "df-c": 2}})
    harness = run(cluster, partitioned_job(), until=120.0)
    assert of(harness, qev.WorkloadAdmitted) == []
    waits = [e for e in of(harness, qev.WorkloadPending) if e.workload_id == "parted"]
    assert waits[0].reason == "TopologyPlacementFailed"
    assert "dragonfly domain has room for slice" in waits[0].message


def test_volcano_partitions_stay_inside_the_jobs_own_tier() -> None:
    """The job's networkTopology tier 2 and its partitions' tier 1 together: both groups
    in dragonflies of one switchbox, though one dragonfly of 4 in each switchbox would
    also hold each group alone."""
    cluster = hypernode_cluster(
        {"sw-a": {"df-a": 4, "df-b": 3}, "sw-b": {"df-c": 4, "df-d": 4}, "sw-c": {"df-e": 4}}
    )
    harness = run(cluster, partitioned_job(job_tier=2))
    (admitted,) = of(harness, qev.WorkloadAdmitted)
    groups = partitions(dict(admitted.placements))
    assert all(len(g) == 1 for g in groups), groups
    assert sorted(g.pop() for g in groups) == ["df-c", "df-d"]
    # Without room for both groups in one switchbox, it waits, naming the job's level.
    cluster = hypernode_cluster({"sw-a": {"df-a": 4, "df-b": 3}, "sw-b": {"df-c": 4}})
    harness = run(cluster, partitioned_job(job_tier=2), until=120.0)
    assert of(harness, qev.WorkloadAdmitted) == []
    waits = [e for e in of(harness, qev.WorkloadPending) if e.workload_id == "parted"]
    assert "switchbox domain has room for its 2 slices of 4 pods" in waits[0].message


def test_volcano_partitions_prefer_the_jobs_soft_tier() -> None:
    """peers.md §2.7, soft mode is best effort: both groups in one switchbox when one holds
    them, else each group still whole inside one dragonfly, in different switchboxes."""
    cluster = hypernode_cluster(
        {"sw-a": {"df-a": 4, "df-b": 3}, "sw-b": {"df-c": 4, "df-d": 4}, "sw-c": {"df-e": 4}}
    )
    (admitted,) = of(run(cluster, partitioned_job(job_tier=2, mode="soft")), qev.WorkloadAdmitted)
    assert sorted(g.pop() for g in partitions(dict(admitted.placements))) == ["df-c", "df-d"]
    cluster = hypernode_cluster({"sw-a": {"df-a": 4, "df-b": 3}, "sw-b": {"df-c": 4}})
    (admitted,) = of(run(cluster, partitioned_job(job_tier=2, mode="soft")), qev.WorkloadAdmitted)
    groups = partitions(dict(admitted.placements))
    assert all(len(g) == 1 for g in groups), groups
    assert sorted(g.pop() for g in groups) == ["df-a", "df-c"]


def test_a_partial_gang_of_partitions_is_whole_partitions() -> None:
    """Volcano's minAvailable 4 with partitions of 4 (peers.md §2.4, §2.7: each partition
    all-or-nothing): where only one dragonfly holds 4 pods and another 3, the job starts
    with one whole partition (4 pods), not 7 with a partition cut short."""
    cluster = hypernode_cluster({"sw-a": {"df-a": 4, "df-b": 3}})
    harness = run(cluster, partitioned_job(min_available=4), until=30.0)
    (admitted,) = of(harness, qev.WorkloadAdmitted)
    assert sorted(admitted.placements) == [f"worker-{i}" for i in range(4)]
    assert {n.rsplit("-", 1)[0] for n in admitted.placements.values()} == {"df-a"}


# -- S6: restart after eviction, Failed after maxRetry -------------------------------------


TWO_MX_NODES = {
    "name": "node",
    "count": 2,
    "allocatable": {"metax-tech.com/gpu": 2},
    "gpus": {"count": 2, "model": "MXC500", "memory": "64Gi"},
}


def two_gpu_nodes() -> ClusterSpec:
    return parse.cluster(
        {
            "name": "regular",
            "zones": ["z"],
            "nodes": [TWO_MX_NODES],
            **one_queue("mx", "mx", {"metax-tech.com/gpu": 4}),
        }
    )


def regular_job(seconds: int = 100) -> manifests.Manifests:
    (job,) = docs("volcano/job-regular.yaml")
    job["metadata"]["annotations"] = {"muster.dev/runtime-seconds": str(seconds)}
    return manifests.read([job])


def test_s6_an_evicted_pod_restarts_the_whole_job() -> None:
    harness = run(two_gpu_nodes(), regular_job(), node_losses=[(30.0, "node-0")])
    evicted = of(harness, qev.WorkloadEvicted)
    assert [(e.reason, e.restart) for e in evicted] == [("NodeLost", True)]
    assert "restarting the whole workload (1 of 2)" in evicted[0].message
    # both pods stopped, then the job starts again at once: minAvailable 1, so on the one
    # node that is left, with one pod (Volcano runs a gang once minAvailable pods fit)
    stopped = [s for s in of(harness, nev.PodStopped) if s.workload_id == "job-demo"]
    assert [s.node for s in stopped] == ["node-1"]
    reserved = timed(harness, qev.QuotaReserved)
    assert [t for t, _ in reserved] == [0.0, 30.0]
    assert len(reserved[0][1].placement.nodes) == 2
    assert reserved[1][1].placement.nodes == {"gpu-vectoradd-0": "node-1"}
    assert outcomes(harness) == {"job-demo": "Succeeded"}


def test_s6_after_max_retry_restarts_the_job_fails() -> None:
    losses = [(30.0, "node-0"), (50.0, "node-1"), (70.0, "node-0")]
    harness = run(two_gpu_nodes(), regular_job(), node_losses=losses, agent_restarts=[40.0])
    evicted = of(harness, qev.WorkloadEvicted)
    assert [e.message.rsplit("(", 1)[1] for e in evicted] == ["1 of 2)", "2 of 2)"]
    (finished,) = of(harness, qev.WorkloadFinished)
    assert (finished.outcome, finished.reason) == ("Failed", "MaxRestartsReached")
    assert "restarted 2 times already, maxRestarts 2" in finished.message
    reserved = [t for t, _ in timed(harness, qev.QuotaReserved)]
    assert reserved == [0.0, 30.0, 50.0]  # never again after it failed


def test_a_lost_nodes_workloads_come_back_to_the_queue_as_whole_gangs() -> None:
    """Without a failure policy a gang on a lost node is requeued, without limit, and
    placed again on the nodes that are left."""
    cluster = two_gpu_nodes()
    gang = parse.workload(
        {
            "name": "gang",
            "queueName": "default",
            "podSets": [{"count": 2, "requests": {"metax-tech.com/gpu": 1}}],
            "runtime": {"durationSeconds": 100},
        }
    )
    harness = build(
        manifests.merge(cluster, manifests.read([])),
        [(0.0, "gang", gang)],
        node_losses=[(10.0, "node-0"), (20.0, "node-1")],
        agent_restarts=[50.0],
    )
    harness.run()
    reserved = timed(harness, qev.QuotaReserved)
    # placed, both pods on one node (binpack); lost -> requeued; ...
    assert reserved[0][0] == 0.0
    assert all(len(set(e.placement.nodes.values())) == 1 for _, e in reserved)
    assert [e.reason for e in of(harness, qev.WorkloadEvicted)][:1] == ["NodeLost"]
    assert outcomes(harness) == {"gang": "Succeeded"}


def test_node_figures_show_lost_nodes_and_what_is_free() -> None:
    from muster.core.queueing.figures import figures

    harness = run(two_gpu_nodes(), regular_job(), node_losses=[(30.0, "node-0")], until=60.0)
    state = harness.runners[0].state
    fams = {f.name: dict(f.samples) for f in figures(state)}
    assert fams["muster_nodes"] == {(("state", "ready"),): 1.0, (("state", "lost"),): 1.0}
    # the restarted job runs one pod (minAvailable 1) with 2 GPUs on node-1
    assert fams["muster_node_gpus"] == {(("state", "used"),): 2.0, (("state", "free"),): 0.0}
    assert fams["muster_free_whole_domains"] == {(("level", "node"),): 0.0}


def test_workloads_no_existing_node_could_hold_go_to_the_provisioner() -> None:
    """A mixed cluster: MetaX nodes on premises, an A100 pool in the cloud. A workload
    asking for A100s (which no existing node offers, whatever is free) gets new nodes."""
    cluster = parse.cluster(
        {
            "name": "mixed",
            "zones": ["z"],
            "nodes": [TWO_MX_NODES],
            "nodePools": [
                {"name": "a100", "machineType": "a2", "allocatable": {"nvidia.com/gpu": 8}}
            ],
            **one_queue("q", "any", {"metax-tech.com/gpu": 4, "nvidia.com/gpu": 16}),
        }
    )

    def wl(name: str, resource: str, n: int) -> Any:
        return parse.workload(
            {
                "name": name,
                "queueName": "default",
                "podSets": [{"count": 1, "requests": {resource: n}}],
                "runtime": {"durationSeconds": 10},
            }
        )

    harness = build(
        cluster,
        [
            (0.0, "mx", wl("mx", "metax-tech.com/gpu", 2)),
            (0.0, "nv", wl("nv", "nvidia.com/gpu", 8)),
        ],
    )
    harness.run()
    reserved = {e.workload_id: e for e in of(harness, qev.QuotaReserved)}
    assert reserved["mx"].placement is not None
    assert reserved["nv"].placement is None  # the provisioner made its node
    admitted = {e.workload_id: e for e in of(harness, qev.WorkloadAdmitted)}
    assert admitted["nv"].request_id and not admitted["mx"].request_id
    assert outcomes(harness) == {"mx": "Succeeded", "nv": "Succeeded"}
