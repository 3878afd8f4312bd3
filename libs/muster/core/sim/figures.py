"""Scheduling figures of a run, as trace studies report them (Tiresias, Helios, Pollux).

From the event log alone: job completion time (submission to finish), queueing delay
(submission to first admission), their percentiles, GPU utilisation over the arrival
window (GPU-seconds held by admitted workloads / GPUs of the declared nodes x window; GPUs
and TPU chips alike, held as ``muster report`` counts them: core/views/accounting.py; none
for a cluster with node pools, whose capacity is not fixed),
per-namespace figures with slowdown (JCT over run time; its mean, and the mean JCT over
the mean run time) and Jain's fairness index over the namespaces' slowdowns (both ways),
and preemption: evictions, GPU-seconds they threw away (with checkpoints: since the last
one, plus the restore after it: the simulated node agent's model, core/nodes/state.py;
and their share of all GPU-seconds held), and the most times one workload was evicted
for one preemptor.

``job_figures`` computes the job-level figures from jobs' times alone, so a replay made
outside the harness (bench/oracle.py) is measured by the same code.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from statistics import mean
from typing import Any

from muster.core.events import Envelope
from muster.core.events import provisioning as pev
from muster.core.events import queue as qev
from muster.core.events import workload as wev
from muster.core.model.cluster import Checkpointing, kept
from muster.core.model.inventory import ACCELERATORS
from muster.core.sim.summary import percentile
from muster.core.views import accounting

Span = tuple[float, float, int]  # (from, to, devices held)


def figures(
    envelopes: Iterable[Envelope], horizon: tuple[float, float] | None = None
) -> dict[str, Any]:
    """The figures of a whole log (see the module's docstring); utilisation over
    ``horizon`` (from, to), by default the arrival window."""
    run = _Run()
    for env in envelopes:
        run.fold(env)
    return run.report(horizon)


@dataclass(frozen=True)
class Job:
    """A job's times: from a workload's accounting (``core/views/accounting.py``) or a
    replay's own; ``ran`` is the seconds it held its devices, over all its attempts."""

    namespace: str
    submitted: float
    admitted: float | None
    finished: float | None
    ran: float  # seconds holding quota, over all its attempts

    @staticmethod
    def of(u: accounting.Usage) -> Job:
        ran = sum(b - a for a, b, _ in u.spans)
        return Job(u.namespace, u.submitted, u.started, u.ended, ran)


def job_figures(
    jobs: Sequence[Job],
    spans: Sequence[Span],
    capacity: int,
    horizon: tuple[float, float] | None = None,
) -> dict[str, Any]:
    """JCT and queueing delay, utilisation of ``capacity`` devices by ``spans`` over
    ``horizon`` (by default the arrival window), per-namespace figures and Jain's index of
    the namespaces' mean slowdowns, and the device-seconds held in all."""
    done = [j for j in jobs if j.finished is not None]
    waits = [j.admitted - j.submitted for j in jobs if j.admitted is not None]
    jcts = [j.finished - j.submitted for j in done if j.finished is not None]
    namespaces = _namespaces(jobs)
    if horizon is None and jobs:
        horizon = (min(j.submitted for j in jobs), max(j.submitted for j in jobs))
    return {
        "jobs": len(jobs),
        "finished": len(done),
        "jct_seconds": _spread(jcts),
        "wait_seconds": _spread(waits),
        # Not holding quota, from submission to finish: the first wait plus every wait
        # after a preemption (the first wait alone flatters a preemptive policy).
        "pending_seconds": _spread([j.finished - j.submitted - j.ran for j in done]),  # type: ignore[operator]
        "utilisation": _utilisation(spans, capacity, horizon),
        "namespaces": namespaces,
        "jain_slowdown": _jain([ns["slowdown"] for ns in namespaces.values()]),
        "jain_slowdown_of_means": _jain([ns["slowdown_of_means"] for ns in namespaces.values()]),
        "gpu_seconds": round(sum((b - a) * g for a, b, g in spans), 1),
    }


@dataclass
class _Run:
    usage: dict[str, accounting.Usage] = field(default_factory=dict)
    capacity: int = 0  # accelerator devices of the declared nodes
    evictions: int = 0
    # Held by attempts that preemption ended, since their last checkpoint, and spent by
    # the attempts after them restoring it.
    lost_gpu_seconds: float = 0.0
    per_pair: dict[tuple[str, str], int] = field(default_factory=dict)  # (preemptor, victim)
    checkpointing: Checkpointing = field(default_factory=Checkpointing)
    intervals: dict[str, float | None] = field(default_factory=dict)  # workload -> its own
    restoring: dict[str, float] = field(default_factory=dict)  # workload -> restore ahead
    restored: dict[str, float] = field(default_factory=dict)  # its current attempt's restore

    def fold(self, env: Envelope) -> None:
        ev, at = env.event, env.occurred_at
        if isinstance(ev, pev.CloudConfigured):
            # Pools grow and shrink: a cluster with any has no fixed capacity to divide by.
            nodes = () if ev.spec.node_pools else ev.spec.nodes
            self.capacity = sum(n.allocatable.get(d, 0) for n in nodes for d in ACCELERATORS)
            self.checkpointing = ev.spec.checkpointing
        elif isinstance(ev, wev.WorkloadSubmitted):
            self.intervals[ev.workload_id] = ev.spec.checkpoint_interval_seconds
        elif isinstance(ev, qev.WorkloadEvicted) and ev.workload_id in self.usage:
            held = self.usage[ev.workload_id].held
            self.evictions += 1
            if ev.preemptor is not None:
                if held is not None:
                    self.lost_gpu_seconds += self._lost(ev.workload_id, at - held[0], held[1])
                pair = (ev.preemptor, ev.workload_id)
                self.per_pair[pair] = self.per_pair.get(pair, 0) + 1
        elif isinstance(ev, qev.QuotaReserved) and ev.workload_id in self.restoring:
            # The attempt after a preemption spends its restore first (as the simulated
            # node agent runs it: core/nodes/state.py).
            restore = self.restored[ev.workload_id] = self.restoring.pop(ev.workload_id)
            self.lost_gpu_seconds += restore * accounting.devices(ev.usage)
        accounting.fold(self.usage, env)

    def _lost(self, wid: str, run: float, devices: int) -> float:
        """GPU-seconds a preempted attempt of ``run`` seconds loses: all of it, or with a
        checkpoint interval what it ran since its last checkpoint (its restore counted
        when it was spent); its next attempt restores first."""
        interval = self.checkpointing.interval(self.intervals.get(wid))
        if interval is None:
            return run * devices
        progress = max(0.0, run - self.restored.pop(wid, 0.0))
        self.restoring[wid] = self.checkpointing.restore(devices)
        return (progress - kept(progress, interval)) * devices

    @property
    def gpu_seconds(self) -> list[Span]:
        """Every interval a workload held devices: (from, to, devices)."""
        return [span for u in self.usage.values() for span in u.spans]

    def report(self, horizon: tuple[float, float] | None = None) -> dict[str, Any]:
        out = job_figures(
            [Job.of(u) for u in self.usage.values()], self.gpu_seconds, self.capacity, horizon
        )
        held = out["gpu_seconds"]
        return {
            **out,
            "evictions": self.evictions,
            "preemption_lost_gpu_seconds": round(self.lost_gpu_seconds, 1),
            "preemption_lost_share": round(self.lost_gpu_seconds / held, 5) if held else 0.0,
            "max_evictions_per_victim_per_preemptor": max(self.per_pair.values(), default=0),
        }


def _utilisation(
    spans: Sequence[Span], capacity: int, horizon: tuple[float, float] | None
) -> float | None:
    """Device-seconds held inside the horizon over what the nodes offer in it."""
    if not capacity or horizon is None or horizon[1] <= horizon[0]:
        return None
    start, end = horizon
    held = sum(max(0.0, min(b, end) - max(a, start)) * g for a, b, g in spans)
    return round(held / (capacity * (end - start)), 4)


def _namespaces(every: Sequence[Job]) -> dict[str, dict[str, Any]]:
    by_ns: dict[str, list[Job]] = {}
    for job in every:
        by_ns.setdefault(job.namespace, []).append(job)
    out = {}
    for ns, jobs in sorted(by_ns.items()):
        done = [j for j in jobs if j.finished is not None and j.ran > 0]
        waits = [j.admitted - j.submitted for j in jobs if j.admitted is not None]
        jcts = [j.finished - j.submitted for j in done if j.finished is not None]
        slow = [jct / j.ran for jct, j in zip(jcts, done, strict=True)]
        out[ns] = {
            "jobs": len(jobs),
            "mean_wait": round(mean(waits), 1) if waits else 0.0,
            "mean_pending": round(mean(jct - j.ran for jct, j in zip(jcts, done, strict=True)), 1)
            if jcts
            else 0.0,
            "mean_jct": round(mean(jcts), 1) if jcts else 0.0,
            "slowdown": round(mean(slow), 3) if slow else 1.0,
            # Mean JCT over mean run time: what issue 19's Jain target was measured with
            # (a 1-second job waiting an hour weighs no more than its share of run time).
            "slowdown_of_means": round(mean(jcts) / mean(j.ran for j in done), 3)
            if jcts
            else 1.0,
        }
    return out


def _spread(values: list[float]) -> dict[str, float]:
    return {
        "mean": round(mean(values), 1) if values else 0.0,
        "p50": round(percentile(values, 50), 1),
        "p90": round(percentile(values, 90), 1),
        "p99": round(percentile(values, 99), 1),
    }


def _jain(values: list[float]) -> float:
    """Jain's index: 1 when every value is equal, 1/n when one takes everything."""
    if not values:
        return 1.0
    total = sum(values)
    squares = sum(v * v for v in values)
    return round(total * total / (len(values) * squares), 3) if squares else 1.0
