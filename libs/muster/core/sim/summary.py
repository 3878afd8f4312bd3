"""Figures from an event log: outcomes, waits, provisioning (for sim, demo and bench)."""

from __future__ import annotations

from collections.abc import Iterable
from statistics import mean
from typing import Any

from muster.core.events import Envelope
from muster.core.events import provisioning as pev
from muster.core.events import queue as qev
from muster.core.events import workload as wev


def percentile(values: list[float], p: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def summarize(envelopes: Iterable[Envelope]) -> dict[str, Any]:
    submitted: dict[str, float] = {}
    first_admit: dict[str, float] = {}
    outcome: dict[str, str] = {}
    zones: dict[str, int] = {}
    nodes = 0
    events = 0
    last = 0.0
    for env in envelopes:
        events += 1
        last = max(last, env.occurred_at)
        ev = env.event
        if isinstance(ev, wev.WorkloadSubmitted):
            submitted[ev.workload_id] = env.occurred_at
        elif isinstance(ev, qev.WorkloadAdmitted):
            first_admit.setdefault(ev.workload_id, env.occurred_at)
        elif isinstance(ev, qev.WorkloadFinished):
            outcome[ev.workload_id] = ev.outcome
        elif isinstance(ev, qev.WorkloadCancelled):
            outcome[ev.workload_id] = "Cancelled"
        elif isinstance(ev, qev.WorkloadRejected):
            outcome[ev.workload_id] = "Rejected"
        elif (created := pev.node_creation(ev, env.occurred_at)) is not None:
            nodes += len(created.nodes)
            zones[created.zone] = zones.get(created.zone, 0) + len(created.nodes)
    waits = [first_admit[w] - submitted[w] for w in first_admit if w in submitted]
    by_outcome: dict[str, int] = {}
    for wid in submitted:
        key = outcome.get(wid, "Unfinished")
        by_outcome[key] = by_outcome.get(key, 0) + 1
    start = min(submitted.values(), default=0.0)
    return {
        "events": events,
        "workloads": len(submitted),
        "outcomes": dict(sorted(by_outcome.items())),
        "admitted": len(first_admit),
        "wait_seconds": {
            "mean": round(mean(waits), 3) if waits else 0.0,
            "p50": round(percentile(waits, 50), 3),
            "p99": round(percentile(waits, 99), 3),
        },
        "nodes_provisioned": nodes,
        "nodes_by_zone": dict(sorted(zones.items())),
        "makespan_seconds": round(last - start, 3) if submitted else 0.0,
    }
