"""Quota and placement together: a workload whose pod sets existing nodes can hold is
admitted only when every pod has a place (all or none); the placement goes into its
``QuotaReserved``. Workloads that no existing node could ever take go to the
provisioner, as before.

Where a workload goes is decided from what nodes the cluster has (declared, or
registered by agents), the pod sets' selectors and tolerations (flavor labels
included) and what an empty node offers: it does not depend on which nodes happen to be
free, so it is stable.
"""

from __future__ import annotations

from collections.abc import Mapping

from muster.core.model.workload import Toleration
from muster.core.placement.book import (
    NodeBook,
    Placement,
    PodAsk,
    could_hold,
    matches,
    tolerated,
)
from muster.core.placement.devices import device_ask
from muster.core.placement.engine import NoPlacement, demands, place
from muster.core.queueing.flavors import Assignment, Unassignable
from muster.core.queueing.state import QueueState, WorkloadEntry


def injected_tolerations(
    state: QueueState, outcome: Assignment
) -> dict[str, tuple[Toleration, ...]]:
    """Each pod set gets its flavors' tolerations, as Kueue injects them into the pods."""
    out: dict[str, tuple[Toleration, ...]] = {}
    for ps, per_resource in outcome.flavors.items():
        names = sorted(set(per_resource.values()))
        tolerations = tuple(
            t for f in names if f in state.flavors for t in state.flavors[f].tolerations
        )
        if tolerations:
            out[ps] = tolerations
    return out


def on_nodes(
    state: QueueState,
    wl: WorkloadEntry,
    selectors: Mapping[str, Mapping[str, str]],
    tolerations: Mapping[str, tuple[Toleration, ...]],
) -> bool:
    """Every pod set could run on some node the cluster has: its labels, taints and what
    it offers when empty (not what is free now). A pod set pinned to GPU UUIDs can run
    only on existing hardware: it waits there (Unschedulable) for a node with them to
    register, as HAMi leaves it pending; no provisioned node has a given UUID."""
    if wl.spec.consumes is not None:
        return False
    if any(ps.devices is not None and ps.devices.use_uuids for ps in wl.spec.pod_sets):
        return True
    if not state.inventory:
        return False
    for ps in wl.spec.pod_sets:
        selector = {**ps.node_selector, **selectors.get(ps.name, {})}
        tols = (*ps.tolerations, *tolerations.get(ps.name, ()))
        pod = PodAsk(ps.name, ps.name, ps.requests, device_ask(ps.requests, ps.devices))
        if not any(
            matches(node, selector) and tolerated(node, tols) is None and could_hold(node, pod)
            for node in state.inventory.values()
        ):
            return False
    return True


def routed(
    state: QueueState,
    wl: WorkloadEntry,
    outcome: Assignment,
    routes: dict[tuple[object, ...], bool],
) -> bool:
    """Whether the workload goes to existing nodes (else the provisioner makes its nodes).
    ``routes`` memoises it per shape (one cycle: it scans every node the cluster has)."""
    tolerations = injected_tolerations(state, outcome)
    key = (
        wl.shape[2:],  # the pods, not whose they are
        tuple(ps.devices for ps in wl.spec.pod_sets),
        tuple(sorted((p, tuple(sorted(s.items()))) for p, s in outcome.node_selectors.items())),
        tuple(sorted(tolerations.items())),
    )
    found = routes.get(key)
    if found is None:
        found = routes[key] = on_nodes(state, wl, outcome.node_selectors, tolerations)
    return found


def try_place(
    state: QueueState,
    book: NodeBook,
    wl: WorkloadEntry,
    cluster_queue: str,
    outcome: Assignment,
    counts: Mapping[str, int],
    routes: dict[tuple[object, ...], bool],
    *,
    within: frozenset[str] | None = None,
    explain: bool = True,
) -> Placement | Unassignable | None:
    """The workload's placement (``book`` holds it), why there is none, or None when the
    provisioner will make its nodes (``routed``). ``within``: only these nodes."""
    if not routed(state, wl, outcome, routes):
        return None
    tolerations = injected_tolerations(state, outcome)
    cq = state.cluster_queues[cluster_queue]
    want = demands(wl.spec, counts, outcome.node_selectors, tolerations)
    got = place(
        book,
        wl.id,
        wl.spec,
        want,
        wl.spec.placement or cq.placement,
        within=within,
        explain=explain,
    )
    if isinstance(got, NoPlacement):
        return Unassignable(got.reason, f"couldn't place the gang: {got.message}")
    return got
