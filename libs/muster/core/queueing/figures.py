"""The queue's Prometheus figures, named after Kueue's (``kueue_*`` -> ``muster_*``).

Pure: computed from the folded state at scrape time, so counters survive restarts
(they are folded from the log) and a replay shows the same numbers.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from muster.core.events import NewEvent
from muster.core.events import queue as qev
from muster.core.queueing import checks
from muster.core.queueing import quota as qt
from muster.core.queueing.state import WAIT_BUCKETS, QueueState

Labels = tuple[tuple[str, str], ...]


@dataclass(slots=True)
class Family:
    name: str
    help: str
    kind: str  # gauge | counter | histogram
    samples: list[tuple[Labels, float]] = field(default_factory=list)
    # histograms: labels -> (cumulative bucket counts incl. +Inf, sum)
    histograms: list[tuple[Labels, list[tuple[str, int]], float]] = field(default_factory=list)


def figures(state: QueueState) -> list[Family]:
    pending = Family(
        "muster_pending_workloads",
        "Pending workloads per ClusterQueue; status active (not yet judged) or inadmissible",
        "gauge",
    )
    unadmitted = Family(
        "muster_unadmitted_workloads", "Pending workloads by their recorded reason", "gauge"
    )
    counts: dict[tuple[str, str], int] = {}
    reasons: dict[tuple[str, str], int] = {}
    for wid in state.pending:
        wl = state.workloads[wid]
        cq = state.cluster_queue_of(wl.spec) or ""
        status = "inadmissible" if wl.pending_reason else "active"
        counts[(cq, status)] = counts.get((cq, status), 0) + 1
        if wl.pending_reason:
            key = (cq, wl.pending_reason[0])
            reasons[key] = reasons.get(key, 0) + 1
    for cq in sorted(state.cluster_queues):
        for status in ("active", "inadmissible"):
            counts.setdefault((cq, status), 0)
    pending.samples = [
        ((("cluster_queue", cq), ("status", st)), float(n))
        for (cq, st), n in sorted(counts.items())
    ]
    unadmitted.samples = [
        ((("cluster_queue", cq), ("reason", r)), float(n)) for (cq, r), n in sorted(reasons.items())
    ]
    tree = qt.build(state.cluster_queues, state.cohorts, state.usage)
    usage = Family(
        "muster_cluster_queue_resource_usage", "Quota in use per flavor and resource", "gauge"
    )
    nominal = Family("muster_cluster_queue_nominal_quota", "Nominal quota", "gauge")
    borrowing = Family("muster_cluster_queue_borrowing_limit", "Borrowing limit", "gauge")
    lending = Family("muster_cluster_queue_lending_limit", "Lending limit", "gauge")
    share = Family(
        "muster_cluster_queue_weighted_share",
        "Dominant resource share above nominal, per mille, divided by the fair-sharing weight",
        "gauge",
    )
    holding = Family(
        "muster_reserving_active_workloads", "Workloads holding quota per ClusterQueue", "gauge"
    )
    held: dict[str, int] = {}
    for wid in state.active:
        wl = state.workloads[wid]
        if wl.holds_quota and wl.run.cluster_queue:
            held[wl.run.cluster_queue] = held.get(wl.run.cluster_queue, 0) + 1
    for name in sorted(tree.queues):
        node = tree.queues[name]
        for (flavor, resource), q in sorted(node.quotas.items()):
            labels = (("cluster_queue", name), ("flavor", flavor), ("resource", resource))
            nominal.samples.append((labels, float(q.nominal_quota)))
            usage.samples.append((labels, float(node.usage.get((flavor, resource), 0))))
            if q.borrowing_limit is not None:
                borrowing.samples.append((labels, float(q.borrowing_limit)))
            if q.lending_limit is not None:
                lending.samples.append((labels, float(q.lending_limit)))
        weighted = qt.dominant_share(node)[0]
        share.samples.append(((("cluster_queue", name),), min(weighted, 1e12)))
        holding.samples.append(((("cluster_queue", name),), float(held.get(name, 0))))
    stats = state.stats
    reserved = _per_queue(
        "muster_quota_reserved_workloads_total", "Quota reservations", stats.reserved
    )
    admitted = _per_queue("muster_admitted_workloads_total", "Admissions", stats.admitted)
    finished = _per_queue("muster_finished_workloads_total", "Finished workloads", stats.finished)
    evicted = Family("muster_evicted_workloads_total", "Evictions by reason", "counter")
    evicted.samples = [
        ((("cluster_queue", cq), ("reason", r)), float(n))
        for (cq, r), n in sorted(stats.evicted.items())
    ]
    preempted = Family(
        "muster_preempted_workloads_total", "Preemptions by reason and preemptor", "counter"
    )
    preempted.samples = [
        ((("reason", r), ("preempting_cluster_queue", cq)), float(n))
        for (r, cq), n in sorted(stats.preempted.items())
    ]
    wait = _wait_histogram(
        "muster_quota_reserved_wait_time_seconds",
        "Time from (re)queueing to quota reservation",
        stats.wait,
    )
    admission_wait = _wait_histogram(
        "muster_admission_wait_time_seconds",
        "Time from (re)queueing to admission (quota reserved and every admission check Ready)",
        stats.admission_wait,
    )
    return [
        pending,
        unadmitted,
        usage,
        nominal,
        borrowing,
        lending,
        share,
        holding,
        reserved,
        admitted,
        finished,
        evicted,
        preempted,
        wait,
        admission_wait,
        _admitted_active(state),
        _status(state),
        *_nodes(state),
    ]


def _wait_histogram(name: str, help: str, waits: dict[str, tuple[list[int], float]]) -> Family:
    family = Family(name, help, "histogram")
    for cq, (buckets, total) in sorted(waits.items()):
        cumulative, running = [], 0
        for bound, n in zip([*map(str, WAIT_BUCKETS), "+Inf"], buckets, strict=True):
            running += n
            cumulative.append((bound, running))
        family.histograms.append(((("cluster_queue", cq),), cumulative, total))
    return family


def _admitted_active(state: QueueState) -> Family:
    """Kueue's kueue_admitted_active_workloads: admitted and not finished, per ClusterQueue
    (those only holding quota while their admission checks run are not counted)."""
    counts = dict.fromkeys(sorted(state.cluster_queues), 0)
    for wid in state.active:
        wl = state.workloads[wid]
        if wl.status == "Admitted" and wl.run.cluster_queue:
            counts[wl.run.cluster_queue] = counts.get(wl.run.cluster_queue, 0) + 1
    return Family(
        "muster_admitted_active_workloads",
        "Admitted workloads that have not finished, per ClusterQueue",
        "gauge",
        [((("cluster_queue", cq),), float(n)) for cq, n in sorted(counts.items())],
    )


CLUSTER_QUEUE_STATUSES = ("pending", "active", "terminating")


def _status(state: QueueState) -> Family:
    """Kueue's kueue_cluster_queue_status: 1 for the ClusterQueue's status, 0 for the
    others. pending: it cannot admit (stopped, or an admission check it names is missing
    or unusable: Kueue's inactive ClusterQueue); terminating: never, muster's ClusterQueues
    are not deleted."""
    family = Family(
        "muster_cluster_queue_status",
        "ClusterQueue status: pending (inactive or stopped), active or terminating",
        "gauge",
    )
    for name in sorted(state.cluster_queues):
        cq = state.cluster_queues[name]
        inactive = cq.stop_policy != "None" or checks.inactive(state, cq) is not None
        current = "pending" if inactive else "active"
        family.samples += [
            ((("cluster_queue", name), ("status", st)), 1.0 if st == current else 0.0)
            for st in CLUSTER_QUEUE_STATUSES
        ]
    return family


def admission_attempt(state: QueueState, news: list[NewEvent]) -> str | None:
    """Kueue's ``kueue_admission_attempts_total`` result for one decide call over ``state``:
    ``success`` when it reserved quota for at least one workload, ``inadmissible`` when its
    admission cycle judged pending workloads and reserved for none (it recorded why one
    waits, started preempting for one, or rejected one); None when no cycle judged
    anything (settling what holds quota, or nothing changed)."""
    if any(isinstance(new.event, qev.QuotaReserved) for new in news):
        return "success"
    judged = (qev.WorkloadPending, qev.WorkloadRejected)
    for new in news:
        if isinstance(new.event, judged) and new.event.workload_id in state.pending:
            return "inadmissible"
    return None


def _nodes(state: QueueState) -> list[Family]:
    """Existing nodes: ready or lost, GPUs in use, and what is left whole (fragmentation)."""
    book = state.book
    nodes = Family("muster_nodes", "Existing nodes by state", "gauge")
    ready = sum(1 for n in book.nodes.values() if n.ready)
    nodes.samples = [
        ((("state", "ready"),), float(ready)),
        ((("state", "lost"),), float(len(book.nodes) - ready)),
    ]
    gpus = Family("muster_node_gpus", "GPUs of ready existing nodes, by use", "gauge")
    total = used = 0
    for n in book.nodes.values():
        if n.ready:
            total += len(n.devices)
            used += sum(1 for u in n.devices if u.pods)
    gpus.samples = [
        ((("state", "used"),), float(used)),
        ((("state", "free"),), float(total - used)),
    ]
    whole = Family(
        "muster_free_whole_domains",
        "Ready nodes, and topology domains, with nothing placed on them",
        "gauge",
    )
    frag = book.fragmentation() if book.nodes else {}
    whole.samples = [((("level", "node"),), float(frag.get("free_nodes", 0)))]
    whole.samples += [
        ((("level", level),), float(frag.get(f"free_{level}", 0))) for level in book.levels
    ]
    return [nodes, gpus, whole]


def _per_queue(name: str, help: str, counts: dict[str, int]) -> Family:
    return Family(
        name,
        help,
        "counter",
        [((("cluster_queue", cq),), float(n)) for cq, n in sorted(counts.items())],
    )
