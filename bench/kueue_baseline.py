"""Kueue's scheduler performance test "baseline", replayed on muster.

The shape is Kueue's ``test/performance/scheduler/configs/baseline/generator.yaml``
(reference: /work/shared/reference/kueue.md §3.1):

* 5 cohorts x 6 ClusterQueues = 30 CQs, one resource (``example.com/unit``), each CQ
  nominal 20 and borrowingLimit 100, preemption ``reclaimWithinCohort: Any``,
  ``withinClusterQueue: LowerPriority``; one LocalQueue per CQ, in its own namespace;
* per CQ, three generators running side by side, each waiting its interval before
  every creation (as Kueue's generator does): 350 small (1 unit, 200 ms, priority
  50, every 100 ms), 100 medium (5 units, 500 ms, priority 100, every 500 ms) and 50
  large (20 units, 1 s, priority 200, every 1.2 s): 15,000 workloads.

The cloud has one node pool with 20 units per node, ``maxNodes`` 100,000 and no
provisioning delay, so quota is the only thing workloads wait for. A workload runs
``runtime.durationSeconds`` once its pods start (the node agent's simulation), as
Kueue's runner finishes a workload ``runtimeMs`` after admission.

Two ways to run it:

* virtual time (default): the simulation harness (``muster.core.sim.harness``) with
  the same deciders the services run. The queue decider is wrapped to measure the
  CPU time of its decisions, its admission cycles and the pending queue they see;
* ``--services``: the embedded stack (broker, SQLite store, the four services as
  processes); workloads are POSTed to intake at their arrival times (wall clock).
  ``--scale`` shrinks every generator's count (0.1: 35/10/5 per CQ) to fit a run on
  2 cores.

Figures, in the definitions of Kueue's recorder
(``test/performance/scheduler/runner/recorder``): total time (first submission to
the last finish) against the capacity bound, time to admission per class (to the
*last* admission, as Kueue's recorder overwrites it on re-admission; the first is
printed too), and usage = time integral of quota held / (total time x nominal 600).

Virtual time runs Kueue's configuration, then the same with ``preemption.minAdmitDuration``
(a minimum runtime before preemption, default 2 s: longer than any workload runs).

Outcome, checked in both modes (fails loudly otherwise): every workload accepted by
intake (``--services``), admitted and finished successfully, none rejected or cancelled
(evictions are the scenario's: preemption requeues them); virtual time also fails on a
livelock (the harness's bound), ``--services`` when the log has not ended by ``--timeout``.

Each run prints where its total beyond the capacity bound went (work lost per eviction,
quota held beyond the runtime, idle capacity by what waited) and, with Kueue's
configuration, the least total of any schedule that starts larges on arrival.
``--existing-node``: one declared node of the nominal total instead of the provisioned
pool (no provisioning request between reservation and admission).

    python -m bench.kueue_baseline [--scale 1.0] [--min-admit-duration 2s] [--services]
                                   [--existing-node]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import math
import os
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from statistics import mean
from typing import Any

import aiohttp
import orjson

from bench import check_outcome, machine, per_second, ratio, run_bounded
from muster.core.decider import Decider
from muster.core.events import Envelope, NewEvent
from muster.core.events import queue as qev
from muster.core.events import workload as wev
from muster.core.model import parse
from muster.core.model.cluster import ClusterSpec
from muster.core.nodes.decider import NodeAgentDecider
from muster.core.provisioning.decider import ProvisionerDecider
from muster.core.queueing import decider as queue_decider_module
from muster.core.queueing.decider import QueueDecider
from muster.core.queueing.state import QueueState
from muster.core.sim import harness as sim
from muster.core.sim.summary import percentile

RESOURCE = "example.com/unit"
COHORTS = 5
QUEUES_PER_COHORT = 6
NOMINAL = 20
BORROWING_LIMIT = 100
ENDED = (qev.WorkloadFinished, qev.WorkloadCancelled, qev.WorkloadRejected)
RELEASES = (*ENDED, qev.WorkloadEvicted)  # what lets go of quota
GAVE_UP = (qev.WorkloadCancelled, qev.WorkloadRejected)
# A harness log this many events per workload has no fixed point (a few dozen are usual,
# re-admissions after preemption included): a livelock, not a long run.
RUNAWAY_EVENTS_PER_WORKLOAD = 500
# --services: a p90 send lag above this (s) means the client bunched the arrivals (a
# quarter of the smalls' 0.1 s interval; a quiet machine's run is ~0.01 s at p50).
LATE_ARRIVALS = 0.25


@dataclass(frozen=True)
class WorkloadClass:
    name: str
    count: int  # per ClusterQueue
    interval: float  # seconds between creations
    units: int
    runtime: float  # seconds
    priority: int


CLASSES = (
    WorkloadClass("small", 350, 0.1, 1, 0.2, 50),
    WorkloadClass("medium", 100, 0.5, 5, 0.5, 100),
    WorkloadClass("large", 50, 1.2, 20, 1.0, 200),
)

# Kueue's published figures for this configuration (reference §3.1; averages of CI runs
# in envtest, with equivalence hashing).
KUEUE_WORKLOADS = 15_000
KUEUE_WALL = 351.116  # seconds
KUEUE_USAGE = 55.9  # percent
KUEUE_ADMISSION = {"large": 16.5, "medium": 76.8, "small": 215.5}  # mean seconds


@dataclass(frozen=True)
class Arrival:
    at: float
    key: str  # unique per run: the harness's workload id, intake's Idempotency-Key
    cls: WorkloadClass
    body: dict[str, Any]


def queue_names() -> list[tuple[str, str]]:
    """(ClusterQueue, cohort) pairs; every CQ's LocalQueue has its name, in its namespace."""
    return [
        (f"cq-{c}-{q}", f"cohort-{c}") for c in range(COHORTS) for q in range(QUEUES_PER_COHORT)
    ]


def cluster_doc(protect: str | None = None, *, existing_node: bool = False) -> dict[str, Any]:
    """Kueue's configuration; ``protect``: a ``minAdmitDuration`` on every queue.
    ``existing_node``: instead of the node pool, one declared node as large as the nominal
    quota, so nothing but quota constrains (Kueue's test has no nodes) and no workload
    waits for a provisioning request: the queue admits it in the decision that reserves."""
    preemption = {"reclaimWithinCohort": "Any", "withinClusterQueue": "LowerPriority"}
    if protect is not None:
        preemption["minAdmitDuration"] = protect
    cluster_queues = [
        {
            "name": cq,
            "cohort": cohort,
            "preemption": preemption,
            "resourceGroups": [
                {
                    "coveredResources": [RESOURCE],
                    "flavors": [
                        {
                            "name": "rf",
                            "resources": [
                                {
                                    "name": RESOURCE,
                                    "nominalQuota": NOMINAL,
                                    "borrowingLimit": BORROWING_LIMIT,
                                }
                            ],
                        }
                    ],
                }
            ],
        }
        for cq, cohort in queue_names()
    ]
    doc: dict[str, Any] = {
        "name": "kueue-baseline",
        "zones": ["zone-a"],
        # Kueue's test has no cloud: every workload's nodes come at once, however many
        # requests are open (GKE's default of 100 Accepted requests would refuse 40 % of
        # them, as this benchmark did unnoticed until the engine rework).
        "activeRequests": 100_000,
        "nodePools": [
            {
                "name": "units",
                "machineType": "unit-20",
                "allocatable": {RESOURCE: 20},
                "maxNodes": 100_000,
                "provisioningDelaySeconds": 0,
            }
        ],
        "resourceFlavors": [{"name": "rf"}],
        "clusterQueues": cluster_queues,
        "localQueues": [
            {"namespace": cq, "name": cq, "clusterQueue": cq} for cq, _ in queue_names()
        ],
    }
    if existing_node:
        doc["nodePools"] = []
        doc["nodes"] = [
            {"name": "units", "count": 1, "allocatable": {RESOURCE: NOMINAL * len(cluster_queues)}}
        ]
    return doc


def cohort_of(a: Arrival) -> str:
    return dict(queue_names())[a.body["queueName"]]


def scaled(count: int, scale: float) -> int:
    return max(1, round(count * scale))


def arrivals(scale: float, run: str = "") -> list[Arrival]:
    """Every generator waits its interval before each creation; all run side by side."""
    out = []
    for cq, _ in queue_names():
        for cls in CLASSES:
            for k in range(scaled(cls.count, scale)):
                body = {
                    "name": f"{cls.name}-{k}",
                    "namespace": cq,
                    "queueName": cq,
                    "priority": cls.priority,
                    "podSets": [{"name": "main", "count": 1, "requests": {RESOURCE: cls.units}}],
                    "runtime": {"durationSeconds": cls.runtime},
                }
                at = round((k + 1) * cls.interval, 6)
                out.append(Arrival(at, f"{run}{cq}.{cls.name}-{k}", cls, body))
    out.sort(key=lambda a: a.at)  # stable: the CQ order within one instant
    return out


def capacity_bound(scale: float) -> tuple[float, float, float]:
    """(unit-seconds of work, work / nominal capacity, last arrival + its runtime)."""
    queues = COHORTS * QUEUES_PER_COHORT
    work = sum(scaled(c.count, scale) * c.units * c.runtime for c in CLASSES) * queues
    last = max(scaled(c.count, scale) * c.interval + c.runtime for c in CLASSES)
    return work, work / (NOMINAL * queues), last


def preemptive_bound(scale: float) -> float:
    """The least total (first submission to last finish) for a scheduler that admits every
    large when it arrives, as Kueue's rules make it here: a large (priority 200) heads its
    queue and every lower-priority workload is a candidate (``withinClusterQueue:
    LowerPriority`` in its queue, ``reclaimWithinCohort: Any`` in the others, which borrow).

    All 30 queues' larges arrive together and fill the nominal capacity exactly while they
    run, so only the windows between them hold other work before the last large ends; a
    workload counts there only if it arrived in time to finish inside one window (work in
    a window is lost when the next larges come). Optimistic otherwise (any packing, no
    decision time), so no such scheduler ends sooner."""
    capacity = NOMINAL * COHORTS * QUEUES_PER_COHORT
    queues = COHORTS * QUEUES_PER_COHORT
    large = max(CLASSES, key=lambda c: c.priority)
    others = [c for c in CLASSES if c is not large]
    assert large.units * queues == capacity, "the larges no longer fill the capacity"
    n_large = scaled(large.count, scale)
    first = min(c.interval for c in CLASSES)
    windows = [(first, large.interval)] + [
        (k * large.interval + large.runtime, (k + 1) * large.interval) for k in range(1, n_large)
    ]
    done = {c.name: 0 for c in others}  # workloads (of all queues) finished inside windows
    for a, b in windows:
        room = capacity * (b - a)
        for c in sorted(others, key=lambda c: c.runtime):  # shortest first: they waste least
            if b - a < c.runtime - 1e-9:
                continue
            # every queue's generator: those created in time to finish by b
            per_queue = math.floor((b - c.runtime) / c.interval + 1e-9)
            arrived = min(scaled(c.count, scale), per_queue) * queues
            n = min(arrived - done[c.name], math.floor(room / (c.units * c.runtime) + 1e-9))
            room -= n * c.units * c.runtime
            done[c.name] += n
    left = sum(
        (scaled(c.count, scale) * queues - done[c.name]) * c.units * c.runtime for c in others
    )
    return n_large * large.interval + large.runtime + left / capacity - first


# -- figures from a log ------------------------------------------------------------------


@dataclass
class Figures:
    classes: dict[str, WorkloadClass]  # workload id -> class
    submitted: dict[str, float] = field(default_factory=dict)
    first_admit: dict[str, float] = field(default_factory=dict)
    last_admit: dict[str, float] = field(default_factory=dict)
    finished: dict[str, float] = field(default_factory=dict)
    failed: set[str] = field(default_factory=set)  # finished, but not Succeeded
    gave_up: dict[str, str] = field(default_factory=dict)  # rejected or cancelled: event type
    evictions: int = 0
    admissions: int = 0  # WorkloadAdmitted events, re-admissions included
    held: float = 0.0  # unit-seconds of quota held (QuotaReserved -> release)
    # Where the held unit-seconds beyond the work went (see ``Breakdown``):
    # class -> unit-s held by reservations that ended in eviction
    lost: defaultdict[str, float] = field(default_factory=lambda: defaultdict(float))
    lost_n: Counter[str] = field(default_factory=Counter)  # class -> evictions
    overhead: float = 0.0  # held by finished reservations beyond their runtime (the hops)
    reserving: float = 0.0  # of which held between QuotaReserved and WorkloadAdmitted
    # (time, cohort, units held change, class whose pending count changes, change): the
    # sweep that finds idle capacity while work waited
    steps: list[tuple[float, str, int, str, int]] = field(default_factory=list)
    start: float = 0.0
    end: float = 0.0

    @property
    def total(self) -> float:
        return self.end - self.start


def figures(
    envelopes: list[Envelope],
    classes: dict[str, WorkloadClass],
    when: Callable[[Envelope], float],
    cohorts: dict[str, str],
) -> Figures:
    """``classes``, ``cohorts``: each workload id's class and cohort."""
    f = Figures(classes)
    holding: dict[str, tuple[float, int]] = {}  # workload -> (since, units)
    for env in envelopes:
        ev = env.event
        wid = getattr(ev, "workload_id", None)
        if wid not in classes:
            continue
        t = when(env)
        cls, cohort = classes[wid], cohorts[wid]
        if isinstance(ev, wev.WorkloadSubmitted):
            f.submitted[wid] = t
            f.steps.append((t, cohort, 0, cls.name, +1))
        elif isinstance(ev, qev.QuotaReserved):
            units = sum(q for res in ev.usage.values() for q in res.values())
            holding[wid] = (t, units)
            f.steps.append((t, cohort, units, cls.name, -1))
        elif isinstance(ev, qev.WorkloadAdmitted):
            if wid in holding:
                since, units = holding[wid]
                f.reserving += units * max(0.0, t - since)
            f.admissions += 1
            f.first_admit.setdefault(wid, t)
            f.last_admit[wid] = t
        elif isinstance(ev, RELEASES):
            if wid in holding:
                since, units = holding.pop(wid)
                f.held += units * max(0.0, t - since)
                requeued = isinstance(ev, qev.WorkloadEvicted)
                f.steps.append((t, cohort, -units, cls.name, +1 if requeued else 0))
                if requeued:
                    f.lost[cls.name] += units * max(0.0, t - since)
                elif isinstance(ev, qev.WorkloadFinished):
                    f.overhead += units * (max(0.0, t - since) - cls.runtime)
            if isinstance(ev, qev.WorkloadEvicted):
                f.evictions += 1
                f.lost_n[cls.name] += 1
            elif isinstance(ev, qev.WorkloadFinished):
                f.finished[wid] = t
                if ev.outcome != "Succeeded":
                    f.failed.add(wid)
            elif isinstance(ev, GAVE_UP):
                f.gave_up[wid] = env.type
    if f.submitted:
        f.start = min(f.submitted.values())
        f.end = max([*f.finished.values(), *f.last_admit.values(), f.start])
    return f


@dataclass(frozen=True)
class Idle:
    """Unit-seconds of nominal capacity held by nobody between the first submission and
    the last finish, by what was waiting then."""

    fitting: float  # a pending workload would have fit the free units: time between decisions
    too_big: float  # workloads waited, none small enough for the free units
    nothing: float  # nothing waited: the arrivals' pace


def idle(f: Figures) -> Idle:
    """Sweep each cohort's reservations, releases and arrivals in time order (a cohort's
    quota is its own: another cohort's free units are no use to its workloads)."""
    capacity = NOMINAL * QUEUES_PER_COHORT
    units = {c.name: c.units for c in CLASSES}
    fitting = too_big = nothing = 0.0
    by_cohort: dict[str, list[tuple[float, int, str, int]]] = {}
    for t, cohort, d_held, cls, d_pending in f.steps:
        by_cohort.setdefault(cohort, []).append((t, d_held, cls, d_pending))
    for steps in by_cohort.values():
        pending: Counter[str] = Counter()
        held = 0
        last = f.start
        for t, d_held, cls, d_pending in sorted(steps, key=lambda s: s[0]):
            t = min(max(t, f.start), f.end)
            free = max(0, capacity - held) * (t - last)
            waiting = [units[c] for c, n in pending.items() if n > 0]
            if not waiting:
                nothing += free
            elif min(waiting) <= capacity - held:
                fitting += free
            else:
                too_big += free
            last, held = t, held + d_held
            pending[cls] += d_pending
        nothing += capacity * (f.end - last)  # after its last release
    return Idle(fitting, too_big, nothing)


def breakdown(f: Figures, scale: float) -> None:
    """Total = (work + lost + overhead + idle) / capacity: print each part in seconds."""
    capacity = NOMINAL * COHORTS * QUEUES_PER_COHORT
    work, _, _ = capacity_bound(scale)
    gaps = idle(f)
    lost = sum(f.lost.values())
    per = ", ".join(
        f"{c.name} {f.lost[c.name]:,.0f} unit-s in {f.lost_n[c.name]:,} "
        f"({f.lost[c.name] / f.lost_n[c.name]:.2f} each)"
        for c in CLASSES
        if f.lost_n[c.name]
    )
    print(
        f"  where the total goes (unit-s / {capacity} = s): work {work / capacity:.2f}s; "
        f"lost to evictions {lost / capacity:.2f}s ({per or 'none'}); hops, quota held "
        f"beyond runtime {f.overhead / capacity:.2f}s (reserved, not yet admitted "
        f"{f.reserving / capacity:.2f}s); idle while a waiting workload fit "
        f"{gaps.fitting / capacity:.2f}s, while none fit {gaps.too_big / capacity:.2f}s, "
        f"with nothing waiting {gaps.nothing / capacity:.2f}s"
    )


def outcome(f: Figures, n: int) -> list[str]:
    """What went other than intended: every one of the ``n`` workloads submitted, admitted
    and finished successfully, none rejected or cancelled (evictions are the scenario's)."""
    problems = []
    if len(f.submitted) != n:
        problems.append(f"{n - len(f.submitted)} of {n} never submitted")
    if f.gave_up:
        problems.append(
            f"{len(f.gave_up)} rejected or cancelled ({dict(Counter(f.gave_up.values()))})"
        )
    if len(f.first_admit) != n:
        problems.append(f"{n - len(f.first_admit)} of {n} never admitted")
    if len(f.finished) != n or f.failed:
        problems.append(f"{n - len(f.finished)} of {n} never finished, {len(f.failed)} failed")
    return problems


def by_class(f: Figures, admitted: dict[str, float]) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {c.name: [] for c in CLASSES}
    for wid, t in admitted.items():
        if wid in f.submitted:
            out[f.classes[wid].name].append(t - f.submitted[wid])
    return out


def report(f: Figures, scale: float, label: str, *, total_label: str, protected: bool) -> None:
    """``protected``: minAdmitDuration on the queues (larges may wait: no preemptive bound)."""
    work, bound_work, bound_arrival = capacity_bound(scale)
    bound = max(bound_work, bound_arrival)
    n = len(f.classes)
    print(
        f"{label}: {len(f.submitted)}/{n} submitted, {len(f.first_admit)} admitted, "
        f"{len(f.finished)} finished, {f.evictions} evictions, {f.admissions} admissions "
        f"(re-admissions included)"
    )
    print(
        f"  {total_label} (first submission -> last finish): {f.total:.2f}s; capacity bound "
        f"{bound:.2f}s = max(work {work:,.0f} unit-s / {NOMINAL * COHORTS * QUEUES_PER_COHORT} "
        f"units = {bound_work:.2f}s, last arrival + runtime {bound_arrival:.2f}s) -> "
        f"{ratio(f.total, bound)} the bound"
    )
    if not protected:
        least = preemptive_bound(scale)
        print(
            f"  with Kueue's preemption every large starts on arrival; then no schedule ends "
            f"before {least:.2f}s = {ratio(least, bound)} the bound (mediums fit no gap "
            f"between larges: `preemptive_bound`)"
        )
    capacity = NOMINAL * COHORTS * QUEUES_PER_COHORT
    usage = 100.0 * f.held / (f.total * capacity) if f.total > 0 else 0.0
    print(
        f"  admissions/s: {per_second(len(f.first_admit), f.total):,.1f} (workloads), "
        f"{per_second(f.admissions, f.total):,.1f} (admission events); mean usage "
        f"{usage:.1f}% ({f.held:,.0f} unit-s held; work needs {work:,.0f})"
    )
    breakdown(f, scale)
    last, first = by_class(f, f.last_admit), by_class(f, f.first_admit)
    print(
        "  time to admission (s): class  count   mean    p50    p90    max | first-admission mean"
    )
    for cls in reversed(CLASSES):
        v, v1 = last[cls.name], first[cls.name]
        if not v:
            print(f"    {cls.name:<6} none admitted")
            continue
        print(
            f"    {cls.name:<6} {len(v):>6} {mean(v):7.2f} {percentile(v, 50):6.2f} "
            f"{percentile(v, 90):6.2f} {max(v):6.2f} | {mean(v1):7.2f}"
        )
    print(f"  Kueue's baseline (envtest, {KUEUE_WORKLOADS:,} workloads) vs muster (Kueue/muster):")
    ours_rate = per_second(len(f.first_admit), f.total)
    kueue_rate = KUEUE_WORKLOADS / KUEUE_WALL
    print(
        f"    total time {KUEUE_WALL:.1f}s vs {f.total:.2f}s ({ratio(KUEUE_WALL, f.total)}); "
        f"admissions/s {kueue_rate:.1f} vs {ours_rate:,.1f} ({ratio(kueue_rate, ours_rate)})"
    )
    print(f"    usage {KUEUE_USAGE:.1f}% vs {usage:.1f}% ({ratio(KUEUE_USAGE, usage)})")
    for cls in reversed(CLASSES):
        v = last[cls.name]
        k = KUEUE_ADMISSION[cls.name]
        ours = mean(v) if v else math.nan
        print(f"    time to admission {cls.name:<6} {k:6.1f}s vs {ours:6.2f}s ({ratio(k, ours)})")
    if scale != 1.0:
        print(f"    (scale {scale:g}: Kueue's figures are for the full 15,000)")


# -- virtual time: the harness -----------------------------------------------------------


@dataclass
class Timing:
    """CPU seconds (time.process_time) spent in one decider, and its calls."""

    decide_s: float = 0.0
    decide_calls: int = 0
    decide_nonempty: int = 0
    evolve_s: float = 0.0
    evolve_calls: int = 0


class Timed:
    """A decider that measures its inner decider's decide and evolve."""

    def __init__(self, inner: Decider[Any]) -> None:
        self.inner = inner
        self.name = inner.name
        self.categories = inner.categories
        self.snapshot_format = inner.snapshot_format
        self.timing = Timing()

    def initial(self) -> Any:
        return self.inner.initial()

    def evolve(self, state: Any, envelope: Envelope) -> Any:
        started = time.process_time()
        out = self.inner.evolve(state, envelope)
        self.timing.evolve_s += time.process_time() - started
        self.timing.evolve_calls += 1
        return out

    def decide(self, state: Any) -> list[NewEvent]:
        started = time.process_time()
        out = self.inner.decide(state)
        self.timing.decide_s += time.process_time() - started
        self.timing.decide_calls += 1
        self.timing.decide_nonempty += bool(out)
        return out

    def next_deadline(self, state: Any) -> float | None:
        return self.inner.next_deadline(state)

    def summary(self, state: Any) -> dict[str, Any]:
        return self.inner.summary(state)


@dataclass
class CycleStats:
    cycles: int = 0
    productive: int = 0  # cycles that returned events
    cycle_s: float = 0.0
    settles: int = 0
    settle_s: float = 0.0
    pending_sum: int = 0
    pending_max: int = 0


@contextlib.contextmanager
def counting_cycles(stats: CycleStats) -> Iterator[None]:
    """Wrap the queue decider's ``admission_cycle`` and ``settle`` (in this process only)."""
    cycle, settle = queue_decider_module.admission_cycle, queue_decider_module.settle

    def timed_cycle(state: QueueState) -> list[NewEvent]:
        started = time.process_time()
        out = cycle(state)
        stats.cycle_s += time.process_time() - started
        stats.cycles += 1
        stats.productive += bool(out)
        stats.pending_sum += len(state.pending)
        stats.pending_max = max(stats.pending_max, len(state.pending))
        return out

    def timed_settle(state: QueueState) -> list[NewEvent]:
        started = time.process_time()
        out = settle(state)
        stats.settle_s += time.process_time() - started
        stats.settles += 1
        return out

    queue_decider_module.admission_cycle = timed_cycle
    queue_decider_module.settle = timed_settle
    try:
        yield
    finally:
        queue_decider_module.admission_cycle = cycle
        queue_decider_module.settle = settle


def virtual(spec: ClusterSpec, plan: list[Arrival], scale: float) -> list[str]:
    """One harness run, printed; what went other than intended."""
    specs: list[sim.Submission] = [(a.at, a.key, parse.workload(a.body)) for a in plan]
    classes = {a.key: a.cls for a in plan}
    deciders = [Timed(QueueDecider()), Timed(ProvisionerDecider()), Timed(NodeAgentDecider())]
    harness = sim.build(spec, specs, deciders=deciders)
    stats = CycleStats()
    wall, cpu = time.perf_counter(), time.process_time()
    with counting_cycles(stats):
        livelock = run_bounded(harness, RUNAWAY_EVENTS_PER_WORKLOAD * len(plan) + 10_000)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    envs = harness.log.envelopes
    f = figures(envs, classes, lambda e: e.occurred_at, {a.key: cohort_of(a) for a in plan})
    problems = outcome(f, len(plan))
    if livelock is not None:
        # Figures of a run cut short describe nothing: stop here.
        check_outcome([livelock, *problems])
    print(
        f"harness: {len(envs):,} events, virtual clock {harness.clock:.2f}s, run took "
        f"{wall:.1f}s wall / {cpu:.1f}s CPU ({per_second(len(envs), wall):,.0f} events/s)"
    )
    protected = any(cq.preemption.min_admit_duration for cq in spec.cluster_queues)
    report(f, scale, "virtual time", total_label="virtual time", protected=protected)
    print("  CPU time by decider (process_time, inside the harness run):")
    for d in deciders:
        t = d.timing
        print(
            f"    {d.name:<12} decide {t.decide_s:7.2f}s in {t.decide_calls:>7,} calls "
            f"({t.decide_nonempty:,} with events)  fold {t.evolve_s:6.2f}s "
            f"({t.evolve_calls:,} events)"
        )
    queue_timing = deciders[0].timing
    avg_pending = stats.pending_sum / stats.cycles if stats.cycles else 0.0
    print(
        f"  queue decisions: {queue_timing.decide_s:.2f}s CPU = "
        f"{queue_timing.decide_s / max(cpu, 1e-9):.0%} of the run; settle {stats.settle_s:.2f}s "
        f"in {stats.settles:,} calls; admission cycles {stats.cycles:,} "
        f"({stats.productive:,} produced events) took {stats.cycle_s:.2f}s = "
        f"{1000 * stats.cycle_s / max(stats.cycles, 1):.2f} ms/cycle; pending per cycle "
        f"mean {avg_pending:,.0f}, max {stats.pending_max:,}"
    )
    print(
        f"  decision CPU per admitted workload: "
        f"{1000 * queue_timing.decide_s / max(len(f.first_admit), 1):.2f} ms; the queue could "
        f"sustain ~{per_second(len(f.first_admit), queue_timing.decide_s):,.0f} admissions "
        f"per CPU-second at this shape"
    )
    return problems


# -- wall clock: the services ------------------------------------------------------------


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process (Linux /proc), or NaN elsewhere."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return math.nan
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def submit_on_time(
    base: str, plan: list[Arrival], clients: int
) -> tuple[dict[str, str], list[float], dict[int, int], float]:
    """POST each workload at its arrival time; (id -> key, send lags, statuses, started)."""
    ids: dict[str, str] = {}
    lags: list[float] = []
    statuses: dict[int, int] = {}
    semaphore = asyncio.Semaphore(clients)
    connector = aiohttp.TCPConnector(limit=clients)
    async with aiohttp.ClientSession(connector=connector) as session:
        started = time.monotonic()

        async def post(a: Arrival) -> None:
            async with semaphore:
                lags.append(time.monotonic() - started - a.at)
                headers = {"Content-Type": "application/json", "Idempotency-Key": a.key}
                async with session.post(
                    f"{base}/v1/workloads", data=orjson.dumps(a.body), headers=headers
                ) as resp:
                    payload = await resp.read()
                statuses[resp.status] = statuses.get(resp.status, 0) + 1
                if resp.status in (200, 201):
                    ids[orjson.loads(payload)["id"]] = a.key

        tasks = []
        for a in plan:
            delay = started + a.at - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(post(a)))
        await asyncio.gather(*tasks)
    return ids, lags, statuses, started


async def follow_log(
    store_url: str,
    categories: set[str],
    ids: set[str],
    ended: Callable[[Envelope], str | None],
    timeout: float,
    *,
    keep: Callable[[Envelope], bool] = lambda env: True,
    poll_seconds: float = 0.5,
) -> list[Envelope]:
    """The log's events of ``categories`` that ``keep`` takes, read until every id in ``ids``
    has ended (``ended``: the id an event ends, if any) or ``timeout`` has passed."""
    from muster.store import SqlEventStore

    store = SqlEventStore(store_url)
    envs: list[Envelope] = []
    done: set[str] = set()
    position = 0
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            batch = await store.read_all(position, categories=categories)
            for env in batch:
                if not keep(env):
                    continue
                envs.append(env)
                if (which := ended(env)) in ids:
                    done.add(which)
            if batch:
                position = batch[-1].position
            if len(done) >= len(ids):
                break
            await asyncio.sleep(poll_seconds)
    finally:
        await store.close()
    return envs


async def follow_until_done(store_url: str, ids: set[str], timeout: float) -> list[Envelope]:
    """The log's workload and admission events until every workload has ended."""

    def workload(env: Envelope) -> str | None:
        return getattr(env.event, "workload_id", None)

    return await follow_log(
        store_url,
        {"workload", "admission"},
        ids,
        lambda env: workload(env) if isinstance(env.event, ENDED) else None,
        timeout,
        keep=lambda env: workload(env) in ids,
    )


def services(
    spec: ClusterSpec, plan: list[Arrival], scale: float, args: argparse.Namespace
) -> list[str]:
    """The run through the stack, printed; what went other than intended."""
    from muster.runtime import admin
    from muster.runtime.stack import Stack

    with tempfile.TemporaryDirectory(prefix="muster-bench-") as tmp:
        started = time.perf_counter()
        # No per-tenant rate limit: the benchmark is one tenant keeping to its schedule.
        with Stack(Path(tmp) / "stack", extra_env={"MUSTER_SUBMIT_RATE": "0"}) as stack:
            print(
                f"stack up in {time.perf_counter() - started:.1f}s "
                f"(intake {stack.url()}, broker {stack.broker.bootstrap})"
            )
            asyncio.run(admin.configure(stack.store_url, spec, stack.broker.bootstrap))
            cpu_before = {n: cpu_seconds(p.pid) for n, p in stack.processes.items()}
            wall = time.perf_counter()
            ids, lags, statuses, _ = asyncio.run(submit_on_time(stack.url(), plan, args.clients))
            submitted_in = time.perf_counter() - wall
            envs = asyncio.run(follow_until_done(stack.store_url, set(ids), args.timeout))
            wall = time.perf_counter() - wall
            cpu = {n: cpu_seconds(p.pid) - cpu_before[n] for n, p in stack.processes.items()}
    by_key = {a.key: a.cls for a in plan}
    classes = {wid: by_key[key] for wid, key in ids.items()}
    print(
        f"submitted {len(ids)}/{len(plan)} in {submitted_in:.1f}s (statuses "
        f"{dict(sorted(statuses.items()))}); send lag behind the arrival schedule p50 "
        f"{percentile(lags, 50):.3f}s, p90 {percentile(lags, 90):.3f}s, max {max(lags):.3f}s; "
        f"whole run {wall:.1f}s wall"
    )
    if percentile(lags, 90) > LATE_ARRIVALS:
        print(
            f"  WARNING: the client sent 10 % of the workloads more than {LATE_ARRIVALS:g}s "
            "late (a loaded machine): the arrivals were not Kueue's shape, so neither are "
            "the figures below"
        )

    def wall_time(env: Envelope) -> float:
        # Submissions: intake's acceptance time; decisions: their commit time.
        return env.occurred_at if isinstance(env.event, wev.WorkloadSubmitted) else env.recorded_at

    by_id = {a.key: cohort_of(a) for a in plan}
    cohorts = {wid: by_id[key] for wid, key in ids.items()}
    f = figures(envs, classes, wall_time, cohorts)
    protected = args.min_admit_duration is not None
    report(f, scale, "services (wall clock)", total_label="wall", protected=protected)
    total_cpu = sum(v for v in cpu.values() if not math.isnan(v))
    print(
        "  service CPU seconds during the run: "
        + ", ".join(f"{n} {v:.1f}s" for n, v in cpu.items())
        + f"; total {total_cpu:.1f}s on {len(cpu)} processes"
    )
    logical = figures(envs, classes, lambda e: e.occurred_at, cohorts)
    last = by_class(logical, logical.last_admit)
    print(
        "  logical (occurred_at) time to admission mean: "
        + ", ".join(
            f"{c.name} {mean(last[c.name]):.2f}s" for c in reversed(CLASSES) if last[c.name]
        )
    )
    problems = []
    if len(ids) != len(plan) or set(statuses) != {201}:
        problems.append(
            f"{len(plan) - len(ids)} of {len(plan)} not accepted by intake: "
            f"statuses {dict(sorted(statuses.items()))}"
        )
    return problems + outcome(f, len(plan))


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    protect = args.min_admit_duration
    node = args.existing_node
    spec = parse.cluster(
        cluster_doc(protect if args.services else protect or "2s", existing_node=node)
    )
    run = f"r{time.time():.0f}." if args.services else ""
    plan = arrivals(args.scale, run)
    counts = {c.name: scaled(c.count, args.scale) for c in CLASSES}
    print(
        f"bench.kueue_baseline ({machine()}): {len(plan):,} workloads over "
        f"{COHORTS * QUEUES_PER_COHORT} ClusterQueues in {COHORTS} cohorts "
        f"(per CQ {counts}; scale {args.scale:g})"
    )
    if args.services:
        check_outcome(services(spec, plan, args.scale, args))
        return
    print(
        "-- Kueue's configuration: every preemption allowed at once. Larges (priority 200) "
        "evict the mediums admitted in the 0.2 s between two of them: no scheduler that "
        "admits larges at once beats about 73 s here (mediums fit no gap; they run after 61 s)"
    )
    problems = virtual(parse.cluster(cluster_doc(existing_node=node)), plan, args.scale)
    print(
        f"-- the same with preemption.minAdmitDuration {protect or '2s'} on every "
        "queue (a minimum runtime before any preemption; the longest runtime is 1 s)"
    )
    problems += [f"with minAdmitDuration: {p}" for p in virtual(spec, plan, args.scale)]
    check_outcome(problems)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m bench.kueue_baseline",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--scale",
        type=float,
        default=1.0,
        help="multiply every generator's count (default 1.0 = 15,000 workloads)",
    )
    p.add_argument(
        "--services",
        action="store_true",
        help="run through the embedded stack over HTTP, in wall-clock time",
    )
    p.add_argument(
        "--min-admit-duration",
        help="virtual time: the second run's preemption.minAdmitDuration (default 2s); "
        "--services: set it on the queues (default: Kueue's configuration, none)",
    )
    p.add_argument(
        "--existing-node",
        action="store_true",
        help="one declared node of the nominal total instead of the provisioned pool: no "
        "provisioning request between reservation and admission (Kueue's test has no nodes)",
    )
    p.add_argument(
        "--clients", type=int, default=64, help="--services: concurrent HTTP requests (default 64)"
    )
    p.add_argument(
        "--timeout",
        type=float,
        default=900.0,
        help="--services: seconds to wait for every workload to end (default 900)",
    )
    return p.parse_args(argv)


if __name__ == "__main__":
    main()
