"""Cloud configuration (``cloud-*``) and provisioning requests (``provisioning-*``).

Written by the provisioner. A request asks for the pods of one quota reservation;
its nodes come up together in one zone or not at all, and are never reused by
another request.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from muster.core.events.base import Event, event_class
from muster.core.model.cluster import ClusterSpec


def request_stream(request_id: str) -> str:
    return f"provisioning-{request_id}"


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


@event_class("provisioning.accepted")
@dataclass(frozen=True, slots=True, kw_only=True)
class ProvisioningAccepted(Event):
    request_id: str
    workload_id: str
    attempt: int
    pod_sets: tuple[PodSetNodes, ...]
    message: str
    # The zones every pod set allows (selectors incl. flavor labels, pools); () in old events.
    zones: tuple[str, ...] = ()


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


@event_class("provisioning.failed")
@dataclass(frozen=True, slots=True, kw_only=True)
class ProvisioningFailed(Event):
    request_id: str
    reason: str
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
