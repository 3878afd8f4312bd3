"""What a batch platform submits: a workload of one or more pod sets."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from muster.core.model import resources


@dataclass(frozen=True, slots=True, kw_only=True)
class Toleration:
    key: str = ""
    operator: str = "Equal"  # Equal | Exists
    value: str = ""
    effect: str = ""  # "" matches every effect


@dataclass(frozen=True, slots=True, kw_only=True)
class PodSet:
    name: str
    count: int
    requests: Mapping[str, int]
    node_selector: Mapping[str, str] = field(default_factory=dict)
    tolerations: tuple[Toleration, ...] = ()
    min_count: int | None = None

    def total_requests(self) -> dict[str, int]:
        return resources.scale(self.requests, self.count)


@dataclass(frozen=True, slots=True, kw_only=True)
class Runtime:
    """How a simulated pod behaves: it runs this long, then exits with this code."""

    duration_seconds: float = 60.0
    exit_code: int = 0


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

    def total_requests(self) -> dict[str, int]:
        return resources.total(ps.total_requests() for ps in self.pod_sets)

    @property
    def pod_count(self) -> int:
        return sum(ps.count for ps in self.pod_sets)


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
