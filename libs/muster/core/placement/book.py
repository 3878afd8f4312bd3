"""The existing nodes and what is placed on them: the placement engine's world.

The queue folds node registrations, losses and placements into one ``NodeBook``; the
engine charges it while it searches and gives back what it does not keep, so a failed
search leaves it as it was. Domains (the nodes under one value of a topology level,
or of any label) are indexed once per change of the node set, and each domain's room
for a pod shape is cached until a node in it changes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from muster.core.model.inventory import (
    DEVICE_RESOURCES,
    HOSTNAME,
    SHARED_COUNT,
    WHOLE_DEVICE,
    NodeInventory,
    TopologySpec,
)
from muster.core.model.workload import Toleration
from muster.core.pickling import compact
from muster.core.placement import devices as dev
from muster.core.placement import index, links
from muster.core.placement.devices import DeviceAsk, DeviceShare, DeviceUse


@compact
@dataclass(frozen=True, slots=True)
class Placement:
    """Where a workload's pods go: a node each, and their shares of its devices."""

    nodes: Mapping[str, str]  # pod -> node
    devices: Mapping[str, tuple[DeviceShare, ...]] = field(default_factory=dict)
    # Exclusive topology values this workload holds: (label, value) pairs.
    exclusive: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True, slots=True)
class PodAsk:
    """One pod as placement sees it."""

    name: str
    pod_set: str
    requests: Mapping[str, int]
    device: DeviceAsk | None


@dataclass(slots=True)
class NodeState:
    inv: NodeInventory
    order: int  # registration order: ties go to the earlier node, for determinism
    path: tuple[str, ...]  # its value at each topology level ("" if unlabelled)
    free: dict[str, int]
    devices: list[DeviceUse]
    ready: bool = True
    pods: int = 0
    workloads: dict[str, int] = field(default_factory=dict)  # workload -> pods here
    # What a pod's room on it depends on while it is empty: allocatable and devices (not
    # their UUIDs, nor their links: those choose devices on a node, not the node); the
    # engine looks at one empty node per shape.
    shape: tuple[object, ...] = ()

    @property
    def name(self) -> str:
        return self.inv.name

    def has_devices(self) -> bool:
        return bool(self.inv.gpus)

    def scalar(self, requests: Mapping[str, int]) -> Iterable[tuple[str, int]]:
        return plain(self.inv, requests)

    def free_devices(self) -> int:
        return sum(1 for u in self.devices if u.pods == 0)

    def empty(self) -> bool:
        return self.pods == 0


@dataclass(slots=True)
class Held:
    placement: Placement
    pods: dict[str, PodAsk]


def plain(node: NodeInventory, requests: Mapping[str, int]) -> Iterable[tuple[str, int]]:
    """The requests a node counts as plain quantities (on a node that lists its devices,
    device resources are counted per device instead)."""
    skip = DEVICE_RESOURCES if node.gpus else frozenset()
    return ((r, q) for r, q in requests.items() if q and r not in skip)


def matches(node: NodeInventory, selector: Mapping[str, str]) -> bool:
    return all(node.labels.get(k) == v for k, v in selector.items())


def tolerated(node: NodeInventory, tolerations: Iterable[Toleration]) -> str | None:
    """The first taint a pod does not tolerate (kube-scheduler's TaintToleration), or None."""
    tols = tuple(tolerations)
    for taint in node.taints:
        if taint.effect == "PreferNoSchedule":
            continue
        if not any(
            (t.effect in ("", taint.effect))
            and (
                (t.operator == "Exists" and (not t.key or t.key == taint.key))
                or (t.key == taint.key and t.value == taint.value)
            )
            for t in tols
        ):
            return f"{{{taint.key}: {taint.value}}}" if taint.value else f"{{{taint.key}}}"
    return None


def device_kind_missing(node: NodeInventory, requests: Mapping[str, int]) -> str | None:
    """A device resource the pod names that the node does not offer at all (a MetaX sGPU
    request on an NVIDIA node), or None."""
    for r in (*WHOLE_DEVICE, *SHARED_COUNT):
        if requests.get(r) and r not in node.allocatable:
            return r
    return None


def could_hold(node: NodeInventory, pod: PodAsk) -> bool:
    """The empty node has room for one such pod (what it offers, not what is free)."""
    if device_kind_missing(node, pod.requests) is not None:
        return False
    if any(node.allocatable.get(r, 0) < q for r, q in plain(node, pod.requests)):
        return False
    ask = pod.device
    if ask is None or not node.gpus:
        return True
    fitting = [
        g for g in node.gpus if dev.allowed(g, ask.filter) and ask.memory_of(g) <= g.memory_mib
    ]
    return len(fitting) >= ask.count


def _unused(node: NodeState, ask: DeviceAsk) -> int:
    """Devices nobody uses that the pod may have (a whole-device request takes these)."""
    return sum(
        1
        for gpu, use in zip(node.inv.gpus, node.devices, strict=True)
        if use.pods == 0 and dev.allowed(gpu, ask.filter)
    )


def _pick_devices(node: NodeState, ask: DeviceAsk, spread: bool) -> tuple[DeviceShare, ...]:
    """The pod's shares of the node's devices (it fits). Whole GPUs on a node whose links
    are known: the best connected set (HAMi topology-aware, ``links``); otherwise the
    fullest devices that fit (binpack) or the emptiest (spread), then device order."""
    gpus = node.inv.gpus
    fitting = [i for i, use in enumerate(node.devices) if dev.why_not(gpus[i], use, ask) is None]
    if ask.whole and node.inv.links and len(node.inv.links) == len(gpus):
        chosen = links.choose(node.inv.links, fitting, ask.count)
    else:

        def fullness(i: int) -> tuple[float, int]:
            use = node.devices[i]
            score = use.cores / 100 + use.memory_mib / max(gpus[i].memory_mib, 1)
            return (score if spread else -score, gpus[i].index)

        chosen = tuple(sorted(fitting, key=fullness)[: ask.count])
    return tuple(dev.share_of(gpus[i], ask) for i in chosen)


def fit_count(node: NodeState, pod: PodAsk) -> int:
    """How many more such pods fit on the node in this state (an upper bound when a pod
    wants several shared devices)."""
    n = 1 << 30
    for r, q in node.scalar(pod.requests):
        n = min(n, node.free.get(r, 0) // q)
        if n == 0:
            return 0
    ask = pod.device
    if ask is not None and node.has_devices():
        if ask.whole:
            n = min(n, _unused(node, ask) // ask.count)
        else:
            slots = sum(
                dev.pods_fitting(gpu, use, ask)
                for gpu, use in zip(node.inv.gpus, node.devices, strict=True)
            )
            n = min(n, slots // ask.count)
    return n


class NodeBook:
    def __init__(self, topology: TopologySpec | None = None) -> None:
        self.topology: TopologySpec | None = None
        self.levels: tuple[str, ...] = ()
        self.nodes: dict[str, NodeState] = {}
        self.exclusive: dict[tuple[str, str], str] = {}
        self.held: dict[str, Held] = {}
        self._registrations = 0
        # Counts every change that may give a pod more room (a release, a node set
        # change): a "does not place" found at one count holds while it stays.
        self.freed = 0
        self.version = 0  # counts every change of what is placed where, or of the nodes
        self._domains: dict[str, dict[tuple[str, ...], list[NodeState]]] = {}
        self._room: dict[tuple[str, tuple[str, ...]], dict[object, int]] = {}
        self._eligible: dict[object, frozenset[str]] = {}
        # The ready nodes by state (``index``): built at the first search, kept up to date.
        self._by_state: index.Groups | None = None
        self._key_of: dict[str, index.StateKey] = {}
        self.set_topology(topology)

    def __getstate__(self) -> dict[str, object]:
        # The groups by state are rebuilt from the nodes when a search wants them.
        return {**self.__dict__, "_by_state": None, "_key_of": {}}

    # -- the node set -------------------------------------------------------------------

    def set_topology(self, topology: TopologySpec | None) -> None:
        self.topology = topology
        self.levels = tuple(lv for lv in (topology.levels if topology else ()) if lv != HOSTNAME)
        for node in self.nodes.values():
            node.path = self._path(node.inv)
        self._changed_set()

    def register(self, inv: NodeInventory) -> None:
        old = self.nodes.get(inv.name)
        if old is not None and old.pods:
            old.ready = True  # back with its pods' usage still charged
            self._changed_set()
            return
        free = {
            r: q for r, q in inv.allocatable.items() if not (inv.gpus and r in DEVICE_RESOURCES)
        }
        self.nodes[inv.name] = NodeState(
            inv=inv,
            order=old.order if old is not None else self._registrations,
            path=self._path(inv),
            free=free,
            devices=[DeviceUse() for _ in inv.gpus],
            shape=(
                tuple(sorted(inv.allocatable.items())),
                tuple((g.model, g.memory_mib, g.index, g.split) for g in inv.gpus),
            ),
        )
        self._registrations += 1
        self._changed_set()

    def lose(self, name: str) -> None:
        node = self.nodes.get(name)
        if node is not None:
            node.ready = False
            self._changed_set()

    def remove(self, name: str) -> None:
        node = self.nodes.get(name)
        if node is not None and not node.pods:
            del self.nodes[name]
            self._changed_set()
        else:
            self.lose(name)  # its pods' usage stays charged until they are released

    def _path(self, inv: NodeInventory) -> tuple[str, ...]:
        return tuple(inv.labels.get(lv, "") for lv in self.levels)

    def _changed_set(self) -> None:
        self.freed += 1
        self.version += 1
        self._domains.clear()
        self._room.clear()
        self._eligible.clear()
        self._by_state = None
        self._key_of = {}

    # -- domains ------------------------------------------------------------------------

    def domains(self, key: str) -> dict[tuple[str, ...], list[NodeState]]:
        """Ready nodes grouped by their value of ``key``: a topology level (grouped by the
        path down to it, so racks of different blocks differ), the hostname, or any label."""
        cached = self._domains.get(key)
        if cached is None:
            cached = self._domains[key] = self._group(key, ready_only=True)
        return cached

    def members(self, key: str, value: tuple[str, ...]) -> list[NodeState]:
        """Every node of a domain, ready or not (exclusivity counts pods on all of them)."""
        cached = self._domains.get("\0" + key)
        if cached is None:
            cached = self._domains["\0" + key] = self._group(key, ready_only=False)
        return cached.get(value, [])

    def untouched(self, key: str, value: tuple[str, ...]) -> bool:
        """No pod on any node of the domain (cached like its room)."""
        cached = self.room(key, value, "\0untouched")
        if cached is None:
            members = self.domains(key).get(value, [])
            cached = int(all(self.state_of(n).pods == 0 for n in members))
            self.remember_room(key, value, "\0untouched", cached)
        return bool(cached)

    def label_of(self, node: NodeState, key: str) -> str | None:
        """The node's value of ``key`` as exclusivity names it (a level: its path)."""
        if key in self.levels:
            value = node.path[: self.levels.index(key) + 1]
            return None if "" in value else "/".join(value)
        if key == HOSTNAME:
            return node.name
        return node.inv.labels.get(key)

    def fenced(self, node: NodeState, workload: str) -> bool:
        """The node is in a domain another workload holds exclusively."""
        return any(
            holder != workload and self.label_of(node, key) == value
            for (key, value), holder in self.exclusive.items()
        )

    def ready_nodes(self) -> list[NodeState]:
        cached = self._domains.get("\0ready")
        if cached is None:
            nodes = [n for n in sorted(self.nodes.values(), key=lambda n: n.order) if n.ready]
            cached = self._domains["\0ready"] = {(): nodes}
        return cached[()]

    def eligible(self, key: object, ok: Callable[[NodeState], bool]) -> frozenset[str]:
        """The names of the ready nodes ``ok`` accepts, memoised per ``key`` until the
        node set changes (what a node offers does not change while it is registered)."""
        found = self._eligible.get(key)
        if found is None:
            found = self._eligible[key] = frozenset(n.name for n in self.ready_nodes() if ok(n))
        return found

    def _group(self, key: str, ready_only: bool) -> dict[tuple[str, ...], list[NodeState]]:
        out: dict[tuple[str, ...], list[NodeState]] = {}
        depth = self.levels.index(key) + 1 if key in self.levels else None
        for node in sorted(self.nodes.values(), key=lambda n: n.order):
            if ready_only and not node.ready:
                continue
            if depth is not None:
                value = node.path[:depth]
                if "" in value:
                    continue
            elif key == HOSTNAME:
                value = (node.name,)
            else:
                label = node.inv.labels.get(key)
                if label is None:
                    continue
                value = (label,)
            out.setdefault(value, []).append(node)
        return out

    def room(self, key: str, value: tuple[str, ...], shape: object) -> int | None:
        return self._room.get((key, value), {}).get(shape)

    def remember_room(self, key: str, value: tuple[str, ...], shape: object, room: int) -> None:
        self._room.setdefault((key, value), {})[shape] = room

    def _touched(self, node: NodeState) -> None:
        if self._room:
            for domain in self.domains_of(node):
                self._room.pop(domain, None)
        if self._by_state is not None:
            self._regroup(node)

    # -- the ready nodes by state (``index``) ----------------------------------------------

    def state_groups(self) -> Mapping[index.StateKey, Sequence[NodeState]]:
        """The ready nodes grouped by what a pod's room on them depends on, each group in
        registration order (some may be empty)."""
        if self._by_state is None:
            nodes = self.ready_nodes()
            self._by_state = index.group(nodes)
            self._key_of = {n.name: index.state_key(n) for n in nodes}
        return self._by_state

    def _regroup(self, node: NodeState) -> None:
        """The node's state changed: into the group of its new state."""
        assert self._by_state is not None
        old = self._key_of.pop(node.name, None)
        if old is not None:
            group = self._by_state[old]
            index.take(group, node)
            if not group:  # states come and go: a search looks at the groups there are
                del self._by_state[old]
        if node.ready:
            key = self._key_of[node.name] = index.state_key(node)
            index.put(self._by_state.setdefault(key, []), node)

    def domains_of(self, node: NodeState) -> list[tuple[str, tuple[str, ...]]]:
        """The (key, value) of every indexed domain the node is in."""
        out = []
        for key in list(self._domains):
            if key.startswith("\0"):
                continue
            if key in self.levels:
                out.append((key, node.path[: self.levels.index(key) + 1]))
            elif key == HOSTNAME:
                out.append((key, (node.name,)))
            else:
                label = node.inv.labels.get(key)
                if label is not None:
                    out.append((key, (label,)))
        return out

    # -- one pod ------------------------------------------------------------------------

    def state_of(self, node: NodeState) -> NodeState:
        """What is placed on ``node`` as this book sees it (a view has its own copies of
        the nodes it changed; the domain lists hold the base book's)."""
        return node

    def _writable(self, node: NodeState) -> NodeState:
        return node

    def why_not(self, node: NodeState, pod: PodAsk) -> str | None:
        """kube-scheduler's and HAMi's reason this pod does not fit here now, or None."""
        node = self.state_of(node)
        for r, q in node.scalar(pod.requests):
            if node.free.get(r, 0) < q:
                return f"Insufficient {r}"
        ask = pod.device
        if ask is None or not node.has_devices():
            return None
        if ask.whole:
            if _unused(node, ask) >= ask.count:
                return None
            resource = next((r for r in WHOLE_DEVICE if pod.requests.get(r)), "devices")
            return f"Insufficient {resource}"
        reasons: dict[str, int] = {}
        fits = 0
        for gpu, use in zip(node.inv.gpus, node.devices, strict=True):
            why = dev.why_not(gpu, use, ask)
            if why is None:
                fits += 1
            else:
                reasons[why] = reasons.get(why, 0) + 1
        if fits >= ask.count:
            return None
        return max(sorted(reasons), key=lambda k: reasons[k]) if reasons else "Insufficient devices"

    def fit_count(self, node: NodeState, pod: PodAsk) -> int:
        """How many more such pods fit on the node (an upper bound when a pod wants
        several shared devices)."""
        return fit_count(self.state_of(node), pod)

    def charge(
        self, node: NodeState, workload: str, pod: PodAsk, spread_gpus: bool
    ) -> tuple[DeviceShare, ...]:
        """Put the pod on the node (it fits: ``why_not`` said so)."""
        node = self._writable(node)
        shares: tuple[DeviceShare, ...] = ()
        ask = pod.device
        if ask is not None and node.has_devices():
            shares = _pick_devices(node, ask, spread_gpus)
        self._seat(node, workload, pod, shares)
        return shares

    def _seat(
        self, node: NodeState, workload: str, pod: PodAsk, shares: tuple[DeviceShare, ...]
    ) -> None:
        """Charge the node for the pod and its device shares."""
        self.version += 1
        for r, q in node.scalar(pod.requests):
            node.free[r] = node.free.get(r, 0) - q
        by_uuid = {g.uuid: u for g, u in zip(node.inv.gpus, node.devices, strict=True)}
        for share in shares:
            use = by_uuid.get(share.uuid)
            if use is not None:
                dev.add(use, share)
        node.pods += 1
        node.workloads[workload] = node.workloads.get(workload, 0) + 1
        self._touched(node)

    def uncharge(
        self, node: NodeState, workload: str, pod: PodAsk, shares: tuple[DeviceShare, ...]
    ) -> None:
        node = self._writable(node)
        self.freed += 1
        self.version += 1
        for r, q in node.scalar(pod.requests):
            node.free[r] = node.free.get(r, 0) + q
        by_uuid = {gpu.uuid: use for gpu, use in zip(node.inv.gpus, node.devices, strict=True)}
        for share in shares:
            use = by_uuid.get(share.uuid)
            if use is not None:
                dev.give_back(use, share)
        node.pods -= 1
        left = node.workloads.get(workload, 0) - 1
        if left > 0:
            node.workloads[workload] = left
        else:
            node.workloads.pop(workload, None)
        self._touched(node)

    # -- whole workloads ----------------------------------------------------------------

    def hold(self, workload: str, placement: Placement, pods: Mapping[str, PodAsk]) -> None:
        """Charge a placement the log says was made (folding ``QuotaReserved``)."""
        if workload in self.held:
            self.release(workload)
        for pod_name, node_name in placement.nodes.items():
            node = self.nodes.get(node_name)
            pod = pods.get(pod_name)
            if node is not None and pod is not None:
                self._seat(self._writable(node), workload, pod, placement.devices.get(pod_name, ()))
        self.keep(workload, placement, pods)

    def keep(self, workload: str, placement: Placement, pods: Mapping[str, PodAsk]) -> None:
        """Record a placement whose pods are charged: what ``release`` gives back."""
        for key in placement.exclusive:
            self.exclusive[key] = workload
        self.held[workload] = Held(placement, dict(pods))

    def take_pods(self, workload: str, pods: Iterable[str]) -> None:
        """Some of a workload's pods leave (preempted surplus): it keeps the others."""
        held = self.held.get(workload)
        if held is None:
            return
        gone = set(pods)
        kept = Placement(
            nodes={p: n for p, n in held.placement.nodes.items() if p not in gone},
            devices={p: d for p, d in held.placement.devices.items() if p not in gone},
            exclusive=held.placement.exclusive,
        )
        self.release(workload)
        self.hold(workload, kept, {p: a for p, a in held.pods.items() if p not in gone})

    def add_pods(self, workload: str, placement: Placement, pods: Mapping[str, PodAsk]) -> None:
        """More pods of a workload are placed (surplus pods that waited): it keeps the others."""
        held = self.held.get(workload)
        for pod_name, node_name in placement.nodes.items():
            node = self.nodes.get(node_name)
            pod = pods.get(pod_name)
            if node is not None and pod is not None:
                self._seat(self._writable(node), workload, pod, placement.devices.get(pod_name, ()))
        if held is not None:
            placement = Placement(
                nodes={**held.placement.nodes, **placement.nodes},
                devices={**held.placement.devices, **placement.devices},
                exclusive=(*held.placement.exclusive, *placement.exclusive),
            )
            pods = {**held.pods, **pods}
        self.keep(workload, placement, pods)

    def release(self, workload: str) -> None:
        """Give back a workload's placement (folding its end or eviction; on a view, a
        victim's pods taken away to see what its preemptor would find)."""
        held = self.held.pop(workload, None)
        if held is None:
            return
        for pod_name, node_name in held.placement.nodes.items():
            node = self.nodes.get(node_name)
            pod = held.pods.get(pod_name)
            if node is not None and pod is not None:
                self.uncharge(node, workload, pod, held.placement.devices.get(pod_name, ()))
        for key in held.placement.exclusive:
            if self.exclusive.get(key) == workload:
                del self.exclusive[key]

    # -- figures --------------------------------------------------------------------------

    def fragmentation(self) -> dict[str, int]:
        """Whole free nodes and whole free domains per level: what a big gang needs."""
        out = {"nodes": 0, "free_nodes": 0}
        for node in self.nodes.values():
            if node.ready:
                out["nodes"] += 1
                out["free_nodes"] += node.empty()
        for level in self.levels:
            groups = self.domains(level).values()
            out[f"free_{level}"] = sum(1 for g in groups if all(n.empty() for n in g))
            out[f"all_{level}"] = len(groups)
        return out
