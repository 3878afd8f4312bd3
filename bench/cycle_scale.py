"""One admission cycle at scale: N pending workloads over Q ClusterQueues.

The queue decider's state is built the way the service builds it: by folding
events (``QueueDecider.evolve``) — the configuration events of a generated cluster
description, ``WorkloadSubmitted`` for every workload, and ``QuotaReserved`` for
those already running. Then ``admission_cycle(state)`` is timed: the first run and
the best of ``--repeat`` (the cycle reads the state and does not change it).

The shape (defaults): 1,000 ClusterQueues in 10 cohorts (100 each), resources
``nvidia.com/gpu`` and ``cpu`` in one resource group with two flavors (``a100``
nominal 8-64 GPUs, ``spot`` half that). Every third queue preempts
(``withinClusterQueue: LowerPriority``, ``reclaimWithinCohort: Any``), every other
one has a borrowing limit, every tenth is StrictFIFO. Running workloads (priority 0
or 10) hold 50-125% of each queue's a100 quota (so some queues borrow); pending
workloads ask for 1-16 GPUs in 1 or 2 pods at priority 0, 10 or 100. Some of them
fit (spot, and the a100 room of queues below their quota); most do not.

Memory (tracemalloc, measured apart from the timed runs): the folded state's size
(everything allocated while generating and folding, minus the events, which are
dropped), and the extra peak of one cycle over the state.

A baseline is measured first in the same process: the same queues and running
workloads with ``--baseline`` pending (default 10,000), so the scaling shows as a ratio.

Time bounds: a cycle still running after ``--limit`` seconds (default 45) is stopped
(SIGALRM) and reported as unfinished; ``--profile`` seconds (default 15) of another
cycle of that size then run under cProfile and the top 15 by cumulative time are
printed (once per run). No further repeat once a size's cycles took ``--budget``
seconds; the cycle peak (under tracemalloc, up to ~3x slower) is measured only when
that fits in ``--limit``.

Outcome, checked on each size's first finished cycle (fails loudly otherwise): every
pending workload got exactly one verdict (QuotaReserved or a pending reason) and nothing
else did, every eviction is of a distinct workload holding quota, and nothing was
rejected; the queue reaches its fixed point within ``--settle`` decisions, and the
decision after one more submission answers it. A cycle stopped at ``--limit`` has no
output to check: it is reported as unfinished (its time a lower bound), not as a failure.

    python -m bench.cycle_scale [--pending 100000] [--queues 1000] [--cohorts 10]
                                [--baseline 10000] [--limit 45] [--profile 15]
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import gc
import io
import os
import pstats
import random
import signal
import time
import tracemalloc
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from bench import check_outcome, machine, per_second, ratio
from muster.core import inputs
from muster.core.events import Envelope, Event, NewEvent
from muster.core.events import queue as qev
from muster.core.events import workload as wev
from muster.core.model import parse
from muster.core.model.workload import PodSet, Runtime, WorkloadSpec
from muster.core.queueing.cycle import admission_cycle
from muster.core.queueing.decider import QueueDecider
from muster.core.queueing.notebook import Notebook
from muster.core.queueing.state import QueueState
from muster.core.runner import DeciderRunner

GPU = "nvidia.com/gpu"
CPU_PER_GPU = 8_000  # millicores
TRACE_SLOWDOWN = 3.0  # a cycle under tracemalloc takes up to ~3x as long


@dataclass(frozen=True)
class Queue:
    name: str
    cohort: str
    nominal: int  # a100 GPUs; spot has half
    preempts: bool
    borrowing_limit: int | None
    strict: bool
    running: int  # a100 GPUs held by running workloads


def make_queues(count: int, cohorts: int, seed: int) -> list[Queue]:
    rng = random.Random(seed)
    out = []
    for i in range(count):
        nominal = rng.choice([8, 16, 32, 64])
        out.append(
            Queue(
                name=f"cq-{i:04d}",
                cohort=f"cohort-{i % cohorts:02d}",
                nominal=nominal,
                preempts=i % 3 == 0,
                borrowing_limit=nominal if i % 2 else None,
                strict=i % 10 == 9,
                running=int(nominal * rng.choice([0.5, 0.75, 1.0, 1.25])),
            )
        )
    return out


def cluster_doc(queues: list[Queue]) -> dict[str, Any]:
    def quota(nominal: int, limit: int | None) -> list[dict[str, Any]]:
        gpu: dict[str, Any] = {"name": GPU, "nominalQuota": nominal}
        if limit is not None:
            gpu["borrowingLimit"] = limit
        return [gpu, {"name": "cpu", "nominalQuota": nominal * CPU_PER_GPU // 1000}]

    cqs = []
    for q in queues:
        cq: dict[str, Any] = {
            "name": q.name,
            "cohort": q.cohort,
            "queueingStrategy": "StrictFIFO" if q.strict else "BestEffortFIFO",
            "resourceGroups": [
                {
                    "coveredResources": [GPU, "cpu"],
                    "flavors": [
                        {"name": "a100", "resources": quota(q.nominal, q.borrowing_limit)},
                        {"name": "spot", "resources": quota(q.nominal // 2, q.borrowing_limit)},
                    ],
                }
            ],
        }
        if q.preempts:
            cq["preemption"] = {"withinClusterQueue": "LowerPriority", "reclaimWithinCohort": "Any"}
        cqs.append(cq)
    return {
        "name": "cycle-scale",
        "zones": ["zone-a"],
        "resourceFlavors": [
            {"name": "a100", "nodeLabels": {"pool": "a100"}},
            {"name": "spot", "nodeLabels": {"pool": "spot"}},
        ],
        "clusterQueues": cqs,
        "localQueues": [
            {"namespace": q.name, "name": "jobs", "clusterQueue": q.name} for q in queues
        ],
    }


def spec_of(name: str, q: Queue, gpus: int, pods: int, priority: int) -> WorkloadSpec:
    per_pod = max(1, gpus // pods)
    return WorkloadSpec(
        name=name,
        namespace=q.name,
        queue_name="jobs",
        pod_sets=(
            PodSet(name="main", count=pods, requests={GPU: per_pod, "cpu": per_pod * CPU_PER_GPU}),
        ),
        priority=priority,
        runtime=Runtime(duration_seconds=600.0),
    )


class Log:
    """Envelopes with positions and stream versions, as the store would hand them out."""

    def __init__(self) -> None:
        self.envelopes: list[Envelope] = []
        self.versions: dict[str, int] = {}

    def add(self, new: NewEvent) -> None:
        self.put(new.stream_id, new.event, new.occurred_at)

    def put(self, stream: str, event: Event, at: float) -> None:
        version = self.versions.get(stream, 0) + 1
        self.versions[stream] = version
        position = len(self.envelopes) + 1
        self.envelopes.append(
            Envelope(
                position=position,
                event_id=f"e-{position}",
                stream_id=stream,
                stream_version=version,
                type=event.TYPE,
                schema_version=event.VERSION,
                occurred_at=at,
                recorded_at=at,
                causation_id=None,
                correlation_id=None,
                producer="bench",
                event=event,
            )
        )


def events(queues: list[Queue], pending: int, seed: int) -> tuple[list[Envelope], int]:
    """Configuration, the running workloads (submitted + QuotaReserved), then the pending."""
    rng = random.Random(seed + 1)
    log = Log()
    for new in inputs.configuration(parse.cluster(cluster_doc(queues)), 0.0):
        log.add(new)
    n = 0
    running = 0
    for q in queues:
        left = q.running
        while left > 0:
            gpus = min(left, rng.choice([1, 2, 4, 8]))
            left -= gpus
            wid = f"run-{n}"
            spec = spec_of(wid, q, gpus, 1, rng.choice([0, 10]))
            log.put(wev.stream(wid), wev.WorkloadSubmitted(workload_id=wid, spec=spec), 1.0)
            usage = {"a100": {GPU: gpus, "cpu": gpus * CPU_PER_GPU}}
            reserved = qev.QuotaReserved(
                workload_id=wid,
                cluster_queue=q.name,
                flavors={"main": {GPU: "a100", "cpu": "a100"}},
                usage=usage,
                node_selectors={"main": {"pool": "a100"}},
                attempt=1,
                message=f"Quota reserved in ClusterQueue {q.name}",
            )
            log.put(qev.ADMISSION_STREAM, reserved, 1.0)
            n += 1
            running += 1
    for i in range(pending):
        q = queues[i % len(queues)]
        gpus, pods = rng.choice([(1, 1), (2, 1), (4, 1), (8, 1), (8, 2), (16, 2)])
        wid = f"wl-{i}"
        spec = spec_of(wid, q, gpus, pods, rng.choice([0, 10, 100]))
        log.put(wev.stream(wid), wev.WorkloadSubmitted(workload_id=wid, spec=spec), 2.0 + i * 1e-4)
    return log.envelopes, running


class Overran(Exception):
    """A cycle ran past ``--limit`` seconds and was stopped."""


@contextlib.contextmanager
def time_limit(seconds: float) -> Iterator[None]:
    """Raise ``Overran`` inside the block after ``seconds`` of wall time (main thread, Unix)."""

    def stop(signum: int, frame: object) -> None:
        raise Overran

    previous = signal.signal(signal.SIGALRM, stop)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


@dataclass
class Run:
    wall: float
    cpu: float
    out: list[NewEvent] | None  # None: stopped at the limit


def timed_cycle(state: QueueState, limit: float) -> Run:
    """One full cycle: a fresh notebook, so every lane is judged (nothing parked yet)."""
    state.notes = Notebook()
    wall, cpu = time.perf_counter(), time.process_time()
    out: list[NewEvent] | None = None
    with contextlib.suppress(Overran), time_limit(limit):
        out = admission_cycle(state)
    return Run(time.perf_counter() - wall, time.process_time() - cpu, out)


@dataclass
class Measured:
    pending: int
    running: int
    events: int
    fold_s: float
    state_bytes: int
    runs: list[Run]
    cycle_peak: int | None  # None: not measured (the cycle is too slow to trace)
    output_bytes: int | None
    profile: str | None = None
    problems: list[str] = field(default_factory=list)  # in the first cycle's output

    @property
    def finished(self) -> list[Run]:
        return [r for r in self.runs if r.out is not None]

    @property
    def best(self) -> Run | None:
        return min(self.finished, key=lambda r: r.wall, default=None)


def fold(queues: list[Queue], pending: int, seed: int) -> tuple[QueueState, int, int, float]:
    """(state, running workloads, events folded, fold seconds)."""
    envs, running = events(queues, pending, seed)
    runner: DeciderRunner[QueueState] = DeciderRunner(QueueDecider())
    started = time.perf_counter()
    runner.fold(envs)
    took = time.perf_counter() - started
    return runner.state, running, len(envs), took


def profiled(state: QueueState, limit: float, top: int = 15) -> str:
    """cProfile of one cycle (stopped after ``limit`` seconds): the top entries by cumtime."""
    profile = cProfile.Profile()
    with contextlib.suppress(Overran), time_limit(limit):
        profile.enable()
        try:
            admission_cycle(state)
        finally:
            profile.disable()
    text = io.StringIO()
    pstats.Stats(profile, stream=text).sort_stats("cumulative").print_stats(top)
    return text.getvalue()


def cycle_outcome(state: QueueState, out: list[NewEvent]) -> list[str]:
    """What a full cycle decided other than it should: one verdict (QuotaReserved or a
    pending reason) for every pending workload and for nothing else, evictions only of
    distinct workloads holding quota, no rejection."""
    verdicts = Counter(
        n.event.workload_id
        for n in out
        if isinstance(n.event, qev.QuotaReserved | qev.WorkloadPending)
    )
    evicted = Counter(n.event.workload_id for n in out if isinstance(n.event, qev.WorkloadEvicted))
    problems = []
    if missing := state.pending - set(verdicts):
        problems.append(f"{len(missing)} of {len(state.pending)} pending workloads got no verdict")
    if extra := set(verdicts) - state.pending:
        problems.append(f"{len(extra)} verdicts for workloads not pending")
    if twice := [w for w, c in verdicts.items() if c > 1]:
        problems.append(f"{len(twice)} workloads got more than one verdict")
    if wrong := [w for w, c in evicted.items() if c > 1 or w not in state.active]:
        problems.append(f"{len(wrong)} evictions of workloads not holding quota or evicted twice")
    if rejected := sum(isinstance(n.event, qev.WorkloadRejected) for n in out):
        problems.append(f"{rejected} workloads rejected")
    return problems


def measure(
    queues: list[Queue], pending: int, args: argparse.Namespace, profile: float
) -> Measured:
    # The state's size: everything generating and folding left allocated once the
    # events are dropped (tracemalloc, so the fold time printed is a traced one).
    gc.collect()
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    state, running, n_events, fold_s = fold(queues, pending, args.seed)
    gc.collect()
    state_bytes = tracemalloc.get_traced_memory()[0] - base
    tracemalloc.stop()

    runs: list[Run] = []
    spent = 0.0
    while len(runs) < max(1, args.repeat):
        run = timed_cycle(state, args.limit)
        runs.append(run)
        spent += run.wall
        if run.out is None or spent + run.wall > args.budget:
            break  # stopped, or no time left for another run
        run.out = run.out if len(runs) == 1 else []  # keep the first output only
        gc.collect()

    m = Measured(
        pending=len(state.pending),
        running=running,
        events=n_events,
        fold_s=fold_s,
        state_bytes=state_bytes,
        runs=runs,
        cycle_peak=None,
        output_bytes=None,
    )
    first = runs[0]
    if first.out is not None:
        m.problems = cycle_outcome(state, first.out)
    if first.out is not None and first.wall * TRACE_SLOWDOWN <= args.limit:
        tracemalloc.start()
        before = tracemalloc.get_traced_memory()[0]
        traced = timed_cycle(state, args.limit)
        current, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        if traced.out is not None:
            m.cycle_peak, m.output_bytes = peak - before, current - before
        del traced
    if first.out is None and profile > 0:
        m.profile = profiled(state, profile)
    return m


@dataclass
class AfterOne:
    decisions: int  # to reach the fixed point
    settle_s: float
    times: list[float]  # one decision after one submission, repeated
    events: list[str]


def after_one(queues: list[Queue], pending: int, args: argparse.Namespace) -> AfterOne:
    """Fold the state, decide and fold until the queue has nothing more to say (the
    fixed point a running service sits at), then one more submission: the decision it
    causes, timed. A run that finds no fixed point within --settle decisions fails."""
    state, _, _, _ = fold(queues, pending, args.seed)
    runner: DeciderRunner[QueueState] = DeciderRunner(QueueDecider())
    runner.state = state
    log = Log()
    started = time.perf_counter()
    decisions = 0
    while (news := runner.decide()) and decisions < args.settle:
        for new in news:
            log.add(new)
        runner.fold(log.envelopes[-len(news) :])
        decisions += 1
    if news:
        check_outcome([f"no fixed point after {decisions} decisions (livelock?)"])
    settle_s = time.perf_counter() - started
    q = queues[len(queues) // 3 + 1]  # a queue that preempts
    spec = spec_of("after-one", q, 4, 1, 10)
    log.put(wev.stream("after-one"), wev.WorkloadSubmitted(workload_id="after-one", spec=spec), 9.0)
    runner.fold(log.envelopes[-1:])
    times, out = [], []
    for _ in range(3):
        t = time.perf_counter()
        out = runner.decide()
        times.append(time.perf_counter() - t)
    about = [
        n
        for n in out
        if n.correlation_id == "after-one" or getattr(n.event, "workload_id", "") == "after-one"
    ]
    if not about:
        check_outcome(["the decision after the submission says nothing of it"])
    return AfterOne(decisions, settle_s, times, [type(n.event).__name__ for n in out])


def mib(n: float) -> str:
    return f"{n / 2**20:,.1f} MiB"


def describe(m: Measured, label: str, limit: float) -> None:
    print(
        f"{label}: {m.pending:,} pending, {m.running:,} running; state folded from "
        f"{m.events:,} events in {m.fold_s:.2f}s (tracemalloc on)"
    )
    first, best = m.runs[0], m.best
    if first.out is None or best is None:
        print(
            f"  cycle: stopped after {first.wall:.1f}s wall / {first.cpu:.1f}s CPU "
            f"(--limit {limit:g}s): it takes longer"
        )
    else:
        runs = ", ".join(f"{r.wall:.2f}" for r in m.finished)
        print(
            f"  cycle: first {first.wall:.2f}s ({first.cpu:.2f}s CPU), best of "
            f"{len(m.finished)} {best.wall:.2f}s ({best.cpu:.2f}s CPU) (runs {runs}) "
            f"= {per_second(m.pending, best.wall):,.0f} pending workloads/s"
        )
        types = Counter(type(n.event).__name__ for n in first.out)
        reasons = Counter(
            n.event.reason for n in first.out if isinstance(n.event, qev.WorkloadPending)
        )
        print(
            f"  output: {len(first.out):,} events: {types.get('QuotaReserved', 0):,} admitted "
            f"(QuotaReserved), {types.get('WorkloadEvicted', 0):,} evicted, "
            f"{types.get('WorkloadPending', 0):,} pending reasons {dict(reasons.most_common())}"
        )
    per = m.state_bytes / max(m.pending + m.running, 1)
    memory = f"  memory: state {mib(m.state_bytes)} ({per:,.0f} B per workload held); "
    if m.cycle_peak is None or m.output_bytes is None:
        memory += "cycle peak not measured (too slow to run again under tracemalloc)"
    else:
        memory += (
            f"cycle peak +{mib(m.cycle_peak)} over the state, +{mib(m.output_bytes)} kept "
            "(its output events)"
        )
    print(memory)
    if m.profile:
        print("  profile of the stopped cycle (cProfile, top 15 by cumtime):")
        for line in m.profile.strip().splitlines():
            print(f"    {line}")


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    print(
        f"bench.cycle_scale ({machine()}): {args.queues:,} ClusterQueues in {args.cohorts} "
        f"cohorts; pending {args.pending:,} (baseline {args.baseline:,}); a cycle is stopped "
        f"after {args.limit:g}s"
    )
    queues = make_queues(args.queues, args.cohorts, args.seed)
    started = time.perf_counter()
    base = measure(queues, args.baseline, args, args.profile)
    describe(base, "baseline", args.limit)
    base_best, base_bytes, base_pending = base.best, base.state_bytes, base.pending
    problems = [f"baseline cycle: {p}" for p in base.problems]
    base_profiled = base.profile is not None
    del base
    gc.collect()
    # One profile is enough: the baseline's, if it was stopped too.
    big = measure(queues, args.pending, args, 0.0 if base_profiled else args.profile)
    describe(big, "measured", args.limit)
    problems += [f"measured cycle: {p}" for p in big.problems]
    scale = big.pending / max(1, args.baseline)
    big_best = big.best
    extra = (big.state_bytes - base_bytes) / max(1, big.pending - base_pending)
    print(f"state: {extra:,.0f} B per additional pending workload")
    if args.settle:
        one = after_one(queues, args.pending, args)
        full = big.runs[0]
        stopped = "+" if full.out is None else ""
        print(
            f"one decision after one submission at {args.pending:,} pending, once the queue "
            f"reached its fixed point ({one.decisions} decisions, {one.settle_s:.0f}s): "
            f"first {one.times[0] * 1000:.1f} ms, best {min(one.times) * 1000:.1f} ms "
            f"(a full cycle over the same state: {full.wall:.1f}s{stopped}); "
            f"it decided {', '.join(one.events)}; load {os.getloadavg()[0]:.2f}"
        )
    if base_best is None:
        print("scaling: n/a (the baseline cycle did not finish)")
    elif big_best is None:
        print(
            f"scaling: {scale:.0f}x the pending -> more than "
            f"{ratio(big.runs[0].wall, base_best.wall)} the cycle time (stopped; linear would "
            f"be {scale:.0f}x)"
        )
    else:
        print(
            f"scaling: {scale:.0f}x the pending -> {ratio(big_best.wall, base_best.wall)} the "
            f"cycle time, {ratio(big_best.cpu, base_best.cpu)} its CPU (linear would be "
            f"{scale:.0f}x)"
        )
    print(f"whole run {time.perf_counter() - started:.0f}s")
    check_outcome(problems)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m bench.cycle_scale",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--pending", type=int, default=100_000, help="pending workloads (100000)")
    p.add_argument("--queues", type=int, default=1000, help="ClusterQueues (default 1000)")
    p.add_argument("--cohorts", type=int, default=10, help="cohorts (default 10)")
    p.add_argument(
        "--baseline", type=int, default=10_000, help="pending in the baseline (default 10000)"
    )
    p.add_argument("--repeat", type=int, default=3, help="timed cycles, best printed (default 3)")
    p.add_argument(
        "--budget",
        type=float,
        default=30.0,
        help="no further repeat once the cycles of one size took this many seconds (default 30)",
    )
    p.add_argument(
        "--limit",
        type=float,
        default=45.0,
        help="stop a cycle after this many seconds and report it as unfinished (default 45)",
    )
    p.add_argument(
        "--profile",
        type=float,
        default=15.0,
        help="when a cycle is stopped, profile this many seconds of another (default 15; 0: no)",
    )
    p.add_argument("--seed", type=int, default=7, help="generator seed (default 7)")
    p.add_argument(
        "--settle",
        type=int,
        default=200,
        help="decisions allowed to reach the fixed point before the one-submission decision "
        "is timed (default 200; 0: not measured)",
    )
    return p.parse_args(argv)


if __name__ == "__main__":
    main()
