"""The queue's state: configuration, workloads and quota usage, folded from events."""

from __future__ import annotations

import copyreg
from bisect import bisect_left
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from functools import singledispatch
from typing import Any, Literal, NamedTuple, TypeVar

import msgspec

from muster.core.bounded import keep_latest
from muster.core.decider import advance
from muster.core.events import BareEnvelope, Event, Folded, registered_types
from muster.core.events import node as nev
from muster.core.events import provisioning as pev
from muster.core.events import queue as qev
from muster.core.events import workload as wev
from muster.core.model.inventory import NodeInventory
from muster.core.model.queues import (
    AdmissionCheckSpec,
    CheckState,
    ClusterQueueSpec,
    CohortSpec,
    FairSharingConfig,
    LocalQueueSpec,
    NamespaceQuotaSpec,
    PodSetUpdate,
    PriorityClassSpec,
    ProvisioningRequestConfigSpec,
    ResourceFlavorSpec,
    WaitForPodsReady,
)
from muster.core.model.workload import PodSet, WorkloadSpec
from muster.core.pickling import compact, swapper
from muster.core.placement.book import NodeBook, Placement, PodAsk
from muster.core.placement.devices import DeviceShare, device_ask
from muster.core.placement.engine import demands
from muster.core.provisioning import names
from muster.core.queueing import attained
from muster.core.queueing import quota as qt
from muster.core.queueing.notebook import Notebook
from muster.core.queueing.pending import LaneKey, PendingQueues

Status = Literal["Pending", "QuotaReserved", "Admitted", "Finished", "Cancelled", "Rejected"]
TERMINAL: frozenset[str] = frozenset({"Finished", "Cancelled", "Rejected"})
Usage = dict[str, dict[str, int]]  # flavor -> resource -> quantity


@compact
@dataclass(slots=True)
class CheckStatus:
    """One admission check's state for one attempt (Kueue's AdmissionCheckState)."""

    state: CheckState = "Pending"
    message: str = ""
    at: float = 0.0  # lastTransitionTime
    pod_set_updates: tuple[PodSetUpdate, ...] = ()
    requeue_after_seconds: float | None = None  # Retry: the controller's requeueAfterSeconds


@compact
@dataclass(slots=True)
class Attempt:
    """One admission of a workload, from its quota reservation (or, for a consumer of a
    standalone request, its binding) until it ends or the next one: a new attempt is a new
    value, the old one's pod progress is not reset field by field."""

    attempt: int = 0  # its number: late events of an earlier attempt are ignored
    cluster_queue: str | None = None
    reserved_seq: int = 0  # when it got quota: preemption takes the newest first
    reserved_at: float | None = None
    usage: Usage = field(default_factory=dict)
    flavors: dict[str, dict[str, str]] = field(default_factory=dict)  # pod set -> resource
    pod_counts: dict[str, int] = field(default_factory=dict)  # partially admitted pod sets
    admitted_at: float | None = None
    ask: qev.ProvisioningAsk | None = None  # its ClusterQueue's provisioning admission check
    # Its admission checks' states: Admitted once quota is reserved and all are Ready.
    checks: dict[str, CheckStatus] = field(default_factory=dict)
    request_id: str = ""  # the request its pods run on, once admitted
    # Placed on existing nodes by the queue (not on a provisioning request's nodes).
    placed: bool = False
    placements: dict[str, str] | None = None  # pod -> node, once provisioned or placed
    devices: dict[str, tuple[DeviceShare, ...]] = field(default_factory=dict)
    # What its request reported that ends it: (condition, reason, message, retryable),
    # condition Failed, BookingExpired or CapacityRevoked.
    check_event: tuple[str, str, str, bool] | None = None
    pods_started: set[str] = field(default_factory=set)
    pods_ready: bool = False  # every admitted pod has started (Kueue's PodsReady)
    pods_succeeded: set[str] = field(default_factory=set)
    pods_failed: dict[str, str] = field(default_factory=dict)  # pod -> reason
    # Pods gone with their node: pod -> (reason, message); the failure policy acts on them.
    pods_evicted: dict[str, tuple[str, str]] = field(default_factory=dict)
    pod_failures: dict[str, int] = field(default_factory=dict)  # pod set -> failed pods

    def __reduce__(self) -> tuple[Any, ...]:
        # A workload that never held quota has a fresh attempt: made again on restore,
        # in half the time of unpickling its ten objects (a backlog has tens of thousands).
        if self == _FRESH_ATTEMPT:
            return (Attempt, ())
        return (copyreg.__newobj__, (Attempt,), self.__getstate__())  # type: ignore[attr-defined]


_FRESH_ATTEMPT = Attempt()  # compared with, never changed


@compact
@dataclass(slots=True)
class WorkloadEntry:
    """A workload: what was submitted, its place in the queue and what happened to it over
    its attempts; ``run`` is its current (or last) attempt."""

    id: str
    spec: WorkloadSpec
    order: int  # position of the submission: FIFO order, kept across requeues
    submitted_at: float
    priority: int = 0  # effective: the priority class's value when one is named
    local_queue: str = ""  # "namespace/name": the tenant
    has_min_count: bool = False  # a pod set may be admitted partially
    shape: tuple[object, ...] = ()  # what flavor assignment depends on (equivalence key)
    problem: tuple[str, str] | None = None  # (reason, message): rejected at once
    status: Status = "Pending"
    run: Attempt = field(default_factory=Attempt)
    evictions: int = 0
    # Of them, preemptions by another tenant's (LocalQueue's) workload:
    # ``attainedService.maxCrossTenantPreemptions`` counts these.
    cross_tenant_evictions: int = 0
    restarts: int = 0  # by its failure policy, counted against maxRestarts
    queued_at: float = 0.0  # submitted, or requeued after an eviction
    requeue_count: int = 0  # evictions for PodsReadyTimeout
    requeue_at: float | None = None  # not eligible before (backoff)
    backoff_reason: str = ""  # why it waits until requeue_at: its eviction's message
    check_retries: int = 0  # provisioning attempts retried by its admission check
    preempted_for: dict[str, dict[str, str]] = field(default_factory=dict)  # its flavors
    preempted_on: Placement | None = None  # where it goes once its victims are gone
    pending_reason: tuple[str, str] | None = None  # (reason, message) last recorded
    reason_at: float = 0.0
    cancel_requested: bool = False
    # Attained service (attained.py): GPU-seconds and seconds of its ended attempts (since a
    # starvation promotion reset them), and the level its running attempt last reached.
    service: float = 0.0
    ran: float = 0.0
    las_level: int = 0

    @property
    def admitted_pods(self) -> int:
        # A loop, not sum() over a generator: every pod start a replay folds asks this.
        counts, total = self.run.pod_counts, 0
        for ps in self.spec.pod_sets:
            total += counts.get(ps.name, ps.count)
        return total

    @property
    def holds_quota(self) -> bool:
        return self.status in ("QuotaReserved", "Admitted")


WAIT_BUCKETS = (1.0, 5.0, 15.0, 60.0, 300.0, 900.0, 3600.0, 4 * 3600.0, 86400.0)


@dataclass(slots=True)
class QueueStats:
    """Counters folded from the log, so they survive restarts and match a replay."""

    reserved: dict[str, int] = field(default_factory=dict)  # cluster queue -> count
    admitted: dict[str, int] = field(default_factory=dict)
    finished: dict[str, int] = field(default_factory=dict)
    evicted: dict[tuple[str, str], int] = field(default_factory=dict)  # (cq, reason)
    preempted: dict[tuple[str, str], int] = field(default_factory=dict)  # (reason, preemptor cq)
    # cluster queue -> (bucket counts per WAIT_BUCKETS and +Inf, sum of seconds)
    wait: dict[str, tuple[list[int], float]] = field(default_factory=dict)
    # the same, (re)queued -> admitted (its admission checks Ready): Kueue's
    # kueue_admission_wait_time_seconds
    admission_wait: dict[str, tuple[list[int], float]] = field(default_factory=dict)

    def observe_wait(self, cq: str, seconds: float) -> None:
        _observe(self.wait, cq, seconds)

    def observe_admission_wait(self, cq: str, seconds: float) -> None:
        _observe(self.admission_wait, cq, seconds)


def _observe(histogram: dict[str, tuple[list[int], float]], cq: str, seconds: float) -> None:
    found = histogram.get(cq)
    counts, total = found if found is not None else ([0] * (len(WAIT_BUCKETS) + 1), 0.0)
    counts[bisect_left(WAIT_BUCKETS, seconds)] += 1  # the first bucket it is <=, else +Inf
    histogram[cq] = (counts, total + seconds)


def _bump(counter: dict[Any, int], key: Any) -> None:
    counter[key] = counter.get(key, 0) + 1


@compact
@dataclass(slots=True)
class StandaloneRequest:
    """A standalone ProvisioningRequest as the queue sees it: the pod slots on its nodes
    that consuming workloads bind to."""

    id: str
    pods: int  # the pods it was made for
    status: str = "Pending"  # Pending, Accepted, Provisioned, Failed, Cancelled, Gone
    message: str = ""
    deleted: bool = False
    slots: list[str] = field(default_factory=list)  # one node per pod slot, in order
    taken: dict[str, list[int]] = field(default_factory=dict)  # consumer -> slot indexes

    def free(self) -> list[int]:
        used = {i for idx in self.taken.values() for i in idx}
        return [i for i in range(len(self.slots)) if i not in used]


@dataclass(slots=True)
class Sharding:
    """A queue split between deciders (core/queueing/sharding.py), folded from the log:
    who decides for each cohort tree until when, and what each decider prefers."""

    claims: dict[str, tuple[str, float]] = field(default_factory=dict)  # group -> owner, until
    prefers: dict[str, str] = field(default_factory=dict)  # cohort or queue name -> owner
    started: dict[str, tuple[float, float]] = field(default_factory=dict)  # owner -> at, ttl
    # Each cohort tree's group, for the configuration of one config_version (drawn again
    # when it changes): trees that could compete for anything are decided together.
    groups: tuple[int, dict[str, str]] = (-1, {})


# Ended workloads the queue keeps (``QueueState.ended``, between this many and twice as
# many: ``keep_latest``): an eviction or a shrink folded
# after its preemptor ended names it (one that ended an instant before); ``explain`` of
# one let go of folds its own events. Kept all, they grew with every workload ever run.
ENDED_KEPT = 1024


class Ended(NamedTuple):
    """What the queue keeps of a workload once it ended (its full entry is dropped: the
    log and intake's read model keep its story): how it ended, and what names it in a
    counter or an eviction's preemptor."""

    status: Status  # Finished, Cancelled or Rejected
    local_queue: str  # "namespace/name"
    name: str


@dataclass(slots=True)
class QueueState:
    now: float = 0.0
    flavors: dict[str, ResourceFlavorSpec] = field(default_factory=dict)
    cluster_queues: dict[str, ClusterQueueSpec] = field(default_factory=dict)
    local_queues: dict[str, LocalQueueSpec] = field(default_factory=dict)
    cohorts: dict[str, CohortSpec] = field(default_factory=dict)
    priority_classes: dict[str, PriorityClassSpec] = field(default_factory=dict)
    namespace_quotas: dict[str, NamespaceQuotaSpec] = field(default_factory=dict)
    fair_sharing: FairSharingConfig = field(default_factory=FairSharingConfig)
    wait_for_pods_ready: WaitForPodsReady = field(default_factory=WaitForPodsReady)
    admission_checks: dict[str, AdmissionCheckSpec] = field(default_factory=dict)
    provisioning_configs: dict[str, ProvisioningRequestConfigSpec] = field(default_factory=dict)
    requests: dict[str, StandaloneRequest] = field(default_factory=dict)  # standalone
    # The workloads not ended yet; the ended ones move to ``ended``, the latest
    # ``ENDED_KEPT`` (to twice as many) only, and are counted in ``ended_counts``
    # (unless ``keep_ended``: intake's read model keeps them whole for its pages).
    workloads: dict[str, WorkloadEntry] = field(default_factory=dict)
    ended: dict[str, Ended] = field(default_factory=dict)
    ended_counts: dict[Status, int] = field(default_factory=dict)  # every ended, by status
    keep_ended: bool = False
    next_order: int = 0  # queue-order timestamps: submissions, and requeues that reset it
    pending: set[str] = field(default_factory=set)  # waiting for quota
    usage: dict[str, Usage] = field(default_factory=dict)  # cluster queue -> usage
    lq_usage: dict[str, Usage] = field(default_factory=dict)  # local queue -> usage
    ns_usage: dict[str, dict[str, int]] = field(default_factory=dict)  # namespace -> resource
    # Holding quota or asked to cancel: the workloads whose progress `settle` checks.
    active: set[str] = field(default_factory=set)
    # Pending workloads that evicted others: they go first until they get quota. A
    # workload never evicts the same workload twice (preemptor -> its victims, kept until
    # the preemptor ends): two queues reclaiming from each other cannot ping-pong.
    preemptors: set[str] = field(default_factory=set)
    evicted_for: dict[str, set[str]] = field(default_factory=dict)
    # Pending workloads with a requeue time (backoff): the timers' candidates.
    backing_off: set[str] = field(default_factory=set)
    reservations: int = 0
    stats: QueueStats = field(default_factory=QueueStats)
    # Existing nodes: what the cluster declares or agents registered (which workloads go
    # to placement), and the book of what is placed where.
    inventory: dict[str, NodeInventory] = field(default_factory=dict)
    book: NodeBook = field(default_factory=NodeBook)
    # The pending workloads in lanes per LocalQueue (what the cycle walks), the admitted
    # ones whose pods are not all running yet (waitForPodsReady's timers), and what
    # settle still has to look at.
    lanes: PendingQueues = field(default_factory=PendingQueues)
    # What a lane's verdict depends on, counted (the cycle remembers verdicts while these
    # stand still): configuration changes; per cohort tree, quota taken or given back;
    # per namespace, its usage changed.
    config_version: int = 0
    root_of: dict[str, str] = field(default_factory=dict)  # cluster queue -> its tree
    quota_changed: dict[str, int] = field(default_factory=dict)
    ns_changed: dict[str, int] = field(default_factory=dict)
    awaiting_pods: set[str] = field(default_factory=set)
    # Admitted on existing nodes below their count, with surplus pods that wait for room
    # (Volcano's minAvailable): the cycle adds them when room appears (growth.py).
    growers: set[str] = field(default_factory=set)
    notes: Notebook = field(default_factory=Notebook)
    sharding: Sharding = field(default_factory=Sharding)
    # Attained-service priority (attained.py): running workloads of such queues, pending
    # ones waiting for a starvation promotion (-> when), and a heap of the due times.
    las_running: set[str] = field(default_factory=set)
    las_starving: dict[str, float] = field(default_factory=dict)
    las_due: list[tuple[float, str, int]] = field(default_factory=list)

    def cluster_queue_of(self, spec: WorkloadSpec) -> str | None:
        return self.cluster_queue_of_local(f"{spec.namespace}/{spec.queue_name}")

    def cluster_queue_of_local(self, local_queue: str) -> str | None:
        lq = self.local_queues.get(local_queue)
        return lq.cluster_queue if lq else None

    def preemptor_queue(self, wid: str | None) -> str | None:
        """The ClusterQueue a preemptor's LocalQueue points to ("" if none), ended or not;
        None for an id the queue never saw."""
        if wid is None:
            return None
        wl = self.workloads.get(wid)
        if wl is not None:
            return self.cluster_queue_of(wl.spec) or ""
        gone = self.ended.get(wid)
        return None if gone is None else self.cluster_queue_of_local(gone.local_queue) or ""

    def status_of(self, wid: str) -> Status | None:
        """The workload's status, ended or not (None: never submitted)."""
        wl = self.workloads.get(wid)
        if wl is not None:
            return wl.status
        gone = self.ended.get(wid)
        return gone.status if gone is not None else None


def evolve(state: QueueState, envelope: Folded) -> QueueState:
    if envelope.occurred_at > state.now:  # ``advance``, inline: a replay's every event
        state.now = envelope.occurred_at
    event = envelope.event
    handler = _HANDLERS.get(type(event))
    if handler is None:
        handler = _handler(type(event))
    handler(event, state)
    wid = getattr(event, "workload_id", None)
    if wid is not None:
        wl = state.workloads.get(wid)
        if wl is not None:
            _touched(state, wl)
    if state.las_due and state.las_due[0][0] <= state.now:
        attained.tick(state, _level_crossed, enqueue)
    return state


def fold_bare(state: QueueState, envelope: Folded | BareEnvelope) -> None:
    """``evolve`` of an event read bare (``clock_only_types``, ``CLOCK_ONLY_WHEN``): the
    clock moves, and the attained-service levels it made due change, as ``evolve`` does
    for every event (a replay that only moved the clock left them to the next event, at
    a later ``now``)."""
    advance(state, envelope)
    if state.las_due and state.las_due[0][0] <= state.now:
        attained.tick(state, _level_crossed, enqueue)


def _level_crossed(state: QueueState, wl: WorkloadEntry) -> None:
    """A running workload reached a higher attained-service level: it may be a victim now,
    so lanes parked on its tree's quota are judged again."""
    if wl.run.cluster_queue is None:
        return
    root = root_of(state, wl.run.cluster_queue)
    state.quota_changed[root] = state.quota_changed.get(root, 0) + 1


def protected_until(state: QueueState, wl: WorkloadEntry) -> float:
    """When the workload's current attempt may first be preempted: its ClusterQueue's
    ``minAdmitDuration`` after it was admitted (0: not protected). Only admission starts
    the clock: quota reserved while admission checks run guards no running work."""
    at = wl.run.admitted_at
    cq = state.cluster_queues.get(wl.run.cluster_queue or "")
    if at is None or cq is None or cq.preemption.min_admit_duration <= 0:
        return 0.0
    return at + cq.preemption.min_admit_duration


def protecting(state: QueueState) -> bool:
    """Whether any ClusterQueue protects what it admits (``minAdmitDuration``)."""
    return any(cq.preemption.min_admit_duration > 0 for cq in state.cluster_queues.values())


def protection_ends(state: QueueState) -> float | None:
    """The next end of a protection while anything waits: a preemptor it held back may
    go then (the cycle parks such a lane until the protection it met ends)."""
    if not state.pending or not protecting(state):
        return None
    ends = (protected_until(state, state.workloads[w]) for w in state.active)
    return min((t for t in ends if t > state.now), default=None)


def _configured(state: QueueState) -> None:
    """Any configuration changed: everything is judged afresh; cohort trees are redrawn."""
    state.notes.touch_all()
    state.notes.rejudge_all()
    state.config_version += 1
    state.root_of = {}  # drawn again when next needed (config events come in bursts)


def root_of(state: QueueState, cluster_queue: str) -> str:
    """The name of the cohort tree a ClusterQueue is in (its own, alone)."""
    if not state.root_of and state.cluster_queues:
        state.root_of = roots(state.cluster_queues, state.cohorts)
    found = state.root_of.get(cluster_queue)  # the default built only when used
    return found if found is not None else f"queue/{cluster_queue}"


def roots(
    cluster_queues: Mapping[str, ClusterQueueSpec], cohorts: Mapping[str, CohortSpec]
) -> dict[str, str]:
    """The root of each ClusterQueue's cohort tree, as the quota tree draws it."""
    tree = qt.build(cluster_queues, cohorts, {})
    return {
        name: ("queue/" if node.root() is node else "cohort/") + node.root().name
        for name, node in tree.queues.items()
    }


def _touched(state: QueueState, wl: WorkloadEntry) -> None:
    """Settle looks at it again; waitForPodsReady's clock runs until its pods are ready."""
    # Every workload event of a replay comes here: the notebook's sets are used directly
    # (``Notebook.touch`` and ``regrow``; nothing noted while it looks at everything:
    # ``Notebook.full``), and the clock is asked only of a workload holding quota whose
    # pods are not all ready (``pods_ready_clock`` is None for any other).
    wid, notes = wl.id, state.notes
    if not notes.full:  # else settle looks at every active workload: a rebuild's case
        notes.touched.add(wid)
    if wl.status in _HOLDING and not wl.run.pods_ready and pods_ready_clock(wl) is not None:
        state.awaiting_pods.add(wid)
    else:
        state.awaiting_pods.discard(wid)
    notes.grow_misses.pop(wid, None)  # what it may grow into is judged afresh
    if wl.status == "Admitted" and waiting_surplus(wl) is not None:  # else None, cheaper
        state.growers.add(wid)
    else:
        state.growers.discard(wid)


_HOLDING = frozenset({"QuotaReserved", "Admitted"})  # ``WorkloadEntry.holds_quota``


def waiting_surplus(wl: WorkloadEntry) -> PodSet | None:
    """The pod set whose pods above its minimum wait for room (``surplus: Wait``) while the
    workload runs below its count on existing nodes, or None. Pod sets with a topology
    request and workloads with a GPU group size do not grow: their pods must share a
    domain with the running ones, which adding pods one search at a time cannot keep."""
    if wl.status != "Admitted" or not wl.run.placed or wl.cancel_requested or wl.problem:
        return None
    if wl.spec.gpu_group_size:
        return None
    for ps in wl.spec.pod_sets:
        running = wl.run.pod_counts.get(ps.name, ps.count)
        if ps.surplus == "Wait" and ps.topology is None and running < ps.count:
            return ps
    return None


def pods_ready_clock(wl: WorkloadEntry) -> float | None:
    """When waitForPodsReady's clock started for the workload's attempt; None while it does
    not run. Kueue admits at quota reservation unless the ClusterQueue has admission checks,
    and times the pods from admission. So without a check the clock runs from the
    reservation, whatever the workload then waits for (nodes being made, nodes that never
    come); with checks, from the moment the last became Ready (Kueue's admission): for a
    request's check that is its Provisioned, and the request's own failures and backoff
    govern the wait before it (a DWS request may queue for capacity for hours)."""
    run = wl.run
    if not wl.holds_quota or run.pods_ready:
        return None
    if run.ask is not None or run.reserved_at is None:
        return run.admitted_at
    at = run.reserved_at  # the latest of the reservation and every check's Ready, if all are
    for check in run.checks.values():  # a loop, not all() and max(): every event asks this
        if check.state != "Ready":
            return run.admitted_at
        if check.at > at:
            at = check.at
    return at


def lane_key(state: QueueState, wl: WorkloadEntry, rank: int | None = None) -> LaneKey:
    """Workloads of one lane get one verdict from one state: same shape and priority, and
    nothing of their own history that the cycle looks at. ``rank``: its
    ``attained.rank``, when the caller has it."""
    if (
        wl.id in state.preemptors
        or wl.id in state.evicted_for  # the workloads it may not take again are its own
        or wl.preempted_for
        or wl.has_min_count
        or wl.requeue_at is not None
        or wl.check_retries
    ):
        return ("workload", wl.id)
    # Its class too: whether it may preempt (preemptionPolicy) is the class's. The rank is
    # its priority, and its attained-service level where its queue has one; and its
    # declared run time: whether it may backfill on reserved nodes (reservations.py).
    return (
        wl.shape,
        attained.rank(state, wl) if rank is None else rank,
        wl.spec.priority_class,
        wl.spec.max_run_duration_seconds,
    )


def enqueue(state: QueueState, wl: WorkloadEntry) -> None:
    """Pending (again), or its lane changed: (re)file it in its LocalQueue's lanes."""
    state.pending.add(wl.id)
    state.notes.lane_changed(state.lanes.lane_of.get(wl.id))
    rank = attained.rank(state, wl)  # once: the lane's key and its priority
    state.lanes.add(
        wl.id,
        wl.local_queue,
        lane_key(state, wl, rank),
        order=wl.order,
        priority=rank,
        sticky=wl.id in state.preemptors,
        code=wl.pending_reason[0] if wl.pending_reason else None,
    )
    state.notes.lane_changed(state.lanes.lane_of.get(wl.id))


def _dequeue(state: QueueState, wid: str) -> None:
    state.pending.discard(wid)
    state.notes.lane_changed(state.lanes.lane_of.get(wid))
    state.lanes.remove(wid)


@singledispatch
def _apply(event: Event, state: QueueState) -> None:
    """Events the queue does not act on only move its clock."""


# ``_apply``'s handler per event class, looked up once: singledispatch's own lookup (a
# weak-keyed cache behind a wrapper) cost ~0.5 us of every event a replay folds.
_HANDLERS: dict[type, Callable[[Any, QueueState], None]] = {}


def _handler(kind: type) -> Callable[[Any, QueueState], None]:
    found = _HANDLERS.get(kind)
    if found is None:
        found = _HANDLERS[kind] = _apply.dispatch(kind)
    return found


def clock_only_types() -> frozenset[str]:
    """Wire types whose fold only moves the queue's clock: ``_apply`` has no handler of
    their own for them, and they name no workload for ``evolve`` to touch. A replay need
    not decode them (``Decider.clock_only``)."""
    default = _apply.dispatch(Event)
    return frozenset(
        wire_type
        for wire_type, cls in registered_types().items()
        if _apply.dispatch(cls) is default and "workload_id" not in {f.name for f in fields(cls)}
    )


@_apply.register
def _(event: qev.QueueShardStarted, state: QueueState) -> None:
    sharding = state.sharding
    for owned in [k for k, v in sharding.prefers.items() if v == event.owner]:
        del sharding.prefers[owned]
    sharding.prefers.update({name: event.owner for name in event.prefers})
    sharding.started[event.owner] = (state.now, event.claim_seconds)


@_apply.register
def _(event: qev.GroupClaimed, state: QueueState) -> None:
    before = state.sharding.claims.get(event.group)
    state.sharding.claims[event.group] = (event.owner, event.until)
    if before is None or before[0] != event.owner:
        # Another decider's workloads are now this one's: judge everything afresh (what
        # it looked at and left to the old owner would otherwise wait for an event).
        state.notes.touch_all()
        state.notes.rejudge_all()


@_apply.register
def _(event: qev.ResourceFlavorConfigured, state: QueueState) -> None:
    _configured(state)
    state.flavors[event.spec.name] = event.spec


@_apply.register
def _(event: qev.ClusterQueueConfigured, state: QueueState) -> None:
    _configured(state)
    state.cluster_queues[event.spec.name] = event.spec
    state.usage.setdefault(event.spec.name, {})


@_apply.register
def _(event: qev.LocalQueueConfigured, state: QueueState) -> None:
    _configured(state)
    state.local_queues[event.spec.key] = event.spec


@_apply.register
def _(event: qev.CohortConfigured, state: QueueState) -> None:
    _configured(state)
    state.cohorts[event.spec.name] = event.spec


@_apply.register
def _(event: qev.PriorityClassConfigured, state: QueueState) -> None:
    _configured(state)
    state.priority_classes[event.spec.name] = event.spec


@_apply.register
def _(event: qev.NamespaceQuotaConfigured, state: QueueState) -> None:
    _configured(state)
    state.namespace_quotas[event.spec.key] = event.spec


@_apply.register
def _(event: qev.FairSharingConfigured, state: QueueState) -> None:
    _configured(state)
    state.fair_sharing = event.spec


@_apply.register
def _(event: qev.WaitForPodsReadyConfigured, state: QueueState) -> None:
    _configured(state)
    state.wait_for_pods_ready = event.spec


@_apply.register
def _(event: qev.AdmissionCheckConfigured, state: QueueState) -> None:
    _configured(state)
    state.admission_checks[event.spec.name] = event.spec


@_apply.register
def _(event: qev.ProvisioningRequestConfigConfigured, state: QueueState) -> None:
    _configured(state)
    state.provisioning_configs[event.spec.name] = event.spec


@_apply.register
def _(event: wev.WorkloadSubmitted, state: QueueState) -> None:
    # `order` is fixed by the submission's place in the log; see `submission_order`.
    priority, problem = resolve_priority(state, event.spec)
    parts_key = _PARTS_KEY.encode(event.spec.pod_sets)
    spec = _with_parts(
        event.spec,
        share(state, event.spec.pod_sets, parts_key),
        share(state, event.spec.runtime),
        share(state, event.spec.failure_policy),
    )
    wl = WorkloadEntry(
        id=event.workload_id,
        spec=spec,
        order=state.next_order,
        submitted_at=state.now,
        priority=priority,
        local_queue=f"{spec.namespace}/{spec.queue_name}",
        has_min_count=any(ps.min_count is not None for ps in spec.pod_sets),
        shape=_shared_shape(state, spec, parts_key),
        problem=problem,
        queued_at=state.now,
    )
    state.workloads[wl.id] = wl
    again = state.ended.pop(wl.id, None)
    if again is not None:
        state.ended_counts[again.status] -= 1
    state.next_order += 1
    if problem is None and event.spec.consumes is None:
        enqueue(state, wl)
    else:
        # settle rejects it, or binds it to its request's nodes (no queue, no quota)
        state.active.add(wl.id)


T = TypeVar("T")
# What stands for an unhashable part in ``share``: its msgpack bytes (a quarter of a
# repr's cost, paid at every submission a replay folds). Equal bytes are equal values for
# these plain frozen parts of one type (ints, floats and bools stay distinct).
_PARTS_KEY = msgspec.msgpack.Encoder()
SHARED_MAX = 20_000  # distinct shared values kept; past it, the cache starts again


def share(state: QueueState, value: T, key: object = None) -> T:
    """An equal value already in the state, if one is (else ``value``, remembered): a
    backlog of workloads of a few templates then holds each part once, and its snapshot
    pickles and restores it once. ``key``: what stands for ``value`` when it is not
    hashable (its ``_PARTS_KEY`` bytes). A cache only:
    sharing changes no value (the parts are frozen), and a restored state starts a fresh
    one (``Notebook``)."""
    shared = state.notes.shared
    try:
        found = shared.get(value if key is None else key)
    except TypeError:  # a part that is not hashable (a mapping inside): kept as it is
        return value
    if found is not None:
        return found  # type: ignore[return-value]
    if len(shared) >= SHARED_MAX:
        shared.clear()
    shared[value if key is None else key] = value
    return value


# A spec with its shared parts swapped in (``_with_parts``).
_swap_parts: Callable[..., WorkloadSpec] = swapper(
    WorkloadSpec, ("pod_sets", "runtime", "failure_policy")
)


def _with_parts(
    spec: WorkloadSpec, pod_sets: tuple[PodSet, ...], runtime: Any, failure_policy: Any
) -> WorkloadSpec:
    """``spec`` holding the shared parts: ``dataclasses.replace`` without its per-field
    walk and keyword ``__init__`` (~5 us of each submission a replay folds; a spec has no
    ``__post_init__`` to run): a straight-line copy with the three swapped (``swapper``)."""
    if (
        pod_sets is spec.pod_sets
        and runtime is spec.runtime
        and failure_policy is spec.failure_policy
    ):
        return spec
    return _swap_parts(spec, pod_sets, runtime, failure_policy)


def _shared_shape(state: QueueState, spec: WorkloadSpec, parts_key: bytes) -> tuple[object, ...]:
    """``share(state, shape_of(spec))``, looked up by what the shape is made of (the pod
    sets' ``_PARTS_KEY`` bytes) before it is built: a replay's submissions of a few
    templates build and hash each shape once."""
    key = ("shape", spec.namespace, spec.queue_name, parts_key, spec.gpu_group_size, spec.placement)
    found = state.notes.shared.get(key)
    if found is None:
        found = share(state, shape_of(spec))
        if len(state.notes.shared) >= SHARED_MAX:  # as ``share``: start again past it
            state.notes.shared.clear()
        state.notes.shared[key] = found
    return found  # type: ignore[return-value]


def resolve_priority(state: QueueState, spec: WorkloadSpec) -> tuple[int, tuple[str, str] | None]:
    """Kueue: a named class that does not exist means the workload is never queued."""
    pc = priority_class_of(state, spec)
    if pc is not None:
        return pc.value, None
    if spec.priority_class:
        return 0, (
            "WorkloadPriorityClassNotFound",
            f"priority class {spec.priority_class} doesn't exist",
        )
    return spec.priority, None


def never_preempts(state: QueueState, wl: WorkloadEntry) -> bool:
    """Kubernetes' PriorityClass preemptionPolicy: Never: it waits for room."""
    pc = priority_class_of(state, wl.spec)
    return pc is not None and pc.preemption_policy == "Never"


def preemptible(state: QueueState, wl: WorkloadEntry) -> bool:
    """Armada's priorityClass.preemptible: false: no preemptor ever takes it."""
    pc = priority_class_of(state, wl.spec)
    return pc is None or pc.preemptible


def priority_class_of(state: QueueState, spec: WorkloadSpec) -> PriorityClassSpec | None:
    """The class that gives the workload its priority: the one it names, else the global
    default when it asks for no priority of its own."""
    if spec.priority_class:
        return state.priority_classes.get(spec.priority_class)
    if spec.priority == 0:
        defaults = [c for c in state.priority_classes.values() if c.global_default]
        if defaults:
            return min(defaults, key=lambda c: c.name)
    return None


def shape_of(spec: WorkloadSpec) -> tuple[object, ...]:
    """Two workloads of one shape and queue get the same verdict (flavors, quota, namespace
    quota, placement) against one snapshot."""
    return (
        spec.namespace,
        spec.queue_name,
        tuple(
            (
                ps.name,
                ps.count,
                tuple(sorted(ps.requests.items())),
                tuple(sorted(ps.node_selector.items())),
                ps.tolerations,
                ps.min_count,
                ps.topology,
                ps.devices,
            )
            for ps in spec.pod_sets
        ),
        spec.gpu_group_size,
        spec.placement,
    )


@_apply.register
def _(event: wev.WorkloadCancelRequested, state: QueueState) -> None:
    wl = state.workloads.get(event.workload_id)
    if wl is not None and wl.status not in TERMINAL:
        wl.cancel_requested = True
        state.active.add(wl.id)


@_apply.register
def _(event: qev.WorkloadPending, state: QueueState) -> None:
    wl = state.workloads.get(event.workload_id)
    if wl is None:
        return  # ended
    old = wl.pending_reason[0] if wl.pending_reason else None
    wl.pending_reason = share(state, (event.reason, event.message))
    wl.reason_at = state.now
    state.lanes.record(wl.id, old, event.reason)
    state.notes.lane_changed(state.lanes.lane_of.get(wl.id))
    if event.flavors:
        wl.preempted_for = {ps: dict(m) for ps, m in event.flavors.items()}
        wl.preempted_on = event.placement
        if wl.id in state.pending:
            enqueue(state, wl)  # its own lane now


@_apply.register
def _(event: qev.QuotaReserved, state: QueueState) -> None:
    wl = state.workloads.get(event.workload_id)
    if wl is None:
        return  # ended
    wl.status = "QuotaReserved"
    state.reservations += 1
    placement = event.placement
    wl.run = Attempt(
        attempt=event.attempt,
        cluster_queue=event.cluster_queue,
        reserved_seq=state.reservations,
        reserved_at=state.now,
        usage={f: dict(r) for f, r in event.usage.items()},
        flavors={ps: dict(m) for ps, m in event.flavors.items()},
        pod_counts=dict(event.pod_counts),
        ask=event.provisioning,
        placed=placement is not None,
        placements=dict(placement.nodes) if placement is not None else None,
        devices=dict(placement.devices) if placement is not None else {},
        checks=_checks_of(event, state.now),
    )
    if placement is not None:
        state.book.hold(wl.id, placement, _pods(wl.spec, event.pod_counts))
    wl.preempted_for = {}
    wl.preempted_on = None
    wl.pending_reason = None
    _bump(state.stats.reserved, event.cluster_queue)
    state.stats.observe_wait(event.cluster_queue, state.now - wl.queued_at)
    _hold(state, wl, +1)
    _dequeue(state, wl.id)
    state.preemptors.discard(wl.id)
    state.backing_off.discard(wl.id)
    state.active.add(wl.id)


def _pods(spec: WorkloadSpec, counts: Mapping[str, int]) -> dict[str, PodAsk]:
    """The workload's pods as the book charges them: ``demands``' pods, without the node
    selectors and tolerations a search needs and a fold does not (every reservation a
    queue folds came here through ``demands``, ~8 % of the queue's step)."""
    out: dict[str, PodAsk] = {}
    for ps in spec.pod_sets:
        ask = device_ask(ps.requests, ps.devices)
        for name in ps.pod_names(counts.get(ps.name, ps.count)):
            out[name] = PodAsk(name, ps.name, ps.requests, ask)
    return out


def _checks_of(event: qev.QuotaReserved, now: float) -> dict[str, CheckStatus]:
    """The attempt's admission checks, Pending or Ready at once (events from before
    several checks name none: their provisioning check alone)."""
    pending = event.checks
    if not pending and not event.checks_ready:
        if event.provisioning is None:
            return {}  # none at all: most reservations on existing nodes
        pending = (event.provisioning.check,)
    out = {name: CheckStatus(at=now) for name in pending}
    out.update({name: CheckStatus("Ready", why, now) for name, why in event.checks_ready.items()})
    return out


@_apply.register
def _(event: wev.AdmissionCheckUpdated, state: QueueState) -> None:
    wl = state.workloads.get(event.workload_id)
    if wl is None or not wl.holds_quota or event.attempt not in (0, wl.run.attempt):
        return  # late: its attempt ended (a new one starts with the check Pending)
    old = wl.run.checks.get(event.check)
    if old is None:
        return
    wl.run.checks[event.check] = CheckStatus(
        event.state,
        event.message,
        _transition(old, event.state, state.now),
        event.pod_set_updates,
        event.requeue_after_seconds,
    )


def _check_changed(
    wl: WorkloadEntry,
    check: str,
    state_: CheckState,
    message: str,
    now: float,
    updates: tuple[PodSetUpdate, ...] = (),
) -> None:
    """A check muster runs (the ProvisioningRequest check) moved on."""
    old = wl.run.checks.get(check)
    if old is not None:
        wl.run.checks[check] = CheckStatus(state_, message, _transition(old, state_, now), updates)


def _transition(old: CheckStatus, state_: CheckState, now: float) -> float:
    """lastTransitionTime moves only when the state does (Kueue's SetAdmissionCheckState)."""
    return old.at if old.state == state_ else now


@_apply.register
def _(event: qev.WorkloadAdmitted, state: QueueState) -> None:
    wl = state.workloads.get(event.workload_id)
    if wl is None:
        return  # ended
    wl.status = "Admitted"
    wl.pending_reason = None
    if wl.spec.consumes is None:
        wl.run.admitted_at = state.now
        wl.run.attempt = event.attempt
        wl.run.request_id = event.request_id
        _bump(state.stats.admitted, event.cluster_queue)
        state.stats.observe_admission_wait(event.cluster_queue, state.now - wl.queued_at)
        attained.admitted(state, wl)
    else:
        # A consumer's attempt begins with its binding (it reserves no quota).
        wl.run = Attempt(attempt=event.attempt, admitted_at=state.now, request_id=event.request_id)
        req = state.requests.get(event.request_id)
        if req is not None:
            free = req.free()
            req.taken[wl.id] = free[: wl.admitted_pods]


@_apply.register
def _(event: qev.WorkloadEvicted, state: QueueState) -> None:
    wl = state.workloads.get(event.workload_id)
    if wl is None:
        return  # ended: nothing to evict
    cq = wl.run.cluster_queue or ""
    _bump(state.stats.evicted, (cq, event.reason))
    preemptor_cq = state.preemptor_queue(event.preemptor)
    if event.preemptor is not None and preemptor_cq is not None:
        _bump(state.stats.preempted, (event.preemption_reason or event.reason, preemptor_cq))
        if event.preemptor in state.pending:
            state.evicted_for.setdefault(event.preemptor, set()).add(wl.id)
        theirs = state.workloads.get(event.preemptor) or state.ended.get(event.preemptor)
        if theirs is not None and theirs.local_queue != wl.local_queue:
            wl.cross_tenant_evictions += 1
    attained.ended_attempt(state, wl)
    _release(state, wl)
    wl.status = "Pending"
    wl.pending_reason = None
    wl.evictions += 1
    if event.restart:
        wl.restarts += 1
    wl.queued_at = state.now
    wl.run.admitted_at = None
    wl.run.check_event = None
    for name, check in wl.run.checks.items():
        # Kueue resets the checks on eviction; the next attempt starts them afresh.
        wl.run.checks[name] = CheckStatus(
            "Pending", f"Reset to Pending after eviction. Previously: {check.state}", state.now
        )
    if event.deactivate:
        # Kueue's spec.active=false: never requeued; settle closes it as Deactivated.
        wl.problem = ("Deactivated", f"deactivated after eviction: {event.message}")
        state.active.add(wl.id)
        return
    ends = event.reason == "Preempted" and _ends_when_preempted(state, cq)
    if ends:
        # Its ClusterQueue ends what is preempted (Armada): settle finishes it as Preempted.
        wl.problem = ("Preempted", event.message)
        state.active.add(wl.id)
    if event.requeue_after_seconds is not None:
        wl.check_retries += 1
        wl.requeue_at = state.now + event.requeue_after_seconds
        state.backing_off.add(wl.id)
        wl.backoff_reason = event.message
    if event.reason == "PodsReadyTimeout":
        config = state.wait_for_pods_ready
        wl.requeue_count += 1
        wl.requeue_at = state.now + config.backoff(wl.requeue_count)
        state.backing_off.add(wl.id)
        if config.requeue_timestamp == "Eviction":
            wl.order = state.next_order  # to the back of the queue, as Kueue does
            state.next_order += 1
    if not ends:
        enqueue(state, wl)  # requeued keeping its original `order`
    if event.preemptor is not None and event.preemptor in state.pending:
        state.preemptors.add(event.preemptor)
        enqueue(state, state.workloads[event.preemptor])  # sticky: its own lane
    if not ends:
        state.active.discard(wl.id)
    if wl.cancel_requested:
        state.active.add(wl.id)


def _ends_when_preempted(state: QueueState, cluster_queue: str) -> bool:
    cq = state.cluster_queues.get(cluster_queue)
    return cq is not None and cq.preemption.on_preempted == "End"


def _recharge(
    state: QueueState,
    wl: WorkloadEntry,
    usage: Mapping[str, Mapping[str, int]],
    pod_counts: Mapping[str, int],
) -> None:
    """The attempt holds ``usage`` for ``pod_counts`` pods now (shrunk or grown)."""
    _hold(state, wl, -1)
    wl.run.usage = {f: dict(r) for f, r in usage.items()}
    wl.run.pod_counts = dict(pod_counts)
    _hold(state, wl, +1)


@_apply.register
def _(event: qev.WorkloadShrunk, state: QueueState) -> None:
    wl = _current(state, event.workload_id, event.attempt)
    if wl is None:
        return
    _recharge(state, wl, event.usage, event.pod_counts)
    gone = set(event.pods)
    state.book.take_pods(wl.id, gone)
    if wl.run.placements is not None:
        wl.run.placements = {p: n for p, n in wl.run.placements.items() if p not in gone}
    wl.run.devices = {p: d for p, d in wl.run.devices.items() if p not in gone}
    wl.run.pods_started -= gone
    wl.run.pods_ready = len(wl.run.pods_started) >= wl.admitted_pods
    preemptor_cq = state.preemptor_queue(event.preemptor) or ""
    _bump(state.stats.preempted, (event.preemption_reason, preemptor_cq))
    if event.preemptor in state.pending:
        state.evicted_for.setdefault(event.preemptor, set()).add(wl.id)
        state.preemptors.add(event.preemptor)
        enqueue(state, state.workloads[event.preemptor])  # sticky: its own lane


@_apply.register
def _(event: qev.WorkloadGrown, state: QueueState) -> None:
    wl = _current(state, event.workload_id, event.attempt)
    if wl is None:
        return
    _recharge(state, wl, event.usage, event.pod_counts)
    added = set(event.pods)
    pods = (p for d in demands(wl.spec, event.pod_counts) for p in d.pods if p.name in added)
    state.book.add_pods(wl.id, event.placement, {p.name: p for p in pods})
    if wl.run.placements is not None:
        wl.run.placements.update(event.placement.nodes)
    wl.run.devices.update(event.placement.devices)
    for pod in added:  # fresh pods, whatever a pod of that name (shrunk since) did
        wl.run.pods_started.discard(pod)
        wl.run.pods_succeeded.discard(pod)
        wl.run.pods_failed.pop(pod, None)


@_apply.register
def _(event: qev.WorkloadFinished, state: QueueState) -> None:
    wl = state.workloads.get(event.workload_id)
    if wl is None:
        return  # ended already
    _bump(state.stats.finished, wl.run.cluster_queue or "")
    _end(state, event.workload_id, "Finished")


@_apply.register
def _(event: qev.WorkloadCancelled, state: QueueState) -> None:
    _end(state, event.workload_id, "Cancelled")


@_apply.register
def _(event: qev.WorkloadRejected, state: QueueState) -> None:
    _end(state, event.workload_id, "Rejected")


@_apply.register
def _(event: pev.ProvisioningRequested, state: QueueState) -> None:
    pods = sum(ps.count for ps in event.spec.pod_sets)
    state.requests[event.request_id] = StandaloneRequest(id=event.request_id, pods=pods)
    state.notes.touch_all()


@_apply.register
def _(event: pev.ProvisioningDeleteRequested, state: QueueState) -> None:
    req = state.requests.get(event.request_id)
    if req is not None:
        req.deleted = True
        state.notes.touch_all()


def _report(
    state: QueueState, rid: str, status: str | None, message: str
) -> StandaloneRequest | None:
    """What a standalone request reports: its status (None: unchanged) and message. None
    when ``rid`` is not a standalone request (a workload's own, or unknown)."""
    req = state.requests.get(rid)
    if req is not None:
        req.status = status or req.status
        req.message = message
        state.notes.touch_all()  # its consumers bind, or learn why not
    return req


@_apply.register
def _(event: pev.ProvisioningAccepted, state: QueueState) -> None:
    if _report(state, event.request_id, "Accepted", event.message) is None:
        _check_waits(state, event.request_id, event.message)


@_apply.register
def _(event: pev.ProvisioningWaiting, state: QueueState) -> None:
    message = f"{event.reason}: {event.message}"
    if _report(state, event.request_id, None, message) is None:
        _check_waits(state, event.request_id, message)


def _check_waits(state: QueueState, rid: str, message: str) -> None:
    """A workload's request is not provisioned yet: its check stays Pending, saying why
    (Kueue propagates the request's message)."""
    wl = _attempt_of(state, rid)
    if wl is not None and wl.run.ask is not None:
        _check_changed(wl, wl.run.ask.check, "Pending", message, state.now)


@_apply.register
def _(event: pev.ProvisioningCancelled, state: QueueState) -> None:
    _report(state, event.request_id, "Cancelled", event.message)


@_apply.register
def _(event: pev.ProvisioningProvisioned, state: QueueState) -> None:
    for before in event.stands_for(state.now):  # what it stands for, first, as ``evolve``
        _handler(type(before))(before, state)
        wid = getattr(before, "workload_id", None)
        if wid is not None and (wl := state.workloads.get(wid)) is not None:
            _touched(state, wl)
    req = _report(state, event.request_id, "Provisioned", event.message)
    if req is not None:
        req.slots = list(event.assignments.values())
        return
    wl = _attempt_of(state, event.request_id)
    if wl is not None:
        wl.run.placements = dict(event.assignments)
        ask = wl.run.ask
        if ask is not None:
            _check_changed(wl, ask.check, "Ready", event.message, state.now, consume_updates(wl))


def consume_updates(wl: WorkloadEntry) -> tuple[PodSetUpdate, ...]:
    """Kueue's podSetUpdates of a Ready ProvisioningRequest check: each pod set's pods
    consume the request ``<workload>-<check>-<attempt>`` (reference: peers.md §4.4)."""
    ask = wl.run.ask
    if ask is None:
        return ()
    request = names.request_name(wl.spec.name, ask.check, wl.run.attempt)
    annotations = names.consume_annotations(request, ask.provisioning_class)
    return tuple(PodSetUpdate(name=ps.name, annotations=annotations) for ps in wl.spec.pod_sets)


def _check_event(
    state: QueueState, rid: str, condition: str, reason: str, message: str, retryable: bool = True
) -> None:
    """Record what ends a request on the workload(s) it serves; settle acts on it."""
    req = _report(state, rid, "Failed" if condition == "Failed" else None, f"{reason}: {message}")
    if req is not None:
        for wid in req.taken:
            consumer = state.workloads[wid]
            if condition == "CapacityRevoked" and consumer.holds_quota:
                consumer.run.check_event = (condition, reason, message, retryable)
        return
    wl = _attempt_of(state, rid)
    if wl is not None:
        wl.run.check_event = (condition, reason, message, retryable)


@_apply.register
def _(event: pev.ProvisioningFailed, state: QueueState) -> None:
    _check_event(state, event.request_id, "Failed", event.reason, event.message, event.retryable)


@_apply.register
def _(event: pev.ProvisioningBookingExpired, state: QueueState) -> None:
    _check_event(
        state, event.request_id, "BookingExpired", "CapacityReservationTimeExpired", event.message
    )


@_apply.register
def _(event: pev.ProvisioningCapacityRevoked, state: QueueState) -> None:
    _check_event(state, event.request_id, "CapacityRevoked", "CapacityRevoked", event.message)


@_apply.register
def _(event: pev.NodesDeleted, state: QueueState) -> None:
    if event.request_id in state.requests:  # else a workload's request: nothing to report
        _report(state, event.request_id, "Gone", f"nodes removed ({event.reason}): {event.message}")


@_apply.register
def _(event: nev.PodStarted, state: QueueState) -> None:
    wl = _current_pod(state, event.workload_id, event.attempt, event.pod)
    if wl is not None:
        wl.run.pods_started.add(event.pod)
        # Once ready it stays so: pods added later (admission.grown) are not the gang's.
        wl.run.pods_ready = wl.run.pods_ready or len(wl.run.pods_started) >= wl.admitted_pods


@_apply.register
def _(event: nev.PodSucceeded, state: QueueState) -> None:
    wl = _current_pod(state, event.workload_id, event.attempt, event.pod)
    if wl is not None:
        wl.run.pods_succeeded.add(event.pod)


@_apply.register
def _(event: nev.PodFailed, state: QueueState) -> None:
    wl = _current_pod(state, event.workload_id, event.attempt, event.pod)
    if wl is not None:
        wl.run.pods_failed[event.pod] = f"{event.reason} (exit code {event.exit_code})"
        ps = pod_set_of(event.pod)
        wl.run.pod_failures[ps] = wl.run.pod_failures.get(ps, 0) + 1


@_apply.register
def _(event: qev.PodReplaced, state: QueueState) -> None:
    wl = _current(state, event.workload_id, event.attempt)
    if wl is not None:
        wl.run.pods_failed.pop(event.pod, None)
        wl.run.pods_started.discard(event.pod)
        wl.run.pods_ready = False


def pod_set_of(pod: str) -> str:
    """Pods are named ``<pod set>-<index>``."""
    return pod.rsplit("-", 1)[0]


@_apply.register
def _(event: pev.CloudConfigured, state: QueueState) -> None:
    state.book.set_topology(event.spec.topology)
    for node in event.spec.nodes:
        state.inventory[node.name] = node


# Types whose fold only moves the clock when a payload field is set: a replay reads them
# without payload then (``Decider.clock_only_when``; the handler below returns at once).
CLOCK_ONLY_WHEN: Mapping[str, str] = {nev.NodeRegistered.TYPE: "request_id"}


@_apply.register
def _(event: nev.NodeRegistered, state: QueueState) -> None:
    if event.request_id:
        return  # a provisioning request's node: its pods come with the request
    inv = event.inventory()
    state.inventory[event.node] = inv
    state.book.register(inv)


@_apply.register
def _(event: nev.NodeLost, state: QueueState) -> None:
    state.book.lose(event.node)
    for wid in sorted(state.active):
        wl = state.workloads[wid]
        if not wl.holds_quota or not wl.run.placements:
            continue
        for pod, node in wl.run.placements.items():
            if node == event.node and pod not in wl.run.pods_succeeded:
                wl.run.pods_evicted[pod] = ("NodeLost", f"node {event.node} lost: {event.message}")
                state.notes.touch(wl.id)


@_apply.register
def _(event: nev.NodeRemoved, state: QueueState) -> None:
    state.book.remove(event.node)


def _current(state: QueueState, workload_id: str, attempt: int) -> WorkloadEntry | None:
    """The workload, if ``attempt`` is the one holding quota now (late events are ignored)."""
    wl = state.workloads.get(workload_id)
    if wl is None or wl.run.attempt != attempt or wl.status not in _HOLDING:
        return None
    return wl


def _current_pod(
    state: QueueState, workload_id: str, attempt: int, pod: str
) -> WorkloadEntry | None:
    """As ``_current``, and the pod is one it runs now: a late report of a pod preemption
    took (admission.shrunk) is ignored, so it cannot count for a pod grown back later."""
    wl = _current(state, workload_id, attempt)
    if wl is not None and wl.run.placed and wl.run.placements is not None:
        return wl if pod in wl.run.placements else None
    return wl


def _attempt_of(state: QueueState, rid: str) -> WorkloadEntry | None:
    parts = pev.split_request_id(rid)
    wl = _current(state, *parts) if parts is not None else None
    if wl is not None:
        state.notes.touch(wl.id)
    return wl


def _end(state: QueueState, workload_id: str, status: Status) -> None:
    wl = state.workloads.get(workload_id)
    if wl is None:
        return  # ended already
    _release(state, wl)  # unbinds it first
    wl.status = status
    _dequeue(state, workload_id)
    state.active.discard(workload_id)
    state.preemptors.discard(workload_id)
    state.evicted_for.pop(workload_id, None)
    state.backing_off.discard(workload_id)
    attained.gone(state, workload_id)
    if state.keep_ended:
        return
    # Dropped: no decision looks at an ended workload again, and restoring a snapshot
    # of a long log then costs what is running and waiting, not all that ever ran.
    state.awaiting_pods.discard(workload_id)
    state.growers.discard(workload_id)
    state.notes.regrow(workload_id)
    del state.workloads[workload_id]
    state.ended[workload_id] = Ended(status, wl.local_queue, wl.spec.name)
    state.ended_counts[status] = state.ended_counts.get(status, 0) + 1
    keep_latest(state.ended, ENDED_KEPT)


def _unbind(state: QueueState, wl: WorkloadEntry) -> None:
    """A consumer gives its pod slots back to its standalone request."""
    req = state.requests.get(wl.run.request_id)
    if req is not None:
        req.taken.pop(wl.id, None)


def _release(state: QueueState, wl: WorkloadEntry) -> None:
    _unbind(state, wl)
    state.book.release(wl.id)
    if wl.holds_quota and wl.run.cluster_queue is not None:
        _hold(state, wl, -1)
    wl.run.usage = {}


def _hold(state: QueueState, wl: WorkloadEntry, sign: int) -> None:
    """Charge (or release) a workload's usage to its queue, tenant and namespace."""
    run = wl.run  # locals: every reservation and finish a replay folds comes here
    cq, usage = run.cluster_queue, run.usage
    assert cq is not None
    root = root_of(state, cq)
    state.quota_changed[root] = state.quota_changed.get(root, 0) + 1
    ns = wl.spec.namespace
    state.ns_changed[ns] = state.ns_changed.get(ns, 0) + 1
    state.notes.charged(cq, usage, sign)
    _charge(state.usage.setdefault(cq, {}), usage, sign)
    _charge(state.lq_usage.setdefault(wl.local_queue, {}), usage, sign)
    per_ns = state.ns_usage.setdefault(ns, {})
    for resource, qty in namespace_charge(wl.spec, run.pod_counts).items():
        per_ns[resource] = per_ns.get(resource, 0) + sign * qty


def namespace_charge(spec: WorkloadSpec, counts: Mapping[str, int] | None = None) -> dict[str, int]:
    """What a ResourceQuota counts: every pod's requests, whatever the queue covers, and pods."""
    out: dict[str, int] = {}
    pods = 0
    for ps in spec.pod_sets:
        n = (counts or {}).get(ps.name, ps.count)
        pods += n
        for resource, qty in ps.requests.items():
            out[resource] = out.get(resource, 0) + qty * n
    out["pods"] = pods
    return out


def _charge(usage: Usage, amount: Mapping[str, Mapping[str, int]], sign: int) -> None:
    for flavor, resources in amount.items():
        per_flavor = usage.setdefault(flavor, {})
        for resource, qty in resources.items():
            per_flavor[resource] = per_flavor.get(resource, 0) + sign * qty


def summary(state: QueueState) -> dict[str, Any]:
    """Quota usage per ClusterQueue (non-zero entries) and workloads by status."""
    usage = {
        cq: {f: {r: q for r, q in res.items() if q} for f, res in flavors.items()}
        for cq, flavors in sorted(state.usage.items())
    }
    usage = {cq: {f: r for f, r in fl.items() if r} for cq, fl in usage.items()}
    return {
        "now": state.now,
        "usage": usage,
        "workloads": dict(sorted(status_counts(state).items())),
        "pending": len(state.pending),
    }


def status_counts(state: QueueState) -> dict[str, int]:
    """How many workloads are in each status, the ended ones included."""
    counts: dict[str, int] = {}
    for wl in state.workloads.values():
        counts[wl.status] = counts.get(wl.status, 0) + 1
    for status, count in state.ended_counts.items():
        if count:
            counts[status] = counts.get(status, 0) + count
    return counts
