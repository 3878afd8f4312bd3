"""The nodes as ``sinfo`` and ``kubectl get nodes`` show them: pool, zone, state, GPUs used
of each model, shared-GPU slices and topology.

A read model folded from node and provisioning events. Existing nodes (declared in the
cluster description or registered by an agent) get their use from the queue's node book,
which charges a workload's placement when it reserves quota (Slurm's ALLOC); a
provisioned node (DWS) is its request's alone, so its use is the GPUs of the pods running
on it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import singledispatch
from typing import Any

from muster.core.decider import own_handlers
from muster.core.events import Event
from muster.core.events import node as nev
from muster.core.events import provisioning as pev
from muster.core.model.inventory import ACCELERATORS, HOSTNAME, Gpu
from muster.core.model.times import rfc3339
from muster.core.placement.book import NodeBook
from muster.core.queueing.state import WorkloadEntry, pod_set_of

POOL_LABEL = "cloud.google.com/gke-nodepool"
ZONE_LABEL = "topology.kubernetes.io/zone"
ACCELERATOR_LABEL = "cloud.google.com/gke-accelerator"


@dataclass(slots=True)
class NodeRecord:
    name: str
    state: str  # Declared | Provisioning | Ready | Lost
    labels: Mapping[str, str] = field(default_factory=dict)
    allocatable: Mapping[str, int] = field(default_factory=dict)
    gpus: tuple[Gpu, ...] = ()
    pool: str = ""
    zone: str = ""
    request_id: str = ""  # "" for an existing node
    since: float = 0.0  # when it entered its state
    pods: set[tuple[str, str]] = field(default_factory=set)  # (workload, pod) running here


def fold(nodes: dict[str, NodeRecord], event: Event, now: float) -> None:
    """Apply one event to the records (other events are ignored)."""
    _apply(event, nodes, now)



@singledispatch
def _apply(event: Event, nodes: dict[str, NodeRecord], now: float) -> None:
    pass


# ``fold``'s handler for an event type, or None if it ignores them, looked up once a type.
handler = own_handlers(_apply)


@_apply.register
def _(event: pev.CloudConfigured, nodes: dict[str, NodeRecord], now: float) -> None:
    for inv in event.spec.nodes:
        if inv.name not in nodes:  # declared: an agent has not registered it yet
            nodes[inv.name] = NodeRecord(
                inv.name, "Declared", inv.labels, inv.allocatable, inv.gpus, since=now
            )


@_apply.register
def _(event: pev.NodesCreating, nodes: dict[str, NodeRecord], now: float) -> None:
    for spec in event.nodes:
        nodes[spec.name] = NodeRecord(
            spec.name,
            "Provisioning",
            spec.labels,
            spec.allocatable,
            pool=spec.pool,
            zone=spec.zone,
            request_id=event.request_id,
            since=now,
        )


@_apply.register
def _(event: pev.ProvisioningProvisioned, nodes: dict[str, NodeRecord], now: float) -> None:
    for before in event.stands_for(now):  # what it stands for
        apply = handler(type(before))
        if apply is not None:
            apply(before, nodes, now)
    if event.created:  # created Ready: registered by this event (no node.registered)
        for spec in event.nodes:
            record = nodes.get(spec.name)
            if record is not None:
                record.state, record.since = "Ready", now


@_apply.register
def _(event: nev.NodeRegistered, nodes: dict[str, NodeRecord], now: float) -> None:
    old = nodes.get(event.node)
    record = NodeRecord(
        event.node,
        "Ready",
        event.labels,
        event.allocatable,
        event.gpus,
        pool=old.pool if old else "",
        zone=old.zone if old else "",
        request_id=event.request_id or (old.request_id if old else ""),
        since=now,
    )
    if old is not None:
        record.pods = old.pods
    nodes[event.node] = record


@_apply.register
def _(event: nev.NodeLost, nodes: dict[str, NodeRecord], now: float) -> None:
    record = nodes.get(event.node)
    if record is not None:
        record.state, record.since = "Lost", now
        record.pods.clear()  # its pods are gone with it


@_apply.register
def _(event: nev.NodeRemoved, nodes: dict[str, NodeRecord], now: float) -> None:
    nodes.pop(event.node, None)


@_apply.register
def _(event: pev.NodesDeleted, nodes: dict[str, NodeRecord], now: float) -> None:
    for name in event.nodes:
        nodes.pop(name, None)


@_apply.register
def _(event: nev.PodStarted, nodes: dict[str, NodeRecord], now: float) -> None:
    record = nodes.get(event.node)
    if record is not None:
        record.pods.add((event.workload_id, event.pod))


@_apply.register(nev.PodSucceeded)
@_apply.register(nev.PodFailed)
@_apply.register(nev.PodStopped)
def _(
    event: nev.PodSucceeded | nev.PodFailed | nev.PodStopped,
    nodes: dict[str, NodeRecord],
    now: float,
) -> None:
    record = nodes.get(event.node)
    if record is not None:
        record.pods.discard((event.workload_id, event.pod))


# -- what ``get nodes`` shows ------------------------------------------------------------


def node_object(
    record: NodeRecord,
    book: NodeBook,
    workloads: Mapping[str, WorkloadEntry],
    levels: tuple[str, ...],
) -> dict[str, Any]:
    """One node as the API shows it (``kind: Node``)."""
    labels = dict(record.labels)
    accelerators = _accelerators(record, book, workloads)
    return {
        "kind": "Node",
        "name": record.name,
        "spec": {
            "pool": record.pool or labels.get(POOL_LABEL, ""),
            "zone": record.zone or labels.get(ZONE_LABEL, ""),
            "labels": labels,
            "allocatable": dict(record.allocatable),
            "gpus": [
                {"uuid": g.uuid, "model": g.model, "memoryMiB": g.memory_mib, "split": g.split}
                for g in record.gpus
            ],
            "provisioningRequest": record.request_id or None,
        },
        "status": {
            "state": record.state,
            "since": rfc3339(record.since),
            "topology": {lv: labels[lv] for lv in levels if lv in labels and lv != HOSTNAME},
            "accelerators": accelerators,
            "sharedSlices": _shared_slices(record, book),
            "pods": _pods(record, book),
        },
    }


def _accelerators(
    record: NodeRecord, book: NodeBook, workloads: Mapping[str, WorkloadEntry]
) -> list[dict[str, Any]]:
    """GPUs (or TPU chips) per model: {model, used, total}."""
    placed = book.nodes.get(record.name)
    if record.gpus:
        per: dict[str, list[int]] = {}
        uses = placed.devices if placed is not None else []
        for i, gpu in enumerate(record.gpus):
            counts = per.setdefault(gpu.model, [0, 0])
            counts[0] += int(i < len(uses) and uses[i].pods > 0)
            counts[1] += 1
        return [{"model": m, "used": u, "total": t} for m, (u, t) in sorted(per.items())]
    out = []
    for resource in ACCELERATORS:
        total = record.allocatable.get(resource, 0)
        if not total:
            continue
        if placed is not None:
            used = total - placed.free.get(resource, total)
        else:
            used = min(total, sum(_pod_ask(workloads, w, p, resource) for w, p in record.pods))
        model = record.labels.get(ACCELERATOR_LABEL) or resource
        out.append({"model": model, "used": used, "total": total})
    return out


def _pod_ask(workloads: Mapping[str, WorkloadEntry], wid: str, pod: str, resource: str) -> int:
    entry = workloads.get(wid)
    if entry is None:
        return 0
    name = pod_set_of(pod)
    ps = next((p for p in entry.spec.pod_sets if p.name == name), None)
    return ps.requests.get(resource, 0) if ps is not None else 0


def _shared_slices(record: NodeRecord, book: NodeBook) -> dict[str, int]:
    """HAMi shares: pods holding part of a device, and the devices they share."""
    placed = book.nodes.get(record.name)
    if placed is None:
        return {"pods": 0, "devices": 0}
    shared = [u for u in placed.devices if u.pods and not u.exclusive]
    return {"pods": sum(u.pods for u in shared), "devices": len(shared)}


def _pods(record: NodeRecord, book: NodeBook) -> int:
    placed = book.nodes.get(record.name)
    return placed.pods if placed is not None else len(record.pods)
