"""Reservations and backfill around them (a ClusterQueue's ``backfill``): Slurm's
sched/backfill and Volcano's reserve + backfill actions, done the replayable way.

A ClusterQueue with ``backfill`` walks its pending workloads in admission order, as
Slurm's backfill walks its queue: those that fit now (quota without preemption, a place
on the nodes) are taken on copies of the quota and the book, since the cycle is about to
admit them; the first that does not and has waited ``reserveAfterSeconds`` gets a
**reservation**: the nodes the placement engine would give it at the earliest moment
running work frees enough of them, and that moment as its estimated start. Running work
(and work taken now) is taken to end in the order of its estimated ends: its start plus
``maxRunDurationSeconds`` when declared (Slurm's time limit), else plus the queue's
``defaultRunSeconds`` (Slurm's DefaultTime), else unknown: after every known end, oldest
first. The smallest such prefix whose end lets the holder fit (in quota and on the nodes)
gives the nodes and the start; an unknown end in it makes the start unknown (the nodes
are held as they free).

While a reservation stands, every workload behind its holder in admission order (a lower
priority, or as high and submitted later; of any queue) goes on a reserved node only if
its own ``maxRunDurationSeconds`` ends before the estimated start (Slurm's conservative
backfill rule); otherwise only on other nodes, and, if it is in the holder's cohort tree,
only if the holder still fits the quota the tree would have at the start with it
running. So no admission delays the holder: given declared durations are honoured, its
estimated start never moves later.

Derived state: reservations are worked out from the state at the start of every cycle
(running workloads, their declared durations, the pending ones, the time), never
stored; replay re-derives them with every decision. The notebook keeps each holder's last
search with what it was made from (a cache: a fresh one finds the same). The holder's
pending reason (``Reserved``) and the refused one's (``BlockedByReservation``) say what
the operator needs: how many nodes, which, and the estimated start.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from muster.core.model.queues import BackfillPolicy, ClusterQueueSpec
from muster.core.placement.book import NodeBook, Placement
from muster.core.placement.view import view
from muster.core.queueing import placing
from muster.core.queueing import quota as qt
from muster.core.queueing.flavors import FIT, Assignment, Unassignable, assign
from muster.core.queueing.pending import Lane
from muster.core.queueing.state import QueueState, WorkloadEntry

if TYPE_CHECKING:
    from muster.core.queueing.snapshot import Snapshot

# Pending workloads of one queue looked at per cycle for a reservation (Slurm's
# bf_max_job_test): those that fit now, then the first that does not.
MAX_LOOK = 64


@dataclass(frozen=True, slots=True)
class Running:
    """Work that holds (or, taken now, is about to hold) quota and nodes: when it ends."""

    id: str
    queue: str | None
    usage: dict[str, dict[str, int]]
    end: float | None  # None: unknown
    seq: int  # ties: who got quota first (taken now: after everyone running)


@dataclass(slots=True)
class Reservation:
    holder: str  # the workload it is for
    name: str  # the holder's name, for messages
    cluster_queue: str
    priority: int
    order: int  # its place in the queue: it binds only work behind it
    nodes: frozenset[str]
    start: float | None  # estimated start; None: unknown (an end it waits for is unknown)
    tree: qt.QuotaTree  # its cohort tree's quota at the start, the holder charged
    root: str  # the cohort tree's root queue or cohort

    def describe(self, now: float) -> str:
        names = ", ".join(sorted(self.nodes)[:8]) + (", ..." if len(self.nodes) > 8 else "")
        return f"reserved {len(self.nodes)} node(s) ({names}), {self.when(now)}"

    def when(self, now: float) -> str:
        if self.start is None:
            return "estimated start unknown (running work on them declares no duration)"
        return f"estimated start at {self.start:g} (in {max(self.start - now, 0.0):g}s)"


def estimated_end(wl: WorkloadEntry, policy: BackfillPolicy) -> float | None:
    """When a running workload frees what it holds: its declared maxRunDurationSeconds,
    else the queue's defaultRunSeconds, from its quota reservation; None: unknown."""
    started = wl.run.reserved_at
    return None if started is None else _declared_end(wl, policy, started)


def ends_before(state: QueueState, wl: WorkloadEntry, r: Reservation) -> bool:
    """Slurm's backfill rule: started now, its declared run ends by the reservation's start."""
    declared = wl.spec.max_run_duration_seconds
    return declared is not None and r.start is not None and state.now + declared <= r.start


def binding(
    state: QueueState, reservations: list[Reservation], wl: WorkloadEntry
) -> list[Reservation]:
    """The reservations ``wl`` must not delay: those of work ahead of it in admission
    order (a higher priority, or as high and submitted earlier)."""
    return [
        r
        for r in reservations
        if (-wl.priority, wl.order) > (-r.priority, r.order) and not ends_before(state, wl, r)
    ]


def reserve(snap: Snapshot) -> list[Reservation]:
    """This cycle's reservations, at most one per ClusterQueue with ``backfill``, in queue
    name order (a later one is made around the earlier ones' nodes), worked out on the
    snapshot before anything of the cycle is charged to it. Pending workloads are taken
    in admission order, as Slurm's backfill walks its queue: those that fit now are
    charged (on copies: they are about to be admitted and take that room), the first
    that does not and has waited long enough gets the reservation."""
    state, routes = snap.state, snap.routes
    tree, book = qt.copy_on_read(snap.tree), view(snap.book)
    kept = state.notes.reserved
    for wid in [w for w in kept if w not in state.pending]:
        del kept[wid]  # admitted or gone: its search is of no use
    out: list[Reservation] = []
    now: list[Running] = []  # taken now, in this order
    for name in sorted(state.cluster_queues):
        cq = state.cluster_queues[name]
        policy = cq.backfill
        if policy is None or cq.stop_policy != "None":
            continue
        taken = frozenset().union(*(r.nodes for r in out))
        for wl in itertools.islice(in_order(state, name), MAX_LOOK):
            usage = _take_now(state, cq, wl, tree, book, routes)
            if usage is not None:
                end = _declared_end(wl, policy, state.now)
                now.append(Running(wl.id, cq.name, usage, end, 1 << 62 | len(now)))
                continue
            if state.now - wl.queued_at < policy.reserve_after_seconds:
                continue
            root = snap.root_name(name)
            found = _reservation(state, cq, wl, tree, book, routes, taken, root, now)
            if found is not None:
                out.append(found)
                break
    return out


def _take_now(
    state: QueueState,
    cq: ClusterQueueSpec,
    wl: WorkloadEntry,
    tree: qt.QuotaTree,
    book: NodeBook,
    routes: dict[tuple[object, ...], bool],
) -> dict[str, dict[str, int]] | None:
    """What it takes if it fits now (quota without preemption, a place on the nodes),
    charged to the copies ``tree`` and ``book``; None if it does not fit."""
    a = assign(cq, state.flavors, wl.spec, tree, False)
    if not isinstance(a, Assignment) or a.mode != FIT:
        return None
    placed = placing.try_place(state, book, wl, cq.name, a, {}, routes, explain=False)
    if isinstance(placed, Unassignable):
        return None
    tree.add(cq.name, a.usage)
    return a.usage


def _declared_end(wl: WorkloadEntry, policy: BackfillPolicy, start: float) -> float | None:
    declared = wl.spec.max_run_duration_seconds
    if declared is not None:
        return start + declared
    if policy.default_run_seconds is not None:
        return start + policy.default_run_seconds
    return None


def in_order(state: QueueState, cq: str) -> Iterator[WorkloadEntry]:
    """The queue's pending workloads in admission order (lanes merged member by member),
    those in a backoff left out."""
    lanes = [
        lane
        for key, lq in state.local_queues.items()
        if lq.cluster_queue == cq
        for lane in state.lanes.of(key)
    ]

    def members(lane: Lane) -> Iterator[tuple[tuple[int, int, int, str], str]]:
        for at in range(len(lane.members)):
            yield lane.head_key(at), lane.members[at][1]

    for _, wid in heapq.merge(*(members(lane) for lane in lanes)):
        wl = state.workloads[wid]
        if wl.requeue_at is not None and state.now < wl.requeue_at:
            continue  # in backoff: not admissible, not to be reserved for
        yield wl


def next_reservation_time(state: QueueState) -> float | None:
    """When a queue's pending workload first waits ``reserveAfterSeconds`` (its timer)."""
    times = [
        wl.queued_at + cq.backfill.reserve_after_seconds
        for cq in state.cluster_queues.values()
        if cq.backfill is not None and cq.backfill.reserve_after_seconds > 0
        for wl in itertools.islice(in_order(state, cq.name), MAX_LOOK)
    ]
    return min((t for t in times if t > state.now), default=None)


def _reservation(
    state: QueueState,
    cq: ClusterQueueSpec,
    wl: WorkloadEntry,
    tree: qt.QuotaTree,
    book: NodeBook,
    routes: dict[tuple[object, ...], bool],
    taken: frozenset[str],
    root: str,
    now: list[Running],
) -> Reservation | None:
    """Its reservation, or None: it fits now (nothing to reserve), goes to the
    provisioner's nodes, or no end of running work makes room for it. What was found is
    kept in the notebook with what it was found from (the same state finds the same);
    a search after the state moved starts where the last one ended."""
    policy = cq.backfill
    assert policy is not None
    key = (
        state.config_version,
        state.book.version,
        tuple(sorted(state.quota_changed.items())),
        taken,
        policy,
        state.now if now else None,  # the ends of work taken now count from now
    )
    kept = state.notes.reserved.get(wl.id)
    if kept is not None and kept[0] == key:
        found = kept[1]
    else:
        hint = kept[1] if kept is not None else None
        found = _search(state, cq, wl, tree, book, routes, taken, policy, hint, now)
        state.notes.reserved[wl.id] = (key, found)
    if found is None:
        return None
    future = qt.copy_on_read(tree)
    for queue, usage in found.released.items():
        future.add(queue, usage, -1)
    future.add(cq.name, found.usage)
    ends = found.ends
    start = None if any(e is None for e in ends) else max([state.now, *(e for e in ends if e)])
    return Reservation(
        holder=wl.id,
        name=wl.spec.name,
        cluster_queue=cq.name,
        priority=wl.priority,
        order=wl.order,
        nodes=found.nodes,
        start=start,
        tree=future,
        root=root,
    )


@dataclass(frozen=True, slots=True)
class _Found:
    """What a search found: the nodes, the ends it waits for, and the quota at its start
    (usage the ended work gives back per queue, the holder's)."""

    nodes: frozenset[str]
    ends: tuple[float | None, ...]
    released: dict[str, dict[str, dict[str, int]]]
    usage: dict[str, dict[str, int]]
    prefix: frozenset[str]  # the workloads whose ends it waits for


def _search(
    state: QueueState,
    cq: ClusterQueueSpec,
    wl: WorkloadEntry,
    tree: qt.QuotaTree,
    book: NodeBook,
    routes: dict[tuple[object, ...], bool],
    taken: frozenset[str],
    policy: BackfillPolicy,
    hint: _Found | None,
    now: list[Running],
) -> _Found | None:
    now_fits = assign(cq, state.flavors, wl.spec, tree, False)
    if isinstance(now_fits, Unassignable) and now_fits.reason != "WaitingForQuota":
        return None  # over what the queue could ever give, or no flavor: no end helps
    if isinstance(now_fits, Assignment) and not placing.routed(state, wl, now_fits, routes):
        return None  # the provisioner makes its nodes
    within = frozenset(n for n in book.nodes if n not in taken) if taken else None
    running = _by_end(state, policy, now)

    def fits(k: int) -> _Found | None:
        released: dict[str, dict[str, dict[str, int]]] = {}
        trial = view(book)
        for other in running[:k]:
            queue = other.queue
            if queue is not None and queue in tree.queues:
                per_queue = released.setdefault(queue, {})
                for flavor, amounts in other.usage.items():
                    per_flavor = per_queue.setdefault(flavor, {})
                    for resource, qty in amounts.items():
                        per_flavor[resource] = per_flavor.get(resource, 0) + qty
            trial.release(other.id)
        future = qt.copy_on_read(tree)
        for queue, usage in released.items():
            future.add(queue, usage, -1)
        a = assign(cq, state.flavors, wl.spec, future, False)
        if not isinstance(a, Assignment) or a.mode != FIT:
            return None
        if not placing.routed(state, wl, a, routes):
            return None
        got = placing.try_place(
            state, trial, wl, cq.name, a, {}, routes, within=within, explain=False
        )
        if not isinstance(got, Placement):
            return None
        return _Found(
            nodes=frozenset(got.nodes.values()),
            ends=tuple(other.end for other in running[:k]),
            released=released,
            usage=a.usage,
            prefix=frozenset(other.id for other in running[:k]),
        )

    if fits(0) is not None:
        return None  # it fits now: the rounds admit it
    n = len(running)
    if hint is not None:  # the last search's prefix, less what ended since
        k = max((i + 1 for i, other in enumerate(running) if other.id in hint.prefix), default=0)
        if 1 < k <= n and (found := fits(k)) is not None and fits(k - 1) is None:
            return found
        if k == 1 and (found := fits(1)) is not None:
            return found
    lo, hi = 1, n
    if n == 0 or fits(hi) is None:
        return None
    while lo < hi:  # the smallest prefix of ends that makes room (more ends: more room)
        mid = (lo + hi) // 2
        if fits(mid) is None:
            lo = mid + 1
        else:
            hi = mid
    return fits(lo)


def _by_end(state: QueueState, policy: BackfillPolicy, now: list[Running]) -> list[Running]:
    """Running workloads holding quota, and those taken now, by estimated end (unknown
    ones last, oldest first; ties by when they got quota)."""
    out = list(now)
    for wid in state.active:
        other = state.workloads[wid]
        if other.holds_quota:
            end = estimated_end(other, policy)
            out.append(
                Running(wid, other.run.cluster_queue, other.run.usage, end, other.run.reserved_seq)
            )
    inf = float("inf")
    out.sort(key=lambda r: (r.end if r.end is not None else inf, r.seq))
    return out


def quota_left(
    snap: Snapshot, cq: ClusterQueueSpec, wl: WorkloadEntry, r: Reservation, counts: dict[str, int]
) -> bool:
    """Whether the reservation's cohort tree at its start still has room for ``wl``
    running (another tree's quota is not the holder's)."""
    state = snap.state
    if snap.root_name(cq.name) != r.root:
        return True
    a = assign(cq, state.flavors, wl.spec, r.tree, False, counts or None)
    return isinstance(a, Assignment) and a.mode == FIT


def blocked(state: QueueState, r: Reservation, wl: WorkloadEntry) -> Unassignable:
    """Why a workload that fits now waits: only the reserved nodes or quota would take it."""
    declared = wl.spec.max_run_duration_seconds
    why = (
        "it declares no maxRunDurationSeconds"
        if declared is None
        else f"its maxRunDurationSeconds ({declared}s) ends after that"
    )
    return Unassignable(
        "BlockedByReservation",
        f"it would delay {r.name}, which holds a reservation: {r.describe(state.now)}; {why}",
    )
