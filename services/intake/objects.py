"""The configured objects ``muster get`` reads: each kind, its objects as intake's state
holds them, and one page or one object of them."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from muster.core.access.policy import Action
from muster.core.access.tokens import Principal
from muster.core.codec import to_plain
from muster.core.intake.refusal import not_found
from muster.core.model import kinds
from muster.core.queueing import quota as qt
from muster.core.views import nodes as node_view
from muster.core.views.workloads import WorkloadsState
from services.intake import paging
from services.intake.context import Context
from services.intake.errors import Refused, refuse
from services.intake.paging import MAX_LIST


class Objects:
    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx

    async def page(
        self,
        who: Principal,
        kind: str,
        namespace: str | None = None,
        limit: int = MAX_LIST,
        after: str | None = None,
    ) -> dict[str, Any]:
        k = object_kind(kind)
        await paging.prepare(self.ctx, who, namespace if k.namespaced else None, limit)
        visible = self.ctx.access.visible
        objs = [
            o
            for o in k.objects(self.ctx.state)
            if (not k.namespaced or visible(who, o["namespace"]))
            and (not namespace or not k.namespaced or o["namespace"] == namespace)
        ]
        return paging.page(objs, limit, after, key=_object_key, render=lambda o: o)

    async def get(
        self, who: Principal, kind: str, name: str, namespace: str | None = None
    ) -> dict[str, Any]:
        k = object_kind(kind)
        if k.namespaced:
            namespace = namespace or "default"
            self.ctx.access.require(who, Action.READ, namespace)
        await self.ctx.loop.step()
        for o in k.objects(self.ctx.state):
            if o["name"] == name and (not k.namespaced or o["namespace"] == namespace):
                return o
        where = f" in namespace {namespace}" if k.namespaced else ""
        raise Refused(not_found(f"{k.kind} {name}{where}"))


def config_object(event: Any) -> tuple[str, str]:
    """A configuration event's object as a manifest names it: (kind, [namespace/]name)."""
    spec: Any = getattr(event, "spec", None)
    kind = {
        "ResourceFlavorConfigured": "ResourceFlavor",
        "ClusterQueueConfigured": "ClusterQueue",
        "LocalQueueConfigured": "LocalQueue",
        "CohortConfigured": "Cohort",
        "PriorityClassConfigured": getattr(spec, "kind", "PriorityClass"),
        "NamespaceQuotaConfigured": "ResourceQuota",
        "AdmissionCheckConfigured": "AdmissionCheck",
        "ProvisioningRequestConfigConfigured": "ProvisioningRequestConfig",
    }.get(type(event).__name__, type(event).__name__)
    return str(kind), str(getattr(spec, "key", None) or getattr(spec, "name", ""))


@dataclass(frozen=True, slots=True)
class ObjectKind(kinds.ResourceKind):
    """A configured kind and how to read its objects from intake's state."""

    objects: Callable[[WorkloadsState], Iterable[dict[str, Any]]] = lambda s: ()


def object_kind(name: str) -> ObjectKind:
    found = kinds.resource_kind(name, KINDS)
    if found is None:
        raise refuse("UnknownKind", f"unknown kind {name!r}; known: {kinds.known(KINDS)}")
    assert isinstance(found, ObjectKind)
    return found


def _object_key(o: Mapping[str, Any]) -> str:
    return f"{o['namespace']}/{o['name']}" if o.get("namespace") else str(o["name"])


def _obj(kind: str, spec: Any, status: dict[str, Any] | None = None) -> dict[str, Any]:
    plain = to_plain(spec)
    out: dict[str, Any] = {"kind": kind, "name": spec.name}
    namespace = getattr(spec, "namespace", None)
    if namespace is not None:
        out["namespace"] = namespace
    out["spec"] = {k: v for k, v in plain.items() if k not in ("name", "namespace")}
    out["status"] = status or {}
    return out


_HOLDING = frozenset({"QuotaReserved", "Admitted", "Running"})


def _queue_counts(state: WorkloadsState) -> dict[str, tuple[int, int]]:
    """(pending, admitted) workloads per LocalQueue "namespace/name", in one pass."""
    counts: dict[str, tuple[int, int]] = {}
    for v in state.workloads.values():
        key = f"{v.namespace}/{v.queue_name}"
        pending, admitted = counts.get(key, (0, 0))
        counts[key] = (pending + (v.status == "Pending"), admitted + (v.status in _HOLDING))
    return counts


def _local_queues(state: WorkloadsState) -> Iterable[dict[str, Any]]:
    counts = _queue_counts(state)
    for key, q in state.queue.local_queues.items():
        pending, admitted = counts.get(key, (0, 0))
        yield _obj("LocalQueue", q, {"pendingWorkloads": pending, "admittedWorkloads": admitted})


def _cluster_queues(state: WorkloadsState) -> Iterable[dict[str, Any]]:
    per_cq: dict[str, tuple[int, int]] = {}
    for key, (pending, admitted) in _queue_counts(state).items():
        lq = state.queue.local_queues.get(key)
        if lq is not None:
            p, a = per_cq.get(lq.cluster_queue, (0, 0))
            per_cq[lq.cluster_queue] = (p + pending, a + admitted)
    queue = state.queue
    shares = qt.weighted_shares(queue.cluster_queues, queue.cohorts, queue.usage)
    for name, q in queue.cluster_queues.items():
        pending, admitted = per_cq.get(name, (0, 0))
        status = {
            "pendingWorkloads": pending,
            "admittedWorkloads": admitted,
            "usage": to_plain(queue.usage.get(name, {})),
            "fairSharing": {"weightedShare": shares.get(name, 0)},
        }
        yield _obj("ClusterQueue", q, status)


def _request_objects(state: WorkloadsState) -> Iterable[dict[str, Any]]:
    for v in state.requests.values():
        if v.spec is None:
            continue
        view = v.to_json()
        yield {
            "kind": "ProvisioningRequest",
            "name": v.spec.name,
            "namespace": v.spec.namespace,
            "spec": {k: x for k, x in to_plain(v.spec).items() if k not in ("name", "namespace")},
            "status": {k: x for k, x in view.items() if k != "id"},
        }


def _nodes(state: WorkloadsState) -> Iterable[dict[str, Any]]:
    queue = state.queue
    levels = queue.book.levels
    for name in sorted(state.nodes):
        yield node_view.node_object(state.nodes[name], queue.book, queue.workloads, levels)


_READERS: dict[str, Callable[[WorkloadsState], Iterable[dict[str, Any]]]] = {
    "ResourceFlavor": lambda s: (_obj("ResourceFlavor", f) for f in s.queue.flavors.values()),
    "ClusterQueue": _cluster_queues,
    "LocalQueue": _local_queues,
    "Cohort": lambda s: (_obj("Cohort", c) for c in s.queue.cohorts.values()),
    "PriorityClass": lambda s: (_obj(c.kind, c) for c in s.queue.priority_classes.values()),
    "ResourceQuota": lambda s: (
        _obj("ResourceQuota", q) for q in s.queue.namespace_quotas.values()
    ),
    "AdmissionCheck": lambda s: (
        _obj("AdmissionCheck", c) for c in s.queue.admission_checks.values()
    ),
    "ProvisioningRequestConfig": lambda s: (
        _obj("ProvisioningRequestConfig", c) for c in s.queue.provisioning_configs.values()
    ),
    "ProvisioningRequest": _request_objects,
    "Node": _nodes,
}
KINDS = tuple(
    ObjectKind(k.kind, k.plural, k.short, k.namespaced, _READERS[k.kind])
    for k in (*kinds.CONFIG_KINDS, kinds.PROVISIONING_REQUEST, kinds.NODE)
)
