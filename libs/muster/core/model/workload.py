"""What a batch platform submits: a workload of one or more pod sets."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from muster.core.model import resources
from muster.core.pickling import compact


@compact
@dataclass(frozen=True, slots=True, kw_only=True)
class Toleration:
    key: str = ""
    operator: str = "Equal"  # Equal | Exists
    value: str = ""
    effect: str = ""  # "" matches every effect


@compact
@dataclass(frozen=True, slots=True, kw_only=True)
class PodSetTopology:
    """Where a pod set's pods may go in the topology (levels are node labels).

    ``required``: all pods in one domain of that level, or wait (Kueue TAS).
    ``preferred``: one domain of that level if possible, else the next level up, else
    anywhere. Slices of ``slice_size`` pods (a JobSet child Job, a TAS slice) each go
    in one domain of ``slice_required``; with ``exclusive`` (JobSet exclusive-topology)
    each slice takes one whole value of that label that no other workload uses.
    ``tier`` is Volcano's ``networkTopology.highestTierAllowed`` (hard, or soft);
    ``slice_tier`` is a Volcano task's ``partitionPolicy``: each slice inside one domain of
    that tier (the level ``slice_required`` then names)."""

    required: str | None = None
    preferred: str | None = None
    slice_size: int | None = None
    slice_required: str | None = None
    exclusive: str | None = None
    tier: int | None = None
    tier_soft: bool = False
    slice_tier: int | None = None


@compact
@dataclass(frozen=True, slots=True, kw_only=True)
class DeviceFilter:
    """HAMi's pinning annotations: GPU UUIDs (exact) and types (case-insensitive
    substrings of the model) to use or avoid."""

    use_uuids: tuple[str, ...] = ()
    avoid_uuids: tuple[str, ...] = ()
    use_types: tuple[str, ...] = ()
    avoid_types: tuple[str, ...] = ()


# What happens to the pods of a pod set above ``min_count`` that were not admitted: Drop
# (Kueue's partial admission: never started) or Wait (Volcano's minAvailable: they stay
# pending and start when room appears; pods preempted from it wait the same way).
Surplus = Literal["Drop", "Wait"]
SURPLUS: tuple[str, ...] = ("Drop", "Wait")


@compact
@dataclass(frozen=True, slots=True, kw_only=True)
class PodSet:
    name: str
    count: int
    requests: Mapping[str, int]
    node_selector: Mapping[str, str] = field(default_factory=dict)
    tolerations: tuple[Toleration, ...] = ()
    min_count: int | None = None
    surplus: Surplus = "Drop"  # with min_count: Kueue's drop or Volcano's wait
    topology: PodSetTopology | None = None
    devices: DeviceFilter | None = None
    # Failed pods replaced in place before the pod set counts as failed (Job backoffLimit).
    backoff_limit: int = 0

    def total_requests(self) -> dict[str, int]:
        return resources.scale(self.requests, self.count)

    def pod_names(self, count: int | None = None) -> list[str]:
        return [f"{self.name}-{i}" for i in range(self.count if count is None else count)]


@compact
@dataclass(frozen=True, slots=True, kw_only=True)
class Runtime:
    """How a simulated pod behaves: it runs this long, then exits with this code."""

    duration_seconds: float = 60.0
    exit_code: int = 0
    exit_codes: tuple[int, ...] = ()  # per run of a pod (first run first); then exit_code

    def exit_code_of(self, run: int) -> int:
        return self.exit_codes[run] if run < len(self.exit_codes) else self.exit_code


FailureEvent = Literal["PodFailed", "PodEvicted", "TaskCompleted"]
FailureAction = Literal["RestartJob", "RestartJobIgnoreMax", "FailJob", "CompleteJob"]
FAILURE_EVENTS: tuple[str, ...] = ("PodFailed", "PodEvicted", "TaskCompleted")
FAILURE_ACTIONS: tuple[str, ...] = ("RestartJob", "RestartJobIgnoreMax", "FailJob", "CompleteJob")


@compact
@dataclass(frozen=True, slots=True, kw_only=True)
class FailureRule:
    """On ``event`` (in one of ``pod_sets``, or any), do ``action`` (Volcano policies,
    JobSet failurePolicy rules)."""

    event: FailureEvent
    action: FailureAction
    pod_sets: tuple[str, ...] = ()

    def matches(self, event: str, pod_set: str) -> bool:
        return self.event == event and (not self.pod_sets or pod_set in self.pod_sets)


@compact
@dataclass(frozen=True, slots=True, kw_only=True)
class FailurePolicy:
    """What happens when pods fail or are evicted. The first matching rule applies;
    otherwise a failed pod fails the workload (``on_failure``) and an evicted one (its
    node lost) restarts it. Restarts past ``max_restarts`` fail it (None: no limit)."""

    max_restarts: int | None = None
    rules: tuple[FailureRule, ...] = ()
    on_failure: FailureAction = "FailJob"

    def action(self, event: str, pod_set: str) -> FailureAction | None:
        rule = next((r for r in self.rules if r.matches(event, pod_set)), None)
        if rule is not None:
            return rule.action
        if event == "PodFailed":
            return self.on_failure
        if event == "PodEvicted":
            return "RestartJob"
        return None


# HAMi's GPU policies muster runs (mutex and numa are not modelled).
GPU_POLICIES = ("binpack", "spread", "topology-aware")


@compact
@dataclass(frozen=True, slots=True, kw_only=True)
class PlacementPolicy:
    """Binpack (fill nodes and GPUs, keep whole ones free) or spread, per level."""

    node: Literal["binpack", "spread"] = "binpack"
    # topology-aware (HAMi): whole GPUs by their links (as under every policy where a node's
    # links are known), shares of a card as binpack.
    gpu: Literal["binpack", "spread", "topology-aware"] = "binpack"


@compact
@dataclass(frozen=True, slots=True, kw_only=True)
class Gang:
    """The gang a workload is one member of (Armada's gangId and gangCardinality, a
    PodGroup's name and minMember, Kueue's pod-group-name and pod-group-total-count):
    nothing runs until ``cardinality`` members of ``name`` (in the namespace) are
    submitted; then intake submits them as one workload (``core/intake/gangs.py``)."""

    name: str
    cardinality: int


@compact
@dataclass(frozen=True, slots=True, kw_only=True)
class WorkloadSpec:
    name: str
    namespace: str
    queue_name: str  # the LocalQueue, in `namespace`; "" for a consumer of a request
    pod_sets: tuple[PodSet, ...]
    priority: int = 0
    priority_class: str | None = None
    max_run_duration_seconds: int | None = None
    runtime: Runtime = field(default_factory=Runtime)
    labels: Mapping[str, str] = field(default_factory=dict)
    # The standalone ProvisioningRequest (same namespace) whose nodes its pods run on, as the
    # pod annotation autoscaling.x-k8s.io/consume-provisioning-request says; no queue then.
    consumes: str | None = None
    # MetaX supernodes: all of the workload's GPUs in one group of the smallest topology
    # level that can hold this many (metax-tech.com/gpu-group-size).
    gpu_group_size: int | None = None
    placement: PlacementPolicy | None = None  # None: its ClusterQueue's
    failure_policy: FailurePolicy = field(default_factory=FailurePolicy)
    gang: Gang | None = None  # a member of a gang submitted member by member
    # Seconds between its checkpoints: preempted, it keeps floor(run / interval) x interval
    # of its progress (None: the cluster's default; no default either: it keeps nothing).
    checkpoint_interval_seconds: float | None = None
    # Kubernetes' terminationGracePeriodSeconds: a pod stopped is sent SIGTERM, then
    # SIGKILL this long after (a trainer checkpoints in between).
    termination_grace_seconds: float = 30.0

    def total_requests(self) -> dict[str, int]:
        return resources.total(ps.total_requests() for ps in self.pod_sets)

    @property
    def pod_count(self) -> int:
        return sum(ps.count for ps in self.pod_sets)


@compact
@dataclass(frozen=True, slots=True, kw_only=True)
class ProvisioningRequestSpec:
    """A standalone ProvisioningRequest: nodes for ``pod_sets``, all at once in one zone.

    Pods run on them by consuming it (``WorkloadSpec.consumes``); it starts none itself."""

    name: str
    namespace: str
    provisioning_class: str
    parameters: Mapping[str, str] = field(default_factory=dict)
    pod_sets: tuple[PodSet, ...] = ()

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"
