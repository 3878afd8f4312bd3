"""Shared by the core tests: workload documents as harness submissions (id = name)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from muster.core.model import parse
from muster.core.sim.harness import Submission


def submissions(workloads: Iterable[tuple[float, dict[str, Any]]]) -> list[Submission]:
    return [(float(at), doc["name"], parse.workload(doc)) for at, doc in workloads]


GPU = "nvidia.com/gpu"


def gpu_node_cluster(
    name: str,
    *,
    nodes: int,
    gpus: int,
    nominal: int,
    namespaces: Iterable[str] = ("team",),
    **queue: Any,
) -> dict[str, Any]:
    """A cluster document: ``nodes`` existing nodes of ``gpus`` GPUs, one flavor, one
    ClusterQueue ``cq`` of ``nominal`` GPUs (``queue``: more of its fields) and a LocalQueue
    ``q`` in each namespace."""
    return {
        "name": name,
        "zones": ["z"],
        "resourceFlavors": [{"name": "gpu"}],
        "nodes": [{"name": "n", "count": nodes, "allocatable": {GPU: gpus}}],
        "clusterQueues": [
            {
                "name": "cq",
                "resourceGroups": [
                    {
                        "coveredResources": [GPU],
                        "flavors": [
                            {"name": "gpu", "resources": [{"name": GPU, "nominalQuota": nominal}]}
                        ],
                    }
                ],
                **queue,
            }
        ],
        "localQueues": [{"namespace": ns, "name": "q", "clusterQueue": "cq"} for ns in namespaces],
    }


def gpu_job(
    name: str,
    at: float,
    pods: int,
    gpus: int,
    seconds: float,
    *,
    namespace: str = "team",
    priority: int = 0,
    **pod_set: Any,
) -> Submission:
    """A submission of one pod set ``w`` of ``pods`` pods of ``gpus`` GPUs, to LocalQueue ``q``."""
    doc = {
        "name": name,
        "namespace": namespace,
        "queueName": "q",
        "priority": priority,
        "podSets": [{"name": "w", "count": pods, "requests": {GPU: gpus}, **pod_set}],
        "runtime": {"durationSeconds": seconds},
    }
    return (float(at), name, parse.workload(doc))
