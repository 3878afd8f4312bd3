"""Flavor assignment: which ResourceFlavor each pod set's resources are charged to.

Kueue's rule: for each resource group the pod set uses, try the group's flavors in
order and take the first whose node labels do not contradict the pod set's node
selector, whose taints the pod set tolerates, and where every requested resource
of the group fits within nominal quota after what is already used.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from muster.core.model import matching
from muster.core.model.queues import (
    ClusterQueueSpec,
    FlavorQuotas,
    ResourceFlavorSpec,
    ResourceGroup,
)
from muster.core.model.resources import format_quantity
from muster.core.model.workload import PodSet, WorkloadSpec

Usage = Mapping[str, Mapping[str, int]]


@dataclass(frozen=True, slots=True)
class Assignment:
    """A workload's flavors, what it will charge, and the node labels its flavors imply."""

    flavors: dict[str, dict[str, str]]  # pod set -> resource -> flavor
    usage: dict[str, dict[str, int]]  # flavor -> resource -> quantity
    node_selectors: dict[str, dict[str, str]]  # pod set -> selector incl. flavor labels


@dataclass(frozen=True, slots=True)
class Unassignable:
    reason: str  # WaitingForQuota | ExceedsMaxQuota | NoMatchingFlavor
    message: str
    shortfall: dict[str, int] = field(default_factory=dict)


def assign(
    cq: ClusterQueueSpec,
    flavors: Mapping[str, ResourceFlavorSpec],
    spec: WorkloadSpec,
    used: Usage,
) -> Assignment | Unassignable:
    taken: dict[str, dict[str, int]] = {}
    result = Assignment(flavors={}, usage=taken, node_selectors={})
    for ps in spec.pod_sets:
        outcome = _assign_pod_set(cq, flavors, ps, used, taken)
        if isinstance(outcome, Unassignable):
            return Unassignable(
                outcome.reason,
                f"couldn't assign flavors to pod set {ps.name}: {outcome.message}",
                outcome.shortfall,
            )
        chosen, labels = outcome
        result.flavors[ps.name] = chosen
        result.node_selectors[ps.name] = {**labels, **ps.node_selector}
    return result


def _assign_pod_set(
    cq: ClusterQueueSpec,
    flavors: Mapping[str, ResourceFlavorSpec],
    ps: PodSet,
    used: Usage,
    taken: dict[str, dict[str, int]],
) -> tuple[dict[str, str], dict[str, str]] | Unassignable:
    needed = {r: q for r, q in ps.total_requests().items() if q > 0}
    chosen: dict[str, str] = {}
    labels: dict[str, str] = {}
    groups: list[ResourceGroup] = []
    for resource in sorted(needed):
        group = cq.group_for(resource)
        if group is None:
            return Unassignable(
                "NoMatchingFlavor", f"resource {resource} unavailable in ClusterQueue {cq.name}"
            )
        if group not in groups:
            groups.append(group)
    for group in groups:
        wanted = {r: q for r, q in needed.items() if r in group.covered_resources}
        outcome = _first_fitting_flavor(group, flavors, ps, wanted, used, taken)
        if isinstance(outcome, Unassignable):
            return outcome
        for resource in wanted:
            chosen[resource] = outcome
        labels.update(flavors[outcome].node_labels if outcome in flavors else {})
    return chosen, labels


def _first_fitting_flavor(
    group: ResourceGroup,
    flavors: Mapping[str, ResourceFlavorSpec],
    ps: PodSet,
    wanted: Mapping[str, int],
    used: Usage,
    taken: dict[str, dict[str, int]],
) -> str | Unassignable:
    problems: list[Unassignable] = []
    for fq in group.flavors:
        flavor = flavors.get(fq.name)
        if flavor is None:
            problems.append(Unassignable("NoMatchingFlavor", f"flavor {fq.name} not found"))
            continue
        bad = matching.conflicts(ps.node_selector, flavor.node_labels)
        if bad:
            problems.append(
                Unassignable(
                    "NoMatchingFlavor", f"flavor {fq.name} doesn't match node selector {bad[0]}"
                )
            )
            continue
        if not matching.tolerates_all(ps.tolerations, flavor.node_taints):
            problems.append(
                Unassignable("NoMatchingFlavor", f"untolerated taint in flavor {fq.name}")
            )
            continue
        problem = _quota_problem(fq.name, fq, wanted, used, taken)
        if problem is None:
            per_flavor = taken.setdefault(fq.name, {})
            for resource, qty in wanted.items():
                per_flavor[resource] = per_flavor.get(resource, 0) + qty
            return fq.name
        problems.append(problem)
    return _most_telling(problems)


def _quota_problem(
    name: str,
    fq: FlavorQuotas,
    wanted: Mapping[str, int],
    used: Usage,
    taken: Mapping[str, Mapping[str, int]],
) -> Unassignable | None:
    shortfall: dict[str, int] = {}
    messages: list[str] = []
    over_max = False
    for resource, qty in sorted(wanted.items()):
        quota = fq.quota(resource)
        nominal = quota.nominal_quota if quota else 0
        in_use = used.get(name, {}).get(resource, 0) + taken.get(name, {}).get(resource, 0)
        if qty > nominal:
            over_max = True
            messages.append(
                f"insufficient quota for {resource} in flavor {name}, request > maximum "
                f"capacity ({format_quantity(resource, qty)} > "
                f"{format_quantity(resource, nominal)})"
            )
        elif in_use + qty > nominal:
            missing = in_use + qty - nominal
            shortfall[resource] = missing
            messages.append(
                f"insufficient quota for {resource} in flavor {name}, "
                f"{format_quantity(resource, missing)} more needed"
            )
    if not messages:
        return None
    reason = "ExceedsMaxQuota" if over_max else "WaitingForQuota"
    return Unassignable(reason, "; ".join(messages), shortfall)


def _most_telling(problems: list[Unassignable]) -> Unassignable:
    """Report a quota shortfall over a mismatch: it says what would let the workload in."""
    for reason in ("WaitingForQuota", "ExceedsMaxQuota", "NoMatchingFlavor"):
        hits = [p for p in problems if p.reason == reason]
        if hits:
            return Unassignable(reason, ", ".join(p.message for p in hits), hits[0].shortfall)
    return Unassignable("NoMatchingFlavor", "no flavors in resource group")
