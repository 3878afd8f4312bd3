"""Accounting, as Slurm's ``sacct`` and ``sreport`` give it: per workload its submit, start
and end times, wait, run time and GPU-hours; totals per namespace (tenant) and per
ClusterQueue over a time range.

A fold over the log (``fold``) and a pure report over what it kept (``report``); the
caller gives the time ``now`` that open intervals run to. The scheduling figures of
``muster sim`` (``core/sim/figures.py``) are computed from the same fold:

- start: the first admission; wait: start - submit (the queueing delay);
- run time: the seconds it held quota, over all its attempts (from QuotaReserved to the
  eviction or the end), which is what its queue was charged for;
- GPU-hours: the accelerator devices its quota held (``nvidia.com/gpu``, ``amd.com/gpu``,
  ``metax-tech.com/gpu``, ``google.com/tpu``) x hours, following partial admission, shrink
  and grow within an attempt (a shared-GPU share is charged as the devices its quota
  names);
- a range [since, until) keeps the workloads whose life (submit to end, or to now)
  overlaps it, and counts run time and GPU-hours inside it only (``sacct --truncate``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from muster.core.events import Envelope, Event, Folded
from muster.core.events import queue as qev
from muster.core.events import workload as wev
from muster.core.model.inventory import ACCELERATORS

BY = ("workload", "namespace", "clusterqueue")


@dataclass(slots=True)
class Usage:
    """One workload's life as accounting sees it."""

    id: str
    name: str
    namespace: str
    queue: str
    submitted: float
    cluster_queue: str = ""
    started: float | None = None
    ended: float | None = None
    status: str = "Pending"
    attempts: int = 0
    # (from, to, devices) while it held quota; ``held`` is the open one's (from, devices).
    spans: list[tuple[float, float, int]] = field(default_factory=list)
    held: tuple[float, int] | None = None


def fold(usage: dict[str, Usage], env: Folded) -> None:
    """Apply one event (others are ignored)."""
    apply = handler(type(env.event))
    if apply is not None:
        apply(usage, env.event, env.occurred_at)


_Fold = Callable[[dict[str, Usage], Any, float], None]


def handler(kind: type[Event]) -> _Fold | None:
    """``fold``'s handler for events of ``kind``, or None if it ignores them: a caller
    folding many events looks it up once a type (intake's view, on every event; most
    types are the nodes' and the provisioner's, which accounting ignores)."""
    try:
        return _HANDLERS[kind]
    except KeyError:  # a subclass of a handled type is handled as it (isinstance)
        found = _HANDLERS[kind] = next((_BY_TYPE[k] for k in kind.__mro__ if k in _BY_TYPE), None)
        return found


def _submitted(usage: dict[str, Usage], ev: wev.WorkloadSubmitted, at: float) -> None:
    s = ev.spec
    usage[ev.workload_id] = Usage(ev.workload_id, s.name, s.namespace, s.queue_name, at)


def _reserved(usage: dict[str, Usage], ev: qev.QuotaReserved, at: float) -> None:
    u = usage.get(ev.workload_id)
    if u is not None:
        _release(u, at)
        u.cluster_queue, u.status, u.attempts = ev.cluster_queue, "QuotaReserved", ev.attempt
        u.held = (at, devices(ev.usage))


def _admitted(usage: dict[str, Usage], ev: qev.WorkloadAdmitted, at: float) -> None:
    u = usage.get(ev.workload_id)
    if u is not None:
        u.started = at if u.started is None else u.started
        u.status = "Admitted"


def _resized(
    usage: dict[str, Usage], ev: qev.WorkloadShrunk | qev.WorkloadGrown, at: float
) -> None:
    u = usage.get(ev.workload_id)
    if u is not None and u.held is not None:
        _release(u, at)
        u.held = (at, devices(ev.usage))


def _evicted(usage: dict[str, Usage], ev: qev.WorkloadEvicted, at: float) -> None:
    u = usage.get(ev.workload_id)
    if u is not None:
        _release(u, at)
        u.status = "Pending"


def _ended(
    usage: dict[str, Usage],
    ev: qev.WorkloadFinished | qev.WorkloadCancelled | qev.WorkloadRejected,
    at: float,
) -> None:
    u = usage.get(ev.workload_id)
    if u is not None:
        _release(u, at)
        u.ended = at
        u.status = _outcome(ev)


_BY_TYPE: dict[type, _Fold] = {
    wev.WorkloadSubmitted: _submitted,
    qev.QuotaReserved: _reserved,
    qev.WorkloadAdmitted: _admitted,
    qev.WorkloadShrunk: _resized,
    qev.WorkloadGrown: _resized,
    qev.WorkloadEvicted: _evicted,
    qev.WorkloadFinished: _ended,
    qev.WorkloadCancelled: _ended,
    qev.WorkloadRejected: _ended,
}
_HANDLERS: dict[type, _Fold | None] = {}


def fold_all(envelopes: Iterable[Envelope]) -> dict[str, Usage]:
    usage: dict[str, Usage] = {}
    for env in envelopes:
        fold(usage, env)
    return usage


def _outcome(ev: qev.WorkloadFinished | qev.WorkloadCancelled | qev.WorkloadRejected) -> str:
    if isinstance(ev, qev.WorkloadFinished):
        return ev.outcome
    return "Cancelled" if isinstance(ev, qev.WorkloadCancelled) else "Rejected"


def devices(usage: Mapping[str, Mapping[str, int]]) -> int:
    return sum(r.get(d, 0) for r in usage.values() for d in ACCELERATORS)


def _release(u: Usage, at: float) -> None:
    if u.held is not None:
        u.spans.append((u.held[0], at, u.held[1]))
        u.held = None


# -- the report ----------------------------------------------------------------------------


def report(
    usage: Iterable[Usage],
    now: float,
    since: float | None = None,
    until: float | None = None,
    namespaces: frozenset[str] | None = None,
    queues: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """Rows per workload (submit order) and totals per namespace and per ClusterQueue;
    ``namespaces``: only these (a tenant's); ``queues``: LocalQueue ("namespace/name") ->
    its ClusterQueue, for workloads that have not reserved quota yet."""
    lo = since if since is not None else float("-inf")
    hi = min(until, now) if until is not None else now
    rows = []
    for u in sorted(usage, key=lambda u: (u.submitted, u.id)):
        if namespaces is not None and u.namespace not in namespaces:
            continue
        end = u.ended if u.ended is not None else now
        late = u.submitted >= until if until is not None else u.submitted > now
        if late or end < lo:
            continue
        row = _row(u, now, lo, hi)
        row["clusterQueue"] = row["clusterQueue"] or (queues or {}).get(
            f"{u.namespace}/{u.queue}", ""
        )
        rows.append(row)
    return {
        "since": since,
        "until": until,
        "now": now,
        "workloads": rows,
        "namespaces": _totals(rows, "namespace"),
        "clusterQueues": _totals(rows, "clusterQueue"),
    }


def _row(u: Usage, now: float, lo: float, hi: float) -> dict[str, Any]:
    spans = list(u.spans) + ([(u.held[0], now, u.held[1])] if u.held is not None else [])
    clipped = [(max(a, lo), min(b, hi), g) for a, b, g in spans]
    clipped = [(a, b, g) for a, b, g in clipped if b > a]
    return {
        "id": u.id,
        "name": u.name,
        "namespace": u.namespace,
        "queueName": u.queue,
        "clusterQueue": u.cluster_queue,
        "status": u.status,
        "attempts": u.attempts,
        "submitTime": u.submitted,
        "startTime": u.started,
        "endTime": u.ended,
        "waitSeconds": round(u.started - u.submitted, 3) if u.started is not None else None,
        "runSeconds": round(sum(b - a for a, b, _ in clipped), 3),
        "gpuHours": round(sum((b - a) * g for a, b, g in clipped) / 3600, 4),
    }


def _totals(rows: list[dict[str, Any]], key: str) -> list[dict[str, Any]]:
    groups: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        groups.setdefault(r[key] or "", []).append(r)
    out = []
    for name, group in sorted(groups.items()):
        waits = [r["waitSeconds"] for r in group if r["waitSeconds"] is not None]
        out.append(
            {
                "name": name,
                "workloads": len(group),
                "finished": sum(1 for r in group if r["endTime"] is not None),
                "meanWaitSeconds": round(sum(waits) / len(waits), 3) if waits else None,
                "runSeconds": round(sum(r["runSeconds"] for r in group), 3),
                "gpuHours": round(sum(r["gpuHours"] for r in group), 4),
            }
        )
    return out
