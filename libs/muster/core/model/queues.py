"""Queue configuration objects, shaped like Kueue's."""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from muster.core.model.workload import PlacementPolicy, Toleration


@dataclass(frozen=True, slots=True, kw_only=True)
class Taint:
    key: str
    value: str = ""
    effect: str = "NoSchedule"


@dataclass(frozen=True, slots=True, kw_only=True)
class ResourceFlavorSpec:
    name: str
    node_labels: Mapping[str, str] = field(default_factory=dict)
    node_taints: tuple[Taint, ...] = ()
    tolerations: tuple[Toleration, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class ResourceQuota:
    name: str
    nominal_quota: int
    borrowing_limit: int | None = None
    lending_limit: int | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class FlavorQuotas:
    name: str
    resources: tuple[ResourceQuota, ...]

    def quota(self, resource: str) -> ResourceQuota | None:
        return next((r for r in self.resources if r.name == resource), None)


@dataclass(frozen=True, slots=True, kw_only=True)
class ResourceGroup:
    covered_resources: tuple[str, ...]
    flavors: tuple[FlavorQuotas, ...]


QueueingStrategy = Literal["BestEffortFIFO", "StrictFIFO"]
WithinClusterQueue = Literal["Never", "LowerPriority", "LowerOrNewerEqualPriority"]
ReclaimWithinCohort = Literal["Never", "LowerPriority", "Any"]
StopPolicy = Literal["None", "Hold", "HoldAndDrain"]
AdmissionMode = Literal["None", "UsageBasedAdmissionFairSharing"]


@dataclass(frozen=True, slots=True, kw_only=True)
class BorrowWithinCohort:
    policy: Literal["Never", "LowerPriority"] = "Never"
    max_priority_threshold: int | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class PreemptionPolicy:
    within_cluster_queue: WithinClusterQueue = "Never"
    reclaim_within_cohort: ReclaimWithinCohort = "Never"
    borrow_within_cohort: BorrowWithinCohort = field(default_factory=BorrowWithinCohort)
    # Seconds a workload this queue admitted runs before any preemptor may take it (the
    # minimum-runtime guarantee of Slurm's PreemptExemptTime, KAI's min-runtime, Kueue's
    # KEP-9876): 0, the default, protects nothing.
    min_admit_duration: float = 0.0
    # What a workload this queue admitted becomes when it is preempted: requeued (Kueue),
    # or ended for good in the terminal state Preempted (Armada).
    on_preempted: Literal["Requeue", "End"] = "Requeue"


@dataclass(frozen=True, slots=True, kw_only=True)
class AttainedService:
    """Tiresias' discretised 2D-LAS (NSDI'19 §3-4): a workload's attained service is the
    accelerators it held x the seconds it held them, over its admitted attempts; its level
    is the number of ``levels`` (GPU-second thresholds, ascending) it has passed. Within a
    priority class a lower level goes first (and, as ``withinClusterQueue`` allows,
    preempts a higher one); within a level, submission order. A pending workload that has
    waited ``starvation_factor`` x the seconds it ran goes back to level 0 (Tiresias'
    STARVELIMIT; 0: never), after at most ``starvation_limit`` seconds where that is set
    (0: no limit). A workload evicted ``max_preemptions`` times is no longer preempted for
    its level (0: no bound; with ``max_preemptions_min_devices``, only a workload holding at
    least that many accelerators is bound); one preempted ``max_cross_tenant_preemptions``
    times by other tenants' workloads is no longer preempted for its level by another
    tenant's, but still by its own tenant's (0: no bound): the bound protects tenants from
    each other, not a job from the shorter work of its own tenant. With
    ``preempt_for_placement``, a pending workload whose quota is there but whose gang has
    no place on the nodes (they are fragmented by smaller work) preempts running work of a
    lower rank until it has one (Tiresias places a gang on consolidated nodes, preempting
    lower-priority jobs; muster otherwise preempts only for quota)."""

    levels: tuple[float, ...]
    starvation_factor: float = 0.0
    preempt_for_placement: bool = False
    starvation_limit: float = 0.0
    max_preemptions: int = 0
    max_cross_tenant_preemptions: int = 0
    max_preemptions_min_devices: int = 0

    def spent(
        self, evictions: int, cross_tenant: int = 0, same_tenant: bool = True, held: int = 0
    ) -> bool:
        """Whether a workload holding ``held`` accelerators, evicted ``evictions`` times,
        ``cross_tenant`` of them by other tenants' workloads, is past the preemptions it may
        take from a preemptor of its own tenant (``same_tenant``) or of another."""
        if 0 < self.max_preemptions <= evictions and held >= self.max_preemptions_min_devices:
            return True
        return not same_tenant and 0 < self.max_cross_tenant_preemptions <= cross_tenant

    def level(self, service: float) -> int:
        return bisect_right(self.levels, service)


@dataclass(frozen=True, slots=True, kw_only=True)
class BackfillPolicy:
    """Reservations and backfill (Slurm's sched/backfill, Volcano's reserve + backfill
    actions): a head that has waited ``reserve_after_seconds`` and does not fit holds the
    earliest-freeing nodes that can take it; later work goes there only if its declared
    ``maxRunDurationSeconds`` ends before the reservation's estimated start."""

    reserve_after_seconds: float = 0.0
    # Slurm's DefaultTime: the run time assumed for a running workload that declares no
    # maxRunDurationSeconds (None: unknown, it frees its nodes after every declared one).
    default_run_seconds: float | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class FlavorFungibility:
    when_can_borrow: Literal["MayStopSearch", "TryNextFlavor"] = "MayStopSearch"
    when_can_preempt: Literal["MayStopSearch", "TryNextFlavor"] = "TryNextFlavor"
    preference: Literal["BorrowingOverPreemption", "PreemptionOverBorrowing"] = (
        "BorrowingOverPreemption"
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class ClusterQueueSpec:
    name: str
    resource_groups: tuple[ResourceGroup, ...]
    cohort: str | None = None
    queueing_strategy: QueueingStrategy = "BestEffortFIFO"
    admission_checks: tuple[str, ...] = ()
    # admissionChecksStrategy.admissionChecks[].onFlavors: check -> the flavors it runs for
    # (a check not named here runs for every workload, as one listed in admissionChecks).
    check_flavors: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    preemption: PreemptionPolicy = field(default_factory=PreemptionPolicy)
    flavor_fungibility: FlavorFungibility = field(default_factory=FlavorFungibility)
    fair_sharing_weight: float = 1.0
    stop_policy: StopPolicy = "None"
    # Within the queue: order tenants (LocalQueues) by their current share, weighted.
    admission_mode: AdmissionMode = "None"
    # How its workloads are placed on existing nodes (Volcano binpack / HAMi policies).
    placement: PlacementPolicy = field(default_factory=PlacementPolicy)
    # Attained-service priority within each priority class (None: off).
    attained_service: AttainedService | None = None
    # Reservations for heads that waited, and backfill around them (None: off).
    backfill: BackfillPolicy | None = None

    def group_for(self, resource: str) -> ResourceGroup | None:
        return next((g for g in self.resource_groups if resource in g.covered_resources), None)


@dataclass(frozen=True, slots=True, kw_only=True)
class CohortSpec:
    """A node of the quota tree above ClusterQueues: may hold quota and have a parent."""

    name: str
    parent: str | None = None
    resource_groups: tuple[ResourceGroup, ...] = ()
    fair_sharing_weight: float = 1.0


@dataclass(frozen=True, slots=True, kw_only=True)
class LocalQueueSpec:
    namespace: str
    name: str
    cluster_queue: str
    stop_policy: StopPolicy = "None"
    fair_sharing_weight: float = 1.0

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True, slots=True, kw_only=True)
class PriorityClassSpec:
    """Kueue's WorkloadPriorityClass or Kubernetes' PriorityClass: a named priority value."""

    name: str
    value: int
    kind: Literal["WorkloadPriorityClass", "PriorityClass"] = "WorkloadPriorityClass"
    global_default: bool = False
    # Armada's priorityClass.preemptible: false means its workloads are never preempted.
    preemptible: bool = True
    # Kubernetes' PriorityClass.preemptionPolicy: Never means its workloads wait for room
    # and never preempt others.
    preemption_policy: Literal["PreemptLowerPriority", "Never"] = "PreemptLowerPriority"


@dataclass(frozen=True, slots=True, kw_only=True)
class NamespaceQuotaSpec:
    """Like a Kubernetes ResourceQuota: a cap on what one namespace's workloads hold at once.

    ``enforcement`` chooses what happens to a workload that would exceed it: wait
    (the default, with a reason naming the quota) or be rejected, as the API server
    refuses a pod over a ResourceQuota.
    """

    namespace: str
    name: str
    hard: Mapping[str, int]
    enforcement: Literal["Wait", "Reject"] = "Wait"

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True, slots=True, kw_only=True)
class WaitForPodsReady:
    """Kueue's waitForPodsReady: evict and requeue (with backoff) an admitted workload whose
    pods are not all running within ``timeout_seconds`` of its admission."""

    enable: bool = False
    timeout_seconds: float = 1800.0
    block_admission: bool = False
    requeue_timestamp: Literal["Eviction", "Creation"] = "Eviction"
    backoff_limit_count: int | None = None  # None: requeue forever
    backoff_base_seconds: float = 60.0
    backoff_max_seconds: float = 3600.0

    def backoff(self, count: int) -> float:
        """base * 2^(count-1), capped: 60, 120, 240, ... 3600 s by default."""
        return float(
            min(self.backoff_base_seconds * 2 ** max(0, count - 1), self.backoff_max_seconds)
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class FairSharingConfig:
    """Cluster-wide switch, as in Kueue's configuration: order and preempt by weighted share."""

    enable: bool = False
    preemption_strategies: tuple[str, ...] = ("LessThanOrEqualToFinalShare", "LessThanInitialShare")


PROVISIONING_CONTROLLER = "kueue.x-k8s.io/provisioning-request"
DWS_CLASS = "queued-provisioning.gke.io"
# GKE's flex-start limit, and the default when a DWS request names none (seed 000).
MAX_RUN_SECONDS = 7 * 86400


@dataclass(frozen=True, slots=True, kw_only=True)
class RetryStrategy:
    """Kueue's ProvisioningRequestConfig.retryStrategy: how often a failed request is retried."""

    backoff_limit_count: int = 3
    backoff_base_seconds: float = 60.0
    backoff_max_seconds: float = 1800.0

    def backoff(self, retry: int) -> float:
        """base * 2^(retry-1), capped: 60, 120, 240 ... 1800 s by default."""
        return float(
            min(self.backoff_base_seconds * 2 ** max(0, retry - 1), self.backoff_max_seconds)
        )


PodSetMergePolicy = Literal["", "IdenticalPodTemplates", "IdenticalWorkloadSchedulingRequirements"]


@dataclass(frozen=True, slots=True, kw_only=True)
class ProvisioningRequestConfigSpec:
    """Kueue's ProvisioningRequestConfig: the ProvisioningRequest an admission check creates."""

    name: str
    provisioning_class: str
    managed_resources: tuple[str, ...] = ()  # empty: every workload needs a request
    parameters: Mapping[str, str] = field(default_factory=dict)
    retry: RetryStrategy = field(default_factory=RetryStrategy)
    pod_set_merge_policy: PodSetMergePolicy = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class AdmissionCheckSpec:
    """Kueue's AdmissionCheck. muster runs the ProvisioningRequest controller's checks
    itself; a check of any other controller is external: its controller reports the check's
    state per workload through the API (``PUT /v1/workloads/{id}/admissionchecks/{check}``)."""

    name: str
    controller_name: str = PROVISIONING_CONTROLLER
    config: str | None = None  # the ProvisioningRequestConfig it is parameterised by

    @property
    def external(self) -> bool:
        return self.controller_name != PROVISIONING_CONTROLLER


# Kueue's CheckState: what an admission check says of one workload's attempt.
CheckState = Literal["Pending", "Ready", "Retry", "Rejected"]
CHECK_STATES: tuple[CheckState, ...] = ("Pending", "Ready", "Retry", "Rejected")


@dataclass(frozen=True, slots=True, kw_only=True)
class PodSetUpdate:
    """Kueue's AdmissionCheckState.podSetUpdates[]: what a check asks of a pod set's pods
    (the batch platform that creates the pods applies it, e.g. the ProvisioningRequest
    check's consume annotations)."""

    name: str
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    node_selector: Mapping[str, str] = field(default_factory=dict)
