"""The provisioner's decider over the simulated cloud.

Phases, in order, each returning events: cancel or delete what workloads (or users) let
go of, accept new requests (or fail them at once when no cloud could serve them), bring up
requests whose nodes finished booting, end bookings and run durations, and find one zone
with room for every node of each waiting request (else record why it waits).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from muster.core.events import Event, Folded, NewEvent
from muster.core.events import provisioning as pev
from muster.core.events import workload as wev
from muster.core.model.cluster import ClusterSpec, NodePool
from muster.core.model.queues import DWS_CLASS, MAX_RUN_SECONDS
from muster.core.provisioning import plan
from muster.core.provisioning.state import (
    ProvisionerState,
    Request,
    Wanted,
    accepted_request,
    clock_only_types,
    correlation_id,
    evolve,
    node_quota_charge,
    requests_by_status,
)


class ProvisionerDecider:
    """``simulated=False``: the cloud is a real cluster's autoscaler (the Kubernetes
    backend); the state is folded the same way, but the backend's shell observes the
    outcomes and appends them, so this decides nothing."""

    name = "provisioner"
    categories = frozenset({"cloud", "workload", "admission", "provisioning", "timer"})
    snapshot_format = "provisioner-state-v7"
    clock_only = clock_only_types()  # folded without their payload (core/decider.py)
    # A workload's spec is kept for its quota reservation, which wakes the loop itself.
    wakes_later = frozenset({wev.WorkloadSubmitted.TYPE})

    def __init__(self, *, simulated: bool = True) -> None:
        self.simulated = simulated

    def initial(self) -> ProvisionerState:
        return ProvisionerState()

    def evolve(self, state: ProvisionerState, envelope: Folded) -> ProvisionerState:
        return evolve(state, envelope)

    def decide(self, state: ProvisionerState) -> list[NewEvent]:
        return self._decide(state, search_after_release=True)

    def decided_before(self, state: ProvisionerState) -> list[NewEvent]:
        """What an older provisioner decided in ``state`` (``verify``): a decision that
        deleted or cancelled requests did not search for capacity (the next one did, having
        folded them), so a request accepted in it was logged as its own ``accepted``."""
        return self._decide(state, search_after_release=False)

    def _decide(self, state: ProvisionerState, *, search_after_release: bool) -> list[NewEvent]:
        if state.cloud is None or not self.simulated:
            return []
        released, expired = release(state), expire(state)
        accepted = accept(state, state.cloud)
        if not search_after_release:  # as logged before: deletions after the rest
            pairs = [*released, *accepted, *bring_up(state, state.cloud), *expired]
        else:
            # Deletions first: the nodes a request created in this same decision may take
            # the capacity they free, and the log must never hold more nodes than there was
            # room for (appends keep each stream's events together, in first-seen order).
            pairs = [*released, *expired, *accepted, *bring_up(state, state.cloud)]
        if search_after_release or (not released and not expired):
            # The search sees what the next step would: the requests accepted just now are
            # searched with the waiting ones, with the capacity this decision's deletions
            # free and without the requests it cancels, and nodes that are ready at once
            # are Provisioned in the same batch. One append, not a step of this service
            # acting on its own events (a deletion and an acceptance often come together:
            # one workload finishes as the next is reserved).
            freed = [ev for _, ev in (*released, *expired) if isinstance(ev, pev.NodesDeleted)]
            pairs += find_capacity(state, state.cloud, fresh(state, accepted), freed)
            pairs = at_once(pairs)
        return [
            NewEvent(
                stream_id=pev.request_stream(rid),
                event=ev,
                occurred_at=state.now,
                correlation_id=correlation_id(state, rid),
            )
            for rid, ev in pairs
        ]

    @staticmethod
    def as_logged_before(news: list[NewEvent]) -> list[NewEvent]:
        """``news`` as an older provisioner logged them (``verify``): a Provisioned that
        stands for the request's acceptance or node creation (``accepted``, ``created``)
        was those events, then a Provisioned alone, in the same instant and stream."""
        out: list[NewEvent] = []
        for new in news:
            up = new.event
            if isinstance(up, pev.ProvisioningProvisioned) and (
                before := up.stands_for(new.occurred_at)
            ):
                out.extend(replace(new, event=ev) for ev in before)
                new = replace(new, event=up.alone())
            out.append(new)
        return out

    def next_deadline(self, state: ProvisionerState) -> float | None:
        if not self.simulated:
            return None
        times = [
            r.ready_at
            for r in state.open_requests()
            if r.status == "Creating" and r.ready_at is not None and r.ready_at > state.now
        ]
        held = state.next_held_deadline()  # the earliest after now (indexed, not a scan)
        if held is not None:
            times.append(held)
        if state.cloud is not None and any(r.status == "Accepted" for r in state.open_requests()):
            times += [
                state.cloud_since + at
                for pool in state.cloud.node_pools
                for at in (
                    *(step.at for step in pool.capacity),
                    *(f.at for f in pool.failures),
                    *(f.until for f in pool.failures if f.until is not None),
                )
            ]
        return min((t for t in times if t > state.now), default=None)

    def summary(self, state: ProvisionerState) -> dict[str, Any]:
        by_status = requests_by_status(state)
        if not by_status["Pending"]:  # no request has that status: only the wanted count
            del by_status["Pending"]
        nodes = {f"{pool}/{zone}": n for (pool, zone), n in sorted(state.in_use.items()) if n}
        return {
            "now": state.now,
            "requests": dict(sorted(by_status.items())),
            "nodes_in_use": nodes,
            "quota_used": dict(sorted(state.quota_used.items())),
        }


Decision = tuple[str, Event]


def release(state: ProvisionerState) -> list[Decision]:
    """Cancel what is not provisioned (nodes already booting stay until their booking
    expires, as GKE does), delete the nodes of what is."""
    out: list[Decision] = []
    for rid in sorted(state.released):
        req = state.requests.get(rid)
        if req is not None and req.status == "Provisioned":
            if req.standalone:
                continue  # deleted: its nodes go when unneeded (see expire)
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
            continue
        booting = req is not None and req.status == "Creating"
        who = "the request was deleted" if req is None or req.standalone else "quota released"
        message = f"{who} before it was provisioned: node creation stopped"
        if booting:
            message += "; the nodes already booting are removed when their booking expires"
        out.append((rid, pev.ProvisioningCancelled(request_id=rid, message=message)))
    return out


def max_run_seconds(wanted: Wanted) -> float | None:
    """maxRunDurationSeconds: a DWS request's nodes live at most (and by default) 7 days."""
    raw = wanted.parameters.get("maxRunDurationSeconds")
    if raw is not None and raw.isascii() and raw.isdigit():
        return float(min(int(raw), MAX_RUN_SECONDS))
    return float(MAX_RUN_SECONDS) if wanted.provisioning_class == DWS_CLASS else None


def accept(state: ProvisionerState, cloud: ClusterSpec) -> list[Decision]:
    out: list[Decision] = []
    active = sum(1 for r in state.open_requests() if r.status in ("Accepted", "Creating"))
    for rid, wanted in state.wanted.items():
        if rid in state.released:
            continue  # cancelled before it was seen
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
        try:
            plan.one_pod_set(
                wanted.provisioning_class,
                wanted.merge_policy,
                wanted.pod_sets,
                wanted.node_selectors,
                wanted.tolerations,
            )
        except plan.Unplannable as exc:
            out.append((rid, unplannable(rid, "InvalidRequest", exc)))
            continue
        try:
            pod_sets, zones = plan.plan(
                cloud,
                wanted.pod_sets,
                wanted.node_selectors,
                wanted.pod_counts,
                wanted.tolerations,
            )
        except plan.Unplannable as exc:
            out.append((rid, unplannable(rid, "NoSuitableNodePool", exc)))
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
                    provisioning_class=wanted.provisioning_class,
                    max_run_seconds=max_run_seconds(wanted),
                    booking_seconds=cloud.booking_seconds,
                ),
            )
        )
        active += 1
    return out


def at_once(pairs: list[Decision]) -> list[Decision]:
    """A request accepted and Provisioned (nodes ``created``) in the same decision is one
    Provisioned that carries its acceptance (``accepted``), where the acceptance was: one
    event, not three, for every service to store, fold and publish."""
    ready = {
        rid: ev for rid, ev in pairs if isinstance(ev, pev.ProvisioningProvisioned) and ev.created
    }
    fused = {rid for rid, ev in pairs if isinstance(ev, pev.ProvisioningAccepted) and rid in ready}
    out: list[Decision] = []
    for rid, ev in pairs:
        if rid not in fused:
            out.append((rid, ev))
        elif isinstance(ev, pev.ProvisioningAccepted):
            out.append((rid, replace(ready[rid], accepted=ev)))
        elif ev is not ready[rid]:  # (the Provisioned itself went where the acceptance was)
            out.append((rid, ev))
    return out


def unplannable(rid: str, reason: str, exc: plan.Unplannable) -> pev.ProvisioningFailed:
    """A request that can never succeed as it is: failed, not to be retried."""
    return pev.ProvisioningFailed(request_id=rid, reason=reason, message=str(exc), retryable=False)


def bring_up(state: ProvisionerState, cloud: ClusterSpec) -> list[Decision]:
    out: list[Decision] = []
    for req in state.open_requests():
        if req.id in state.released:
            continue  # released in the same instant: it is deleted, not brought up
        if req.status == "Creating" and req.ready_at is not None and req.ready_at <= state.now:
            out.append((req.id, provisioned(req.id, req.pod_sets, req.zone or "", req.nodes)))
    return out


def provisioned(
    rid: str,
    pod_sets: tuple[pev.PodSetNodes, ...],
    zone: str,
    nodes: tuple[pev.NodeSpec, ...],
    *,
    created: bool = False,
) -> pev.ProvisioningProvisioned:
    """Every node of the request is Ready (in one zone): its pods' assignments to them.
    ``created``: no NodesCreating named the nodes; this event does (and stands for one)."""
    return pev.ProvisioningProvisioned(
        request_id=rid,
        zone=zone,
        assignments=plan.assignments(pod_sets, nodes),
        message=f"{len(nodes)} node(s) ready in zone {zone}",
        nodes=nodes if created else (),
        created=created,
    )


def expire(state: ProvisionerState) -> list[Decision]:
    """Nodes whose time is up: booking expired unused, run duration reached (capacity
    revoked), unneeded after their last pods ended, or booted for a cancelled request."""
    out: list[Decision] = []
    for req in state.due_requests():
        if req.id in state.released:
            continue
        nodes = tuple(n.name for n in req.nodes)
        if req.status == "Cancelled":
            reason = "BookingExpired"
            message = (
                f"{len(nodes)} node(s) came up after the request was cancelled; no pod "
                f"used them within {req.booking_seconds:g}s: removed"
            )
        elif (
            not req.consumed
            and req.provisioned_at is not None
            and state.now >= req.provisioned_at + req.booking_seconds
        ):
            reason = "BookingExpired"
            message = (
                f"no pod used the {len(nodes)} node(s) within {req.booking_seconds:g}s of "
                "Provisioned: booking expired, nodes removed"
            )
            out.append((req.id, pev.ProvisioningBookingExpired(request_id=req.id, message=message)))
        elif (
            req.max_run_seconds is not None
            and req.provisioned_at is not None
            and state.now >= req.provisioned_at + req.max_run_seconds
        ):
            reason = "CapacityRevoked"
            message = (
                f"maxRunDurationSeconds {req.max_run_seconds:g} reached: the nodes and their "
                "pods are preempted"
            )
            out.append(
                (req.id, pev.ProvisioningCapacityRevoked(request_id=req.id, message=message))
            )
        else:
            reason = "ScaleDown"
            message = (
                f"nodes unneeded for {req.booking_seconds:g}s after their last pods ended: removed"
            )
        out.append(
            (
                req.id,
                pev.NodesDeleted(request_id=req.id, nodes=nodes, reason=reason, message=message),
            )
        )
    return out


def fresh(state: ProvisionerState, accepted: list[Decision]) -> list[Request]:
    """The requests ``accepted`` decides to accept, as folding it will record them."""
    return [
        accepted_request(ev, state.now)
        for _, ev in accepted
        if isinstance(ev, pev.ProvisioningAccepted)
    ]


def find_capacity(
    state: ProvisionerState,
    cloud: ClusterSpec,
    fresh: list[Request] | None = None,
    freed: list[pev.NodesDeleted] | None = None,
) -> list[Decision]:
    """Each waiting request, oldest first, gets one zone with room for all its nodes
    (``fresh``: requests accepted in this same step, not folded yet; ``freed``: the
    deletions of this same step, whose nodes no longer claim capacity; a request this step
    cancels is not searched). Nodes that are ready at once (no provisioning delay) are
    Provisioned in the same decision, as the next step's ``bring_up`` would at the same
    instant, in one event that names them."""
    room = _Room.of(state, cloud)
    quota_used = dict(state.quota_used)
    for deleted in freed or ():
        gone = state.requests[deleted.request_id]
        if gone.held:  # as folding the deletion will: its nodes' claims given back
            for node in gone.nodes:
                room.claim(node.pool, node.zone, -1)
                for q, amount in node_quota_charge(cloud, node).items():
                    quota_used[q] = quota_used.get(q, 0) - amount
    out: list[Decision] = []
    for req in sorted(
        [*state.open_requests(), *(fresh or ())], key=lambda r: (r.accepted_at, r.id)
    ):
        if req.status != "Accepted" or req.id in state.released:
            continue
        decision = _try_zones(state, cloud, req, room, quota_used)
        if isinstance(decision, pev.NodesCreating):
            for node in decision.nodes:
                room.claim(node.pool, node.zone)
                for q, amount in node_quota_charge(cloud, node).items():
                    quota_used[q] = quota_used.get(q, 0) + amount
            if decision.ready_at <= state.now:
                # Ready at once: one Provisioned that names its nodes (``created``) stands
                # for the NodesCreating and the Provisioned of the same instant.
                ready = provisioned(
                    req.id, req.pod_sets, decision.zone, decision.nodes, created=True
                )
                out.append((req.id, ready))
            else:
                out.append((req.id, decision))
        elif isinstance(decision, pev.ProvisioningFailed) or req.waiting != (
            decision.reason,
            decision.message,
        ):
            out.append((req.id, decision))
    return out


class _Room:
    """Capacity now, per pool and zone, and what is claimed: computed once per search."""

    def __init__(self) -> None:
        self.capacity: dict[str, dict[str, int]] = {}
        self.in_use: dict[tuple[str, str], int] = {}
        self.per_pool: dict[str, int] = {}
        self.pools: dict[str, NodePool] = {}  # by name: ``cloud.pool`` walks the list

    @classmethod
    def of(cls, state: ProvisionerState, cloud: ClusterSpec) -> _Room:
        room = cls()
        room.pools = {pool.name: pool for pool in reversed(cloud.node_pools)}  # first wins
        for pool in cloud.node_pools:
            room.capacity[pool.name] = pool.capacity_at(state.now, cloud.zones, state.cloud_since)
        room.in_use = dict(state.in_use)
        for (pool_name, _), n in state.in_use.items():
            room.per_pool[pool_name] = room.per_pool.get(pool_name, 0) + n
        return room

    def claim(self, pool: str, zone: str, sign: int = 1) -> None:
        self.in_use[(pool, zone)] = self.in_use.get((pool, zone), 0) + sign
        self.per_pool[pool] = self.per_pool.get(pool, 0) + sign

    def fits(self, cloud: ClusterSpec, need: dict[str, int], zone: str) -> bool:
        """Whether ``zone`` has room now for ``need`` (nodes per pool)."""
        for pool_name, count in need.items():
            pool = self.pools.get(pool_name)
            if pool is None or zone not in pool.zones_or(cloud.zones):
                return False
            if self.per_pool.get(pool_name, 0) + count > pool.max_nodes:
                return False
            held = self.in_use.get((pool_name, zone), 0)
            if held + count > self.capacity[pool_name].get(zone, 0):
                return False
        return True


def _try_zones(
    state: ProvisionerState,
    cloud: ClusterSpec,
    req: Request,
    room: _Room,
    quota_used: dict[str, int],
) -> pev.NodesCreating | pev.ProvisioningWaiting | pev.ProvisioningFailed:
    for p in req.pod_sets:
        pool = room.pools.get(p.pool)
        failure = pool.failure_at(state.now, state.cloud_since) if pool is not None else None
        if failure is not None:
            return pev.ProvisioningFailed(
                request_id=req.id,
                reason=failure.reason,
                message=failure.message
                or f"node pool {p.pool} could not create nodes ({failure.reason})",
            )
    # The nodes are alike in every zone, so the regional quota is checked once, first:
    # it blocks the request whatever capacity appears.
    quota_problem = _quota_problem(cloud, req.pod_sets, quota_used, room.pools)
    if quota_problem is not None:
        return pev.ProvisioningWaiting(
            request_id=req.id, reason="QuotaExceeded", message=quota_problem
        )
    need = plan.nodes_per_pool(req.pod_sets)
    for zone in req.zones or cloud.zones:
        if not room.fits(cloud, need, zone):
            continue
        delay = max(
            (
                room.pools[p.pool].provisioning_delay_seconds
                for p in req.pod_sets
            ),
            default=0.0,
        )
        return pev.NodesCreating(
            request_id=req.id,
            zone=zone,
            nodes=plan.make_nodes(cloud, req.id, zone, req.pod_sets),
            ready_at=state.now + delay,
        )
    wanted = ", ".join(f"{n} x {pool}" for pool, n in need.items())
    return pev.ProvisioningWaiting(
        request_id=req.id,
        reason="NotProvisioned",
        message=f"waiting for capacity: no single zone has room for {wanted}",
    )


def _quota_problem(
    cloud: ClusterSpec,
    pod_sets: tuple[pev.PodSetNodes, ...],
    quota_used: dict[str, int],
    pools: dict[str, NodePool],
) -> str | None:
    asked: dict[str, int] = {}
    for p in pod_sets:
        pool = pools.get(p.pool)
        assert pool is not None
        for quota in cloud.quotas:
            if quota.covers(pool.name):
                amount = pool.allocatable.get(quota.resource, 0) * p.nodes
                asked[quota.name] = asked.get(quota.name, 0) + amount
    for quota in cloud.quotas:
        if quota_used.get(quota.name, 0) + asked.get(quota.name, 0) > quota.limit:
            return (
                f"Quota '{quota.name}' exceeded. Limit: {float(quota.limit)} "
                f"in region {cloud.region}."
            )
    return None
