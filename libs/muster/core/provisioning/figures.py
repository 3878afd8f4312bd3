"""The provisioner's Prometheus figures: requests by condition, nodes held, cloud quotas,
the active-request quota, and how long requests wait to be Provisioned.

Pure, from the folded state at scrape time: a replay shows the same numbers.
"""

from __future__ import annotations

from muster.core.provisioning.state import WAIT_BUCKETS, ProvisionerState, requests_by_status
from muster.core.queueing.figures import Family


def figures(state: ProvisionerState) -> list[Family]:
    by_status = requests_by_status(state)
    requests = Family(
        "muster_provisioning_requests",
        "Provisioning requests by status (Pending: not yet accepted)",
        "gauge",
        [((("status", s),), float(n)) for s, n in sorted(by_status.items())],
    )
    active = sum(1 for r in state.open_requests() if r.status in ("Accepted", "Creating"))
    limit = state.cloud.active_requests if state.cloud is not None else 0
    active_fam = Family(
        "muster_active_provisioning_requests",
        "Requests Accepted and not yet provisioned (GKE's ACTIVE_RESIZE_REQUESTS)",
        "gauge",
        [((), float(active))],
    )
    limit_fam = Family(
        "muster_active_provisioning_requests_limit",
        "The cluster's activeRequests: one more Accepted request fails at once",
        "gauge",
        [((), float(limit))],
    )
    nodes = Family(
        "muster_provisioned_nodes",
        "Nodes that exist (booting or Ready) per node pool and zone",
        "gauge",
        [
            ((("node_pool", pool), ("zone", zone)), float(n))
            for (pool, zone), n in sorted(state.in_use.items())
        ],
    )
    quota = Family(
        "muster_cloud_quota_usage",
        "Regional cloud quota used by existing nodes, and its limit",
        "gauge",
    )
    if state.cloud is not None:
        for q in state.cloud.quotas:
            quota.samples.append(
                ((("quota", q.name), ("kind", "used")), float(state.quota_used.get(q.name, 0)))
            )
            quota.samples.append(((("quota", q.name), ("kind", "limit")), float(q.limit)))
    counts, total = state.waits
    cumulative, buckets = 0, []
    for bound, n in zip((*WAIT_BUCKETS, float("inf")), counts, strict=True):
        cumulative += n
        buckets.append(("+Inf" if bound == float("inf") else f"{bound:g}", cumulative))
    wait = Family(
        "muster_provisioning_wait_seconds",
        "From Accepted to Provisioned, per request",
        "histogram",
        histograms=[((), buckets, total)],
    )
    return [requests, active_fam, limit_fam, nodes, quota, wait]
