"""``get nodes`` and ``report`` as intake folds them from a harness-built log: node rows
(pool, zone, state, GPUs used of each model, shared slices, topology) and accounting
(submit/start/end, wait, run time, GPU-hours; totals per namespace and ClusterQueue)."""

from __future__ import annotations

from typing import Any

import pytest

from muster.core.model import parse
from muster.core.model.fields import InvalidInput
from muster.core.model.times import parse_instant, rfc3339
from muster.core.sim.figures import figures
from muster.core.sim.harness import Harness, build
from muster.core.views import accounting
from muster.core.views.nodes import node_object
from muster.core.views.workloads import WorkloadsState, WorkloadsView
from tests.unit.harness_inputs import GPU, gpu_job, gpu_node_cluster

HOUR = 3600.0


def _intake(h: Harness) -> WorkloadsState:
    view = WorkloadsView()
    state = view.initial()
    for env in h.log.envelopes:
        state = view.evolve(state, env)
    return state


def _nodes(state: WorkloadsState) -> dict[str, dict[str, Any]]:
    q = state.queue
    return {n: node_object(r, q.book, q.workloads, q.book.levels) for n, r in state.nodes.items()}


def _hours_run() -> Harness:
    """a: 2 GPUs for 1 h from 0; b: 2 GPUs for 1 h, waits until a ends (1 h); c (namespace
    b): 1 GPU for 1 h from 2 h. One node of 2 GPUs, a ClusterQueue of 2."""
    cluster = gpu_node_cluster("acct", nodes=1, gpus=2, nominal=2, namespaces=("a", "b"))
    jobs = [
        gpu_job("a", 0, 1, 2, HOUR, namespace="a"),
        gpu_job("b", 0, 1, 2, HOUR, namespace="b"),
        gpu_job("c", 2 * HOUR, 1, 1, HOUR, namespace="b"),
    ]
    h = build(parse.cluster(cluster), jobs)
    h.run()
    return h


def test_report_per_workload_as_sacct_shows_it() -> None:
    """Slurm sacct: Submit, Start, End, wait (Start - Submit), Elapsed; GPU-hours as
    sreport's TRES usage (GPUs x hours), which Kueue users ask for (kueue.md §4, item 8)."""
    usage = accounting.fold_all(_hours_run().log.envelopes)
    found = accounting.report(usage.values(), now=10 * HOUR)
    rows = {r["name"]: r for r in found["workloads"]}
    assert [r["name"] for r in found["workloads"]] == ["a", "b", "c"]  # submit order
    assert (rows["a"]["waitSeconds"], rows["a"]["runSeconds"], rows["a"]["gpuHours"]) == (
        0.0,
        HOUR,
        2.0,
    )
    assert rows["b"]["waitSeconds"] == HOUR and rows["b"]["gpuHours"] == 2.0
    assert rows["b"]["startTime"] == HOUR and rows["b"]["endTime"] == 2 * HOUR
    assert rows["c"]["gpuHours"] == 1.0 and rows["c"]["status"] == "Succeeded"
    assert rows["c"]["clusterQueue"] == "cq" and rows["c"]["queueName"] == "q"
    by_ns = {t["name"]: t for t in found["namespaces"]}
    assert (by_ns["a"]["workloads"], by_ns["a"]["gpuHours"]) == (1, 2.0)
    assert (by_ns["b"]["workloads"], by_ns["b"]["gpuHours"], by_ns["b"]["finished"]) == (2, 3.0, 2)
    assert by_ns["b"]["meanWaitSeconds"] == HOUR / 2
    assert found["clusterQueues"] == [
        {
            "name": "cq",
            "workloads": 3,
            "finished": 3,
            "meanWaitSeconds": HOUR / 3,
            "runSeconds": 3 * HOUR,
            "gpuHours": 5.0,
        }
    ]


def test_report_over_a_range_counts_only_time_inside_it() -> None:
    """sacct -S/-E with --truncate: the workloads running in the window, their time
    clipped to it; c, submitted after the window, is left out."""
    usage = accounting.fold_all(_hours_run().log.envelopes)
    found = accounting.report(usage.values(), now=10 * HOUR, since=HOUR / 2, until=1.5 * HOUR)
    rows = {r["name"]: r for r in found["workloads"]}
    assert set(rows) == {"a", "b"}
    assert (rows["a"]["runSeconds"], rows["a"]["gpuHours"]) == (HOUR / 2, 1.0)
    assert (rows["b"]["runSeconds"], rows["b"]["gpuHours"]) == (HOUR / 2, 1.0)
    assert rows["b"]["waitSeconds"] == HOUR  # the whole wait: a workload's own figure
    tenant = accounting.report(usage.values(), now=10 * HOUR, namespaces=frozenset({"b"}))
    assert {r["name"] for r in tenant["workloads"]} == {"b", "c"}
    assert [t["name"] for t in tenant["namespaces"]] == ["b"]


def test_a_running_workload_is_charged_up_to_now_and_an_evicted_one_per_attempt() -> None:
    """SEMANTICS.md §3 and kueue.md §1.2: quota is held from QuotaReserved until the
    workload ends or is evicted; a preempted attempt's time counts (SEMANTICS.md §4), the
    wait before the next does not."""
    cluster = gpu_node_cluster(
        "pre",
        nodes=1,
        gpus=2,
        nominal=2,
        preemption={"withinClusterQueue": "LowerPriority"},
    )
    jobs = [
        gpu_job("low", 0, 1, 2, 2 * HOUR, priority=0),
        gpu_job("high", HOUR, 1, 2, HOUR, priority=10),
    ]
    h = build(parse.cluster(cluster), jobs)
    h.run(until=1.5 * HOUR)
    usage = accounting.fold_all(h.log.envelopes)
    rows = {r["name"]: r for r in accounting.report(usage.values(), now=1.5 * HOUR)["workloads"]}
    assert rows["low"]["status"] == "Pending" and rows["low"]["endTime"] is None
    assert rows["low"]["gpuHours"] == pytest.approx(2.0, abs=0.01)  # its first hour
    assert rows["high"]["status"] == "Admitted"
    assert rows["high"]["gpuHours"] == pytest.approx(1.0, abs=0.01)  # 2 GPUs, half an hour


def test_existing_node_rows_show_gpus_in_use_and_topology() -> None:
    """sinfo / kubectl get nodes: a node's state and what is allocated on it."""
    cluster = gpu_node_cluster("rows", nodes=2, gpus=4, nominal=8)
    cluster["nodes"][0]["labels"] = {"topology.example/rack": "r1"}
    cluster["topology"] = {"levels": ["topology.example/rack", "kubernetes.io/hostname"]}
    h = build(parse.cluster(cluster), [gpu_job("j", 0, 1, 3, HOUR)])
    h.run(until=HOUR / 2)
    nodes = _nodes(_intake(h))
    assert sorted(nodes) == ["n-0", "n-1"]
    used = {n: o["status"]["accelerators"] for n, o in nodes.items()}
    assert sorted(a[0]["used"] for a in used.values()) == [0, 3]
    assert all(a == [{"model": GPU, "used": a[0]["used"], "total": 4}] for a in used.values())
    assert all(o["status"]["state"] == "Ready" for o in nodes.values())
    assert nodes["n-0"]["status"]["topology"] == {"topology.example/rack": "r1"}


def test_shared_gpu_slices_are_counted_per_device() -> None:
    """peers.md §3.2, HAMi sharing: pods sharing a device (nvidia.com/gpucores below 100)
    are slices of it."""
    cluster = gpu_node_cluster("hami", nodes=1, gpus=2, nominal=4)
    cluster["nodes"][0]["gpus"] = {"count": 2, "model": "NVIDIA-A100", "memory": "80Gi"}
    cores, memory = "nvidia.com/gpucores", "nvidia.com/gpumem"
    group = cluster["clusterQueues"][0]["resourceGroups"][0]
    for r in (cores, memory):
        group["coveredResources"].append(r)
        group["flavors"][0]["resources"].append({"name": r, "nominalQuota": 10**6})
    shared = {GPU: 1, cores: 30, memory: 10000}
    jobs = [gpu_job("s", 0, 3, 1, HOUR, requests=shared)]
    h = build(parse.cluster(cluster), jobs)
    h.run(until=HOUR / 2)
    node = _nodes(_intake(h))["n"]
    assert node["status"]["sharedSlices"]["pods"] == 3
    assert node["status"]["accelerators"][0]["model"] == "NVIDIA-A100"
    assert node["status"]["accelerators"][0]["total"] == 2


def test_provisioned_nodes_go_from_provisioning_to_ready_to_gone() -> None:
    """peers.md §4.3 and SEMANTICS.md §6, GKE DWS: a request's nodes are created for it
    (Provisioning), all Ready at once, and removed after; never reused."""
    doc = {
        "name": "dws",
        "zones": ["z1"],
        "nodePools": [
            {
                "name": "pool",
                "machineType": "a2",
                "allocatable": {GPU: 8},
                "labels": {"cloud.google.com/gke-accelerator": "nvidia-tesla-a100"},
                "provisioningDelaySeconds": 60,
            }
        ],
        "resourceFlavors": [{"name": "gpu"}],
        "clusterQueues": [
            {
                "name": "cq",
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
        "localQueues": [{"namespace": "team", "name": "q", "clusterQueue": "cq"}],
    }
    h = build(parse.cluster(doc), [gpu_job("j", 0, 1, 8, HOUR)])
    h.run(until=30)
    (booting,) = _nodes(_intake(h)).values()
    assert booting["status"]["state"] == "Provisioning"
    assert booting["status"]["since"] == rfc3339(0.0)  # RFC 3339, as every time shown
    assert (booting["spec"]["pool"], booting["spec"]["zone"]) == ("pool", "z1")
    h.run(until=HOUR / 2)
    (ready,) = _nodes(_intake(h)).values()
    assert ready["status"]["state"] == "Ready"
    assert ready["status"]["accelerators"] == [
        {"model": "nvidia-tesla-a100", "used": 8, "total": 8}
    ]
    h.run()
    assert _nodes(_intake(h)) == {}
    # Nodes come and go with requests: no fixed capacity to state a utilisation against.
    assert figures(h.log.envelopes)["utilisation"] is None


def test_instants_as_users_write_them() -> None:
    now = 1_800_000_000.0
    assert parse_instant("-5m", now, "since") == now - 300
    assert parse_instant("2h", now, "since") == now - 7200  # `--since 2h`: no "-" to escape
    assert parse_instant("2027-01-15T08:00:00Z", now, "since") == 1_800_000_000.0
    assert parse_instant("1800000000", now, "since") == now
    assert rfc3339(now) == "2027-01-15T08:00:00Z"
    with pytest.raises(InvalidInput, match="since: 'yesterday' is not a time"):
        parse_instant("yesterday", now, "since")
