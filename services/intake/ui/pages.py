"""What each page of the web UI shows, as JSON, from one state of intake's read model.

Pure functions of a ``WorkloadsState`` (live, or rebuilt at a past position) and of what
the caller may see (``visible``: namespace -> bool). Quantities come as numbers and as
text the way users write them (``700`` CPUs, ``80Gi``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from muster.core.events import provisioning as pev
from muster.core.model.resources import format_quantity
from muster.core.model.times import rfc3339
from muster.core.placement.book import NodeState
from muster.core.queueing import quota as qt
from muster.core.queueing import visibility
from muster.core.queueing.state import WorkloadEntry
from muster.core.views import nodes as node_view
from muster.core.views.workloads import WorkloadsState, WorkloadView, admission_checks
from services.intake.objects import object_kind

Visible = Callable[[str | None], bool]


def clock(state: WorkloadsState, position: int) -> dict[str, Any]:
    return {"position": position, "time": rfc3339(state.now) if state.now else None}


# -- ClusterQueues and cohorts ----------------------------------------------------------


def queues(state: WorkloadsState) -> dict[str, Any]:
    """Every ClusterQueue with its quota, usage and borrowing per flavor and resource, and
    every cohort with its members and totals (cluster-scoped: every tenant sees them)."""
    q = state.queue
    tree = qt.build(q.cluster_queues, q.cohorts, q.usage)
    objects = {o["name"]: o for o in object_kind("clusterqueues").objects(state)}
    cqs = [
        {
            "name": name,
            "cohort": q.cluster_queues[name].cohort,
            "pendingWorkloads": objects[name]["status"]["pendingWorkloads"],
            "admittedWorkloads": objects[name]["status"]["admittedWorkloads"],
            "weightedShare": objects[name]["status"]["fairSharing"]["weightedShare"],
            "resources": quota_rows(node),
        }
        for name, node in sorted(tree.queues.items())
    ]
    cohorts = [
        {
            "name": name,
            "parent": node.parent.name if node.parent else None,
            "members": sorted(c.name for c in node.children),
            "resources": quota_rows(node),
        }
        for name, node in sorted(tree.cohorts.items())
    ]
    return {"clusterQueues": cqs, "cohorts": cohorts}


def quota_rows(node: qt.QuotaNode) -> list[dict[str, Any]]:
    """One bar per (flavor, resource): nominal, used, borrowed and the most it could hold."""
    rows = []
    for fr in sorted(set(node.quotas) | set(node.subtree) | set(node.usage)):
        flavor, resource = fr
        quota = node.quotas.get(fr)
        nominal = node.nominal(fr) if node.is_queue else node.subtree.get(fr, 0)
        used = node.usage.get(fr, 0)
        values = {
            "nominal": nominal,
            "usage": used,
            "borrowed": node.borrowing(fr),
            "potential": qt.potential(node, fr),
            "borrowingLimit": quota.borrowing_limit if quota else None,
            "lendingLimit": quota.lending_limit if quota else None,
        }
        rows.append(
            {
                "flavor": flavor,
                "resource": resource,
                **values,
                "text": {k: _qty(resource, v) for k, v in values.items()},
            }
        )
    return rows


def _qty(resource: str, value: int | None) -> str | None:
    return None if value is None else format_quantity(resource, value)


# -- workloads --------------------------------------------------------------------------


def pending(items: Iterable[visibility.PendingItem], visible: Visible) -> list[dict[str, Any]]:
    """The visibility API's items (positions, current reason) the caller may see."""
    return [i.to_json() for i in items if visible(i.workload.spec.namespace)]


def workloads(state: WorkloadsState, visible: Visible) -> list[dict[str, Any]]:
    """Every workload the caller may see, newest first."""
    views = [v for v in state.workloads.values() if visible(v.namespace)]
    views.sort(key=lambda v: (-v.submitted_at, v.id))
    return [v.to_json() for v in views]


def workload(state: WorkloadsState, view: WorkloadView) -> dict[str, Any]:
    """One workload: what GET /v1/workloads/{id} shows, its conditions, its pods with
    their nodes and GPU shares, and the provisioning requests made for it."""
    body = view.to_json()
    entry = state.queue.workloads.get(view.gang_id or view.id)
    if entry is not None and entry.run.checks:
        body["admissionChecks"] = admission_checks(entry)
    # Kueue's conditions as GET shows them: one fold (views/conditions.py) for every view.
    body["conditions"] = state.workloads.get(view.gang_id or view.id, view).conditions.to_json()
    body["pods"] = _pods(entry) if entry is not None else []
    wanted = {view.id, view.gang_id}
    body["provisioningRequests"] = [
        r.to_json() for r in state.requests.values() if r.workload_id and r.workload_id in wanted
    ]
    return body


def _pods(entry: WorkloadEntry) -> list[dict[str, Any]]:
    run = entry.run
    placements = run.placements or {}
    out = []
    for ps in entry.spec.pod_sets:
        for i in range(run.pod_counts.get(ps.name, ps.count)):
            pod = f"{ps.name}-{i}"
            out.append(
                {
                    "name": pod,
                    "podSet": ps.name,
                    "node": placements.get(pod),
                    "status": _pod_status(entry, pod),
                    "gpus": [
                        {"uuid": s.uuid, "cores": s.cores, "memoryMiB": s.memory_mib}
                        for s in run.devices.get(pod, ())
                    ],
                }
            )
    return out


def _pod_status(entry: WorkloadEntry, pod: str) -> str:
    run = entry.run
    if pod in run.pods_succeeded:
        return "Succeeded"
    if pod in run.pods_failed:
        return f"Failed: {run.pods_failed[pod]}"
    if pod in run.pods_evicted:
        return f"Evicted: {run.pods_evicted[pod][0]}"
    if pod in run.pods_started:
        return "Running"
    if entry.holds_quota:
        return "Starting" if (run.placements or {}).get(pod) else "Waiting for a node"
    return "Not placed"


# -- nodes ------------------------------------------------------------------------------


def nodes(state: WorkloadsState, visible: Visible) -> list[dict[str, Any]]:
    """Existing nodes with their GPUs and who holds which share of each (HAMi slices), then
    the nodes provisioning requests brought up, with the pods placed on them."""
    q = state.queue
    slices = _slices(state, visible)
    out = [_existing(n, slices, state, visible) for n in q.book.nodes.values()]
    out.sort(key=lambda n: n["name"])
    for name, inv in sorted(q.inventory.items()):
        if name not in q.book.nodes:
            out.append(
                {"name": name, "source": "declared", "state": "NotRegistered", "gpus": []}
                | {"labels": dict(inv.labels), "allocatable": _quantities(inv.allocatable)}
            )
    out += _provisioned(state, visible, {n["name"] for n in out})
    return [n | _accelerators(state, n["name"]) for n in out]


def _accelerators(state: WorkloadsState, name: str) -> dict[str, Any]:
    """What ``get nodes`` shows of a node's GPUs, from the same view (views/nodes.py): used
    of total per model, shared slices (HAMi), and since when it is in its state. A
    provisioned node has no devices in the queue's book: this is all there is to its GPUs."""
    record = state.nodes.get(name)
    if record is None:
        return {"accelerators": [], "sharedSlices": {"pods": 0, "devices": 0}}
    q = state.queue
    status = node_view.node_object(record, q.book, q.workloads, q.book.levels)["status"]
    return {k: status[k] for k in ("accelerators", "sharedSlices", "since")}


def _existing(
    node: NodeState,
    slices: dict[str, list[dict[str, Any]]],
    state: WorkloadsState,
    visible: Visible,
) -> dict[str, Any]:
    inv = node.inv
    gpus = [
        {
            "index": g.index,
            "uuid": g.uuid,
            "model": g.model,
            "memoryMiB": g.memory_mib,
            "split": g.split,
            "usedCores": use.cores,
            "usedMemoryMiB": use.memory_mib,
            "pods": use.pods,
            "exclusive": use.exclusive,
            "slices": slices.get(g.uuid, []),
        }
        for g, use in zip(inv.gpus, node.devices, strict=True)
    ]
    return {
        "name": inv.name,
        "source": "existing",
        "state": "Ready" if node.ready else "NotReady",
        "labels": dict(inv.labels),
        "allocatable": _quantities(inv.allocatable),
        "free": _quantities(node.free),
        "pods": node.pods,
        "workloads": [_who(state, wid, visible) | {"pods": n} for wid, n in node.workloads.items()],
        "gpus": gpus,
    }


def _slices(state: WorkloadsState, visible: Visible) -> dict[str, list[dict[str, Any]]]:
    """GPU UUID -> the pods holding a share of it."""
    out: dict[str, list[dict[str, Any]]] = {}
    for wid, held in state.queue.book.held.items():
        who = _who(state, wid, visible)
        for pod, shares in held.placement.devices.items():
            for s in shares:
                out.setdefault(s.uuid, []).append(
                    who | {"pod": pod, "cores": s.cores, "memoryMiB": s.memory_mib}
                )
    return out


def _who(state: WorkloadsState, wid: str, visible: Visible) -> dict[str, Any]:
    """A workload as a node shows it; one of a namespace the caller may not see, unnamed."""
    view = state.workloads.get(wid)
    if view is None or not visible(view.namespace):
        return {"workload": None, "name": "(not visible)"}
    return {"workload": wid, "name": view.name, "namespace": view.namespace}


def _provisioned(state: WorkloadsState, visible: Visible, known: set[str]) -> list[dict[str, Any]]:
    pods: dict[str, list[dict[str, Any]]] = {}
    for wl in state.queue.workloads.values():
        if wl.holds_quota and wl.run.placements and not wl.run.placed:
            for pod, node in sorted(wl.run.placements.items()):
                pods.setdefault(node, []).append(_who(state, wl.id, visible) | {"pod": pod})
    out = []
    for r in state.requests.values():
        if r.cancelled or r.nodes_removed or not visible(r.spec.namespace if r.spec else None):
            continue
        for name in r.nodes:
            if name not in known:
                parts = pev.split_request_id(r.id)
                record = state.nodes.get(name)
                out.append(
                    {
                        "name": name,
                        "source": "provisioned",
                        # The node's own state as get nodes shows it; the request's before then.
                        "state": record.state if record is not None else r.phase,
                        "zone": r.zone,
                        "request": r.id,
                        "workload": parts[0] if parts else None,
                        "placed": pods.get(name, []),
                        "gpus": [],
                        **(
                            {"allocatable": _quantities(record.allocatable)}
                            if record is not None
                            else {}
                        ),
                    }
                )
    return out


def _quantities(values: Any) -> dict[str, str]:
    return {r: format_quantity(r, v) for r, v in sorted(values.items())}


# -- provisioning requests --------------------------------------------------------------


def requests(state: WorkloadsState, visible: Visible) -> list[dict[str, Any]]:
    """Every ProvisioningRequest with its conditions (those of queued workloads belong to
    no namespace: only a caller that sees all sees them, as the API's list)."""
    return [
        r.to_json()
        for r in state.requests.values()
        if visible(r.spec.namespace if r.spec is not None else None)
    ]
