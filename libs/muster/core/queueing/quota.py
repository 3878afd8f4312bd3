"""The quota tree: ClusterQueues as leaves, Cohorts above, usage bubbling up.

Kueue's arithmetic (reference §1.3), per (flavor, resource) pair ``fr``:

* ``subtree(cq) = nominal``; ``subtree(cohort) = own nominal + sum(child.subtree - child.local)``.
* ``local(node) = max(0, subtree - lendingLimit)`` when a lending limit is set, else 0: what
  the parent never sees.
* Usage bubbles up: the part of a charge beyond the node's remaining local quota is
  charged to its parent.
* ``available`` is what a node may still take now (borrowing included, capped by
  ``borrowingLimit``); ``potential`` is the most it could ever hold under this config.

All numbers are integers (cpu in millis), so the tree is exact and deterministic.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from muster.core.model.queues import ClusterQueueSpec, CohortSpec, ResourceGroup, ResourceQuota

FR = tuple[str, str]  # (flavor, resource)


@dataclass(slots=True)
class QuotaNode:
    name: str
    is_queue: bool
    weight: float = 1.0
    parent: QuotaNode | None = None
    children: list[QuotaNode] = field(default_factory=list)
    quotas: dict[FR, ResourceQuota] = field(default_factory=dict)
    subtree: dict[FR, int] = field(default_factory=dict)
    usage: dict[FR, int] = field(default_factory=dict)
    height: int = 0  # 0 for a queue; a cohort: 1 + its tallest child
    lendable: dict[str, int] | None = None  # see dominant_share

    def nominal(self, fr: FR) -> int:
        q = self.quotas.get(fr)
        return q.nominal_quota if q else 0

    def local(self, fr: FR) -> int:
        q = self.quotas.get(fr)
        if q is None or q.lending_limit is None:
            return 0
        return max(0, self.subtree.get(fr, 0) - q.lending_limit)

    def borrowing_limit(self, fr: FR) -> int | None:
        q = self.quotas.get(fr)
        if q is None:
            # A queue borrows only for pairs it defines; a cohort without its own
            # quota for the pair passes its children's up unchanged.
            return 0 if self.is_queue else None
        return q.borrowing_limit

    def root(self) -> QuotaNode:
        node = self
        while node.parent is not None:
            node = node.parent
        return node

    def borrowing(self, fr: FR) -> int:
        """How much of ``fr`` this node uses beyond its own subtree quota."""
        return max(0, self.usage.get(fr, 0) - self.subtree.get(fr, 0))


def _quotas(groups: Iterable[ResourceGroup]) -> dict[FR, ResourceQuota]:
    return {(fq.name, rq.name): rq for g in groups for fq in g.flavors for rq in fq.resources}


@dataclass(slots=True)
class QuotaTree:
    queues: dict[str, QuotaNode]
    cohorts: dict[str, QuotaNode]

    def add(self, queue: str, amount: Mapping[str, Mapping[str, int]], sign: int = 1) -> None:
        node = self.queues[queue]
        for flavor, resources in amount.items():
            for resource, qty in resources.items():
                if qty:
                    if sign > 0:
                        add_usage(node, (flavor, resource), qty)
                    else:
                        remove_usage(node, (flavor, resource), qty)


def copy_on_read(base: QuotaTree) -> QuotaTree:
    """A tree over ``base`` whose cohort trees are copied the first time one of their nodes is
    looked up, so that what the cycle charges to it never reaches ``base`` (the notebook's,
    kept in step with the state's usage): a cycle copies the trees it looks at, not all."""
    queues = _Copied(base.queues)
    cohorts = _Copied(base.cohorts)

    def copy_tree(node: QuotaNode) -> None:
        def clone(n: QuotaNode, parent: QuotaNode | None) -> QuotaNode:
            c = QuotaNode(
                name=n.name,
                is_queue=n.is_queue,
                weight=n.weight,
                parent=parent,
                quotas=n.quotas,
                subtree=n.subtree,  # the configuration's: never changed after build
                usage=dict(n.usage),
                height=n.height,
                lendable=n.lendable,
            )
            c.children = [clone(child, c) for child in n.children]
            (queues if n.is_queue else cohorts).put(n.name, c)
            return c

        clone(node.root(), None)

    queues.copy_tree = cohorts.copy_tree = copy_tree
    return QuotaTree(queues=queues, cohorts=cohorts)


class _Copied(dict[str, QuotaNode]):
    """Nodes of a ``copy_on_read`` tree: a node not copied yet brings its whole tree."""

    def __init__(self, base: dict[str, QuotaNode]) -> None:
        super().__init__()
        self.base = base
        self.copy_tree: Callable[[QuotaNode], None] = lambda node: None

    def put(self, name: str, node: QuotaNode) -> None:
        dict.__setitem__(self, name, node)

    def __missing__(self, name: str) -> QuotaNode:
        self.copy_tree(self.base[name])
        return dict.__getitem__(self, name)

    def __contains__(self, name: object) -> bool:
        return name in self.base

    def get(self, name: str, default: QuotaNode | None = None) -> QuotaNode | None:  # type: ignore[override]
        return self[name] if name in self.base else default


def build(
    cluster_queues: Mapping[str, ClusterQueueSpec],
    cohorts: Mapping[str, CohortSpec],
    usage: Mapping[str, Mapping[str, Mapping[str, int]]],
) -> QuotaTree:
    """The tree for the current configuration with each queue's usage charged to it.

    A cohort named by a ClusterQueue but never configured exists implicitly with no
    quota of its own (Kueue does the same). A parent cycle is broken by ignoring the
    parent link that closes it, so a misconfiguration never hangs the cycle.
    """
    cnodes: dict[str, QuotaNode] = {}

    def cohort_node(name: str) -> QuotaNode:
        if name not in cnodes:
            spec = cohorts.get(name)
            cnodes[name] = QuotaNode(
                name=name,
                is_queue=False,
                weight=spec.fair_sharing_weight if spec else 1.0,
                quotas=_quotas(spec.resource_groups) if spec else {},
            )
        return cnodes[name]

    for name in sorted(cohorts):
        cohort_node(name)
    for name in sorted(cohorts):
        parent = cohorts[name].parent
        if parent is None or _reaches(cohorts, parent, name):
            continue
        child, p = cohort_node(name), cohort_node(parent)
        child.parent = p
        p.children.append(child)
    qnodes: dict[str, QuotaNode] = {}
    for name in sorted(cluster_queues):
        spec = cluster_queues[name]
        node = QuotaNode(
            name=name,
            is_queue=True,
            weight=spec.fair_sharing_weight,
            quotas=_quotas(spec.resource_groups),
        )
        if spec.cohort:
            p = cohort_node(spec.cohort)
            node.parent = p
            p.children.append(node)
        qnodes[name] = node
    for node in [n for n in cnodes.values() if n.parent is None]:
        _fill_subtree(node)
    for node in qnodes.values():
        if node.parent is None:
            _fill_subtree(node)
    for node in [*cnodes.values(), *qnodes.values()]:
        _fill_lendable(node)
    tree = QuotaTree(queues=qnodes, cohorts=cnodes)
    for name in sorted(usage):
        if name in qnodes:
            tree.add(name, usage[name])
    return tree


def _reaches(cohorts: Mapping[str, CohortSpec], start: str, target: str) -> bool:
    seen: set[str] = set()
    node: str | None = start
    while node is not None and node not in seen:
        if node == target:
            return True
        seen.add(node)
        spec = cohorts.get(node)
        node = spec.parent if spec else None
    return False


def _fill_subtree(node: QuotaNode) -> None:
    node.subtree = {fr: q.nominal_quota for fr, q in node.quotas.items()}
    for child in node.children:
        _fill_subtree(child)
        for fr, qty in child.subtree.items():
            node.subtree[fr] = node.subtree.get(fr, 0) + qty - child.local(fr)
    if not node.is_queue:
        node.height = 1 + max((c.height for c in node.children), default=0)


def add_usage(node: QuotaNode, fr: FR, qty: int) -> None:
    local_available = max(0, node.local(fr) - node.usage.get(fr, 0))
    node.usage[fr] = node.usage.get(fr, 0) + qty
    if node.parent is not None and qty > local_available:
        add_usage(node.parent, fr, qty - local_available)


def remove_usage(node: QuotaNode, fr: FR, qty: int) -> None:
    stored_in_parent = node.usage.get(fr, 0) - node.local(fr)
    node.usage[fr] = node.usage.get(fr, 0) - qty
    if node.parent is not None and stored_in_parent > 0:
        remove_usage(node.parent, fr, min(qty, stored_in_parent))


def available(node: QuotaNode, fr: FR) -> int:
    """What ``node`` may still take of ``fr`` now, borrowing included (may be negative)."""
    if node.parent is None:
        return node.subtree.get(fr, 0) - node.usage.get(fr, 0)
    local = node.local(fr)
    local_available = max(0, local - node.usage.get(fr, 0))
    from_parent = available(node.parent, fr)
    limit = node.borrowing_limit(fr)
    if limit is not None:
        stored_in_parent = node.subtree.get(fr, 0) - local
        used_in_parent = max(0, node.usage.get(fr, 0) - local)
        from_parent = min(from_parent, stored_in_parent - used_in_parent + limit)
    return local_available + from_parent


def potential(node: QuotaNode, fr: FR) -> int:
    """The most ``node`` could ever hold of ``fr`` under this configuration, usage aside."""
    if node.parent is None:
        return node.subtree.get(fr, 0)
    most = node.local(fr) + potential(node.parent, fr)
    limit = node.borrowing_limit(fr)
    if limit is not None:
        most = min(most, node.subtree.get(fr, 0) + limit)
    return most


def borrow_level(node: QuotaNode, fr: FR, qty: int, *, ignore_usage: bool = False) -> int:
    """0 if ``qty`` more fits the node's own quota; else the height of the lowest subtree
    that holds it (Kueue's FindHeightOfLowestSubtreeThatFits): what stays in a node's
    local (lending-limited) quota never reaches its parent. ``ignore_usage``: as if
    nothing were admitted (the level a preemptor needs once its victims are gone)."""

    def used(n: QuotaNode) -> int:
        return 0 if ignore_usage else n.usage.get(fr, 0)

    def local_available(n: QuotaNode) -> int:
        return max(0, n.local(fr) - used(n))

    if node.parent is None or used(node) + qty <= node.subtree.get(fr, 0):
        return 0
    remaining = qty - local_available(node)
    current = node.parent
    while current.parent is not None:
        if used(current) + remaining <= current.subtree.get(fr, 0):
            return current.height
        remaining -= local_available(current)
        current = current.parent
    return current.height


def dominant_share(node: QuotaNode, extra: Mapping[FR, int] | None = None) -> tuple[float, str]:
    """Kueue's DRS: per resource, borrowing over what the parent could lend, per mille.

    Returns (weighted share, dominant resource). Not borrowing, or no parent: 0.
    Weight 0 while borrowing: infinite (always loses).
    """
    if node.parent is None:
        return 0.0, ""
    borrowed: dict[str, int] = {}
    for fr in set(node.subtree) | set(node.usage) | set(extra or {}):
        used = node.usage.get(fr, 0) + (extra or {}).get(fr, 0)
        borrowed[fr[1]] = borrowed.get(fr[1], 0) + max(0, used - node.subtree.get(fr, 0))
    lendable = node.lendable or {}
    best, dominant = 0.0, ""
    for resource in sorted(borrowed):
        if lendable.get(resource, 0) <= 0 or borrowed[resource] <= 0:
            continue
        share = 1000.0 * borrowed[resource] / lendable[resource]
        if share > best:
            best, dominant = share, resource
    if best == 0.0:
        return 0.0, ""
    if node.weight <= 0:
        return float("inf"), dominant
    return best / node.weight, dominant


# Kueue's status.fairSharing.weightedShare of a ClusterQueue with weight 0 that borrows.
MAX_WEIGHTED_SHARE = 2**63 - 1


def weighted_shares(
    cluster_queues: Mapping[str, ClusterQueueSpec],
    cohorts: Mapping[str, CohortSpec],
    usage: Mapping[str, Mapping[str, Mapping[str, int]]],
) -> dict[str, int]:
    """Each ClusterQueue's weighted share as Kueue's status shows it (an integer, per mille
    of what its cohort could lend, divided by its fair-sharing weight; 0: within nominal)."""
    tree = build(cluster_queues, cohorts, usage)
    out = {}
    for name in sorted(tree.queues):
        share = dominant_share(tree.queues[name])[0]
        out[name] = MAX_WEIGHTED_SHARE if share == float("inf") else int(share)
    return out


def _fill_lendable(node: QuotaNode) -> None:
    """What the parent could lend of each resource, over every flavor of its tree: the
    configuration decides it, so it is worked out once, when the tree is built."""
    if node.parent is not None:
        node.lendable = {}
        for fr in node.root().subtree:
            node.lendable[fr[1]] = node.lendable.get(fr[1], 0) + potential(node.parent, fr)
