"""Reference replays of a trace: non-preemptive FIFO and oracle SJF, nothing else.

A small event simulation, independent of muster's engine, so a trace benchmark has
figures to hold muster against that are computed in the same run (the traces' README
gives them for the Philly week: FIFO avg JCT 33,110 s / queueing 22,838 s, SJF 13,954 /
3,681 on 512 GPUs). The rules, and nothing more:

* the cluster is ``nodes`` nodes of ``gpus_per_node`` GPUs, one pool;
* a job of up to ``gpus_per_node`` GPUs runs on one node, the fullest one it fits on
  (consolidate: best fit, then the lowest index); a bigger one takes
  ``gpus / gpus_per_node`` whole free nodes (the lowest indexes);
* a job runs for its trace duration once started, and is never stopped;
* ``fifo`` starts jobs in submission order and stops at the first that does not fit
  (strict FIFO: head-of-line blocking); ``sjf`` starts the shortest pending job first
  (its duration known: the oracle) and passes over one that does not fit;
* at one instant, finishes free their GPUs before that instant's arrivals queue, then
  the queue is served.

Pure: jobs in, start times out; no clock, no randomness.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import dataclass

POLICIES = ("fifo", "sjf")


@dataclass(frozen=True)
class Job:
    """One trace row: ``tenant`` is only carried through for per-tenant figures."""

    id: str
    submit: float
    duration: float
    gpus: int
    tenant: str = ""


@dataclass(frozen=True)
class Ran:
    job: Job
    start: float

    @property
    def end(self) -> float:
        return self.start + self.job.duration

    @property
    def wait(self) -> float:
        return self.start - self.job.submit

    @property
    def jct(self) -> float:
        return self.end - self.job.submit


class _Nodes:
    """Free GPUs per node, and where a job goes (see the module's docstring)."""

    def __init__(self, nodes: int, per_node: int) -> None:
        self.free = [per_node] * nodes
        self.per_node = per_node
        self.total_free = nodes * per_node

    def place(self, gpus: int) -> list[tuple[int, int]] | None:
        """Take ``gpus`` GPUs: [(node, gpus taken)], or None (nothing taken) if no room."""
        if gpus > self.total_free:
            return None
        if gpus <= self.per_node:
            fits = [(f, i) for i, f in enumerate(self.free) if f >= gpus]
            if not fits:
                return None
            _, node = min(fits)
            taken = [(node, gpus)]
        else:
            whole = [i for i, f in enumerate(self.free) if f == self.per_node]
            need = gpus // self.per_node
            if len(whole) < need:
                return None
            taken = [(i, self.per_node) for i in whole[:need]]
        for node, g in taken:
            self.free[node] -= g
        self.total_free -= gpus
        return taken

    def release(self, taken: list[tuple[int, int]]) -> None:
        for node, g in taken:
            self.free[node] += g
            self.total_free += g


def replay(jobs: Sequence[Job], *, nodes: int, gpus_per_node: int, policy: str) -> list[Ran]:
    """Every job with its start time, in the order of ``jobs``. A job the cluster can
    never hold (more GPUs than it has, or a multi-node size that is not whole nodes) is a
    ValueError naming it: leaving it waiting would block strict FIFO forever."""
    if policy not in POLICIES:
        raise ValueError(f"policy: {policy!r} is not one of {', '.join(POLICIES)}")
    for job in jobs:
        if job.gpus > nodes * gpus_per_node or (
            job.gpus > gpus_per_node and job.gpus % gpus_per_node
        ):
            raise ValueError(f"job {job.id}: {job.gpus} GPUs never fit {nodes}x{gpus_per_node}")
    cluster = _Nodes(nodes, gpus_per_node)
    arrivals = sorted(range(len(jobs)), key=lambda i: (jobs[i].submit, i))
    # Pending jobs by the policy's key: submission (FIFO) or duration (SJF), then order.
    key = (lambda i: (jobs[i].submit, i)) if policy == "fifo" else (
        lambda i: (jobs[i].duration, jobs[i].submit, i)
    )
    pending: list[tuple[tuple[float, ...], int]] = []
    running: list[tuple[float, int, list[tuple[int, int]]]] = []  # (end, job, placement)
    starts: dict[int, float] = {}
    nxt = 0
    while nxt < len(arrivals) or pending:
        now = min(
            jobs[arrivals[nxt]].submit if nxt < len(arrivals) else float("inf"),
            running[0][0] if running else float("inf"),
        )
        while running and running[0][0] <= now:
            cluster.release(heapq.heappop(running)[2])
        while nxt < len(arrivals) and jobs[arrivals[nxt]].submit <= now:
            heapq.heappush(pending, (key(arrivals[nxt]), arrivals[nxt]))
            nxt += 1
        pending = _serve(jobs, pending, cluster, running, starts, now, strict=policy == "fifo")
    return [Ran(job, starts[i]) for i, job in enumerate(jobs)]


def _serve(
    jobs: Sequence[Job],
    pending: list[tuple[tuple[float, ...], int]],
    cluster: _Nodes,
    running: list[tuple[float, int, list[tuple[int, int]]]],
    starts: dict[int, float],
    now: float,
    *,
    strict: bool,
) -> list[tuple[tuple[float, ...], int]]:
    """Start what the policy lets start at ``now``; the jobs left pending (a heap)."""
    passed: list[tuple[tuple[float, ...], int]] = []
    while pending and cluster.total_free:
        entry = heapq.heappop(pending)
        i = entry[1]
        taken = cluster.place(jobs[i].gpus)
        if taken is None:
            passed.append(entry)
            if strict:
                break
            continue
        starts[i] = now
        heapq.heappush(running, (now + jobs[i].duration, i, taken))
    if not passed:
        return pending
    for entry in passed:
        heapq.heappush(pending, entry)
    return pending
