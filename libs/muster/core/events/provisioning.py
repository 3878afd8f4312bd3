"""Cloud configuration (``cloud-*``) and provisioning requests (``provisioning-*``).

Written by the provisioner. A request asks for the pods of one quota reservation;
its nodes come up together in one zone or not at all, and are never reused by
another request.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from muster.core.events.base import Event, event_class
from muster.core.model.cluster import ClusterSpec
from muster.core.model.workload import ProvisioningRequestSpec


def request_stream(request_id: str) -> str:
    return f"provisioning-{request_id}"


def standalone_id(namespace: str, name: str) -> str:
    """A standalone request's id; a queued workload's requests are ``<workload>.<attempt>``."""
    return f"{namespace}/{name}"


def request_id(workload_id: str, attempt: int) -> str:
    """One request per quota reservation: nodes are never reused across them."""
    return f"{workload_id}.{attempt}"


def split_request_id(rid: str) -> tuple[str, int] | None:
    """``(workload id, attempt)`` of a queued workload's request; None for a standalone one."""
    if "/" in rid:
        return None
    workload, _, attempt = rid.rpartition(".")
    if not workload or not attempt.isdigit():
        return None
    return workload, int(attempt)


def cloud_stream(name: str) -> str:
    return f"cloud-{name}"


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeSpec:
    name: str
    pool: str
    zone: str
    machine_type: str
    allocatable: Mapping[str, int]
    labels: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True, kw_only=True)
class PodSetNodes:
    """One pod set on one node pool: ``nodes`` nodes of ``pool``, ``per_node`` pods each."""

    pod_set: str
    pods: int
    pool: str
    per_node: int

    @property
    def nodes(self) -> int:
        return -(-self.pods // self.per_node)


@event_class("cloud.configured")
@dataclass(frozen=True, slots=True, kw_only=True)
class CloudConfigured(Event):
    """The simulated cloud's description; capacity steps count from this event's time."""

    spec: ClusterSpec


@event_class("provisioning.requested")
@dataclass(frozen=True, slots=True, kw_only=True)
class ProvisioningRequested(Event):
    """A standalone ProvisioningRequest was created (kubectl apply, muster apply, the API)."""

    request_id: str
    spec: ProvisioningRequestSpec


@event_class("provisioning.delete_requested")
@dataclass(frozen=True, slots=True, kw_only=True)
class ProvisioningDeleteRequested(Event):
    """A standalone request was deleted: node creation stops; nodes already there stay while
    pods use them and are removed when unneeded."""

    request_id: str


@event_class("provisioning.accepted")
@dataclass(frozen=True, slots=True, kw_only=True)
class ProvisioningAccepted(Event):
    """``Accepted=True``: the request waits for capacity. ``workload_id`` is "" for a
    standalone request."""

    request_id: str
    workload_id: str
    attempt: int
    pod_sets: tuple[PodSetNodes, ...]
    message: str
    # The zones every pod set allows (selectors incl. flavor labels, pools); () in old events.
    zones: tuple[str, ...] = ()
    provisioning_class: str = ""  # "" for nodes of a queue without a provisioning check
    # When the nodes are preempted (CapacityRevoked), counted from Provisioned; None: never.
    max_run_seconds: float | None = None
    # Pods must bind to the nodes this long after Provisioned, or BookingExpired.
    booking_seconds: float = 600.0


@event_class("provisioning.waiting")
@dataclass(frozen=True, slots=True, kw_only=True)
class ProvisioningWaiting(Event):
    """``Provisioned=false`` with reason NotProvisioned or QuotaExceeded (recorded on change)."""

    request_id: str
    reason: str
    message: str


@event_class("provisioning.nodes_creating")
@dataclass(frozen=True, slots=True, kw_only=True)
class NodesCreating(Event):
    """Room for every node was found in one zone and claimed; nodes boot until ``ready_at``."""

    request_id: str
    zone: str
    nodes: tuple[NodeSpec, ...]
    ready_at: float


@event_class("provisioning.provisioned")
@dataclass(frozen=True, slots=True, kw_only=True)
class ProvisioningProvisioned(Event):
    """Every node of the request is Ready, at once, in one zone."""

    request_id: str
    zone: str
    # pod name -> node name
    assignments: Mapping[str, str]
    message: str
    # The nodes, when no NodesCreating event named them first (a Kubernetes backend, or
    # ``created``).
    nodes: tuple[NodeSpec, ...] = ()
    # The nodes were claimed and were Ready in the same instant (a pool without a
    # provisioning delay): this event stands for the NodesCreating that would otherwise
    # come first, with ``ready_at`` its own time. One event a request fewer for every
    # service to store, fold and publish; False in older logs, which hold both.
    created: bool = False
    # The request was accepted in the same decision (its nodes ``created`` at once): this
    # event stands for that ProvisioningAccepted too, which would otherwise come first.
    accepted: ProvisioningAccepted | None = None

    def creating(self, now: float) -> NodesCreating | None:
        """The NodesCreating this event stands for (``created``), at ``now``; else None."""
        if not self.created:
            return None
        return NodesCreating(
            request_id=self.request_id, zone=self.zone, nodes=self.nodes, ready_at=now
        )

    def stands_for(self, now: float) -> tuple[Event, ...]:
        """The events before it that this one stands for, in their order (the acceptance,
        then the node creation), at ``now``. A fold applies them first, so a log of
        either form folds to the same state."""
        # Four cases spelled out, not a filter over both: every service folds every
        # provisioned event through this (intake three times: its queue, requests and nodes).
        creating = self.creating(now)
        if self.accepted is None:
            return () if creating is None else (creating,)
        return (self.accepted,) if creating is None else (self.accepted, creating)

    def alone(self) -> ProvisioningProvisioned:
        """This event as it is logged after the events it ``stands_for``."""
        return replace(self, nodes=(), created=False, accepted=None)


@event_class("provisioning.failed")
@dataclass(frozen=True, slots=True, kw_only=True)
class ProvisioningFailed(Event):
    """``Failed=True`` (terminal). ``retryable`` False: the same request can never succeed
    (no pool fits, too many nodes, several pod sets), so an admission check does not retry."""

    request_id: str
    reason: str
    message: str
    retryable: bool = True


@event_class("provisioning.booking_expired")
@dataclass(frozen=True, slots=True, kw_only=True)
class ProvisioningBookingExpired(Event):
    """``BookingExpired=True``: no pod bound to the nodes within the booking window."""

    request_id: str
    message: str


@event_class("provisioning.capacity_revoked")
@dataclass(frozen=True, slots=True, kw_only=True)
class ProvisioningCapacityRevoked(Event):
    """``CapacityRevoked=True``: maxRunDurationSeconds reached; nodes and pods are preempted."""

    request_id: str
    message: str


@event_class("provisioning.cancelled")
@dataclass(frozen=True, slots=True, kw_only=True)
class ProvisioningCancelled(Event):
    """The reservation went away before any node was claimed: nothing to remove."""

    request_id: str
    message: str


@event_class("provisioning.nodes_deleted")
@dataclass(frozen=True, slots=True, kw_only=True)
class NodesDeleted(Event):
    request_id: str
    nodes: tuple[str, ...]
    reason: str
    message: str


def node_creation(event: Event, at: float) -> NodesCreating | None:
    """The NodesCreating ``event`` is, or stands for (a Provisioned that ``created`` its
    nodes, at its time ``at``); None for any other event. What reads a log of either form
    for the nodes created uses this."""
    if isinstance(event, NodesCreating):
        return event
    if isinstance(event, ProvisioningProvisioned):
        return event.creating(at)
    return None


def acceptance(event: Event) -> ProvisioningAccepted | None:
    """The ProvisioningAccepted ``event`` is, or stands for (a Provisioned ``accepted`` in
    the same decision); None for any other event."""
    if isinstance(event, ProvisioningAccepted):
        return event
    if isinstance(event, ProvisioningProvisioned):
        return event.accepted
    return None
