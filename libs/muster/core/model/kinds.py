"""The kinds of object the API serves, by the names kubectl users type for them."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ResourceKind:
    kind: str
    plural: str
    short: tuple[str, ...]  # short names and aliases, besides the singular and the plural
    namespaced: bool

    @property
    def names(self) -> tuple[str, ...]:
        return (self.kind.lower(), self.plural, *self.short)


WORKLOAD = ResourceKind("Workload", "workloads", ("wl",), True)
PROVISIONING_REQUEST = ResourceKind(
    "ProvisioningRequest", "provisioningrequests", ("provreq", "provreqs"), True
)
# Queue configuration: applied as manifests, read with get; the log keeps every version.
CONFIG_KINDS = (
    ResourceKind("ResourceFlavor", "resourceflavors", ("rf", "flavor", "flavors"), False),
    ResourceKind("ClusterQueue", "clusterqueues", ("cq",), False),
    ResourceKind("LocalQueue", "localqueues", ("lq", "queue", "queues"), True),
    ResourceKind("Cohort", "cohorts", (), False),
    ResourceKind(
        "PriorityClass",
        "priorityclasses",
        ("pc", "workloadpriorityclass", "workloadpriorityclasses", "wpc"),
        False,
    ),
    ResourceKind("ResourceQuota", "resourcequotas", ("quota", "quotas"), True),
    ResourceKind("AdmissionCheck", "admissionchecks", ("ac",), False),
    ResourceKind("ProvisioningRequestConfig", "provisioningrequestconfigs", ("prc",), False),
)
# The nodes (existing and provisioned), read-only: ``get nodes``.
NODE = ResourceKind("Node", "nodes", ("no",), False)
ALL = (WORKLOAD, *CONFIG_KINDS, PROVISIONING_REQUEST, NODE)
_BY_NAME = {n: k for k in ALL for n in k.names}


def resource_kind(name: str, among: Sequence[ResourceKind] = ALL) -> ResourceKind | None:
    """The kind a user means by ``name``, of those in ``among`` (matched by kind)."""
    k = _BY_NAME.get(name.lower())
    return next((a for a in among if k is not None and a.kind == k.kind), None)


def known(among: Sequence[ResourceKind] = ALL) -> str:
    return ", ".join(f"{k.plural} ({k.short[0]})" if k.short else k.plural for k in among)
