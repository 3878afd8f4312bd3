"""Flavor assignment: which ResourceFlavor each pod set's resources are charged to.

Kueue's rule (reference §1.4): for each resource group a pod set uses, try the
group's flavors in ClusterQueue order. A flavor is eligible when its node labels
do not contradict the pod set's node selector and the pod set tolerates its
taints. Each eligible flavor gets a mode per resource against the quota tree:
``Fit`` (with a borrowing level), ``Preempt`` (fits only if admitted workloads
make room) or no fit. The search stops at the first flavor that fits without
borrowing; the ClusterQueue's flavor fungibility decides whether it goes on past
one that needs borrowing or preemption, and which of the tried flavors wins.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from muster.core.model import matching
from muster.core.model.queues import ClusterQueueSpec, ResourceFlavorSpec, ResourceGroup
from muster.core.model.resources import format_quantity
from muster.core.model.workload import PodSet, WorkloadSpec
from muster.core.queueing import quota as qt

FIT, PREEMPT = "Fit", "Preempt"


@dataclass(frozen=True, slots=True)
class Assignment:
    """A workload's flavors, what it will charge, and the node labels its flavors imply."""

    flavors: dict[str, dict[str, str]]  # pod set -> resource -> flavor
    usage: dict[str, dict[str, int]]  # flavor -> resource -> quantity
    node_selectors: dict[str, dict[str, str]]  # pod set -> selector incl. flavor labels
    mode: str = FIT  # Fit | Preempt
    borrow: int = 0  # 0: within the queue's own quota; n: borrows from n levels up
    contested: frozenset[qt.FR] = frozenset()  # pairs that need preemption
    shortfall: dict[str, int] = field(default_factory=dict)  # resource -> missing, if Preempt
    message: str = ""  # why preemption is needed

    def frs(self) -> dict[qt.FR, int]:
        return {(f, r): q for f, res in self.usage.items() for r, q in res.items() if q}


@dataclass(frozen=True, slots=True)
class Unassignable:
    reason: str  # WaitingForQuota | ExceedsMaxQuota | NoMatchingFlavor | ...
    message: str
    shortfall: dict[str, int] = field(default_factory=dict)
    tried: tuple[str, ...] = ()  # the flavors looked at, in order (explain shows them)


@dataclass(frozen=True, slots=True)
class _Rules:
    can_preempt: bool
    beyond_nominal: bool
    exclude: frozenset[str]


@dataclass(frozen=True, slots=True)
class _Try:
    flavor: str
    mode: str
    borrow: int
    contested: frozenset[qt.FR]
    shortfall: dict[str, int]
    message: str

    def rank(self, preference: str) -> tuple[int, int]:
        fit = self.mode == FIT
        borrows = self.borrow > 0
        if preference == "PreemptionOverBorrowing":
            order = {(True, False): 0, (False, False): 1, (True, True): 2, (False, True): 3}
        else:
            order = {(True, False): 0, (True, True): 1, (False, False): 2, (False, True): 3}
        return order[(fit, borrows)], self.borrow


def assign(
    cq: ClusterQueueSpec,
    flavors: Mapping[str, ResourceFlavorSpec],
    spec: WorkloadSpec,
    tree: qt.QuotaTree,
    can_preempt: bool,
    pod_counts: Mapping[str, int] | None = None,
    *,
    beyond_nominal: bool = False,
    exclude: frozenset[str] = frozenset(),
    pinned: Mapping[str, Mapping[str, str]] | None = None,
) -> Assignment | Unassignable:
    """Assign every pod set; ``pod_counts`` overrides counts (partial admission).

    Preemption is considered only where the request fits the queue's own nominal quota,
    unless ``beyond_nominal`` (borrowWithinCohort, or fair sharing with reclaim) allows
    preempting in order to borrow. ``exclude`` names flavors where preemption was found
    to have no candidates: they are passed over, as Kueue ranks "no candidates" below
    every viable mode. ``pinned`` (pod set -> resource -> flavor) restricts the search to
    the flavors a preemptor evicted for.
    """
    rules = _Rules(can_preempt, beyond_nominal, exclude)
    node = tree.queues[cq.name]
    taken: dict[str, dict[str, int]] = {}
    chosen_flavors: dict[str, dict[str, str]] = {}
    selectors: dict[str, dict[str, str]] = {}
    mode, borrow = FIT, 0
    contested: set[qt.FR] = set()
    shortfall: dict[str, int] = {}
    messages: list[str] = []
    for ps in spec.pod_sets:
        count = pod_counts.get(ps.name, ps.count) if pod_counts else ps.count
        only = (pinned or {}).get(ps.name)
        outcome = _assign_pod_set(cq, flavors, ps, count, node, rules, taken, only)
        if isinstance(outcome, Unassignable):
            return Unassignable(
                outcome.reason,
                f"couldn't assign flavors to pod set {ps.name}: {outcome.message}",
                outcome.shortfall,
                outcome.tried,
            )
        per_resource, labels, tries = outcome
        chosen_flavors[ps.name] = per_resource
        selectors[ps.name] = {**labels, **ps.node_selector}
        for t in tries:
            borrow = max(borrow, t.borrow)
            if t.mode == PREEMPT:
                mode = PREEMPT
                contested |= t.contested
                for r, q in t.shortfall.items():
                    shortfall[r] = shortfall.get(r, 0) + q
                messages.append(t.message)
    return Assignment(
        flavors=chosen_flavors,
        usage=taken,
        node_selectors=selectors,
        mode=mode,
        borrow=borrow,
        contested=frozenset(contested),
        shortfall=shortfall,
        message="; ".join(messages),
    )


def _assign_pod_set(
    cq: ClusterQueueSpec,
    flavors: Mapping[str, ResourceFlavorSpec],
    ps: PodSet,
    count: int,
    node: qt.QuotaNode,
    rules: _Rules,
    taken: dict[str, dict[str, int]],
    only: Mapping[str, str] | None = None,
) -> tuple[dict[str, str], dict[str, str], list[_Try]] | Unassignable:
    needed = {r: q * count for r, q in ps.requests.items() if q > 0}
    needed["pods"] = count
    groups: list[ResourceGroup] = []
    for resource in sorted(needed):
        group = cq.group_for(resource)
        if group is None:
            if resource == "pods":
                continue  # quota on pods only where the queue declares it
            return Unassignable(
                "NoMatchingFlavor", f"resource {resource} unavailable in ClusterQueue {cq.name}"
            )
        if group not in groups:
            groups.append(group)
    chosen: dict[str, str] = {}
    labels: dict[str, str] = {}
    tries: list[_Try] = []
    for group in groups:
        wanted = {r: q for r, q in needed.items() if r in group.covered_resources}
        if only:
            keep = {only[r] for r in wanted if r in only}
            group = ResourceGroup(
                covered_resources=group.covered_resources,
                flavors=tuple(f for f in group.flavors if f.name in keep) or group.flavors,
            )
        outcome = _pick_flavor(cq, group, flavors, ps, wanted, node, rules, taken)
        if isinstance(outcome, Unassignable):
            return outcome
        per_flavor = taken.setdefault(outcome.flavor, {})
        for resource, qty in wanted.items():
            chosen[resource] = outcome.flavor
            per_flavor[resource] = per_flavor.get(resource, 0) + qty
        spec = flavors.get(outcome.flavor)
        labels.update(spec.node_labels if spec else {})
        tries.append(outcome)
    return chosen, labels, tries


def _pick_flavor(
    cq: ClusterQueueSpec,
    group: ResourceGroup,
    flavors: Mapping[str, ResourceFlavorSpec],
    ps: PodSet,
    wanted: Mapping[str, int],
    node: qt.QuotaNode,
    rules: _Rules,
    taken: Mapping[str, Mapping[str, int]],
) -> _Try | Unassignable:
    fungibility = cq.flavor_fungibility
    problems: list[Unassignable] = []
    viable: list[_Try] = []
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
        # The flavor's own tolerations are injected into the pods on admission: they count.
        if not matching.tolerates_all((*ps.tolerations, *flavor.tolerations), flavor.node_taints):
            problems.append(
                Unassignable("NoMatchingFlavor", f"untolerated taint in flavor {fq.name}")
            )
            continue
        outcome = _flavor_mode(fq.name, wanted, node, rules, taken)
        if isinstance(outcome, Unassignable):
            problems.append(outcome)
            continue
        if outcome.mode == PREEMPT and fq.name in rules.exclude:
            problems.append(
                Unassignable(
                    "WaitingForQuota",
                    f"{outcome.message}; no preemption candidates",
                    outcome.shortfall,
                )
            )
            continue
        viable.append(outcome)
        if outcome.mode == FIT and (
            outcome.borrow == 0 or fungibility.when_can_borrow == "MayStopSearch"
        ):
            break
        if outcome.mode == PREEMPT and fungibility.when_can_preempt == "MayStopSearch":
            break
    if viable:
        return min(viable, key=lambda t: t.rank(fungibility.preference))
    return replace(_most_telling(problems), tried=tuple(fq.name for fq in group.flavors))


def _flavor_mode(
    name: str,
    wanted: Mapping[str, int],
    node: qt.QuotaNode,
    rules: _Rules,
    taken: Mapping[str, Mapping[str, int]],
) -> _Try | Unassignable:
    mode, borrow = FIT, 0
    beyond = False
    contested: set[qt.FR] = set()
    shortfall: dict[str, int] = {}
    waiting: list[str] = []
    over_max: list[str] = []
    for resource, qty in sorted(wanted.items()):
        fr = (name, resource)
        value = taken.get(name, {}).get(resource, 0) + qty
        most = qt.potential(node, fr)
        if value > most:
            over_max.append(
                f"insufficient quota for {resource} in flavor {name}, request > maximum "
                f"capacity ({format_quantity(resource, value)} > {format_quantity(resource, most)})"
            )
            continue
        free = qt.available(node, fr)
        if value <= free:
            borrow = max(borrow, qt.borrow_level(node, fr, value))
            continue
        missing = value - max(free, 0)
        beyond = beyond or value > node.subtree.get(fr, 0)
        shortfall[resource] = missing
        contested.add(fr)
        waiting.append(
            f"insufficient quota for {resource} in flavor {name}, "
            f"{format_quantity(resource, missing)} more needed"
        )
        mode = PREEMPT
    if over_max:
        return Unassignable("ExceedsMaxQuota", "; ".join(over_max))
    if mode == PREEMPT and (not rules.can_preempt or (beyond and not rules.beyond_nominal)):
        return Unassignable("WaitingForQuota", "; ".join(waiting), shortfall)
    if mode == PREEMPT:
        # The borrowing it would need once the victims are gone (Kueue ranks flavors
        # by the level after preemption): none if it fits the queue's own quota.
        for fr in sorted(contested):
            value = taken.get(name, {}).get(fr[1], 0) + wanted[fr[1]]
            borrow = max(borrow, qt.borrow_level(node, fr, value, ignore_usage=True))
    return _Try(name, mode, borrow, frozenset(contested), shortfall, "; ".join(waiting))


def _most_telling(problems: list[Unassignable]) -> Unassignable:
    """Report a quota shortfall over a mismatch: it says what would let the workload in."""
    for reason in ("WaitingForQuota", "ExceedsMaxQuota", "NoMatchingFlavor"):
        hits = [p for p in problems if p.reason == reason]
        if hits:
            shortfall: dict[str, int] = {}
            for p in hits[:1]:
                shortfall.update(p.shortfall)
            return Unassignable(reason, ", ".join(p.message for p in hits), shortfall)
    return Unassignable("NoMatchingFlavor", "no flavors in resource group")
