"""ProvisioningRequests as Kubernetes shows them: conditions with reasons and messages.

A read model folded from ``provisioning-*`` events, for every request: standalone ones
(created through the API or manifests) and those made for queued workloads.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import singledispatch
from typing import Any

from muster.core.decider import own_handlers
from muster.core.events import Event
from muster.core.events import provisioning as pev
from muster.core.model.times import rfc3339
from muster.core.model.workload import ProvisioningRequestSpec
from muster.core.views.conditions import Condition, put


@dataclass(slots=True)
class RequestView:
    id: str
    workload_id: str = ""  # "" for a standalone request
    spec: ProvisioningRequestSpec | None = None  # standalone requests only
    created_at: float = 0.0
    # Accepted, Provisioned, Failed, BookingExpired, CapacityRevoked
    conditions: dict[str, Condition] = field(default_factory=dict)
    zone: str | None = None
    nodes: tuple[str, ...] = ()
    nodes_removed: str | None = None  # the reason they were removed
    deleted: bool = False
    cancelled: bool = False

    @property
    def phase(self) -> str:
        """One word, like the columns of ``kubectl get provreq``."""
        c = self.conditions
        for kind in ("Failed", "CapacityRevoked", "BookingExpired"):
            if kind in c and c[kind].status == "True":
                return kind
        if self.cancelled:
            return "Cancelled"
        if "Provisioned" in c and c["Provisioned"].status == "True":
            return "Provisioned"
        if "Accepted" in c:
            return "Accepted"
        return "Pending"

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "id": self.id,
            "status": self.phase,
            "conditions": [c.to_json() for c in self.conditions.values()],
            "zone": self.zone,
            "nodes": list(self.nodes),
            "nodesRemoved": self.nodes_removed,
            "deleted": self.deleted,
            "createdAt": rfc3339(self.created_at),
        }
        if self.workload_id:
            out["workload"] = self.workload_id
        if self.spec is not None:
            out.update(
                namespace=self.spec.namespace,
                name=self.spec.name,
                provisioningClassName=self.spec.provisioning_class,
                parameters=dict(self.spec.parameters),
                podSets=[{"name": ps.name, "count": ps.count} for ps in self.spec.pod_sets],
            )
        return out


def fold(views: dict[str, RequestView], event: Event, now: float) -> None:
    """Apply one event to the views (other events are ignored)."""
    _apply(event, views, now)



def _set(view: RequestView, kind: str, status: str, reason: str, message: str, now: float) -> None:
    put(view.conditions, kind, status, reason, message, now)


@singledispatch
def _apply(event: Event, views: dict[str, RequestView], now: float) -> None:
    pass


# ``fold``'s handler for an event type, or None if it ignores them, looked up once a type.
handler = own_handlers(_apply)


@_apply.register
def _(event: pev.ProvisioningRequested, views: dict[str, RequestView], now: float) -> None:
    views[event.request_id] = RequestView(id=event.request_id, spec=event.spec, created_at=now)


@_apply.register
def _(event: pev.ProvisioningDeleteRequested, views: dict[str, RequestView], now: float) -> None:
    if event.request_id in views:
        views[event.request_id].deleted = True


@_apply.register
def _(event: pev.ProvisioningAccepted, views: dict[str, RequestView], now: float) -> None:
    view = views.setdefault(event.request_id, RequestView(id=event.request_id, created_at=now))
    view.workload_id = event.workload_id
    _set(view, "Accepted", "True", "Accepted", event.message, now)


@_apply.register
def _(event: pev.ProvisioningWaiting, views: dict[str, RequestView], now: float) -> None:
    if event.request_id in views:
        _set(views[event.request_id], "Provisioned", "False", event.reason, event.message, now)


@_apply.register
def _(event: pev.NodesCreating, views: dict[str, RequestView], now: float) -> None:
    if event.request_id in views:
        view = views[event.request_id]
        view.zone, view.nodes = event.zone, tuple(n.name for n in event.nodes)
        message = f"{len(event.nodes)} node(s) booting in zone {event.zone}"
        _set(view, "Provisioned", "False", "NotProvisioned", message, now)


@_apply.register
def _(event: pev.ProvisioningProvisioned, views: dict[str, RequestView], now: float) -> None:
    for before in event.stands_for(now):  # what it stands for, first
        apply = handler(type(before))
        if apply is not None:
            apply(before, views, now)
    if event.request_id in views:
        view = views[event.request_id]
        view.zone = event.zone
        if event.nodes:
            view.nodes = tuple(n.name for n in event.nodes)
        _set(view, "Provisioned", "True", "Provisioned", event.message, now)


@_apply.register
def _(event: pev.ProvisioningFailed, views: dict[str, RequestView], now: float) -> None:
    view = views.setdefault(event.request_id, RequestView(id=event.request_id, created_at=now))
    _set(view, "Failed", "True", event.reason, event.message, now)


@_apply.register
def _(event: pev.ProvisioningCancelled, views: dict[str, RequestView], now: float) -> None:
    view = views.setdefault(event.request_id, RequestView(id=event.request_id, created_at=now))
    view.cancelled = True
    if "Accepted" in view.conditions or "Provisioned" in view.conditions:
        _set(view, "Provisioned", "False", "Cancelled", event.message, now)


@_apply.register
def _(event: pev.ProvisioningBookingExpired, views: dict[str, RequestView], now: float) -> None:
    if event.request_id in views:
        view = views[event.request_id]
        _set(view, "BookingExpired", "True", "CapacityReservationTimeExpired", event.message, now)


@_apply.register
def _(event: pev.ProvisioningCapacityRevoked, views: dict[str, RequestView], now: float) -> None:
    if event.request_id in views:
        _set(
            views[event.request_id],
            "CapacityRevoked",
            "True",
            "CapacityRevoked",
            event.message,
            now,
        )


@_apply.register
def _(event: pev.NodesDeleted, views: dict[str, RequestView], now: float) -> None:
    if event.request_id in views:
        views[event.request_id].nodes_removed = f"{event.reason}: {event.message}"
