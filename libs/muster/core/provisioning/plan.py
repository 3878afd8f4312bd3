"""Planning a request: which pool serves each pod set, and which one zone fits all of it."""

from __future__ import annotations

from collections.abc import Mapping

from muster.core.events import provisioning as pev
from muster.core.model import matching
from muster.core.model.cluster import ClusterSpec, NodePool
from muster.core.model.queues import DWS_CLASS
from muster.core.model.workload import PodSet, Toleration

ZONE_LABEL = "topology.kubernetes.io/zone"
MAX_NODES_PER_REQUEST = 1000


class Unplannable(ValueError):
    """The request can never be provisioned by this cloud (a permanent failure)."""


def pods_per_node(pool: NodePool, requests: Mapping[str, int]) -> int:
    fits = [pool.allocatable.get(r, 0) // q for r, q in requests.items() if q > 0]
    return min(fits) if fits else 1


def pool_for(
    cloud: ClusterSpec,
    ps: PodSet,
    selector: Mapping[str, str],
    injected: tuple[Toleration, ...] = (),
) -> NodePool:
    """The first pool (in the cluster description's order) whose nodes can take the pod set
    (``injected``: the tolerations its flavors add to its pods)."""
    wanted = {k: v for k, v in selector.items() if k != ZONE_LABEL}
    for pool in cloud.node_pools:
        labels = pool.node_labels(zone="")
        if not matching.selects(wanted, {**labels, ZONE_LABEL: ""}):
            continue
        if not matching.tolerates_all((*ps.tolerations, *injected), pool.taints):
            continue
        if pods_per_node(pool, ps.requests) >= 1:
            return pool
    raise Unplannable(
        f"no node pool can run pod set {ps.name}: none matches node selector "
        f"{dict(sorted(selector.items()))} with room for one pod"
    )


def plan(
    cloud: ClusterSpec,
    pod_sets: tuple[PodSet, ...],
    selectors: Mapping[str, Mapping[str, str]],
    counts: Mapping[str, int] | None = None,
    tolerations: Mapping[str, tuple[Toleration, ...]] | None = None,
) -> tuple[tuple[pev.PodSetNodes, ...], tuple[str, ...]]:
    """The pool of each pod set and the zones the request may use, or ``Unplannable``.

    ``counts`` overrides pod set counts admitted partially (Kueue's minCount)."""
    out = []
    for ps in pod_sets:
        pool = pool_for(
            cloud,
            ps,
            selectors.get(ps.name, ps.node_selector),
            (tolerations or {}).get(ps.name, ()),
        )
        out.append(
            pev.PodSetNodes(
                pod_set=ps.name,
                pods=(counts or {}).get(ps.name, ps.count),
                pool=pool.name,
                per_node=pods_per_node(pool, ps.requests),
            )
        )
    total = sum(p.nodes for p in out)
    if total > MAX_NODES_PER_REQUEST:
        raise Unplannable(
            f"request needs {total} nodes; at most {MAX_NODES_PER_REQUEST} per request"
        )
    planned = tuple(out)
    return planned, _check_servable(cloud, pod_sets, selectors, planned)


def _check_servable(
    cloud: ClusterSpec,
    specs: tuple[PodSet, ...],
    selectors: Mapping[str, Mapping[str, str]],
    pod_sets: tuple[pev.PodSetNodes, ...],
) -> tuple[str, ...]:
    """Refuse at once what this cloud can never serve, rather than wait forever."""
    need = nodes_per_pool(pod_sets)
    for name, count in need.items():
        pool = cloud.pool(name)
        assert pool is not None
        if count > pool.max_nodes:
            raise Unplannable(
                f"request needs {count} nodes of pool {name}; its maxNodes is {pool.max_nodes}"
            )
    zones = zones_for(cloud, specs, selectors, pod_sets)
    if not zones:
        raise Unplannable(
            f"no zone allows every pod set (pools {', '.join(sorted(need))} and the zones "
            "their node selectors pin): the request's nodes must all come up in one zone"
        )
    return zones


def nodes_per_pool(pod_sets: tuple[pev.PodSetNodes, ...]) -> dict[str, int]:
    """How many nodes a request needs of each pool, in the order its pod sets name them."""
    need: dict[str, int] = {}
    for p in pod_sets:
        need[p.pool] = need.get(p.pool, 0) + p.nodes
    return need


def zones_for(
    cloud: ClusterSpec,
    specs: tuple[PodSet, ...],
    selectors: Mapping[str, Mapping[str, str]],
    pod_sets: tuple[pev.PodSetNodes, ...],
) -> tuple[str, ...]:
    """Zones where every pod set may run: its selector (flavor labels included) and pool allow it.

    All nodes of a request come up in one zone, so this is an intersection; empty means the
    request can never be served.
    """
    allowed = set(cloud.zones)
    for ps in specs:
        selector = selectors.get(ps.name, ps.node_selector)
        if ZONE_LABEL in selector:
            allowed &= {selector[ZONE_LABEL]}
    for p in pod_sets:
        pool = cloud.pool(p.pool)
        assert pool is not None
        allowed &= set(pool.zones_or(cloud.zones))
    return tuple(z for z in cloud.zones if z in allowed)


def make_nodes(
    cloud: ClusterSpec, request_id: str, zone: str, pod_sets: tuple[pev.PodSetNodes, ...]
) -> tuple[pev.NodeSpec, ...]:
    nodes: list[pev.NodeSpec] = []
    for ps in pod_sets:
        pool = cloud.pool(ps.pool)
        assert pool is not None
        for i in range(ps.nodes):
            # Dots cannot occur in the parts (DNS labels), so names never collide.
            name = f"{pool.name}.{zone}.{_node_tag(request_id)}.{ps.pod_set}.{i}"
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


def _node_tag(request_id: str) -> str:
    """A request id as part of a node name: ``<workload>.<attempt>`` (hex and digits), or
    ``pr-<namespace>.<name>`` for a standalone ``<namespace>/<name>`` (no workload id
    starts with ``pr-``), so node names stay DNS subdomains and never collide."""
    if "/" in request_id:
        return "pr-" + request_id.replace("/", ".")
    return request_id


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


def one_pod_set(
    provisioning_class: str,
    merge_policy: str,
    pod_sets: tuple[PodSet, ...],
    selectors: Mapping[str, Mapping[str, str]],
    tolerations: Mapping[str, tuple[Toleration, ...]] | None = None,
) -> None:
    """GKE's queued provisioning takes one podSet per request. Several are merged into one as
    Kueue's ``podSetMergePolicy`` allows (muster's pod sets carry only scheduling
    requirements, so both policies compare requests, node selectors and tolerations);
    otherwise ``Unplannable``."""
    if provisioning_class != DWS_CLASS or len(pod_sets) < 2:
        return
    names = ", ".join(ps.name for ps in pod_sets)
    if not merge_policy:
        raise Unplannable(
            f"{DWS_CLASS} supports a single podSet per request; this one has {len(pod_sets)} "
            f"({names}). Set podSetMergePolicy in the ProvisioningRequestConfig to merge "
            "identical pod sets, or submit one pod set"
        )

    def requirements(ps: PodSet) -> tuple[object, ...]:
        return (
            tuple(sorted(ps.requests.items())),
            tuple(sorted(selectors.get(ps.name, ps.node_selector).items())),
            tuple(sorted(((*ps.tolerations, *(tolerations or {}).get(ps.name, ()))), key=repr)),
        )

    if len({requirements(ps) for ps in pod_sets}) > 1:
        raise Unplannable(
            f"{DWS_CLASS} supports a single podSet per request, and pod sets {names} differ "
            f"in their scheduling requirements, so {merge_policy} cannot merge them"
        )
