"""Admit or preempt: the cycle's last phase for one head, over the cycle's snapshot.

``nominate`` assigns flavors (quota on the snapshot's copy of the cohort trees; a "does
not fit" is kept for the shape for the rest of the cycle); ``process`` admits a fitting
assignment once it has a place on existing nodes (a view of the book), tries partial
admission, or preempts: the fewest victims that make room in quota *and* on the nodes
(preemption.py), skipping workloads protected by ``minAdmitDuration``. In a dry run
(``snap.dry``: judging heads before the rounds) nothing is kept.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace

from muster.core.model.inventory import DEVICE_RESOURCES, WHOLE_DEVICE
from muster.core.model.queues import ClusterQueueSpec
from muster.core.model.resources import format_quantity
from muster.core.placement.book import NodeBook, Placement
from muster.core.placement.view import view
from muster.core.queueing import attained, placing
from muster.core.queueing import preemption as pre
from muster.core.queueing import reservations as rsv
from muster.core.queueing.cursor import QueueCursor
from muster.core.queueing.flavors import FIT, PREEMPT, Assignment, Unassignable, assign
from muster.core.queueing.snapshot import Snapshot
from muster.core.queueing.state import (
    WorkloadEntry,
    namespace_charge,
    never_preempts,
    preemptible,
    protected_until,
    shape_of,
)
from muster.core.queueing.verdicts import Verdict

# Shares of a device (cores, memory, split counts): packing them is not a count of room.
SHARED_DEVICE_RESOURCES = DEVICE_RESOURCES - frozenset(WHOLE_DEVICE)
# Placement misses remembered across cycles (the notebook's): more are forgotten at once.
MAX_MISSES = 10_000


def preempt_rules(snap: Snapshot, cq: ClusterQueueSpec) -> tuple[bool, bool]:
    """(may preempt at all, may preempt in order to borrow)."""
    rules = snap.rules.get(cq.name)
    if rules is None:
        rules = snap.rules[cq.name] = _preempt_rules(snap, cq)
    return rules


def _preempt_rules(snap: Snapshot, cq: ClusterQueueSpec) -> tuple[bool, bool]:
    in_cohort = snap.tree.queues[cq.name].parent is not None
    fs_reclaim = snap.fair_sharing and in_cohort and cq.preemption.reclaim_within_cohort != "Never"
    beyond = fs_reclaim or (in_cohort and cq.preemption.borrow_within_cohort.policy != "Never")
    return pre.possible(cq.preemption, in_cohort) or fs_reclaim, beyond


def nominate(
    snap: Snapshot, cq: ClusterQueueSpec, wl: WorkloadEntry, exclude: frozenset[str] = frozenset()
) -> Verdict:
    can_preempt, beyond = preempt_rules(snap, cq)
    can_preempt = can_preempt and not never_preempts(snap.state, wl)
    if wl.preempted_for and not exclude:
        # It evicted for these flavors: take them now that the victims are gone.
        pinned = assign(cq, snap.state.flavors, wl.spec, snap.tree, False, pinned=wl.preempted_for)
        if isinstance(pinned, Assignment):
            return Verdict(wl, cq.name, pinned)
    key = no_fit_key(cq, wl, attained.rank(snap.state, wl) if can_preempt else None)
    cache = snap.no_fit.setdefault(id(snap.tree.queues[cq.name].root()), {})
    cached = cache.get(key)
    if cached is not None:
        return Verdict(wl, cq.name, cached)
    outcome = assign(
        cq,
        snap.state.flavors,
        wl.spec,
        snap.tree,
        can_preempt,
        beyond_nominal=beyond,
        exclude=exclude,
    )
    if isinstance(outcome, Unassignable) and not exclude:
        cache[key] = outcome
    return Verdict(wl, cq.name, outcome)


def no_fit_key(cq: ClusterQueueSpec, wl: WorkloadEntry, rank: int | None) -> tuple[object, ...]:
    """What a "does not fit" verdict is kept under for the rest of the cycle: the queue,
    the shape and the rank of a preemptor (None: it may not preempt). The shape names the
    namespace and LocalQueue, so where a preemptor's candidates depend on its tenant
    (tenant fair sharing, ``maxCrossTenantPreemptions``) tenants never share a verdict."""
    return (cq.name, wl.shape, rank)


def process(snap: Snapshot, cursor: QueueCursor, v: Verdict, *, since: int = -1) -> Verdict:
    """``since``: ``snap.processed`` when ``v`` was nominated; if no ``process`` ran since,
    nothing took room since and ``v`` stands (assign is a function of the snapshot)."""
    cq, wl = cursor.cq, v.workload
    fresh = since == snap.processed
    snap.processed += 1
    if snap.admission_blocked:
        return Verdict(wl, cq.name, pods_ready_block())
    if isinstance(v.outcome, Assignment) and not fresh:
        # Earlier entries of this round may have taken the room: assign again.
        v = nominate(snap, cq, wl)
    outcome = v.outcome
    if isinstance(outcome, Unassignable):
        if outcome.reason in PARTIAL_HELPS:
            if _surplus_waits(wl):  # its full count may be out of reach, its minimum not
                return _partial(snap, cq, wl) or _preempt_for_minimum(snap, cq, wl)
            return _partial(snap, cq, wl) or v
        return v
    over = namespace_excess(snap, wl)
    if over is not None:
        return Verdict(wl, cq.name, over)
    if outcome.mode == FIT:
        v = _place_and_admit(snap, cq, wl, outcome, {})
        if isinstance(v.outcome, Unassignable):
            return _partial(snap, cq, wl) or _preempt_for_place(snap, cq, wl, outcome, v) or v
        return v
    if _surplus_waits(wl):
        return _partial(snap, cq, wl) or _preempt_for_minimum(snap, cq, wl)
    return preempt(snap, cq, wl, outcome)


def _surplus_waits(wl: WorkloadEntry) -> bool:
    return any(ps.surplus == "Wait" and ps.min_count is not None for ps in wl.spec.pod_sets)


def _preempt_for_minimum(snap: Snapshot, cq: ClusterQueueSpec, wl: WorkloadEntry) -> Verdict:
    """Volcano preempts for a gang only while it is starving (fewer than minAvailable of
    its pods can run, peers.md §2.4): a workload whose surplus pods wait preempts for its
    minimum; once admitted, the others come as room appears (growth.py). The preemption is
    judged for the workload cut to its minimum (same id, priority and queue position)."""
    pod_sets = tuple(
        replace(ps, count=ps.min_count, min_count=None, surplus="Drop")
        if ps.surplus == "Wait" and ps.min_count is not None
        else ps
        for ps in wl.spec.pod_sets
    )
    spec = replace(wl.spec, pod_sets=pod_sets)
    least = replace(wl, spec=spec, shape=shape_of(spec), has_min_count=False)
    v = nominate(snap, cq, least)
    if not isinstance(v.outcome, Assignment):
        return Verdict(wl, cq.name, v.outcome)
    if v.outcome.mode == FIT:  # quota for its minimum but, as _partial found, no place
        why = namespace_excess(snap, least) or placing.try_place(
            snap.state, view(snap.book), least, cq.name, v.outcome, {}, snap.routes
        )
        if not isinstance(why, Unassignable):
            why = Unassignable("WaitingForQuota", f"couldn't admit its {spec.pod_count} pods")
        return Verdict(wl, cq.name, why)
    return preempt(snap, cq, least, v.outcome)


def _preempt_for_place(
    snap: Snapshot, cq: ClusterQueueSpec, wl: WorkloadEntry, outcome: Assignment, v: Verdict
) -> Verdict | None:
    """``attainedService.preemptForPlacement``: the quota is there but the gang has no
    place (smaller work fragments the nodes), so it preempts work of a lower rank until it
    has one, as Tiresias places a gang on consolidated nodes by preempting lower-priority
    jobs. The same search as for quota, every pair it charges counted as contested: the
    victims are those whose pods gather a place for it (fill-back keeps none it can spare).
    None: no such set, it waits as before (a reservation it must not delay included)."""
    las = cq.attained_service
    why = v.outcome
    if (
        las is None
        or not las.preempt_for_placement
        or not isinstance(why, Unassignable)
        or why.reason == "BlockedByReservation"
        or not preempt_rules(snap, cq)[0]
        or never_preempts(snap.state, wl)
        or not placing.routed(snap.state, wl, outcome, snap.routes)
    ):
        return None
    forced = replace(
        outcome,
        mode=PREEMPT,
        contested=frozenset(outcome.frs()),
        message=f"no place on the nodes: {why.message}",
    )
    done = preempt(snap, cq, wl, forced, for_place=True)
    return done if isinstance(done.outcome, Assignment) else None


def preempt(
    snap: Snapshot,
    cq: ClusterQueueSpec,
    wl: WorkloadEntry,
    outcome: Assignment,
    for_place: bool = False,
) -> Verdict:
    """Evict the fewest workloads that make room, in quota and on the nodes, or say why
    none do. The room goes to the preemptor: later entries of this cycle cannot take it.
    ``for_place``: the quota is there and only a place is sought (_preempt_for_place):
    no other flavor is tried and "no candidates" is not shared with its lane-mates."""
    if snap.defer_preemptions and snap.root_name(cq.name) in snap.reserved_in:
        return _partial(snap, cq, wl) or Verdict(wl, cq.name, _not_yet(outcome))
    spared = snap.state.evicted_for.get(wl.id, set())  # it evicted them once already
    gone = snap.evicted | spared | snap.grown
    rank = attained.rank(snap.state, wl)
    candidates = [h for h in holders(snap, cq.name) if h.id not in gone]
    candidates = _fair_to_tenants(snap, cq, wl, outcome, _ranked(snap, cq, wl, candidates, rank))
    candidates, protected = _unprotected(snap, candidates, outcome)
    excluded: frozenset[str] = frozenset()
    while True:
        victims = pre.victims(
            snap.tree,
            pre.Preemptor(wl.id, cq, rank, wl.order, outcome),
            candidates,
            snap.state.fair_sharing.preemption_strategies if snap.fair_sharing else None,
            placeable=_placeable_without(snap, cq, wl, outcome),
            nodes_of=lambda h: _nodes_of(snap, h),
            monotone=_places_monotonically(wl),
        )
        if victims or for_place:
            break
        # No candidates in these flavors: Kueue ranks that below every viable mode,
        # so the next flavor (fit, or preemption with candidates) gets its turn.
        excluded |= {flavor for flavor, _ in outcome.contested}
        retry = nominate(snap, cq, wl, excluded).outcome
        if isinstance(retry, Assignment) and retry.mode == FIT:
            if namespace_excess(snap, wl) is not None:
                break
            return _place_and_admit(snap, cq, wl, retry, {})
        if not isinstance(retry, Assignment):
            break
        outcome = retry
    if not victims:
        message = (
            f"couldn't assign flavors: {outcome.message}; no preemption candidates "
            "whose eviction makes room for it"
        )
        if protected:
            ends = min(protected.values())
            snap.protection_met = ends
            message += (
                f"; {len(protected)} that could are protected by minAdmitDuration, the "
                f"first for another {ends - snap.state.now:g}s"
            )
        verdict = Unassignable("WaitingForQuota", message, outcome.shortfall)
        # Its lane-mates have the same candidates; a verdict that met protections is
        # not shared, so each lane it parks learns when they end.
        if not for_place and not spared and not protected:
            root = id(snap.tree.queues[cq.name].root())
            snap.no_fit.setdefault(root, {})[no_fit_key(cq, wl, rank)] = verdict
        return _partial(snap, cq, wl) or Verdict(wl, cq.name, verdict)
    if snap.dry:
        return Verdict(wl, cq.name, outcome, victims)
    for victim in victims:
        snap.evicted.add(victim.holder.id)
        snap.tree.add(victim.holder.cluster_queue, victim.holder.usage, -1)
        gives = snap.state.workloads[victim.holder.id]
        charge_tenant(snap, gives, victim.holder.usage, -1, gives.run.pod_counts)
        if victim.holder.shrink is not None:  # it keeps its other pods in its namespace
            charge_tenant(snap, gives, {}, +1, victim.holder.shrink.pod_counts)
        _take_pods(snap, snap.book, victim.holder)
    snap.tree.add(cq.name, outcome.usage)
    charge_tenant(snap, wl, outcome.usage, +1)
    planned = placing.try_place(snap.state, snap.book, wl, cq.name, outcome, {}, snap.routes)
    # "Does not fit" verdicts of this cycle are kept although quota moved: a workload
    # that the evictions made room for gets in next cycle, right after they are folded.
    return Verdict(
        wl,
        cq.name,
        outcome,
        victims,
        placement=planned if isinstance(planned, Placement) else None,
    )


def _not_yet(outcome: Assignment) -> Unassignable:
    """A preemption in a cohort tree where this cycle reserved quota waits for the next
    cycle. The usage it is judged against holds those reservations, its candidates do not
    (they are holders once folded): it could take an older holder, a large, where Kueue,
    whose preemptions are nominated against the cycle's starting snapshot, would take the
    newest lowest-priority one next cycle. Those reservations' fold re-judges it."""
    return Unassignable(
        "WaitingForQuota",
        f"couldn't assign flavors: {outcome.message}; quota was reserved in its cohort "
        "in this cycle: its preemption is judged in the next one, those workloads among "
        "the candidates",
        outcome.shortfall,
    )


def _ranked(
    snap: Snapshot,
    cq: ClusterQueueSpec,
    wl: WorkloadEntry,
    candidates: list[pre.Holder],
    rank: int,
) -> list[pre.Holder]:
    """Candidates with the ranks ``wl``, a preemptor of ``cq`` of rank ``rank``, compares:
    with attained service, priority and level now in ``cq`` (attained.py), else their
    priority. Those of ``cq`` ranked above the preemptor are no victims under any policy:
    left out here, before the costlier checks. Ranked once per cycle (``now`` is the
    cycle's), and per preemptor's tenant where ``maxCrossTenantPreemptions`` makes the
    rank depend on it."""
    las = cq.attained_service
    if las is None:
        return candidates
    state, cache, out = snap.state, snap.ranked, []
    tenant = wl.local_queue
    per_tenant = tenant if las.max_cross_tenant_preemptions else ""
    for h in candidates:
        key = (cq.name, h.id, per_tenant)
        ranked = cache.get(key)
        if ranked is None:
            same = h.cluster_queue == cq.name
            victim = state.workloads[h.id]
            ranked = cache[key] = h.ranked(attained.holder_rank(state, las, victim, same, tenant))
        if ranked.cluster_queue == cq.name and ranked.priority > rank:
            continue
        out.append(ranked)
    return out


def _fair_to_tenants(
    snap: Snapshot,
    cq: ClusterQueueSpec,
    wl: WorkloadEntry,
    outcome: Assignment,
    candidates: list[pre.Holder],
) -> list[pre.Holder]:
    """Attained service with tenant fair sharing: a workload of another tenant is taken for
    its level only while its tenant keeps at least the preemptor's tenant's share (both
    weighted, after the preemption: Kueue's LessThanOrEqualToFinalShare, between tenants)
    and at least its own nominal share, its weight's part of the queue's quota (Kueue
    reclaims only from a queue borrowing above its nominal quota, and fair sharing counts
    a queue within it as share 0: docs/architecture.md, "the per-tenant bound"). Within a
    tenant LAS preempts freely; a class above the preemptor's is no candidate anyway, and
    one below it is taken whatever the shares."""
    if cq.attained_service is None or cq.admission_mode != "UsageBasedAdmissionFairSharing":
        return candidates
    mine = snap.share_after(cq, wl.local_queue, outcome.usage, +1)
    nominal = snap.nominal_share(cq)
    state, out = snap.state, []
    for h in candidates:
        victim = state.workloads[h.id]
        if (
            h.cluster_queue != cq.name
            or victim.local_queue == wl.local_queue
            or victim.priority < wl.priority
            or snap.share_after(cq, victim.local_queue, h.usage, -1) >= max(mine, nominal)
        ):
            out.append(h)
    return out


def _unprotected(
    snap: Snapshot, candidates: list[pre.Holder], outcome: Assignment
) -> tuple[list[pre.Holder], dict[str, float]]:
    """The candidates that may be taken now, and those that hold the preemptor's pairs
    but are protected (minAdmitDuration) -> when that ends."""
    if not snap.protecting:
        return candidates, {}
    now, free, protected = snap.state.now, [], {}
    for h in candidates:
        until = protected_until(snap.state, snap.state.workloads[h.id])
        if until <= now:
            free.append(h)
        elif h.frs() & outcome.contested:
            protected[h.id] = until
    return free, protected


def _placeable_without(
    snap: Snapshot, cq: ClusterQueueSpec, wl: WorkloadEntry, outcome: Assignment
) -> Callable[[Sequence[pre.Holder]], bool]:
    """Whether the preemptor finds a place on existing nodes once these are gone (always,
    when the provisioner makes its nodes). The sets asked about grow and shrink by one
    holder at a time: one trial view follows them, a placement is tried on a view of it."""
    if not placing.routed(snap.state, wl, outcome, snap.routes):
        return lambda gone: True
    seen: dict[frozenset[str], bool] = {}
    trial = view(snap.book)
    released: set[str] = set()

    def placeable(gone: Sequence[pre.Holder]) -> bool:
        key = frozenset(h.id for h in gone)
        found = seen.get(key)
        if found is None:
            for wid in sorted(released - key):
                held = snap.book.held[wid]
                trial.hold(wid, held.placement, held.pods)
                released.discard(wid)
            for h in gone:
                if h.id not in released:
                    _take_pods(snap, trial, h)
                    released.add(h.id)
            got = placing.try_place(
                snap.state, view(trial), wl, cq.name, outcome, {}, snap.routes, explain=False
            )
            found = seen[key] = not isinstance(got, Unassignable)
        return found

    return placeable


def _places_monotonically(wl: WorkloadEntry) -> bool:
    """Whether the workload's placement can only succeed more as pods leave the nodes:
    one pod set of identical pods (each node holds as many as its free room allows, one
    less per pod placed, so the fullest-node-first gang places them wherever the counts
    add up), without a topology request, device filter, device shares or a GPU group,
    whose choices could go wrong with more room. Then a search whose every candidate
    gone leaves it no place has no answer (preemption.py ``_room_with_all``)."""
    if wl.spec.gpu_group_size or len(wl.spec.pod_sets) != 1:
        return False
    ps = wl.spec.pod_sets[0]
    return (
        ps.topology is None
        and ps.devices is None
        and not any(r in ps.requests for r in SHARED_DEVICE_RESOURCES)
    )


def _nodes_of(snap: Snapshot, holder: pre.Holder) -> frozenset[str]:
    """The nodes the holder's pods (its surplus ones, shrinking) are on; kept for the
    cycle (``snap.nodes``): the search asks it for every candidate in every order it
    tries, and a holder's pods stay where they are until it is a victim (no candidate
    then)."""
    key = (holder.id, holder.shrink is not None)
    found = snap.nodes.get(key)
    if found is None:
        held = snap.book.held.get(holder.id)
        if held is None:
            found = frozenset()
        else:
            pods = holder.shrink.pods if holder.shrink is not None else held.placement.nodes
            found = frozenset(held.placement.nodes[p] for p in pods if p in held.placement.nodes)
        snap.nodes[key] = found
    return found


def _take_pods(snap: Snapshot, book: NodeBook, holder: pre.Holder) -> None:
    """A victim's pods leave ``book`` (a view): all of them, or its surplus pods."""
    if holder.shrink is None:
        book.release(holder.id)
    else:
        book.take_pods(holder.id, holder.shrink.pods)


def _place_and_admit(
    snap: Snapshot,
    cq: ClusterQueueSpec,
    wl: WorkloadEntry,
    outcome: Assignment,
    counts: dict[str, int],
) -> Verdict:
    """Admit a fitting assignment once its gang has a place on existing nodes (if it
    goes there), or say why it has none. Reservations it must not delay keep it off
    their nodes and out of the quota their holders will need (reservations.py)."""
    bound = rsv.binding(snap.state, snap.reservations, wl) if snap.reservations else []
    for r in bound:
        if not rsv.quota_left(snap, cq, wl, r, counts):
            return Verdict(wl, cq.name, rsv.blocked(snap.state, r, wl))
    placed = _place(snap, cq, wl, outcome, counts, bound)
    if isinstance(placed, Unassignable):
        return Verdict(wl, cq.name, placed)
    if not snap.dry:
        _admit(snap, cq, wl, outcome, counts)
        for r in bound:  # it still runs at the reservation's start
            if snap.root_name(cq.name) == r.root:
                r.tree.add(cq.name, outcome.usage)
    return Verdict(wl, cq.name, outcome, pod_counts=counts, placement=placed)


def _admit(
    snap: Snapshot,
    cq: ClusterQueueSpec,
    wl: WorkloadEntry,
    outcome: Assignment,
    counts: dict[str, int],
) -> None:
    snap.tree.add(cq.name, outcome.usage)
    snap.reserved_in.add(snap.root_name(cq.name))
    charge_tenant(snap, wl, outcome.usage, +1, counts)
    snap.admission_blocked = snap.block_after_admit


# Why the full count is not admitted now that fewer pods may mend: quota in use, or a count
# over what the ClusterQueue could ever give (Kueue's reducer runs whenever the full size
# does not fit, pkg/scheduler/podset_reducer.go).
PARTIAL_HELPS = frozenset({"WaitingForQuota", "ExceedsMaxQuota"})


def _partial(snap: Snapshot, cq: ClusterQueueSpec, wl: WorkloadEntry) -> Verdict | None:
    """Kueue's partial admission: the largest count >= minCount that fits now, in
    quota and, on existing nodes, in placement (Volcano's minAvailable).

    Only one pod set may have a ``minCount``; the search is a bisection because
    fitting is monotone in the count. A pod set in slices (a Volcano task's partitions)
    is admitted in whole slices.
    """
    ps = next(
        (p for p in wl.spec.pod_sets if p.min_count is not None and p.min_count < p.count),
        None,
    )
    if ps is None or ps.min_count is None:
        return None
    # Whole slices only (a Volcano partition is all-or-nothing): counts in steps of one.
    step = ps.topology.slice_size if ps.topology is not None and ps.topology.slice_size else 1
    lo, hi = -(-ps.min_count // step), (ps.count - 1) // step
    best: tuple[int, Assignment] | None = None
    while lo <= hi:
        mid = (lo + hi) // 2
        n = mid * step
        a = assign(cq, snap.state.flavors, wl.spec, snap.tree, False, {ps.name: n})
        if isinstance(a, Assignment) and a.mode == FIT and _placeable(snap, cq, wl, a, n):
            best, lo = (n, a), mid + 1
        else:
            hi = mid - 1
    if best is None:
        return None
    counts = {ps.name: best[0]}
    if namespace_excess(snap, wl, counts) is not None:
        return None
    return _place_and_admit(snap, cq, wl, best[1], counts)


def _placeable(
    snap: Snapshot, cq: ClusterQueueSpec, wl: WorkloadEntry, a: Assignment, n: int
) -> bool:
    ps = next(p for p in wl.spec.pod_sets if p.min_count is not None)
    trial = view(snap.book)
    got = placing.try_place(
        snap.state, trial, wl, cq.name, a, {ps.name: n}, snap.routes, explain=False
    )
    return not isinstance(got, Unassignable)


def _place(
    snap: Snapshot,
    cq: ClusterQueueSpec,
    wl: WorkloadEntry,
    outcome: Assignment,
    counts: dict[str, int],
    bound: Sequence[rsv.Reservation] = (),
) -> Placement | Unassignable | None:
    """Placement on existing nodes (None: the provisioner makes the nodes), off the nodes
    of the reservations ``bound``."""
    avoid = frozenset().union(*(r.nodes for r in bound))
    # What placement depends on: the pods (not whose they are), the flavors' labels and
    # tolerations, the policy, the nodes it may not take. Tenants and queues with
    # lookalike heads share one search.
    key = (
        wl.spec.placement or cq.placement,
        wl.shape[2:],
        tuple(sorted(counts.items())),
        tuple(sorted((k, tuple(sorted(v.items()))) for k, v in outcome.node_selectors.items())),
        tuple(sorted((k, tuple(sorted(v.items()))) for k, v in outcome.flavors.items())),
        avoid,
    )
    if wl.preempted_on is not None:
        # Where its victims made room: there first, before anywhere a lookalike fails.
        within = frozenset(wl.preempted_on.nodes.values())
        there = placing.try_place(
            snap.state,
            view(snap.book) if snap.dry else snap.book,
            wl,
            cq.name,
            outcome,
            counts,
            snap.routes,
            within=within,
        )
        if not isinstance(there, Unassignable):
            return there
    known = snap.unplaced.get(key)
    if known is not None:
        return known
    if avoid:
        return _place_around(snap, cq, wl, outcome, counts, bound, avoid, key)
    misses = snap.state.notes.misses
    freed = snap.state.book.freed
    pristine = not snap.book.changed()
    if pristine:  # the book as the log left it: what was found on it holds
        seen = misses.get(key)
        if seen is not None and seen[0] == freed:
            # No room was freed since it found none. Its reason's numbers are of then:
            # if they are to be recorded, they are worked out now (lane_verdict).
            snap.recall[id(seen[1])] = lambda: _fresh_miss(snap, cq, wl, outcome, counts)
            return seen[1]
    book = view(snap.book) if snap.dry else snap.book  # a dry run keeps nothing
    placed = placing.try_place(snap.state, book, wl, cq.name, outcome, counts, snap.routes)
    if isinstance(placed, Unassignable):
        snap.unplaced[key] = placed
        if pristine:  # found on the book as the log left it
            if len(misses) > MAX_MISSES:
                misses.clear()
            misses[key] = (freed, placed)
    return placed


def _place_around(
    snap: Snapshot,
    cq: ClusterQueueSpec,
    wl: WorkloadEntry,
    outcome: Assignment,
    counts: dict[str, int],
    bound: Sequence[rsv.Reservation],
    avoid: frozenset[str],
    key: tuple[object, ...],
) -> Placement | Unassignable | None:
    """Placement off the reserved nodes ``avoid``; where it has none but would have one
    on them, the reservation is what it waits for (BlockedByReservation)."""
    within = frozenset(n for n in snap.book.nodes if n not in avoid)
    book = view(snap.book) if snap.dry else snap.book
    placed = placing.try_place(
        snap.state, book, wl, cq.name, outcome, counts, snap.routes, within=within
    )
    if isinstance(placed, Unassignable):
        anywhere = placing.try_place(
            snap.state, view(snap.book), wl, cq.name, outcome, counts, snap.routes, explain=False
        )
        if isinstance(anywhere, Placement):
            on = set(anywhere.nodes.values())
            r = next((r for r in bound if r.nodes & on), bound[0])
            placed = rsv.blocked(snap.state, r, wl)
        snap.unplaced[key] = placed
    return placed


def _fresh_miss(
    snap: Snapshot,
    cq: ClusterQueueSpec,
    wl: WorkloadEntry,
    outcome: Assignment,
    counts: dict[str, int],
) -> Unassignable:
    got = placing.try_place(snap.state, view(snap.book), wl, cq.name, outcome, counts, snap.routes)
    assert isinstance(got, Unassignable), "a remembered miss found a place"
    return got


def charge_tenant(
    snap: Snapshot,
    wl: WorkloadEntry,
    usage: dict[str, dict[str, int]],
    sign: int,
    counts: dict[str, int] | None = None,
) -> None:
    per_lq = snap.lq_usage.setdefault(wl.local_queue, {})
    snap.shares.pop(wl.local_queue, None)
    for flavor, resources in usage.items():
        per_flavor = per_lq.setdefault(flavor, {})
        for resource, qty in resources.items():
            per_flavor[resource] = per_flavor.get(resource, 0) + sign * qty
    per_ns = snap.ns_usage.setdefault(wl.spec.namespace, {})
    for resource, qty in namespace_charge(wl.spec, counts or wl.run.pod_counts).items():
        per_ns[resource] = per_ns.get(resource, 0) + sign * qty


def namespace_excess(
    snap: Snapshot, wl: WorkloadEntry, counts: dict[str, int] | None = None
) -> Unassignable | None:
    """A ResourceQuota of the workload's namespace it would exceed, with numbers."""
    quotas = [
        q
        for k, q in sorted(snap.state.namespace_quotas.items())
        if q.namespace == wl.spec.namespace
    ]
    if not quotas:
        return None
    want = namespace_charge(wl.spec, counts)
    used = snap.ns_usage.get(wl.spec.namespace, {})
    for q in quotas:
        over = sorted(r for r, hard in q.hard.items() if used.get(r, 0) + want.get(r, 0) > hard)
        if over:

            def fmt(amounts: dict[str, int], over: list[str] = over) -> str:
                return ",".join(f"{r}={format_quantity(r, amounts.get(r, 0))}" for r in over)

            message = (
                f"exceeded quota: {q.name}, requested: {fmt(want)}, used: {fmt(used)}, "
                f"limited: {fmt(dict(q.hard))}"
            )
            reason = (
                "NamespaceQuotaRejected"
                if q.enforcement == "Reject"
                else ("NamespaceQuotaExceeded")
            )
            return Unassignable(reason, message)
    return None


def holders(snap: Snapshot, cq: str) -> list[pre.Holder]:
    """Workloads holding quota in ``cq``'s cohort tree: the only possible victims. Kept
    in the notebook per tree until quota moves in it (or the configuration changes)."""
    root = snap.root_name(cq)
    stamp = (snap.state.config_version, snap.state.quota_changed.get(root, 0))
    kept = snap.state.notes.holders
    found = kept.get(root)
    if found is None or found[0] != stamp:
        fresh: dict[str, list[pre.Holder]] = {}
        # The last lists' holders, reused for workloads whose attempt has not changed: a
        # busy tree's quota moves every cycle, its holders mostly do not.
        before = {h.id: h for _, listed in kept.values() for h in listed}
        for wid in sorted(snap.state.active):
            wl = snap.state.workloads[wid]
            if (
                wl.holds_quota
                and wl.run.cluster_queue in snap.tree.queues
                and preemptible(snap.state, wl)
            ):
                holder = _same_holder(before.get(wid), wl) or _holder(wl)
                if holder is not None:
                    fresh.setdefault(snap.root_name(wl.run.cluster_queue), []).append(holder)
        for name in {*fresh, *kept, root}:
            kept[name] = (
                (snap.state.config_version, snap.state.quota_changed.get(name, 0)),
                fresh.get(name, []),
            )
        found = kept[root]
    return found[1]


def pods_ready_block() -> Unassignable:
    return Unassignable(
        "WaitingForPodsReady",
        "admission blocked until every admitted workload has all its pods running "
        "(waitForPodsReady.blockAdmission)",
    )


def _same_holder(h: pre.Holder | None, wl: WorkloadEntry) -> pre.Holder | None:
    """``h`` if ``_holder(wl)`` would make an equal one: the same attempt (its usage is the
    same dict: the fold assigns a new one whenever it changes), queue, priority and place
    in line, and a whole workload (a partial one's surplus moves with its pods)."""
    if (
        h is None
        or h.shrink is not None
        or wl.has_min_count
        or h.usage is not wl.run.usage
        or h.reserved_seq != wl.run.reserved_seq
        or h.cluster_queue != wl.run.cluster_queue
        or h.priority != wl.priority
        or h.order != wl.order
    ):
        return None
    return h


def _holder(wl: WorkloadEntry) -> pre.Holder | None:
    """The workload as a preemption candidate. One admitted partially (a ``minCount``) is
    never taken below its minimum (Volcano's gang rule): on existing nodes it offers the
    pods it runs above it, elsewhere nothing."""
    if wl.run.cluster_queue is None:
        return None
    shrink = None
    usage = wl.run.usage
    if wl.has_min_count:
        surplus = _surplus(wl) if wl.run.placed else None
        if surplus is None:
            return None
        shrink, usage = surplus
    return pre.Holder(
        id=wl.id,
        cluster_queue=wl.run.cluster_queue,
        priority=wl.priority,
        order=wl.order,
        reserved_seq=wl.run.reserved_seq,
        usage=usage,
        shrink=shrink,
    )


def _surplus(wl: WorkloadEntry) -> tuple[pre.Shrink, dict[str, dict[str, int]]] | None:
    """(what taking the pods above its minimum leaves, what those pods hold), or None."""
    for ps in wl.spec.pod_sets:
        if ps.min_count is None:
            continue
        running = wl.run.pod_counts.get(ps.name, ps.count)
        extra = running - ps.min_count
        if extra <= 0:
            return None
        taken: dict[str, dict[str, int]] = {}
        for resource, flavor in wl.run.flavors.get(ps.name, {}).items():
            per_pod = 1 if resource == "pods" else ps.requests.get(resource, 0)
            if per_pod:
                taken.setdefault(flavor, {})[resource] = per_pod * extra
        left = {
            f: {r: q - taken.get(f, {}).get(r, 0) for r, q in res.items()}
            for f, res in wl.run.usage.items()
        }
        pods = tuple(ps.pod_names(running)[ps.min_count :])
        counts = {**wl.run.pod_counts, ps.name: ps.min_count}
        return pre.Shrink(pods, counts, left), taken
    return None
