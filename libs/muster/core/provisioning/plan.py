"""Planning a request: which pool serves each pod set, and which one zone fits all of it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from muster.core.events import provisioning as pev
from muster.core.model import matching
from muster.core.model.cluster import ClusterSpec, NodePool
from muster.core.model.workload import PodSet, WorkloadSpec

ZONE_LABEL = "topology.kubernetes.io/zone"
MAX_NODES_PER_REQUEST = 1000


class Unplannable(ValueError):
    """The request can never be provisioned by this cloud (a permanent failure)."""


def pods_per_node(pool: NodePool, requests: Mapping[str, int]) -> int:
    fits = [pool.allocatable.get(r, 0) // q for r, q in requests.items() if q > 0]
    return min(fits) if fits else 1


def pool_for(cloud: ClusterSpec, ps: PodSet, selector: Mapping[str, str]) -> NodePool:
    """The first pool (in the cluster description's order) whose nodes can take the pod set."""
    wanted = {k: v for k, v in selector.items() if k != ZONE_LABEL}
    for pool in cloud.node_pools:
        labels = pool.node_labels(zone="")
        if not matching.selects(wanted, {**labels, ZONE_LABEL: ""}):
            continue
        if not matching.tolerates_all(ps.tolerations, pool.taints):
            continue
        if pods_per_node(pool, ps.requests) >= 1:
            return pool
    raise Unplannable(
        f"no node pool can run pod set {ps.name}: none matches node selector "
        f"{dict(sorted(selector.items()))} with room for one pod"
    )


def plan(
    cloud: ClusterSpec, spec: WorkloadSpec, selectors: Mapping[str, Mapping[str, str]]
) -> tuple[pev.PodSetNodes, ...]:
    out = []
    for ps in spec.pod_sets:
        pool = pool_for(cloud, ps, selectors.get(ps.name, ps.node_selector))
        out.append(
            pev.PodSetNodes(
                pod_set=ps.name,
                pods=ps.count,
                pool=pool.name,
                per_node=pods_per_node(pool, ps.requests),
            )
        )
    total = sum(p.nodes for p in out)
    if total > MAX_NODES_PER_REQUEST:
        raise Unplannable(
            f"request needs {total} nodes; at most {MAX_NODES_PER_REQUEST} per request"
        )
    _check_servable(cloud, tuple(out))
    return tuple(out)


def _check_servable(cloud: ClusterSpec, pod_sets: tuple[pev.PodSetNodes, ...]) -> None:
    """Refuse at once what this cloud can never serve, rather than wait forever."""
    need: dict[str, int] = {}
    for p in pod_sets:
        need[p.pool] = need.get(p.pool, 0) + p.nodes
    zones = set(cloud.zones)
    for name, count in need.items():
        pool = cloud.pool(name)
        assert pool is not None
        if count > pool.max_nodes:
            raise Unplannable(f"request needs {count} nodes of pool {name}; its maxNodes is "
                              f"{pool.max_nodes}")
        zones &= set(pool.zones_or(cloud.zones))
    if not zones:
        raise Unplannable(f"pools {', '.join(sorted(need))} share no zone: the request's nodes "
                          "must all come up in one zone")


@dataclass(frozen=True, slots=True)
class ZoneShortage:
    reason: str  # NotProvisioned | QuotaExceeded
    message: str


def zones_for(
    cloud: ClusterSpec, spec: WorkloadSpec, selectors: Mapping[str, Mapping[str, str]]
) -> list[str]:
    pinned = {sel[ZONE_LABEL] for sel in selectors.values() if ZONE_LABEL in sel}
    if not pinned:
        pinned = {
            ps.node_selector[ZONE_LABEL] for ps in spec.pod_sets if ZONE_LABEL in ps.node_selector
        }
    return [z for z in cloud.zones if not pinned or z in pinned]


def make_nodes(
    cloud: ClusterSpec, request_id: str, zone: str, pod_sets: tuple[pev.PodSetNodes, ...]
) -> tuple[pev.NodeSpec, ...]:
    nodes: list[pev.NodeSpec] = []
    for ps in pod_sets:
        pool = cloud.pool(ps.pool)
        assert pool is not None
        for i in range(ps.nodes):
            # Dots cannot occur in the parts (DNS labels), so names never collide.
            name = f"{pool.name}.{zone}.{request_id}.{ps.pod_set}.{i}"
            nodes.append(
                pev.NodeSpec(
                    name=name,
                    pool=pool.name,
                    zone=zone,
                    machine_type=pool.machine_type,
                    allocatable=dict(pool.allocatable),
                    labels={**pool.node_labels(zone), "kubernetes.io/hostname": name},
                )
            )
    return tuple(nodes)


def assignments(
    pod_sets: tuple[pev.PodSetNodes, ...], nodes: tuple[pev.NodeSpec, ...]
) -> dict[str, str]:
    """Pods ``<pod set>-<i>``, filled onto the request's nodes ``per_node`` at a time."""
    out: dict[str, str] = {}
    offset = 0
    for ps in pod_sets:
        for i in range(ps.pods):
            out[f"{ps.pod_set}-{i}"] = nodes[offset + i // ps.per_node].name
        offset += ps.nodes
    return out
