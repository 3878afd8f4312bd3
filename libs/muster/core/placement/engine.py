"""Gang placement on existing nodes: every pod of a workload, or none.

Pure given the ``NodeBook``: ``place`` charges the book for what it places and, when
one pod cannot go anywhere allowed, gives everything back and says why.

Constraints, per pod set: node selector (flavor labels included) and taints; device
type/UUID lists; a required topology level (all pods in one domain of it) or a
preferred one (that level, then the ones above, then anywhere); slices of
``slice_size`` pods each in one domain of ``slice_required``, or each on a whole value
of the ``exclusive`` label that no other workload uses (JobSet exclusive-topology),
all inside one domain of a required level when one is given; Volcano's tiers (a job's,
and a task partition's for its slices). Per workload: ``gpu_group_size`` N puts all its
pods in one domain of the lowest level where some domain holds N devices (MetaX
supernodes).

Choices (binpack, the default): among domains that can hold what is asked, the one with
the least room (Kueue's BestFit: big domains stay whole). Inside it, a pod set with a
topology request takes its parts (racks of a block, nodes of a rack) by Kueue's BestFit:
the most room first, the last the smallest that holds the rest, so it spans the fewest
(``pack``). Without one, each pod goes on the fullest node that fits (Kueue's
LeastFreeCapacity for unconstrained pod sets: gaps are filled). Among devices, the
fullest (HAMi binpack). Spread takes the emptiest instead. ``first_fit`` takes domains and
nodes in registration order (the benchmark's baseline).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field

from muster.core.model.inventory import HOSTNAME, WHOLE_DEVICE
from muster.core.model.workload import PlacementPolicy, PodSet, Toleration, WorkloadSpec
from muster.core.placement import devices as dev
from muster.core.placement.book import (
    NodeBook,
    NodeState,
    Placement,
    PodAsk,
    device_kind_missing,
    fit_count,
    matches,
    tolerated,
)
from muster.core.placement.devices import DeviceShare

SELECTOR_MISMATCH = "node(s) didn't match Pod's node affinity/selector"
EXCLUSIVE_TAKEN = "node(s) in a topology domain another workload uses"


@dataclass(frozen=True, slots=True)
class NoPlacement:
    reason: str  # TopologyPlacementFailed | Unschedulable
    message: str


@dataclass(frozen=True, slots=True)
class Demand:
    """A pod set as the engine places it: its pods and the constraints on them."""

    pod_set: PodSet
    pods: tuple[PodAsk, ...]
    selector: Mapping[str, str]
    tolerations: tuple[Toleration, ...]
    # What decides which nodes may take these pods (the eligibility memo key), and that
    # plus what one pod asks (the room cache key): computed once, looked up per domain.
    key: tuple[object, ...] = ()
    shape: tuple[object, ...] = ()

    @staticmethod
    def of(
        pod_set: PodSet,
        pods: tuple[PodAsk, ...],
        selector: Mapping[str, str],
        tolerations: tuple[Toleration, ...],
    ) -> Demand:
        device = pods[0].device if pods else None
        key = (tuple(sorted(selector.items())), tolerations, pod_set.devices, bool(device))
        shape = (key, tuple(sorted(pod_set.requests.items())), device)
        return Demand(pod_set, pods, selector, tolerations, key, shape)


def demands(
    spec: WorkloadSpec,
    counts: Mapping[str, int] | None = None,
    selectors: Mapping[str, Mapping[str, str]] | None = None,
    tolerations: Mapping[str, Sequence[Toleration]] | None = None,
) -> list[Demand]:
    """The workload's pod sets, with the flavor's labels and tolerations Kueue injects."""
    out = []
    for ps in spec.pod_sets:
        n = (counts or {}).get(ps.name, ps.count)
        ask = dev.device_ask(ps.requests, ps.devices)
        pods = tuple(PodAsk(name, ps.name, ps.requests, ask) for name in ps.pod_names(n))
        out.append(
            Demand.of(
                ps,
                pods,
                {**ps.node_selector, **(selectors or {}).get(ps.name, {})},
                (*ps.tolerations, *(tolerations or {}).get(ps.name, ())),
            )
        )
    return out


class _NoFit(Exception):
    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason, self.message = reason, message


@dataclass(slots=True)
class _Search:
    book: NodeBook
    workload: str
    policy: PlacementPolicy
    first_fit: bool
    explain_misses: bool = True  # say why a pod fits nowhere (kube-scheduler's summary)
    nodes: dict[str, str] = field(default_factory=dict)
    shares: dict[str, tuple[DeviceShare, ...]] = field(default_factory=dict)
    exclusive: list[tuple[str, str]] = field(default_factory=list)
    trail: list[tuple[NodeState, PodAsk]] = field(default_factory=list)

    # -- charging with an undo trail ------------------------------------------------------

    def put(self, node: NodeState, pod: PodAsk) -> None:
        shares = self.book.charge(node, self.workload, pod, self.policy.gpu == "spread")
        self.nodes[pod.name] = node.name
        if shares:
            self.shares[pod.name] = shares
        self.trail.append((node, pod))

    def mark(self) -> tuple[int, int]:
        return len(self.trail), len(self.exclusive)

    def undo(self, mark: tuple[int, int]) -> None:
        pods, claims = mark
        while len(self.trail) > pods:
            node, pod = self.trail.pop()
            self.book.uncharge(node, self.workload, pod, self.shares.pop(pod.name, ()))
            self.nodes.pop(pod.name, None)
        del self.exclusive[claims:]

    # -- which nodes ----------------------------------------------------------------------

    def eligible(self, d: Demand) -> frozenset[str]:
        def ok(node: NodeState) -> bool:
            return self.static_reason(node, d) is None

        return self.book.eligible(d.key, ok)

    def static_reason(self, node: NodeState, d: Demand) -> str | None:
        if not matches(node.inv, d.selector):
            return SELECTOR_MISMATCH
        taint = tolerated(node.inv, d.tolerations)
        if taint is not None:
            return f"node(s) had untolerated taint {taint}"
        missing = device_kind_missing(node.inv, d.pod_set.requests)
        if missing is not None:
            return f"Insufficient {missing}"
        ask = d.pods[0].device if d.pods else None
        if (
            ask is not None
            and ask.filter is not None
            and node.has_devices()
            and not any(dev.allowed(g, ask.filter) for g in node.inv.gpus)
        ):
            return dev.mismatch(ask.filter)  # HAMi's name: no device here it may have
        return None

    def fits(self, members: Sequence[NodeState], d: Demand) -> int:
        """How many more of ``d``'s pods the members it may use take."""
        allowed = self.eligible(d)
        pod = d.pods[0]
        return sum(self.book.fit_count(n, pod) for n in members if n.name in allowed)

    def room(self, key: str, value: tuple[str, ...], members: list[NodeState], d: Demand) -> int:
        """``fits`` for a whole domain, cached in the book until a node in it changes."""
        cached = self.book.room(key, value, d.shape)
        if cached is None:
            cached = self.fits(members, d)
            self.book.remember_room(key, value, d.shape, cached)
        return cached

    # -- placing ----------------------------------------------------------------------------

    def fill(self, members: Sequence[NodeState], pods: Sequence[PodAsk], d: Demand) -> None:
        """Each pod on the fullest node it fits (binpack), the emptiest (spread), or the
        first (first fit), among ``members``; raises when one fits nowhere."""
        if by_state(self.book, members, pods):
            self.fill_by_state(pods, d)
            return
        candidates = self.candidates(members, d)
        spare = None if self.first_fit else _EmptyByShape(self.book, candidates)
        for pod in pods:
            best: NodeState | None = None
            best_key: tuple[int, int] | None = None
            by_uuid = pod.device is not None and pod.device.filter is not None
            for node in candidates if spare is None or by_uuid else spare.worth_a_look():
                n = self.book.fit_count(node, pod)
                if n == 0:
                    continue
                key = (-n if self.policy.node == "spread" else n, node.order)
                # A node that could not beat the best so far needs no closer look.
                if not self.first_fit and best_key is not None and key >= best_key:
                    continue
                if self.book.why_not(node, pod) is not None:
                    continue
                best, best_key = node, key
                if self.first_fit:
                    break
            if best is None:
                if not any(n.ready for n in members) and not self.book.ready_nodes():
                    raise _NoFit("WaitingForNodes", "no node has registered yet")
                why = self.explain(members, pod, d) if self.explain_misses else "no room"
                raise _NoFit("Unschedulable", why)
            self.put(best, pod)
            if spare is not None:
                spare.taken(best)

    def fill_by_state(self, pods: Sequence[PodAsk], d: Demand) -> None:
        """``fill`` over every ready node, one look per group of nodes in the same state
        (``NodeBook.state_groups``): nodes alike answer alike, so the group's earliest
        node the pod may use stands for it; the same choice as looking at every node."""
        allowed = self.eligible(d)
        book, workload = self.book, self.workload
        fences = bool(book.exclusive)  # unchanged while the search runs

        def ok(node: NodeState) -> bool:
            return node.name in allowed and not (fences and book.fenced(node, workload))

        spread = self.policy.node == "spread"
        for pod in pods:
            best: NodeState | None = None
            best_key: tuple[int, int] | None = None
            for group in book.state_groups().values():
                if not group:
                    continue
                n = fit_count(group[0], pod)  # any node of the group: they are alike
                if n == 0:
                    continue
                node = next((m for m in group if ok(m)), None)  # the earliest it may use
                if node is None:
                    continue
                rank = (0 if self.first_fit else -n if spread else n, node.order)
                if best_key is not None and rank >= best_key:
                    continue
                if book.why_not(node, pod) is not None:
                    continue
                best, best_key = node, rank
            if best is None:
                members = book.ready_nodes()
                if not members:
                    raise _NoFit("WaitingForNodes", "no node has registered yet")
                why = self.explain(members, pod, d) if self.explain_misses else "no room"
                raise _NoFit("Unschedulable", why)
            self.put(best, pod)

    def candidates(self, members: Sequence[NodeState], d: Demand) -> list[NodeState]:
        """The members ``d``'s pods may use: eligible, and not fenced off by another
        workload's exclusive domain."""
        allowed = self.eligible(d)
        fences = bool(self.book.exclusive)  # unchanged while the search runs
        return [
            n
            for n in members
            if n.name in allowed and not (fences and self.book.fenced(n, self.workload))
        ]

    def explain(self, members: Sequence[NodeState], pod: PodAsk, d: Demand) -> str:
        """kube-scheduler's summary: ``0/4 nodes are available: 3 Insufficient ...``."""
        reasons: dict[str, int] = {}
        ready = [n for n in members if n.ready]
        for node in ready:
            why = (
                self.static_reason(node, d)
                or (EXCLUSIVE_TAKEN if self.book.fenced(node, self.workload) else None)
                or self.book.why_not(node, pod)
                or "no room"
            )
            reasons[why] = reasons.get(why, 0) + 1
        detail = ", ".join(
            f"{n} {r}" for r, n in sorted(reasons.items(), key=lambda x: (-x[1], x[0]))
        )
        return f"pod {pod.name} of pod set {d.pod_set.name}: 0/{len(ready)} nodes are available" + (
            f": {detail}" if detail else ""
        )

    def ordered_domains(
        self, key: str, d: Demand, need: int, within: set[str] | None = None
    ) -> Iterator[tuple[tuple[str, ...], list[NodeState]]]:
        """Domains of ``key`` with room for ``need`` pods, best first.

        Binpack keeps whole what is whole: a domain under partly used ancestors (block,
        zone) before one under untouched ones, a partly used domain before an untouched
        one, then the least room that fits (Kueue's BestFit), then registration order.
        Spread takes the most room. First fit takes registration order."""
        found = []
        for value, members in self.book.domains(key).items():
            if within is not None:
                members = [n for n in members if n.name in within]
                if not members:
                    continue
                room = self.fits(members, d)
            else:
                room = self.room(key, value, members, d)
            if room >= need:
                found.append((self._rank(key, value, members, room), value, members))
        found.sort(key=lambda f: f[0])
        for _, value, members in found:
            yield value, members

    def _rank(
        self, key: str, value: tuple[str, ...], members: list[NodeState], room: int
    ) -> tuple[object, ...]:
        order = members[0].order
        if self.first_fit:
            return (order,)
        if self.policy.node == "spread":
            return (-room, order)
        levels = self.book.levels
        depth = levels.index(key) if key in levels else len(levels)
        whole = tuple(
            self.book.untouched(levels[i], value[: i + 1]) for i in range(min(depth, len(value)))
        )
        return (*whole, self.book.untouched(key, value), room, order)

    def in_one_domain(
        self,
        key: str,
        pods: Sequence[PodAsk],
        d: Demand,
        within: set[str] | None = None,
        packed: bool = False,
    ) -> bool:
        """All ``pods`` in one domain of ``key``, the best first; ``packed``: spread over the
        domain's parts by BestFit (``pack``), else pod by pod (``fill``)."""
        for _, members in self.ordered_domains(key, d, len(pods), within):
            mark = self.mark()
            try:
                if packed:
                    self.pack(key, members, pods, d)
                else:
                    self.fill(members, pods, d)
                return True
            except _NoFit:
                self.undo(mark)
        return False

    def pack(
        self, key: str | None, members: list[NodeState], pods: Sequence[PodAsk], d: Demand
    ) -> None:
        """Kueue's TAS BestFit inside a domain of ``key`` (None: the whole cluster): its
        parts one level down (racks of a block, then nodes of a rack) with the most room
        first, the last one the smallest that holds what remains, so a pod set lands in
        the fewest parts. Binpack only; where a node's room was an upper bound (shared
        devices) and a pod does not fit after all, pod by pod as before."""
        if not self.packs:
            self.fill(members, pods, d)
            return
        mark = self.mark()
        try:
            self._pack(self._below(key), members, pods, d)
        except _NoFit:
            self.undo(mark)
            self.fill(members, pods, d)

    def _pack(
        self, level: str | None, members: list[NodeState], pods: Sequence[PodAsk], d: Demand
    ) -> None:
        if level is None:  # nodes
            nodes = self.candidates(members, d)
            rooms = [(self.book.fit_count(n, pods[0]), n.order) for n in nodes]
            for i, count in _best_fit(rooms, len(pods)):
                for pod in pods[:count]:
                    if self.book.why_not(nodes[i], pod) is not None:
                        raise _NoFit("Unschedulable", "no room")
                    self.put(nodes[i], pod)
                pods = pods[count:]
            return
        depth = self.book.levels.index(level) + 1
        parts: dict[tuple[str, ...], list[NodeState]] = {}
        for n in members:
            parts.setdefault(n.path[:depth], []).append(n)
        groups = list(parts.values())
        rooms = [(self.fits(g, d), g[0].order) for g in groups]
        for i, count in _best_fit(rooms, len(pods)):
            self._pack(self._below(level), groups[i], pods[:count], d)
            pods = pods[count:]

    def _below(self, key: str | None) -> str | None:
        """The topology level under ``key`` (None: nodes)."""
        levels = self.book.levels
        if key is None:
            return levels[0] if levels else None
        if key not in levels or key == levels[-1]:
            return None
        return levels[levels.index(key) + 1]

    @property
    def packs(self) -> bool:
        return not self.first_fit and self.policy.node != "spread"

    def exclusive_slice(self, key: str, pods: Sequence[PodAsk], d: Demand) -> bool:
        """One whole value of ``key`` for these pods, used by no other workload."""
        mine = {v for k, v in self.exclusive if k == key}
        for value, members in self.ordered_domains(key, d, len(pods)):
            label = "/".join(value)
            if (
                label in mine
                or self.book.exclusive.get((key, label), self.workload) != self.workload
            ):
                continue
            if any(
                set(self.book.state_of(n).workloads) - {self.workload}
                for n in self.book.members(key, value)
            ):
                continue
            mark = self.mark()
            try:
                self.fill(members, pods, d)
            except _NoFit:
                self.undo(mark)
                continue
            self.exclusive.append((key, label))
            return True
        return False

    def pod_set(self, d: Demand, within: set[str] | None) -> None:
        topo = d.pod_set.topology
        members = self.all_nodes(within)
        if topo is None:
            if self.book.levels and within is None and not self.first_fit:
                # Unconstrained: still the tightest place that holds it, lowest level first
                # (fills gaps, keeps whole domains whole), else anywhere.
                for lowest in self.upward(self.book.levels[-1]):
                    if self.in_one_domain(lowest, d.pods, d):
                        return
            self.fill(members, d.pods, d)
            return
        name = d.pod_set.name
        required, preferred = topo.required, topo.preferred
        if topo.tier is not None and self.book.topology is not None:
            level = self.book.topology.tier(topo.tier)
            if level is not None:
                required, preferred = (None, level) if topo.tier_soft else (level, None)
        slice_level = topo.slice_required
        if topo.slice_tier is not None and self.book.topology is not None:
            # A tier above the top level leaves each slice free, as a job's tier does.
            slice_level = self.book.topology.tier(topo.slice_tier)
        size = topo.slice_size or len(d.pods)
        slices = [d.pods[i : i + size] for i in range(0, len(d.pods), size)]
        if topo.exclusive:
            for i, pods in enumerate(slices):
                if not self.exclusive_slice(topo.exclusive, pods, d):
                    raise _NoFit(
                        "TopologyPlacementFailed",
                        f"pod set {name}: slice {i} of {len(slices)} ({len(pods)} pods) found "
                        f"no whole {topo.exclusive} that no other workload uses and that "
                        f"holds it",
                    )
            return
        if slice_level:
            # Every slice in one domain of slice_level, all of them in one domain of the
            # required level (or of the preferred one, else the next up, else anywhere).
            outers = [required] if required else self.upward(preferred) if preferred else []
            for outer in outers:
                for _, members in self.ordered_domains(outer, d, len(d.pods), within):
                    mark = self.mark()
                    try:
                        self.slices(slice_level, slices, d, {n.name for n in members})
                        return
                    except _NoFit:
                        self.undo(mark)
            if required:
                raise _NoFit(
                    "TopologyPlacementFailed",
                    f"pod set {name}: no {required} domain has room for its {len(slices)} "
                    f"slices of {size} pods, each in one {slice_level} domain",
                )
            self.slices(slice_level, slices, d, within)
            return
        if required:
            if not self.in_one_domain(required, d.pods, d, within, packed=True):
                raise _NoFit(
                    "TopologyPlacementFailed",
                    f"pod set {name}: no {required} domain has room for all {len(d.pods)} pods",
                )
            return
        if preferred:
            for level in self.upward(preferred):
                if self.in_one_domain(level, d.pods, d, within, packed=True):
                    return
            self.pack(None, members, d.pods, d)  # over the top level's domains
            return
        self.fill(members, d.pods, d)

    def slices(
        self, level: str, slices: Sequence[Sequence[PodAsk]], d: Demand, within: set[str] | None
    ) -> None:
        """Each slice in one domain of ``level`` (Kueue's slice-required topology, a Volcano
        partition's tier)."""
        for i, pods in enumerate(slices):
            if not self.in_one_domain(level, pods, d, within, packed=True):
                raise _NoFit(
                    "TopologyPlacementFailed",
                    f"pod set {d.pod_set.name}: no {level} domain has room for slice "
                    f"{i} ({len(pods)} pods)",
                )

    def upward(self, level: str) -> list[str]:
        """``level`` and the levels above it, nearest first."""
        levels = list(self.book.levels)
        if level == HOSTNAME:
            return [HOSTNAME, *reversed(levels)]
        if level not in levels:
            return [level]
        return list(reversed(levels[: levels.index(level) + 1]))

    def all_nodes(self, within: set[str] | None) -> list[NodeState]:
        nodes = self.book.ready_nodes()
        return nodes if within is None else [n for n in nodes if n.name in within]


def place(
    book: NodeBook,
    workload: str,
    spec: WorkloadSpec,
    want: list[Demand],
    policy: PlacementPolicy,
    *,
    first_fit: bool = False,
    within: frozenset[str] | None = None,
    explain: bool = True,
) -> Placement | NoPlacement:
    """Place every pod of ``want`` or none, on the nodes ``within`` if given; on success
    the book holds the placement. ``explain=False``: a miss is not worth saying why (a
    trial that only asks whether it places)."""
    search = _Search(book, workload, policy, first_fit, explain)
    try:
        if spec.gpu_group_size:
            _in_one_group(search, spec.gpu_group_size, want, within)
        else:
            for d in want:
                search.pod_set(d, set(within) if within is not None else None)
    except _NoFit as e:
        search.undo((0, 0))
        return NoPlacement(e.reason, e.message)
    placement = Placement(
        nodes=dict(search.nodes), devices=dict(search.shares), exclusive=tuple(search.exclusive)
    )
    book.keep(workload, placement, {p.name: p for d in want for p in d.pods})
    return placement


def _best_fit(rooms: Sequence[tuple[int, int]], need: int) -> list[tuple[int, int]]:
    """Kueue's BestFit over parts given as (room, registration order): (index, pods) pairs.
    The parts with the most room first (earliest on a tie) while each holds less than
    what remains, then the smallest that holds the rest (KEP-2724, "Selecting the
    algorithm": free 3,3,2,1 and 7 pods give 3,3,1). Raises when all of them hold less."""
    order = sorted(
        (i for i, r in enumerate(rooms) if r[0] > 0), key=lambda i: (-rooms[i][0], rooms[i][1])
    )
    out: list[tuple[int, int]] = []
    left, k = need, 0
    while left > 0 and k < len(order) and rooms[order[k]][0] < left:
        out.append((order[k], rooms[order[k]][0]))
        left -= rooms[order[k]][0]
        k += 1
    if left > 0:
        holders = [i for i in order[k:] if rooms[i][0] >= left]
        if not holders:
            raise _NoFit("Unschedulable", "no room")
        out.append((min(holders, key=lambda i: rooms[i]), left))
    return out


def by_state(book: NodeBook, members: Sequence[NodeState], pods: Sequence[PodAsk]) -> bool:
    """``fill`` may look at one node per state group: it is over every ready node (the
    groups hold those), and no pod names devices (UUIDs or types tell nodes of one shape
    apart)."""
    return members is book.ready_nodes() and not any(
        p.device is not None and p.device.filter is not None for p in pods
    )


def _device_resource(want: list[Demand]) -> str:
    return next(
        (r for d in want for r in WHOLE_DEVICE if d.pod_set.requests.get(r)), WHOLE_DEVICE[0]
    )


def _devices(book: NodeBook, node: NodeState, resource: str, free: bool) -> int:
    node = book.state_of(node)
    if node.has_devices():
        return node.free_devices() if free else len(node.inv.gpus)
    return node.free.get(resource, 0) if free else node.inv.allocatable.get(resource, 0)


def _in_one_group(
    search: _Search, size: int, want: list[Demand], only: frozenset[str] | None = None
) -> None:
    """MetaX gpu-group-size: the lowest level where a domain holds ``size`` devices; all
    pods in one domain of it."""
    book = search.book
    resource = _device_resource(want)
    levels = [HOSTNAME, *reversed(book.levels)]
    level = None
    for lv in levels:
        for members in book.domains(lv).values():
            if sum(_devices(book, n, resource, False) for n in members) >= size:
                level = lv
                break
        if level is not None:
            break
    if level is None:
        raise _NoFit(
            "TopologyPlacementFailed",
            f"no topology domain at any level holds {size} devices (gpu-group-size {size})",
        )
    needed = sum(
        len(d.pods) * (d.pods[0].device.count if d.pods and d.pods[0].device else 0) for d in want
    )

    def free(members: list[NodeState]) -> int:
        return sum(_devices(book, n, resource, True) for n in members)

    groups = [
        (free(members), members[0].order, members) for members in book.domains(level).values()
    ]
    for room, _, members in sorted(groups, key=lambda g: (g[0], g[1])):
        if room < needed:
            continue
        within = {n.name for n in members if only is None or n.name in only}
        mark = search.mark()
        try:
            for d in want:
                search.pod_set(d, within)
            return
        except _NoFit:
            search.undo(mark)
    raise _NoFit(
        "TopologyPlacementFailed",
        f"no {level} group has room for all {size} GPUs of the gang (gpu-group-size "
        f"{size}); waiting for one to free up",
    )


class _EmptyByShape:
    """Binpack and spread take the node with the best (room, registration order), and
    every empty node of one shape (allocatable and devices) has the same room for a pod
    and the same reason not to take it: of those, only the earliest registered needs a
    look. A cluster of many idle nodes is then one look per shape, not one per node
    (bench.e2e_submit --existing-nodes: the scan was most of the queue's time). Not for a
    pod asking for devices by UUID: those differ node by node."""

    def __init__(self, book: NodeBook, candidates: Sequence[NodeState]) -> None:
        self.busy: list[NodeState] = []
        self.empty: dict[tuple[object, ...], list[NodeState]] = {}
        for node in candidates:
            if book.state_of(node).empty():
                self.empty.setdefault(node.shape, []).append(node)
            else:
                self.busy.append(node)
        for nodes in self.empty.values():
            nodes.sort(key=lambda n: n.order, reverse=True)  # the earliest last

    def worth_a_look(self) -> list[NodeState]:
        return self.busy + [nodes[-1] for nodes in self.empty.values() if nodes]

    def taken(self, node: NodeState) -> None:
        """A pod went to ``node``: it is in use from now on (a pod that looked at every
        node may have taken an empty one that was not its shape's earliest)."""
        nodes = self.empty.get(node.shape, [])
        for i in range(len(nodes) - 1, -1, -1):
            if nodes[i] is node:
                del nodes[i]
                self.busy.append(node)
                return
