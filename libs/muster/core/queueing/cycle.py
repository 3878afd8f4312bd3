"""The admission cycle: phase functions over one snapshot of the state.

    lanes_to_judge -> judge_heads (parked or live) -> admit_rounds (nominate -> order ->
    admit or preempt, admit.py) -> keep_parking; verdicts -> events (verdicts.py)

The lanes to judge are every lane (a fresh notebook, a configuration change) or those
the notebook says: touched by an event, not parked, or parked under a cause that moved
(parking.py); whole lanes are held back first (a missing or stopped queue, admission
blocked, a backoff). A head is judged by a dry run of its admission against the state as
the log left it: a lane that cannot be admitted is parked whole and takes no turn in the
rounds, whether judged now or earlier. Kueue pops one head per ClusterQueue per cycle;
muster runs that round again and again inside one cycle, against what the earlier
rounds admitted, until every live lane is decided: a deep BestEffortFIFO queue admits
everything that fits in one cycle. A StrictFIFO queue stops at its first workload that
does not fit. Within one cycle a verdict of "does not fit" for a workload shape is
reused for the same shape (Kueue's equivalence hashing). The snapshot (snapshot.py)
holds the cycle's working copies: quota on a copy-on-read of the cohort trees,
placement on a view of the node book; the state is read, never written.

Deterministic for a given state: queues are visited in name order and every ordering
ends in the submission order; a fresh notebook decides the same.
"""

from __future__ import annotations

from collections.abc import Iterator

from muster.core.events import NewEvent
from muster.core.model.queues import ClusterQueueSpec
from muster.core.queueing import attained, checks
from muster.core.queueing import quota as qt
from muster.core.queueing.admit import (
    no_fit_key,
    nominate,
    pods_ready_block,
    preempt_rules,
    process,
)
from muster.core.queueing.cursor import QueueCursor
from muster.core.queueing.flavors import Assignment, Unassignable
from muster.core.queueing.growth import Growers
from muster.core.queueing.parking import CONFIG, QUOTA, STATE, TIME
from muster.core.queueing.pending import Lane
from muster.core.queueing.reservations import reserve
from muster.core.queueing.snapshot import Snapshot
from muster.core.queueing.state import QueueState, WorkloadEntry, never_preempts
from muster.core.queueing.verdicts import REJECTIONS, Verdict, to_events


def admission_cycle(state: QueueState, *, defer_preemptions: bool = True) -> list[NewEvent]:
    """The queue's admissions, evictions and pending reasons for this state.
    ``defer_preemptions=False``: as decided before a preemption in a cohort tree that
    reserved quota in the same cycle waited for the next one (``QueueDecider.decided_before``)."""
    return to_events(state, decide(state, defer_preemptions=defer_preemptions))


def decide(
    state: QueueState,
    *,
    every_verdict: bool = False,
    subject: str | None = None,
    defer_preemptions: bool = True,
) -> list[Verdict]:
    """The cycle's verdicts, phase by phase over one snapshot of the state.
    ``every_verdict``: a verdict for every pending workload (visibility), and nothing
    kept in the notebook; otherwise verdicts that would change nothing in the log are
    dropped early. ``subject`` (with ``every_verdict``): of the verdicts its lanes'
    judgements record for whole lanes, only this workload's (explain)."""
    snap = Snapshot(
        state, every_verdict=every_verdict, subject=subject, defer_preemptions=defer_preemptions
    )
    if snap.backfill:
        snap.reservations = reserve(snap)
    live = [cursor for cursor in lanes_to_judge(snap) if judge_heads(snap, cursor)]
    # The rounds find their own misses: what the heads' judgement found on the book
    # as the log left it is not said again with its numbers of then.
    snap.unplaced.clear()
    admit_rounds(snap, live)
    if not every_verdict:
        keep_parking(snap)
    return snap.verdicts


def lanes_to_judge(snap: Snapshot) -> list[QueueCursor]:
    """The ClusterQueues' lanes to judge (every one, or those the notebook says), after
    what holds whole lanes back: a missing or stopped queue, admission blocked, a
    workload's own backoff."""
    blocked = _blocked_by_pods_ready(snap)
    by_queue: dict[str | None, list[Lane]] = {}
    for lq_key in _local_queues(snap):
        lq = snap.state.local_queues.get(lq_key)
        by_queue.setdefault(lq.cluster_queue if lq is not None else None, []).extend(
            snap.state.lanes.of(lq_key)
        )
    cursors: list[QueueCursor] = []
    for name in sorted(by_queue, key=lambda n: n or ""):
        lanes = _to_judge(snap, name, by_queue[name])
        cq = snap.state.cluster_queues.get(name) if name else None
        live = []
        for lane in lanes:
            held, kind = _held(snap, lane, name, cq, blocked)
            if held is not None:
                snap.record(lane, 0, name, held)
                _judged(snap, lane, kind, cq, held)
            else:
                live.append(lane)
        if live:
            assert cq is not None
            cursors.append(QueueCursor(snap, cq, live))
    return cursors


def _local_queues(snap: Snapshot) -> list[str]:
    """The LocalQueues with lanes to judge: all, or those of the notebook's lanes and,
    for a StrictFIFO ClusterQueue among them, the queue's others too."""
    every = snap.state.lanes.lanes
    if snap.judge is None:
        return sorted(every)
    picked = {lq for lq, _ in snap.judge if lq in every}
    strict = snap.strict_judged
    for lq in {lq for lq, _ in snap.judge}:  # a lane that left counts too: a new head
        spec = snap.state.local_queues.get(lq)
        cq = snap.state.cluster_queues.get(spec.cluster_queue) if spec is not None else None
        if cq is not None and cq.queueing_strategy == "StrictFIFO":
            strict.add(cq.name)
    if strict:
        picked |= {
            key
            for key, spec in snap.state.local_queues.items()
            if spec.cluster_queue in strict and key in every
        }
    return sorted(picked)


def _to_judge(snap: Snapshot, name: str | None, lanes: list[Lane]) -> list[Lane]:
    """All of them, or those the notebook says (a StrictFIFO queue's lanes go together:
    one head decides them all)."""
    if snap.judge is None or name in snap.strict_judged:
        return lanes
    return [lane for lane in lanes if (lane.local_queue, lane.key) in snap.judge]


def _held(
    snap: Snapshot, lane: Lane, name: str | None, cq: ClusterQueueSpec | None, blocked: bool
) -> tuple[Unassignable | None, str | None]:
    """What holds the whole lane back, and what can change it (a parking kind)."""
    if cq is None:
        return _missing_queue(name, lane.local_queue), CONFIG
    stopped = _lq_stopped(snap.state, lane.local_queue) or _stopped(snap.state, cq)
    stopped = stopped or _inactive(snap.state, cq)
    if stopped is not None:
        return stopped, CONFIG
    if blocked:
        return pods_ready_block(), None
    if lane.key[0] == "workload":
        held = _held_back(snap, snap.workload(lane, 0))
        if held is not None:
            return held, TIME
    return None, None


def _judged(
    snap: Snapshot,
    lane: Lane,
    kind: str | None,
    cq: ClusterQueueSpec | None,
    why: Unassignable | None,
    until: float = 0.0,
) -> None:
    """What a judged lane is parked under (None: judged again next cycle); ``until``:
    when a protection its verdict met ends."""
    lane_id = (lane.local_queue, lane.key)
    # A workload's own lane parks like any other: what its history holds (victims it
    # may not take again, flavors it preempted for) changes only with events that
    # re-file it, and so touch its lane.
    if kind is None or why is None or why.reason in REJECTIONS:
        snap.stamps[lane_id] = None
        return
    root = snap.root_name(cq.name) if cq is not None else ""
    if kind == TIME:
        wl = snap.workload(lane, 0)
        until = wl.requeue_at if wl.requeue_at is not None else 0.0
    snap.stamps[lane_id] = snap.counters.stamp(kind, root, lane.local_queue.split("/", 1)[0], until)


def _blocked_by_pods_ready(snap: Snapshot) -> bool:
    config = snap.state.wait_for_pods_ready
    if not (config.enable and config.block_admission):
        return False
    return any(
        snap.state.workloads[w].holds_quota and not snap.state.workloads[w].run.pods_ready
        for w in snap.state.active
    )


def _held_back(snap: Snapshot, wl: WorkloadEntry) -> Unassignable | None:
    """Its admission check's retry backoff; waitForPodsReady: past the backoff limit,
    or in backoff."""
    if wl.check_retries and wl.requeue_at is not None and snap.state.now < wl.requeue_at:
        return Unassignable(
            "WaitingForBackoff",
            f"{wl.backoff_reason}; eligible again {wl.requeue_at - snap.state.now:g}s from now",
        )
    config = snap.state.wait_for_pods_ready
    if not config.enable:
        return None
    limit = config.backoff_limit_count
    if limit is not None and wl.requeue_count > limit:
        return Unassignable(
            "RequeuingLimitExceeded",
            f"evicted {wl.requeue_count} times for PodsReadyTimeout; backoffLimitCount is {limit}",
        )
    if wl.requeue_at is not None and snap.state.now < wl.requeue_at:
        return Unassignable(
            "WaitingForBackoff",
            f"requeued after PodsReadyTimeout ({wl.requeue_count} so far); eligible "
            f"again {wl.requeue_at - snap.state.now:g}s from now",
        )
    return None


def judge_heads(snap: Snapshot, cursor: QueueCursor) -> bool:
    """Park the cursor's lanes whose head cannot be admitted against the state as the
    log left it (nothing of this cycle's admissions yet): more usage never admits them
    later in the cycle, so they take no turn in the rounds, whether judged now or
    parked earlier under a cause that has not moved. Whether any lane is left."""
    cq = cursor.cq
    if cq.queueing_strategy == "StrictFIFO":
        head = cursor.peek()
        assert head is not None
        why, kind, until = _judge(snap, cursor, head)
        if why is None:
            for lane, _ in cursor.lanes():
                snap.stamps[(lane.local_queue, lane.key)] = None
            return True
        if snap.reservation_of(head.id) is not None:
            # Reserved: the work behind it backfills around its reservation.
            top = cursor.peek_lane()
            assert top is not None
            _record(snap, top, cursor.at[id(top)], cq.name, why, only=1)
            cursor.pop(head)  # its lane's next member is judged with the other heads
            return _judge_lanes(snap, cursor)
        lane, at = cursor.park(head)
        snap.record(lane, at, cq.name, why, only=1)
        rest = [(lane, at + 1), *cursor.rest()]
        _block(snap, cursor, head, rest)
        for other, _ in rest:
            _judged(snap, other, kind, cq, why, until)
        return False
    return _judge_lanes(snap, cursor)


def _judge_lanes(snap: Snapshot, cursor: QueueCursor) -> bool:
    """BestEffortFIFO (and a StrictFIFO queue behind a reserved head): every lane's head
    is judged, those that cannot be admitted are parked whole."""
    cq = cursor.cq
    parked = []
    for lane, at in cursor.lanes():
        why, kind, until = _judge(snap, cursor, snap.workload(lane, at))
        if why is not None:
            parked.append(lane)
            _record(snap, lane, at, cq.name, why)
        _judged(snap, lane, kind, cq, why, until)
    cursor.drop(parked)
    return cursor.peek() is not None


def _record(
    snap: Snapshot, lane: Lane, at: int, cq: str, why: Unassignable, *, only: int = 0
) -> None:
    """``snap.record``, but a reservation's holder says what it holds (reason Reserved);
    the rest of its lane gets the verdict as it is."""
    r = snap.reservation_of(snap.workload(lane, at).id)
    if r is None:
        snap.record(lane, at, cq, why, only=only)
        return
    held = Unassignable("Reserved", f"{why.message}; {r.describe(snap.state.now)}", why.shortfall)
    snap.record(lane, at, cq, held, only=1)
    if only != 1 and at + 1 < len(lane.members):
        snap.record(lane, at + 1, cq, why, only=max(only - 1, 0))


def _strict(snap: Snapshot, cq: ClusterQueueSpec) -> bool:
    """StrictFIFO, unless a head of the queue holds a reservation: then the work behind
    it backfills (Slurm's backfill: reserve for the first, start the others around it)."""
    if cq.queueing_strategy != "StrictFIFO":
        return False
    return not any(r.cluster_queue == cq.name for r in snap.reservations)


def _judge(
    snap: Snapshot, cursor: QueueCursor, wl: WorkloadEntry
) -> tuple[Unassignable | None, str, float]:
    """Why the workload cannot be admitted now, what can change that (parking.py) and
    when a protection that held it back ends (0: none); None when it can be admitted
    (or can preempt). Nothing is kept (a dry run of ``process``)."""
    since = snap.processed
    v = nominate(snap, cursor.cq, wl)
    if isinstance(v.outcome, Unassignable) and not wl.has_min_count:
        return v.outcome, QUOTA, 0.0
    snap.dry, snap.protection_met = True, 0.0
    try:
        done = process(snap, cursor, v, since=since)
    finally:
        snap.dry = False
    if isinstance(done.outcome, Unassignable):
        return done.outcome, STATE, snap.protection_met
    return None, STATE, 0.0


def admit_rounds(snap: Snapshot, cursors: list[QueueCursor]) -> None:
    """Rounds of one head per ClusterQueue until every live lane is decided. Running
    workloads whose surplus pods wait grow in their queue's turn once its next head has
    a lower priority (growth.py), never in a round of preemptors; the rest at the end."""
    growers = Growers(snap)
    while cursors:
        round_: list[tuple[QueueCursor, Verdict]] = []
        heads = []
        for cursor in cursors:
            _drain_known(snap, cursor)
            wl = cursor.peek()
            if wl is not None:
                heads.append((cursor, wl))
        # Preemptors first, every one of them before anyone else: the room their
        # victims free is theirs (the cohort's other queues would take it otherwise).
        if any(wl.id in snap.state.preemptors for _, wl in heads):
            heads = [(c, wl) for c, wl in heads if wl.id in snap.state.preemptors]
        elif growers:
            growers.turn({c.cq.name: wl.priority for c, wl in heads})
        since = snap.processed
        for cursor, wl in heads:
            round_.append((cursor, nominate(snap, cursor.cq, wl)))
        if not round_:
            break
        for cursor, v in ordered(snap, round_):
            done = process(snap, cursor, v, since=since)
            if isinstance(done.outcome, Assignment):
                cursor.pop(done.workload)
                snap.verdicts.append(done)
                continue
            lane, at = cursor.park(done.workload)
            if not _strict(snap, cursor.cq):
                # Its lane's other members would be judged the same now.
                _record(snap, lane, at, cursor.cq.name, done.outcome)
                continue
            _record(snap, lane, at, cursor.cq.name, done.outcome, only=1)
            _block(snap, cursor, done.workload, [(lane, at + 1), *cursor.rest()])
        cursors = [c for c in cursors if c.peek() is not None]
    growers.turn({})


def _drain_known(snap: Snapshot, cursor: QueueCursor) -> None:
    """Heads whose shape already got "does not fit" in this cycle get it again at
    once, with the rest of their lane: they change nothing, so taking them outside
    the round order changes no outcome."""
    cq = cursor.cq
    if cq.queueing_strategy == "StrictFIFO" or snap.admission_blocked:
        return
    cache = snap.no_fit.get(id(snap.tree.queues[cq.name].root()))
    if not cache:
        return
    can_preempt = preempt_rules(snap, cq)[0]
    while (lane := cursor.peek_lane()) is not None:
        if lane.key[0] == "workload":
            return  # its own history (preempted for flavors, partial) decides
        wl = snap.workload(lane, cursor.at[id(lane)])
        preempts = can_preempt and not never_preempts(snap.state, wl)
        hit = cache.get(no_fit_key(cq, wl, attained.rank(snap.state, wl) if preempts else None))
        if hit is None:
            return
        lane, at = cursor.park(wl)
        snap.record(lane, at, cq.name, hit)


def ordered(
    snap: Snapshot, round_: list[tuple[QueueCursor, Verdict]]
) -> Iterator[tuple[QueueCursor, Verdict]]:
    """Classic: one sort. Fair sharing: a tournament per cohort tree, one winner at a
    time, shares recomputed after each (the winner's admission changes them)."""
    round_.sort(key=lambda cv: order_key(snap, cv[1]))
    if not snap.fair_sharing:
        yield from round_
        return
    contenders = [cv for cv in round_ if isinstance(cv[1].outcome, Assignment)]
    yield from (cv for cv in round_ if not isinstance(cv[1].outcome, Assignment))
    while contenders:
        paths = {id(cv): _path(snap, cv[0].cq.name) for cv in contenders}
        # Trees share the nodes: a preemptor's tree goes first, so no other tree's
        # workload takes the room its victims freed; then trees by name.
        first_root = min(
            (cv[1].workload.id not in snap.state.preemptors, paths[id(cv)][0].name)
            for cv in contenders
        )[1]
        pool = [cv for cv in contenders if paths[id(cv)][0].name == first_root]
        winner = _tournament(snap, pool, paths, 0)
        contenders.remove(winner)
        yield winner


def order_key(snap: Snapshot, v: Verdict) -> tuple[object, ...]:
    wl = v.workload
    if not isinstance(v.outcome, Assignment):
        return (0,)
    sticky = 0 if wl.id in snap.state.preemptors else 1
    if snap.fair_sharing and v.cluster_queue is not None:
        node = snap.tree.queues[v.cluster_queue]
        share = qt.dominant_share(node, v.outcome.frs())[0]
        return (1, sticky, 1 if v.outcome.borrow else 0, share, -wl.priority, wl.order)
    return (1, sticky, v.outcome.borrow, -wl.priority, wl.order)


def _path(snap: Snapshot, cq: str) -> list[qt.QuotaNode]:
    path = [snap.tree.queues[cq]]
    while path[-1].parent is not None:
        path.append(path[-1].parent)
    return path[::-1]


def _tournament(
    snap: Snapshot,
    pool: list[tuple[QueueCursor, Verdict]],
    paths: dict[int, list[qt.QuotaNode]],
    depth: int,
) -> tuple[QueueCursor, Verdict]:
    """Kueue's fair-sharing iterator: at each cohort, compare its children's nominees
    by (not borrowing first, the child's share after admitting the nominee, priority,
    submission)."""
    if len(pool) == 1 and len(paths[id(pool[0])]) == depth + 1:
        return pool[0]
    groups: dict[str, list[tuple[QueueCursor, Verdict]]] = {}
    children: dict[str, qt.QuotaNode] = {}
    for cv in pool:
        child = paths[id(cv)][depth + 1]
        groups.setdefault(child.name, []).append(cv)
        children[child.name] = child
    best: tuple[tuple[object, ...], tuple[QueueCursor, Verdict]] | None = None
    for name in sorted(groups):
        cv = _tournament(snap, groups[name], paths, depth + 1)
        outcome = cv[1].outcome
        assert isinstance(outcome, Assignment)
        wl = cv[1].workload
        key = (
            0 if wl.id in snap.state.preemptors else 1,
            1 if outcome.borrow else 0,
            qt.dominant_share(children[name], outcome.frs())[0],
            -wl.priority,
            wl.order,
        )
        if best is None or key < best[0]:
            best = (key, cv)
    assert best is not None
    return best[1]


def _block(
    snap: Snapshot, cursor: QueueCursor, head: WorkloadEntry, rest: list[tuple[Lane, int]]
) -> None:
    cq = cursor.cq.name
    message = f"waiting behind {head.spec.name} in StrictFIFO ClusterQueue {cq}"
    for lane, at in rest:
        snap.record(lane, at, cq, Unassignable("BlockedByStrictFIFO", message))


def keep_parking(snap: Snapshot) -> None:
    notes = snap.state.notes
    parking = notes.parking
    for lane_id, stamp in snap.stamps.items():
        parking.judged(lane_id, stamp)
    known = snap.state.lanes.lanes
    gone = snap.judge if snap.judge is not None else [*parking.parked, *parking.unparked]
    for lane_id in list(gone):  # a lane's last member leaving touched it: it is judged
        if lane_id[1] not in known.get(lane_id[0], {}):
            parking.gone(lane_id)
    parking.seen = snap.counters
    # Lanes that recorded something are judged again (what they recorded comes back
    # with its fold; if it does not, the same is recorded again).
    notes.lanes = set(snap.emitted)


def _stopped(state: QueueState, cq: ClusterQueueSpec) -> Unassignable | None:
    if cq.stop_policy == "None":
        return None
    return Unassignable(
        "ClusterQueueStopped", f"ClusterQueue {cq.name} is stopped (stopPolicy {cq.stop_policy})"
    )


def _inactive(state: QueueState, cq: ClusterQueueSpec) -> Unassignable | None:
    found = checks.inactive(state, cq)
    return None if found is None else Unassignable(*found)


def _lq_stopped(state: QueueState, local_queue: str) -> Unassignable | None:
    lq = state.local_queues.get(local_queue)
    if lq is None or lq.stop_policy == "None":
        return None
    return Unassignable(
        "LocalQueueStopped",
        f"LocalQueue {lq.name} in namespace {lq.namespace} is stopped "
        f"(stopPolicy {lq.stop_policy})",
    )


def _missing_queue(cq_name: str | None, local_queue: str) -> Unassignable:
    if cq_name is None:
        namespace, name = local_queue.split("/", 1)
        message = f"LocalQueue {name} doesn't exist in namespace {namespace}"
        return Unassignable("LocalQueueNotFound", message)
    return Unassignable("ClusterQueueNotFound", f"ClusterQueue {cq_name} doesn't exist")
