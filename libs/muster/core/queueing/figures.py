"""The queue's Prometheus figures, named after Kueue's (``kueue_*`` -> ``muster_*``).

Pure: computed from the folded state at scrape time, so counters survive restarts
(they are folded from the log) and a replay shows the same numbers.
"""

from __future__ import annotations

from dataclasses import dataclass, field

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
    wait = Family(
        "muster_quota_reserved_wait_time_seconds",
        "Time from (re)queueing to quota reservation",
        "histogram",
    )
    for cq, (buckets, total) in sorted(stats.wait.items()):
        cumulative, running = [], 0
        for bound, n in zip([*map(str, WAIT_BUCKETS), "+Inf"], buckets, strict=True):
            running += n
            cumulative.append((bound, running))
        wait.histograms.append(((("cluster_queue", cq),), cumulative, total))
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
        *_nodes(state),
    ]


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
