"""The provisioner's decider over the simulated cloud.

Phases, in order, each returning events: release what workloads let go of,
accept new reservations (or fail them at once when no cloud could serve them),
bring up requests whose nodes finished booting, and find one zone with room for
every node of each waiting request (else record why it waits).
"""

from __future__ import annotations

from typing import Any

from muster.core.events import Envelope, Event, NewEvent
from muster.core.events import provisioning as pev
from muster.core.model.cluster import ClusterSpec
from muster.core.provisioning import plan
from muster.core.provisioning.state import (
    HOLDS_NODES,
    ProvisionerState,
    Request,
    evolve,
    node_quota_charge,
)


class ProvisionerDecider:
    name = "provisioner"
    categories = frozenset({"cloud", "workload", "admission", "provisioning", "timer"})
    snapshot_format = "provisioner-state-v1"

    def initial(self) -> ProvisionerState:
        return ProvisionerState()

    def evolve(self, state: ProvisionerState, envelope: Envelope) -> ProvisionerState:
        return evolve(state, envelope)

    def decide(self, state: ProvisionerState) -> list[NewEvent]:
        if state.cloud is None:
            return []
        pairs = [*release(state), *accept(state, state.cloud), *bring_up(state, state.cloud)]
        if not pairs:
            pairs = find_capacity(state, state.cloud)
        return [
            NewEvent(
                stream_id=pev.request_stream(rid),
                event=ev,
                occurred_at=state.now,
                correlation_id=rid.rpartition(".")[0],
            )
            for rid, ev in pairs
        ]

    def next_deadline(self, state: ProvisionerState) -> float | None:
        times = [
            r.ready_at
            for r in state.open_requests()
            if r.status == "Creating" and r.ready_at is not None and r.ready_at > state.now
        ]
        if state.cloud is not None and any(r.status == "Accepted" for r in state.open_requests()):
            times += [
                state.cloud_since + step.at
                for pool in state.cloud.node_pools
                for step in pool.capacity
                if state.cloud_since + step.at > state.now
            ]
        return min(times, default=None)

    def summary(self, state: ProvisionerState) -> dict[str, Any]:
        by_status: dict[str, int] = {}
        for req in state.requests.values():
            by_status[req.status] = by_status.get(req.status, 0) + 1
        nodes = {f"{pool}/{zone}": n for (pool, zone), n in sorted(state.in_use.items()) if n}
        return {
            "now": state.now,
            "requests": dict(sorted(by_status.items())),
            "nodes_in_use": nodes,
            "quota_used": dict(sorted(state.quota_used.items())),
        }


Decision = tuple[str, Event]


def release(state: ProvisionerState) -> list[Decision]:
    out: list[Decision] = []
    for rid in sorted(state.released):
        req = state.requests[rid]
        if req.status in HOLDS_NODES:
            out.append(
                (
                    rid,
                    pev.NodesDeleted(
                        request_id=rid,
                        nodes=tuple(n.name for n in req.nodes),
                        reason="Released",
                        message=f"workload {req.workload_id} no longer holds quota: nodes removed",
                    ),
                )
            )
        else:
            out.append(
                (
                    rid,
                    pev.ProvisioningCancelled(
                        request_id=rid,
                        message="reservation released before capacity was found",
                    ),
                )
            )
    return out


def accept(state: ProvisionerState, cloud: ClusterSpec) -> list[Decision]:
    out: list[Decision] = []
    active = sum(1 for r in state.open_requests() if r.status in ("Accepted", "Creating"))
    for rid, wanted in state.wanted.items():
        if active >= cloud.active_requests:
            out.append(
                (
                    rid,
                    pev.ProvisioningFailed(
                        request_id=rid,
                        reason="QuotaExceeded",
                        message=(
                            f"Quota 'ACTIVE_RESIZE_REQUESTS' exceeded. Limit: "
                            f"{float(cloud.active_requests)} in region {cloud.region}."
                        ),
                    ),
                )
            )
            continue
        spec = state.specs[wanted.workload_id]
        try:
            pod_sets, zones = plan.plan(
                cloud, spec, wanted.node_selectors, wanted.pod_counts, wanted.tolerations
            )
        except plan.Unplannable as exc:
            out.append(
                (
                    rid,
                    pev.ProvisioningFailed(
                        request_id=rid, reason="NoSuitableNodePool", message=str(exc)
                    ),
                )
            )
            continue
        nodes = sum(p.nodes for p in pod_sets)
        pools = sorted({p.pool for p in pod_sets})
        out.append(
            (
                rid,
                pev.ProvisioningAccepted(
                    request_id=rid,
                    workload_id=wanted.workload_id,
                    attempt=wanted.attempt,
                    pod_sets=pod_sets,
                    message=f"request accepted: {nodes} node(s) of {', '.join(pools)}",
                    zones=zones,
                ),
            )
        )
        active += 1
    return out


def bring_up(state: ProvisionerState, cloud: ClusterSpec) -> list[Decision]:
    out: list[Decision] = []
    for req in state.open_requests():
        if req.id in state.released:
            continue  # released in the same instant: it is deleted, not brought up
        if req.status == "Creating" and req.ready_at is not None and req.ready_at <= state.now:
            out.append(
                (
                    req.id,
                    pev.ProvisioningProvisioned(
                        request_id=req.id,
                        zone=req.zone or "",
                        assignments=plan.assignments(req.pod_sets, req.nodes),
                        message=f"{len(req.nodes)} node(s) ready in zone {req.zone}",
                    ),
                )
            )
    return out


def find_capacity(state: ProvisionerState, cloud: ClusterSpec) -> list[Decision]:
    """Each waiting request, oldest first, gets one zone with room for all its nodes."""
    in_use = dict(state.in_use)
    quota_used = dict(state.quota_used)
    out: list[Decision] = []
    for req in sorted(state.open_requests(), key=lambda r: (r.accepted_at, r.id)):
        if req.status != "Accepted":
            continue
        decision = _try_zones(state, cloud, req, in_use, quota_used)
        if isinstance(decision, pev.NodesCreating):
            for node in decision.nodes:
                in_use[(node.pool, node.zone)] = in_use.get((node.pool, node.zone), 0) + 1
                for q, amount in node_quota_charge(cloud, node).items():
                    quota_used[q] = quota_used.get(q, 0) + amount
            out.append((req.id, decision))
        elif req.waiting != (decision.reason, decision.message):
            out.append((req.id, decision))
    return out


def _try_zones(
    state: ProvisionerState,
    cloud: ClusterSpec,
    req: Request,
    in_use: dict[tuple[str, str], int],
    quota_used: dict[str, int],
) -> pev.NodesCreating | pev.ProvisioningWaiting:
    elapsed = state.now - state.cloud_since
    quota_problem: str | None = None
    for zone in req.zones or cloud.zones:
        if not _zone_has_room(cloud, req, zone, elapsed, in_use):
            continue
        nodes = plan.make_nodes(cloud, req.id, zone, req.pod_sets)
        quota_problem = _quota_problem(cloud, nodes, quota_used)
        if quota_problem is None:
            delay = max(
                (
                    cloud.pool(p.pool).provisioning_delay_seconds  # type: ignore[union-attr]
                    for p in req.pod_sets
                ),
                default=0.0,
            )
            return pev.NodesCreating(
                request_id=req.id, zone=zone, nodes=nodes, ready_at=state.now + delay
            )
    if quota_problem is not None:
        return pev.ProvisioningWaiting(
            request_id=req.id, reason="QuotaExceeded", message=quota_problem
        )
    need = ", ".join(f"{p.nodes} x {p.pool}" for p in req.pod_sets)
    return pev.ProvisioningWaiting(
        request_id=req.id,
        reason="NotProvisioned",
        message=f"waiting for capacity: no single zone has room for {need}",
    )


def _zone_has_room(
    cloud: ClusterSpec, req: Request, zone: str, elapsed: float, in_use: dict[tuple[str, str], int]
) -> bool:
    need: dict[str, int] = {}
    for p in req.pod_sets:
        need[p.pool] = need.get(p.pool, 0) + p.nodes
    for pool_name, count in need.items():
        pool = cloud.pool(pool_name)
        if pool is None or zone not in pool.zones_or(cloud.zones):
            return False
        total_in_pool = sum(n for (p, _), n in in_use.items() if p == pool_name)
        if total_in_pool + count > pool.max_nodes:
            return False
        if in_use.get((pool_name, zone), 0) + count > pool.capacity_at(elapsed, cloud.zones).get(
            zone, 0
        ):
            return False
    return True


def _quota_problem(
    cloud: ClusterSpec, nodes: tuple[pev.NodeSpec, ...], quota_used: dict[str, int]
) -> str | None:
    asked: dict[str, int] = {}
    for node in nodes:
        for q, amount in node_quota_charge(cloud, node).items():
            asked[q] = asked.get(q, 0) + amount
    for quota in cloud.quotas:
        if quota_used.get(quota.name, 0) + asked.get(quota.name, 0) > quota.limit:
            return (
                f"Quota '{quota.name}' exceeded. Limit: {float(quota.limit)} "
                f"in region {cloud.region}."
            )
    return None
