"""The cluster description: cloud zones, node pools, capacity over time, quotas, queues.

One document describes both what the simulated cloud can provision and how the
queues are configured, so `muster sim` and the embedded services start from the
same file (docs/cluster-description.md).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from muster.core.model.inventory import NodeInventory, TopologySpec
from muster.core.model.queues import (
    AdmissionCheckSpec,
    ClusterQueueSpec,
    CohortSpec,
    FairSharingConfig,
    LocalQueueSpec,
    NamespaceQuotaSpec,
    PriorityClassSpec,
    ProvisioningRequestConfigSpec,
    ResourceFlavorSpec,
    Taint,
    WaitForPodsReady,
)


@dataclass(frozen=True, slots=True, kw_only=True)
class CapacityStep:
    """From ``at`` seconds after the cloud starts, a zone can hold this many nodes of a pool."""

    at: float
    zones: Mapping[str, int]


@dataclass(frozen=True, slots=True, kw_only=True)
class FailureWindow:
    """From ``at`` until ``until`` seconds after the cloud starts, creating nodes of a pool
    fails (a stockout): a request that would use it fails with this reason."""

    at: float
    until: float | None = None  # None: for good
    reason: str = "OutOfResources"
    message: str = ""

    def active(self, now: float, since: float = 0.0) -> bool:
        """Open at ``now`` for a cloud started at ``since`` (absolute times are compared, so
        a timer set for ``since + at`` finds the window open)."""
        return since + self.at <= now and (self.until is None or now < since + self.until)


@dataclass(frozen=True, slots=True, kw_only=True)
class NodePool:
    name: str
    machine_type: str
    allocatable: Mapping[str, int]  # per node
    labels: Mapping[str, str] = field(default_factory=dict)
    taints: tuple[Taint, ...] = ()
    accelerator: str | None = None
    queued_provisioning: bool = True
    max_nodes: int = 1000
    provisioning_delay_seconds: float = 0.0
    zones: tuple[str, ...] = ()  # empty: every zone of the cluster
    capacity: tuple[CapacityStep, ...] = ()  # empty: max_nodes in every zone, always
    failures: tuple[FailureWindow, ...] = ()

    def failure_at(self, now: float, since: float = 0.0) -> FailureWindow | None:
        return next((f for f in self.failures if f.active(now, since)), None)

    def node_labels(self, zone: str) -> dict[str, str]:
        return {
            **self.labels,
            "cloud.google.com/gke-nodepool": self.name,
            "node.kubernetes.io/instance-type": self.machine_type,
            "topology.kubernetes.io/zone": zone,
        }

    def zones_or(self, cluster_zones: tuple[str, ...]) -> tuple[str, ...]:
        return self.zones or cluster_zones

    def capacity_at(self, now: float, zones: tuple[str, ...], since: float = 0.0) -> dict[str, int]:
        """Nodes each zone can hold at ``now`` for a cloud started at ``since``: later steps
        override earlier. Absolute times are compared: ``(since + at) - since`` may round
        below ``at`` when ``since`` is a wall-clock time, and the step's own timer would then
        find it not yet in effect."""
        if not self.capacity:
            return {zone: self.max_nodes for zone in zones}
        current: dict[str, int] = {}
        for step in self.capacity:
            if since + step.at <= now:
                current.update(step.zones)
        return current


@dataclass(frozen=True, slots=True, kw_only=True)
class RegionalQuota:
    """A cloud quota such as NVIDIA_A100_GPUS: at most ``limit`` of ``resource`` in the region."""

    name: str
    resource: str
    limit: int
    node_pools: tuple[str, ...] = ()  # empty: every pool

    def covers(self, pool: str) -> bool:
        return not self.node_pools or pool in self.node_pools


@dataclass(frozen=True, slots=True, kw_only=True)
class Checkpointing:
    """What a preempted workload keeps (simulated nodes and the figures): its progress up to
    its last checkpoint, every ``interval_seconds`` (a workload's own
    ``checkpointIntervalSeconds`` wins; None: it keeps nothing), and it spends a restore
    before it runs on: Helios' 7 / 30 / 60 s for 1 / up to 8 / more accelerators."""

    interval_seconds: float | None = None
    single_gpu_seconds: float = 7.0
    single_node_seconds: float = 30.0  # 2..8 accelerators
    multi_node_seconds: float = 60.0  # more than 8

    def interval(self, own: float | None) -> float | None:
        return own if own is not None else self.interval_seconds

    def restore(self, devices: int) -> float:
        if devices <= 1:
            return self.single_gpu_seconds
        return self.single_node_seconds if devices <= 8 else self.multi_node_seconds


def kept(run: float, interval: float | None) -> float:
    """Seconds of progress a run of ``run`` seconds keeps: up to its last checkpoint."""
    if not interval or run <= 0:
        return 0.0
    return (run // interval) * interval


@dataclass(frozen=True, slots=True, kw_only=True)
class ClusterSpec:
    name: str
    region: str
    zones: tuple[str, ...]
    node_pools: tuple[NodePool, ...] = ()
    quotas: tuple[RegionalQuota, ...] = ()
    resource_flavors: tuple[ResourceFlavorSpec, ...] = ()
    cluster_queues: tuple[ClusterQueueSpec, ...] = ()
    local_queues: tuple[LocalQueueSpec, ...] = ()
    admission_checks: tuple[AdmissionCheckSpec, ...] = ()
    provisioning_configs: tuple[ProvisioningRequestConfigSpec, ...] = ()
    cohorts: tuple[CohortSpec, ...] = ()
    priority_classes: tuple[PriorityClassSpec, ...] = ()
    namespace_quotas: tuple[NamespaceQuotaSpec, ...] = ()
    fair_sharing: FairSharingConfig = field(default_factory=FairSharingConfig)
    wait_for_pods_ready: WaitForPodsReady = field(default_factory=WaitForPodsReady)
    booking_seconds: float = 600.0
    # DWS: at most this many requests Accepted (not yet provisioned) per project and region
    # (GKE's ACTIVE_RESIZE_REQUESTS quota); a new one beyond it fails at once.
    active_requests: int = 100
    # Existing nodes (declared; simulated node agents register them) and their topology.
    nodes: tuple[NodeInventory, ...] = ()
    topology: TopologySpec | None = None
    checkpointing: Checkpointing = field(default_factory=Checkpointing)

    def pool(self, name: str) -> NodePool | None:
        return next((p for p in self.node_pools if p.name == name), None)
