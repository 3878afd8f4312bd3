"""Queue configuration objects, shaped like Kueue's."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from muster.core.model.workload import Toleration


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


@dataclass(frozen=True, slots=True, kw_only=True)
class ClusterQueueSpec:
    name: str
    resource_groups: tuple[ResourceGroup, ...]
    cohort: str | None = None
    queueing_strategy: QueueingStrategy = "BestEffortFIFO"
    admission_checks: tuple[str, ...] = ()

    def group_for(self, resource: str) -> ResourceGroup | None:
        return next((g for g in self.resource_groups if resource in g.covered_resources), None)


@dataclass(frozen=True, slots=True, kw_only=True)
class LocalQueueSpec:
    namespace: str
    name: str
    cluster_queue: str

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"
