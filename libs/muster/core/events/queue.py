"""Queue configuration (``config-*``) and admission decisions (``admission-*``)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from muster.core.events.base import Event, event_class
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
    WaitForPodsReady,
)
from muster.core.model.workload import Toleration
from muster.core.placement.book import Placement
from muster.core.placement.devices import DeviceShare

# One decision stream for the whole cluster: its version is the single-writer guard
# that keeps two queue replicas from admitting against the same quota.
ADMISSION_STREAM = "admission-cluster"


def config_stream(kind: str, name: str) -> str:
    return f"config-{kind}-{name}"


@event_class("config.resource_flavor_configured")
@dataclass(frozen=True, slots=True, kw_only=True)
class ResourceFlavorConfigured(Event):
    spec: ResourceFlavorSpec


@event_class("config.cluster_queue_configured")
@dataclass(frozen=True, slots=True, kw_only=True)
class ClusterQueueConfigured(Event):
    spec: ClusterQueueSpec


@event_class("config.local_queue_configured")
@dataclass(frozen=True, slots=True, kw_only=True)
class LocalQueueConfigured(Event):
    spec: LocalQueueSpec


@event_class("config.admission_check_configured")
@dataclass(frozen=True, slots=True, kw_only=True)
class AdmissionCheckConfigured(Event):
    spec: AdmissionCheckSpec


@event_class("config.provisioning_request_config_configured")
@dataclass(frozen=True, slots=True, kw_only=True)
class ProvisioningRequestConfigConfigured(Event):
    spec: ProvisioningRequestConfigSpec


@dataclass(frozen=True, slots=True, kw_only=True)
class ProvisioningAsk:
    """What a ClusterQueue's provisioning admission check asks of the provisioner."""

    check: str
    provisioning_class: str
    parameters: Mapping[str, str] = field(default_factory=dict)  # config, then job annotations
    pod_set_merge_policy: str = ""


@event_class("config.cohort_configured")
@dataclass(frozen=True, slots=True, kw_only=True)
class CohortConfigured(Event):
    spec: CohortSpec


@event_class("config.priority_class_configured")
@dataclass(frozen=True, slots=True, kw_only=True)
class PriorityClassConfigured(Event):
    spec: PriorityClassSpec


@event_class("config.namespace_quota_configured")
@dataclass(frozen=True, slots=True, kw_only=True)
class NamespaceQuotaConfigured(Event):
    spec: NamespaceQuotaSpec


@event_class("config.fair_sharing_configured")
@dataclass(frozen=True, slots=True, kw_only=True)
class FairSharingConfigured(Event):
    spec: FairSharingConfig


@event_class("config.wait_for_pods_ready_configured")
@dataclass(frozen=True, slots=True, kw_only=True)
class WaitForPodsReadyConfigured(Event):
    spec: WaitForPodsReady


@event_class("admission.pending")
@dataclass(frozen=True, slots=True, kw_only=True)
class WorkloadPending(Event):
    """The reason a workload waits changed (recorded on change of reason, not every cycle)."""

    workload_id: str
    reason: str
    message: str
    # reason Preempting: the flavors it preempts for (pod set -> resource -> flavor); it is
    # admitted with these once the victims are gone, so it never evicts for nothing.
    flavors: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    # reason Preempting, on existing nodes: where it goes once the victims are gone. It
    # is placed there first, so what its victims free is not taken by another preemptor.
    placement: Placement | None = None


@event_class("admission.quota_reserved")
@dataclass(frozen=True, slots=True, kw_only=True)
class QuotaReserved(Event):
    workload_id: str
    cluster_queue: str
    # pod set -> resource -> flavor
    flavors: Mapping[str, Mapping[str, str]]
    # flavor -> resource -> quantity charged
    usage: Mapping[str, Mapping[str, int]]
    # pod set -> node selector, with the labels of its flavors (Kueue injects them)
    node_selectors: Mapping[str, Mapping[str, str]]
    attempt: int
    message: str
    # pod set -> admitted count, for pod sets admitted partially (minCount); others full
    pod_counts: Mapping[str, int] = field(default_factory=dict)
    # pod set -> the tolerations of its flavors, injected into its pods (as Kueue does)
    tolerations: Mapping[str, tuple[Toleration, ...]] = field(default_factory=dict)
    # The ClusterQueue's provisioning admission check: Admitted only once it is Provisioned.
    provisioning: ProvisioningAsk | None = None
    # Placed on existing nodes (pods, device shares, exclusive topology values held);
    # None: on nodes the provisioner creates.
    placement: Placement | None = None
    # The admission checks of this attempt that start Pending (Admitted once all are
    # Ready), and those Ready at once (check -> why: a ProvisioningRequest not needed).
    # Both empty in events from before several checks: the provisioning check alone.
    checks: tuple[str, ...] = ()
    checks_ready: Mapping[str, str] = field(default_factory=dict)


@event_class("admission.admitted")
@dataclass(frozen=True, slots=True, kw_only=True)
class WorkloadAdmitted(Event):
    workload_id: str
    cluster_queue: str
    attempt: int
    # pod name -> node name: where each pod of the gang runs
    placements: Mapping[str, str]
    message: str
    # The provisioning request whose nodes it runs on ("" in events before requests had ids
    # here); binding its pods consumes the request's booking.
    request_id: str = ""
    # pod name -> its shares of the node's devices (HAMi's devices-to-allocate)
    devices: Mapping[str, tuple[DeviceShare, ...]] = field(default_factory=dict)


@event_class("admission.pod_replaced")
@dataclass(frozen=True, slots=True, kw_only=True)
class PodReplaced(Event):
    """A failed pod is replaced on its node (Job backoffLimit not yet reached)."""

    workload_id: str
    attempt: int
    pod: str
    node: str
    failures: int  # of its pod set so far
    message: str


@event_class("admission.evicted")
@dataclass(frozen=True, slots=True, kw_only=True)
class WorkloadEvicted(Event):
    """Quota released and the workload requeued (it keeps its queue position)."""

    workload_id: str
    reason: str
    message: str
    preemptor: str | None = None
    # Kueue's Preempted condition reason: InClusterQueue, InCohortReclamation, ...
    preemption_reason: str | None = None
    # Not admissible again before this many seconds (an admission check's retry backoff).
    requeue_after_seconds: float | None = None
    # Deactivated (Kueue's spec.active=false): evicted for good, never requeued.
    deactivate: bool = False
    # A restart by the workload's failure policy (counted against maxRestarts).
    restart: bool = False


@event_class("admission.shrunk")
@dataclass(frozen=True, slots=True, kw_only=True)
class WorkloadShrunk(Event):
    """Preemption took surplus pods of a workload running above its minimum (Volcano's
    task preemption of an elastic job, Kueue's partial admission): those pods stop, the
    rest run on in the same attempt, with the quota of what is left."""

    workload_id: str
    attempt: int
    pods: tuple[str, ...]  # the pods taken (each pod set's highest indexes)
    pod_counts: Mapping[str, int]  # pod set -> the count it runs with now
    usage: Mapping[str, Mapping[str, int]]  # flavor -> resource -> what it holds now
    message: str
    preemptor: str
    preemption_reason: str


@event_class("admission.grown")
@dataclass(frozen=True, slots=True, kw_only=True)
class WorkloadGrown(Event):
    """Room appeared for pods of a workload running below its count whose surplus waits
    (Volcano's minAvailable: the pods above it stay pending and start as resources free
    up): they join the same attempt, placed on existing nodes, with more quota charged.
    The mirror of ``admission.shrunk``."""

    workload_id: str
    attempt: int
    pods: tuple[str, ...]  # the pods added (each pod set's next indexes)
    pod_counts: Mapping[str, int]  # pod set -> the count it runs with now
    usage: Mapping[str, Mapping[str, int]]  # flavor -> resource -> what it holds now
    placement: Placement  # the added pods: their nodes and device shares
    message: str


@event_class("admission.finished")
@dataclass(frozen=True, slots=True, kw_only=True)
class WorkloadFinished(Event):
    workload_id: str
    # Preempted: evicted by a preemptor in a ClusterQueue whose preemption.onPreempted is
    # End (Armada's terminal state), not requeued.
    outcome: Literal["Succeeded", "Failed", "Preempted"]
    reason: str
    message: str


@event_class("admission.cancelled")
@dataclass(frozen=True, slots=True, kw_only=True)
class WorkloadCancelled(Event):
    workload_id: str
    message: str


@event_class("admission.rejected")
@dataclass(frozen=True, slots=True, kw_only=True)
class WorkloadRejected(Event):
    workload_id: str
    reason: str
    message: str


# -- sharded queue deciders (core/queueing/sharding.py) -----------------------------------


def group_stream(group: str) -> str:
    """A cohort tree's decision stream when the queue is split: its claims and its
    decisions share it, so a stale owner's decision conflicts with the new owner's claim."""
    return "admission-" + group.replace("/", ".")


def shard_stream(owner: str) -> str:
    return f"admission-shard.{owner}"


@event_class("admission.shard_started")
@dataclass(frozen=True, slots=True, kw_only=True)
class QueueShardStarted(Event):
    """A queue decider of a split queue (re)started: the cohort trees it prefers (cohort or
    ClusterQueue names; its shell appends this at start-up, stream ``admission-shard.<owner>``)
    and how long its claims last."""

    owner: str
    prefers: tuple[str, ...]
    claim_seconds: float


@event_class("admission.group_claimed")
@dataclass(frozen=True, slots=True, kw_only=True)
class GroupClaimed(Event):
    """``owner`` decides for the cohort tree ``group`` until ``until`` (renewed before);
    another decider may take it over once ``until`` has passed by a claim's length."""

    group: str
    owner: str
    until: float
