"""DWS-style provisioning at scale: concurrent ProvisioningRequests against a cloud whose
capacity arrives over time.

The shape (the project's issue: "1,000 concurrent requests against a simulated cloud of
10,000 nodes in 3 zones with capacity arriving over time: decisions/s, time from
capacity available to Provisioned, in virtual and real time"):

* the cloud: 3 zones, one queued-provisioning pool of 8-GPU nodes, ``maxNodes`` = 10 per
  request (10,000), split evenly over the zones; each zone's capacity arrives in
  ``--steps`` equal steps (default 10), the zones staggered: in virtual time a zone gets
  a step every 18 min, so the last one lands at 2.9 h; ``provisioningDelaySeconds`` 120;
  ``activeRequests`` = the number of requests; a regional GPU quota equal to the
  capacity (never binding); ``bookingSeconds`` one day, so no node is recycled while
  capacity arrives and the steps are the only source of room;
* the requests: standalone ProvisioningRequests (``queued-provisioning.gke.io``), all
  created at t=0, each one pod set of 1-64 one-node pods (p(size) ~ size^-1.3, seeded:
  9,076 nodes for the 1,000 of seed 1, so all fit in the end), each needing all its
  nodes in one zone.

Virtual time: the simulation harness with the services' deciders; the provisioner's (and
the queue's) ``decide``/``evolve`` are timed with ``bench.kueue_baseline.Timed``.
Reported: wall time, events, provisioner decisions/s (events it appended per CPU-second
of its ``decide``), and per request the delay from *capacity available* to
``provisioning.provisioned``. "Available" is computed from the log and the capacity steps,
not taken from the provisioner: a replay keeps the nodes in use per (pool, zone) from
``nodes_creating``/``nodes_deleted`` and, after each instant's events, which waiting
requests some allowed zone (and the pool's maxNodes) has room for. A request's capacity
became available at the instant from which such room stayed free for it until it was
claimed; older requests that took the room first reset that clock. A prompt provisioner
claims in that same instant, so available -> Provisioned is the provisioning delay; room
it leaves unused shows as available -> claimed > 0. Also checked on the log: every
request ends Provisioned (else why not), no request's nodes span two zones, nodes in use
never exceed a zone's capacity or the pool's maxNodes.

Runs in the same process: the same requests with all capacity present at t=0 (the
baseline for the ratios: what waiting and rescanning cost), with GKE's default
``activeRequests`` of 100, and the same pod sets as workloads through Kueue (a
ClusterQueue with the ProvisioningRequest admission check; ``--no-kueue`` skips it).

Real time (``--no-services`` skips it): the embedded stack (Tansu broker, SQLite, the four
services as processes) as ``bench.kueue_baseline --services`` starts it. The requests are
POSTed to intake's ``/v1/provisioningrequests`` from ``--clients`` connections, then the
cloud is configured, so every request waits for the first step; a zone's steps are
``--real-step-seconds`` apart (default 2), the provisioning delay ``--real-delay`` (1 s).
The same replay runs on commit times (``recorded_at``). Full size (1,000 requests) takes
about a minute on 2 cores; ``--services-scale`` reduces it. ``--binary-steps`` puts the
step times on multiples of 1/64 s, where ``(T + at) - T == at`` for a wall-clock T. The
provisioner's capacity check once lost a step to that rounding when the step's own timer
fired; it compares absolute times now, so the option is only kept to compare.

Outcome, checked on every run (fails loudly otherwise): every request Provisioned, except
with GKE's default ``activeRequests``, where exactly the requests beyond the first 100 fail
at once with QuotaExceeded and the rest are Provisioned; none still waiting or cancelled;
no nodes across two zones or over capacity or maxNodes; through Kueue, every workload
admitted and none rejected or cancelled; no livelock in virtual time (the harness's
bound); in real time, every POST accepted (201) and every request ended by ``--timeout``.

    python -m bench.dws_provisioning [--scale 1.0] [--services-scale 1.0] [--profile N]
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import io
import math
import pstats
import random
import tempfile
import time
import urllib.request
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import orjson

from bench import check_outcome, machine, per_second, ratio, run_bounded
from bench.kueue_baseline import Timed, cpu_seconds, follow_log
from muster.core.events import Envelope
from muster.core.events import provisioning as pev
from muster.core.events import queue as qev
from muster.core.model import parse
from muster.core.model.cluster import ClusterSpec
from muster.core.model.queues import DWS_CLASS
from muster.core.nodes.decider import NodeAgentDecider
from muster.core.provisioning import plan
from muster.core.provisioning.decider import ProvisionerDecider
from muster.core.queueing.decider import QueueDecider
from muster.core.sim import harness as sim
from muster.core.sim.summary import percentile

GPU = "nvidia.com/gpu"
POOL = "a3-dws"
ZONES = ("us-central1-a", "us-central1-b", "us-central1-c")
NAMESPACE = "bench"
MAX_SIZE = 64
SIZE_EXPONENT = 1.3  # p(size) ~ size^-1.3 over 1..64: mean ~8.6 nodes
NODES_PER_REQUEST = 10  # cloud size per request: 1,000 requests -> 10,000 nodes
BOOKING_SECONDS = 86_400.0
# A harness log this many events per request has no fixed point (a few dozen are usual,
# node and pod events included): a livelock, not a long run.
RUNAWAY_EVENTS_PER_REQUEST = 1_000


# -- the workload ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Shape:
    """One run's cloud and requests."""

    requests: int
    nodes: int
    steps: int  # capacity steps per zone
    step_seconds: float  # between a zone's steps
    delay: float  # provisioningDelaySeconds
    active_requests: int
    all_at_start: bool = False  # every zone's final capacity at t=0 (the baseline)
    # Step times on multiples of 1/64 s: then (T + at) - T == at in floating point for a
    # wall-clock T (the capacity check compares absolute times and no longer needs it).
    binary_steps: bool = False

    def zone_capacity(self) -> dict[str, int]:
        base, extra = divmod(self.nodes, len(ZONES))
        return {z: base + (1 if i < extra else 0) for i, z in enumerate(ZONES)}

    def steps_doc(self) -> list[dict[str, Any]]:
        final = self.zone_capacity()
        if self.all_at_start:
            return [{"at": 0, "zones": dict(final)}]
        out = []
        stagger = self.step_seconds / len(ZONES)
        for i, zone in enumerate(ZONES):
            for k in range(self.steps):
                at = round(i * stagger + k * self.step_seconds, 3)
                if self.binary_steps:
                    at = round(at * 64) / 64
                out.append({"at": at, "zones": {zone: final[zone] * (k + 1) // self.steps}})
        return out

    @property
    def last_step(self) -> float:
        return max(float(s["at"]) for s in self.steps_doc())


def cluster_doc(shape: Shape, *, kueue: bool = False) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "name": "dws-bench",
        "region": "us-central1",
        "zones": list(ZONES),
        "nodePools": [
            {
                "name": POOL,
                "machineType": "a3-highgpu-8g",
                "allocatable": {GPU: 8, "cpu": 208, "memory": "1872Gi"},
                "taints": [{"key": GPU, "value": "present", "effect": "NoSchedule"}],
                "accelerator": "nvidia-h100-80gb",
                "queuedProvisioning": True,
                "maxNodes": shape.nodes,
                "provisioningDelaySeconds": shape.delay,
                "capacity": shape.steps_doc(),
            }
        ],
        "quotas": [{"name": "NVIDIA_H100_GPUS", "resource": GPU, "limit": 8 * shape.nodes}],
        "bookingSeconds": BOOKING_SECONDS,
        "activeRequests": shape.active_requests,
    }
    if kueue:
        doc |= kueue_objects(shape.nodes)
    return doc


def kueue_objects(nodes: int) -> dict[str, Any]:
    """Kueue's DWS setup (examples/scenarios/dws/queues.yaml): a ClusterQueue whose quota
    covers the whole cloud, with the ProvisioningRequest admission check."""
    quota = {GPU: 8 * nodes, "cpu": 208 * nodes, "memory": f"{1872 * nodes}Gi"}
    return {
        "resourceFlavors": [{"name": "default-flavor"}],
        "admissionChecks": [
            {
                "name": "dws-prov",
                "controllerName": "kueue.x-k8s.io/provisioning-request",
                "parameters": {
                    "apiGroup": "kueue.x-k8s.io",
                    "kind": "ProvisioningRequestConfig",
                    "name": "dws-config",
                },
            }
        ],
        "provisioningRequestConfigs": [
            {"name": "dws-config", "provisioningClassName": DWS_CLASS, "managedResources": [GPU]}
        ],
        "clusterQueues": [
            {
                "name": "dws-cluster-queue",
                "resourceGroups": [
                    {
                        "coveredResources": list(quota),
                        "flavors": [
                            {
                                "name": "default-flavor",
                                "resources": [
                                    {"name": r, "nominalQuota": q} for r, q in quota.items()
                                ],
                            }
                        ],
                    }
                ],
                "admissionChecks": ["dws-prov"],
            }
        ],
        "localQueues": [
            {"namespace": NAMESPACE, "name": "dws-local-queue", "clusterQueue": "dws-cluster-queue"}
        ],
    }


def sizes(n: int, seed: int) -> list[int]:
    rng = random.Random(seed)
    choices = list(range(1, MAX_SIZE + 1))
    weights = [s**-SIZE_EXPONENT for s in choices]
    return rng.choices(choices, weights, k=n)


def request_body(i: int, size: int) -> dict[str, Any]:
    """A standalone ProvisioningRequest in muster's JSON form (``parse.provisioning_request``)."""
    return {
        "name": f"pr-{i:05d}",
        "namespace": NAMESPACE,
        "provisioningClassName": DWS_CLASS,
        "podSets": [
            {
                "name": "main",
                "count": size,
                "requests": {GPU: 8, "cpu": 200, "memory": "1800Gi"},
                "nodeSelector": {"cloud.google.com/gke-nodepool": POOL},
                "tolerations": [{"key": GPU, "operator": "Exists", "effect": "NoSchedule"}],
            }
        ],
    }


def workload_body(i: int, size: int) -> dict[str, Any]:
    """The same pod set as a queued workload (a Job through Kueue's DWS admission check);
    its pods run for a day, as the standalone requests' nodes are booked for one."""
    pod_set = request_body(i, size)["podSets"][0]
    return {
        "name": f"wl-{i:05d}",
        "namespace": NAMESPACE,
        "queueName": "dws-local-queue",
        "podSets": [pod_set],
        "runtime": {"durationSeconds": BOOKING_SECONDS},
    }


# -- replaying the log: capacity available, invariants ------------------------------------


@dataclass
class Replay:
    """What the log says, checked against the capacity steps."""

    requests: int
    created: dict[str, float] = field(default_factory=dict)
    accepted: dict[str, float] = field(default_factory=dict)
    claimed: dict[str, float] = field(default_factory=dict)  # nodes_creating
    provisioned: dict[str, float] = field(default_factory=dict)
    failed: dict[str, str] = field(default_factory=dict)  # request -> reason
    available: dict[str, float] = field(default_factory=dict)  # room stayed free from here
    missed: int = 0  # requests whose room stayed free for a while before their claim
    zone_violations: list[str] = field(default_factory=list)
    capacity_violations: list[str] = field(default_factory=list)
    peak_in_use: int = 0

    def delays(self, since: dict[str, float]) -> list[float]:
        return [t - since[r] for r, t in self.provisioned.items() if r in since]


class _Group:
    """Waiting requests that need the same nodes in the same zones: they fit together."""

    def __init__(self, need: tuple[tuple[str, int], ...], zones: tuple[str, ...]) -> None:
        self.need, self.zones = need, zones
        self.members: set[str] = set()
        self.fits = False


def replay(
    envelopes: Iterable[Envelope],
    spec: ClusterSpec,
    n_requests: int,
    when: Callable[[Envelope], float],
) -> Replay:
    """Nodes in use over time (from the provisioner's events, timed by ``when``) against
    the capacity steps (counted from the ``cloud.configured`` event, timed the same way).

    Events and capacity steps are grouped into instants (same time). In each instant:
    capacity steps and node deletions first, then new requests, then the decisions
    (claims, Provisioned, failures); after them, each waiting request whose group now has
    room starts its "available" clock if not running, and the clocks of groups that lost
    their room stop. A claim records the running clock (or its own instant)."""
    out = Replay(n_requests)
    pools = {p.name: p for p in spec.node_pools}
    envs = [e for e in envelopes if e.category in ("provisioning", "cloud")]
    configured = next(e for e in envs if isinstance(e.event, pev.CloudConfigured))
    logical_since = configured.occurred_at  # what the provisioner's capacity counts from
    cloud_since = when(configured)
    steps = sorted(
        (
            (cloud_since + step.at, pool.name, dict(step.zones))
            for pool in spec.node_pools
            for step in pool.capacity
        ),
        key=lambda s: s[0],
    )
    cap: dict[tuple[str, str], int] = {}
    for pool in spec.node_pools:
        if not pool.capacity:
            for z in pool.zones_or(spec.zones):
                cap[(pool.name, z)] = pool.max_nodes
    in_use: dict[tuple[str, str], int] = {}
    pool_total: dict[str, int] = {}
    groups: dict[tuple[Any, ...], _Group] = {}
    group_of: dict[str, _Group] = {}
    window: dict[str, float] = {}  # waiting request -> room free for it since
    nodes_of: dict[str, list[pev.NodeSpec]] = {}

    def room(g: _Group) -> bool:
        for pool_name, n in g.need:
            pool = pools[pool_name]
            if pool_total.get(pool_name, 0) + n > pool.max_nodes:
                return False
        return any(
            all(in_use.get((p, z), 0) + n <= cap.get((p, z), 0) for p, n in g.need) for z in g.zones
        )

    def check_capacity(t: float, what: str) -> None:
        for (p, z), n in in_use.items():
            if n > cap.get((p, z), 0):
                out.capacity_violations.append(
                    f"t={t:.3f} {what}: {n} nodes of {p} in {z}, capacity {cap.get((p, z), 0)}"
                )
        for p, n in pool_total.items():
            if n > pools[p].max_nodes:
                out.capacity_violations.append(f"t={t:.3f}: {n} nodes of {p} > maxNodes")

    # Merge events and steps into instants.
    items: list[tuple[float, int, Any]] = [(t, 0, (p, zones)) for t, p, zones in steps]
    items += [(when(e), 1, e) for e in envs]
    items.sort(key=lambda x: (x[0], x[1], x[2].position if x[1] else 0))
    i = 0
    while i < len(items):
        t = items[i][0]
        j = i
        while j < len(items) and items[j][0] == t:
            j += 1
        instant = items[i:j]
        i = j
        # 1. capacity steps and node deletions: room appears
        for _, kind, item in instant:
            if kind == 0:
                pool_name, zones = item
                for z, n in zones.items():
                    cap[(pool_name, z)] = n
            elif isinstance(item.event, pev.NodesDeleted):
                for node in nodes_of.pop(item.event.request_id, []):
                    in_use[(node.pool, node.zone)] -= 1
                    pool_total[node.pool] -= 1
        # 2. new requests (created, accepted) of this instant
        for _, kind, env in instant:
            if kind == 0:
                continue
            ev = env.event
            if isinstance(ev, pev.ProvisioningRequested):
                out.created[ev.request_id] = t
            elif (accepted := pev.acceptance(ev)) is not None:  # or stood for by Provisioned
                ev = accepted
                out.accepted[ev.request_id] = t
                out.created.setdefault(ev.request_id, t)  # queued workloads: no request event
                need = plan.nodes_per_pool(ev.pod_sets)
                key = (tuple(sorted(need.items())), ev.zones or spec.zones)
                g = groups.get(key)
                if g is None:
                    g = groups[key] = _Group(*key)
                g.members.add(ev.request_id)
                group_of[ev.request_id] = g
        # 3. the instant's decisions
        for _, kind, env in instant:
            if kind == 0:
                continue
            ev = env.event
            if isinstance(ev, pev.ProvisioningProvisioned) and ev.created:
                out.provisioned[ev.request_id] = t
                ev = ev.creating(env.occurred_at) or ev  # it stands for a NodesCreating too
            if isinstance(ev, pev.NodesCreating):
                rid = ev.request_id
                out.claimed[rid] = t
                zones = {n.zone for n in ev.nodes} | {ev.zone}
                if len(zones) > 1 or rid in nodes_of:
                    out.zone_violations.append(f"{rid}: nodes in {sorted(zones)}")
                nodes_of[rid] = list(ev.nodes)
                for node in ev.nodes:
                    in_use[(node.pool, node.zone)] = in_use.get((node.pool, node.zone), 0) + 1
                    pool_total[node.pool] = pool_total.get(node.pool, 0) + 1
                # the decision's own (logical) time: the capacity it was made against
                cap_then = _capacity_at(spec, env.occurred_at, logical_since)
                for (p, z), n in in_use.items():
                    if n > cap_then.get((p, z), 0):
                        out.capacity_violations.append(
                            f"{rid} at {env.occurred_at:.3f}: {n} nodes of {p} in {z}, "
                            f"capacity then {cap_then.get((p, z), 0)}"
                        )
                out.peak_in_use = max(out.peak_in_use, sum(pool_total.values()))
                g = group_of.pop(rid, None)
                if g is not None:
                    g.members.discard(rid)
                since = window.pop(rid, t)
                out.available[rid] = since
                if since < t:
                    out.missed += 1
            elif isinstance(ev, pev.ProvisioningProvisioned):
                out.provisioned[ev.request_id] = t
            elif isinstance(ev, pev.ProvisioningFailed):
                out.failed[ev.request_id] = ev.reason
                g = group_of.pop(ev.request_id, None)
                if g is not None:
                    g.members.discard(ev.request_id)
                window.pop(ev.request_id, None)
            elif isinstance(ev, pev.ProvisioningCancelled):
                g = group_of.pop(ev.request_id, None)
                if g is not None:
                    g.members.discard(ev.request_id)
                window.pop(ev.request_id, None)
        check_capacity(t, "end of instant")
        # 4. windows: room for a waiting request after this instant's claims
        for g in groups.values():
            fits = room(g) if g.members else False
            if fits:
                for rid in g.members:
                    window.setdefault(rid, t)
            elif g.fits:
                for rid in g.members:
                    window.pop(rid, None)
            g.fits = fits
    return out


def _capacity_at(spec: ClusterSpec, now: float, since: float) -> dict[tuple[str, str], int]:
    """Capacity at ``now`` for a cloud configured at ``since``, compared as the provisioner
    does (absolute times: ``now - since`` can round below a step's time)."""
    return {
        (pool.name, z): n
        for pool in spec.node_pools
        for z, n in pool.capacity_at(now, spec.zones, since).items()
    }


def print_delays(label: str, values: list[float], unit: str = "s") -> None:
    if not values:
        print(f"    {label}: none")
        return
    print(
        f"    {label}: p50 {percentile(values, 50):.2f}{unit}, p90 {percentile(values, 90):.2f}"
        f"{unit}, p99 {percentile(values, 99):.2f}{unit}, max {max(values):.2f}{unit} "
        f"(n={len(values)})"
    )


def outcome(r: Replay, *, active_requests: int | None = None) -> list[str]:
    """What the log shows went other than the scenario says: every request Provisioned;
    with ``active_requests`` below the requests (all created at once), exactly those beyond
    the limit failed at once with QuotaExceeded; none left waiting; no zone or capacity
    violation."""
    expect_failed = max(0, r.requests - active_requests) if active_requests is not None else 0
    problems = []
    over_limit = [reason for reason in r.failed.values() if reason == "QuotaExceeded"]
    if len(r.failed) != expect_failed or len(over_limit) != expect_failed:
        reasons = dict(sorted(Counter(r.failed.values()).items()))
        problems.append(
            f"{len(r.failed)} of {r.requests} failed ({reasons}), expected {expect_failed} "
            "(QuotaExceeded: beyond the active-request limit)"
        )
    if len(r.provisioned) != r.requests - expect_failed:
        problems.append(
            f"{len(r.provisioned)} of {r.requests} Provisioned, expected "
            f"{r.requests - expect_failed}"
        )
    if waiting := r.requests - len(r.provisioned) - len(r.failed):
        problems.append(f"{waiting} still waiting (or cancelled) at the end")
    if r.zone_violations:
        problems.append(f"{len(r.zone_violations)} requests with nodes in two zones")
    if r.capacity_violations:
        problems.append(f"{len(r.capacity_violations)} times nodes over capacity or maxNodes")
    return problems


def print_checks(r: Replay, delay: float, *, virtual: bool) -> None:
    outcome = f"{len(r.provisioned)}/{r.requests} Provisioned"
    if r.failed:
        reasons: dict[str, int] = {}
        for reason in r.failed.values():
            reasons[reason] = reasons.get(reason, 0) + 1
        outcome += f", failed: {dict(sorted(reasons.items()))}"
    other = r.requests - len(r.provisioned) - len(r.failed)
    if other:
        outcome += f", {other} neither (still waiting at the end)"
    print(f"  outcome: {outcome}")
    print(
        f"  checks on the log: nodes spanning two zones: {len(r.zone_violations)}; "
        f"nodes over capacity or maxNodes: {len(r.capacity_violations)}; peak nodes in use "
        f"{r.peak_in_use:,}"
    )
    for line in (r.zone_violations + r.capacity_violations)[:5]:
        print(f"    ! {line}")
    print(f"  capacity available -> Provisioned (provisioning delay {delay:g}s):")
    print_delays("available -> Provisioned", r.delays(r.available))
    lag = [r.claimed[k] - t for k, t in r.available.items() if k in r.claimed]
    print_delays("available -> claimed (nodes_creating)", lag)
    print_delays("claimed -> Provisioned", r.delays(r.claimed))
    if virtual:
        print(f"    claimed after the instant room appeared for them: {r.missed} request(s)")
    print_delays("created -> Provisioned (waiting for capacity included)", r.delays(r.created))


# -- virtual time -----------------------------------------------------------------------


@dataclass
class VirtualRun:
    label: str
    wall: float
    cpu: float
    events: int
    provisioner_events: int
    clock: float
    timing: Any  # kueue_baseline.Timing of the provisioner
    replay: Replay
    queue_timing: Any = None  # kueue_baseline.Timing of the queue (the Kueue variant)
    admitted: int = 0
    gave_up: int = 0  # workloads rejected or cancelled (the Kueue variant)
    livelock: str | None = None  # the harness found no fixed point


def run_outcome(run: VirtualRun, shape: Shape, *, kueue: bool = False) -> list[str]:
    """What went other than intended in one virtual run, each problem labelled with it."""
    problems = [run.livelock] if run.livelock else []
    problems += outcome(run.replay, active_requests=shape.active_requests)
    if kueue and (run.admitted < shape.requests or run.gave_up):
        problems.append(
            f"{run.admitted} of {shape.requests} workloads admitted, {run.gave_up} rejected "
            "or cancelled"
        )
    return [f"{run.label}: {p}" for p in problems]


def run_virtual(
    shape: Shape,
    sizes_: list[int],
    label: str,
    *,
    kueue: bool = False,
    profile: cProfile.Profile | None = None,
) -> VirtualRun:
    """One harness run: standalone requests, or (``kueue``) the same pod sets as workloads
    through a ClusterQueue with the DWS admission check; all created at t=0."""
    spec = parse.cluster(cluster_doc(shape, kueue=kueue))
    requests = (
        []
        if kueue
        else [(0.0, parse.provisioning_request(request_body(i, s))) for i, s in enumerate(sizes_)]
    )
    workloads: list[sim.Submission] = (
        [(0.0, f"wl-{i:05d}", parse.workload(workload_body(i, s))) for i, s in enumerate(sizes_)]
        if kueue
        else []
    )
    queue, provisioner = Timed(QueueDecider()), Timed(ProvisionerDecider())
    harness = sim.build(
        spec, workloads, deciders=[queue, provisioner, NodeAgentDecider()], requests=requests
    )
    wall, cpu = time.perf_counter(), time.process_time()
    if profile is not None:
        profile.enable()
    try:
        livelock = run_bounded(harness, RUNAWAY_EVENTS_PER_REQUEST * len(sizes_) + 10_000)
    finally:
        if profile is not None:
            profile.disable()
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    envs = harness.log.envelopes
    mine = sum(1 for e in envs if e.producer == "provisioner" and e.type != "timer.fired")
    return VirtualRun(
        label,
        wall,
        cpu,
        len(envs),
        mine,
        harness.clock,
        provisioner.timing,
        replay(envs, spec, len(sizes_), lambda e: e.occurred_at),
        queue.timing if kueue else None,
        len({e.event.workload_id for e in envs if isinstance(e.event, qev.WorkloadAdmitted)}),
        sum(1 for e in envs if isinstance(e.event, qev.WorkloadRejected | qev.WorkloadCancelled)),
        livelock,
    )


def print_virtual(run: VirtualRun, shape: Shape) -> None:
    t = run.timing
    print(
        f"{run.label}: {run.events:,} events in {run.wall:.2f}s wall / {run.cpu:.2f}s CPU "
        f"({per_second(run.events, run.wall):,.0f} events/s); virtual clock at the end "
        f"{run.clock / 3600:.2f} h"
    )
    print(
        f"  provisioner: {run.provisioner_events:,} events appended; decide {t.decide_s:.2f}s "
        f"CPU in {t.decide_calls:,} calls ({t.decide_nonempty:,} with events, "
        f"{1000 * t.decide_s / max(t.decide_calls, 1):.2f} ms/call), fold {t.evolve_s:.2f}s "
        f"({t.evolve_calls:,} events)"
    )
    print(
        f"  provisioner decisions/s: {per_second(run.provisioner_events, t.decide_s):,.0f} "
        f"per CPU-second of decide; "
        f"{per_second(run.provisioner_events, t.decide_s + t.evolve_s):,.0f} counting its fold"
    )
    if run.queue_timing is not None:
        q = run.queue_timing
        print(
            f"  queue: decide {q.decide_s:.2f}s CPU in {q.decide_calls:,} calls, fold "
            f"{q.evolve_s:.2f}s; {run.admitted:,} workloads admitted (once Provisioned)"
        )
    print_checks(run.replay, shape.delay, virtual=True)


def profiled_run(shape: Shape, sizes_: list[int], top: int) -> str:
    profile = cProfile.Profile()
    run_virtual(shape, sizes_, "profile", profile=profile)
    text = io.StringIO()
    pstats.Stats(profile, stream=text).sort_stats("cumulative").print_stats(top)
    return text.getvalue()


def sized(scale: float, seed: int, **timing: Any) -> tuple[Shape, list[int]]:
    """1,000 x ``scale`` requests on 10 nodes of cloud each, and their sizes (drawn with
    ``seed``); ``timing``: the rest of the Shape (steps, step_seconds, delay, ...)."""
    n = max(1, round(1000 * scale))
    shape = Shape(requests=n, nodes=NODES_PER_REQUEST * n, active_requests=max(n, 100), **timing)
    return shape, sizes(n, seed)


def virtual(args: argparse.Namespace) -> list[str]:
    """The virtual-time runs, printed; what went other than intended."""
    shape, sizes_ = sized(
        args.scale,
        args.seed,
        steps=args.steps,
        step_seconds=args.step_seconds,
        delay=args.delay,
    )
    n, nodes = shape.requests, shape.nodes
    print(
        f"virtual time: {n:,} requests ({sum(sizes_):,} nodes asked, sizes 1-{MAX_SIZE}, "
        f"median {percentile([float(s) for s in sizes_], 50):.0f}; seed {args.seed}), cloud of "
        f"{nodes:,} nodes in {len(ZONES)} zones arriving in {args.steps} steps per zone, "
        f"{args.step_seconds:g}s apart (zones staggered, last step at "
        f"{shape.last_step / 3600:.2f} h), provisioning delay {args.delay:g}s, "
        f"activeRequests {shape.active_requests}"
    )
    main = run_virtual(shape, sizes_, "capacity over time")
    print_virtual(main, shape)
    base_shape = Shape(**{**shape.__dict__, "all_at_start": True})
    base = run_virtual(base_shape, sizes_, "baseline: all capacity at t=0")
    print_virtual(base, base_shape)
    problems = run_outcome(main, shape) + run_outcome(base, base_shape)
    mt, bt = main.timing, base.timing
    main_rate = per_second(main.provisioner_events, mt.decide_s)
    base_rate = per_second(base.provisioner_events, bt.decide_s)
    print(
        "  over time / at t=0: wall "
        f"{ratio(main.wall, base.wall)}, provisioner decide CPU {ratio(mt.decide_s, bt.decide_s)}"
        f" ({ratio(mt.decide_calls, bt.decide_calls)} the calls), events "
        f"{ratio(main.events, base.events)}, decisions/s "
        f"{ratio(main_rate, base_rate)}"
    )
    if shape.active_requests != 100:
        gke = Shape(**{**shape.__dict__, "active_requests": 100})
        capped = run_virtual(gke, sizes_, "GKE's default activeRequests (100)")
        print_virtual(capped, gke)
        problems += run_outcome(capped, gke)
    if not args.no_kueue:
        kq = run_virtual(
            shape, sizes_, "through Kueue (workloads, DWS admission check)", kueue=True
        )
        print_virtual(kq, shape)
        problems += run_outcome(kq, shape, kueue=True)
        print(
            f"  through Kueue / standalone: wall {ratio(kq.wall, main.wall)}, events "
            f"{ratio(kq.events, main.events)}, provisioner decide CPU "
            f"{ratio(kq.timing.decide_s, mt.decide_s)}"
        )
    if args.profile:
        print(f"cProfile of the capacity-over-time run (top {args.profile} by cumulative time):")
        print(profiled_run(shape, sizes_, args.profile))
    return problems


# -- real time: the services -------------------------------------------------------------


async def post_all(
    base: str, bodies: list[dict[str, Any]], clients: int
) -> tuple[dict[int, int], list[float]]:
    statuses: dict[int, int] = {}
    latencies: list[float] = []
    semaphore = asyncio.Semaphore(clients)
    connector = aiohttp.TCPConnector(limit=clients)
    async with aiohttp.ClientSession(connector=connector) as session:

        async def post(body: dict[str, Any]) -> None:
            async with semaphore:
                started = time.monotonic()
                async with session.post(
                    f"{base}/v1/provisioningrequests",
                    data=orjson.dumps(body),
                    headers={"Content-Type": "application/json"},
                ) as resp:
                    await resp.read()
                latencies.append(time.monotonic() - started)
                statuses[resp.status] = statuses.get(resp.status, 0) + 1

        await asyncio.gather(*(post(b) for b in bodies))
    return statuses, latencies


async def follow_requests(store_url: str, ids: set[str], timeout: float) -> list[Envelope]:
    """The log's cloud and provisioning events until every request is Provisioned or failed."""

    def ended(env: Envelope) -> str | None:
        if isinstance(env.event, pev.ProvisioningProvisioned | pev.ProvisioningFailed):
            return env.event.request_id
        return None

    return await follow_log(
        store_url, {"provisioning", "cloud"}, ids, ended, timeout, poll_seconds=0.25
    )


def histogram_sums(base: str, names: tuple[str, ...]) -> dict[str, tuple[float, float]]:
    """(sum, count) of each histogram in ``names`` from a service's /metrics."""
    with urllib.request.urlopen(f"{base}/metrics", timeout=10) as resp:
        text = resp.read().decode()
    out = {name: (0.0, 0.0) for name in names}
    for line in text.splitlines():
        for name in names:
            for suffix, i in (("_sum", 0), ("_count", 1)):
                if line.startswith(name + suffix):
                    value = float(line.rsplit(" ", 1)[1])
                    pair = list(out[name])
                    pair[i] += value
                    out[name] = (pair[0], pair[1])
    return out


DECIDE = "muster_decide_duration_seconds"
STEP = "muster_decide_step_seconds"


def services(args: argparse.Namespace) -> list[str]:
    """The real-time run, printed; what went other than intended."""
    from muster.runtime import admin
    from muster.runtime.stack import Stack

    shape, sizes_ = sized(
        args.services_scale,
        args.seed,
        steps=args.steps,
        step_seconds=args.real_step_seconds,
        delay=args.real_delay,
        binary_steps=args.binary_steps,
    )
    n, nodes = shape.requests, shape.nodes
    bodies = [request_body(i, s) for i, s in enumerate(sizes_)]
    ids = {pev.standalone_id(NAMESPACE, b["name"]) for b in bodies}
    spec = parse.cluster(cluster_doc(shape))
    size = "full size" if n >= 1000 else f"reduced: --services-scale {args.services_scale:g}"
    print(
        f"real time ({size}): {n:,} requests ({sum(sizes_):,} nodes asked), cloud of "
        f"{nodes:,} nodes, {args.steps} steps per zone {args.real_step_seconds:g}s apart "
        f"(last step {shape.last_step:.1f}s after the cloud is configured), provisioning "
        f"delay {args.real_delay:g}s"
        + (", step times on multiples of 1/64 s" if args.binary_steps else "")
    )
    with tempfile.TemporaryDirectory(prefix="muster-bench-") as tmp:
        started = time.perf_counter()
        # No per-tenant rate limit: the benchmark is one tenant keeping to its schedule.
        with Stack(Path(tmp) / "stack", extra_env={"MUSTER_SUBMIT_RATE": "0"}) as stack:
            print(f"  stack up in {time.perf_counter() - started:.1f}s")
            cpu_before = {name: cpu_seconds(p.pid) for name, p in stack.processes.items()}
            before = histogram_sums(stack.url("provisioner"), (DECIDE, STEP))
            posted = time.perf_counter()
            statuses, latencies = asyncio.run(post_all(stack.url(), bodies, args.clients))
            posted = time.perf_counter() - posted
            # The cloud comes last, so every request waits for its first capacity step, as
            # in virtual time; the steps count from here.
            wall = time.perf_counter()
            asyncio.run(admin.configure(stack.store_url, spec, stack.broker.bootstrap))
            envs = asyncio.run(follow_requests(stack.store_url, ids, args.timeout))
            wall = time.perf_counter() - wall
            after = histogram_sums(stack.url("provisioner"), (DECIDE, STEP))
            cpu = {k: cpu_seconds(p.pid) - cpu_before[k] for k, p in stack.processes.items()}
    print(
        f"  POSTed {n:,} in {posted:.1f}s from {args.clients} clients (statuses "
        f"{dict(sorted(statuses.items()))}, latency p50 {percentile(latencies, 50) * 1000:.0f} "
        f"ms, max {max(latencies) * 1000:.0f} ms); then {wall:.1f}s wall from configuring "
        f"the cloud to the last Provisioned"
    )
    mine = [e for e in envs if e.producer == "provisioner" and e.type != "timer.fired"]
    decide_s, decide_calls = (a - b for a, b in zip(after[DECIDE], before[DECIDE], strict=True))
    step_s, steps = (a - b for a, b in zip(after[STEP], before[STEP], strict=True))
    print(
        "  service CPU from the first POST: " + ", ".join(f"{k} {v:.1f}s" for k, v in cpu.items())
    )
    print(
        f"  provisioner: {len(mine):,} events appended; decide {decide_s:.2f}s wall in "
        f"{decide_calls:,.0f} calls (muster_decide_duration_seconds); decisions/s "
        f"{per_second(len(mine), decide_s):,.0f} per second of decide, "
        f"{per_second(len(mine), cpu.get('provisioner', math.nan)):,.0f} per CPU-second of "
        f"the process (fold, store, Kafka included); its steps (catch up + decide + append) "
        f"took {step_s:.2f}s wall in {steps:,.0f} steps"
    )

    def wall_time(env: Envelope) -> float:
        # intake's and admin's events: their clock when appended; decisions: commit time.
        if isinstance(env.event, pev.ProvisioningRequested | pev.CloudConfigured):
            return env.occurred_at
        return env.recorded_at

    r = replay(envs, spec, n, wall_time)
    print_checks(r, shape.delay, virtual=False)
    problems = []
    if set(statuses) != {201} or sum(statuses.values()) != n:
        problems.append(f"POSTs not all accepted: statuses {dict(sorted(statuses.items()))}")
    return [f"real time: {p}" for p in problems + outcome(r, active_requests=shape.active_requests)]


# -- main ---------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    print(f"bench.dws_provisioning ({machine()})")
    problems = []
    if not args.no_virtual:
        problems += virtual(args)
    if not args.no_services:
        problems += services(args)
    check_outcome(problems)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m bench.dws_provisioning",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--scale",
        type=float,
        default=1.0,
        help="virtual time: requests = 1000 x scale, nodes = 10 x requests",
    )
    p.add_argument(
        "--services-scale",
        type=float,
        default=1.0,
        help="real time: requests = 1000 x scale, nodes = 10 x requests",
    )
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--steps", type=int, default=10, help="capacity steps per zone (default 10)")
    p.add_argument(
        "--step-seconds",
        type=float,
        default=1080.0,
        help="virtual time: seconds between a zone's steps (default 1080 = 18 min)",
    )
    p.add_argument(
        "--delay",
        type=float,
        default=120.0,
        help="virtual time: provisioningDelaySeconds (default 120)",
    )
    p.add_argument(
        "--real-step-seconds",
        type=float,
        default=2.0,
        help="real time: seconds between a zone's steps (default 2)",
    )
    p.add_argument(
        "--real-delay",
        type=float,
        default=1.0,
        help="real time: provisioningDelaySeconds (default 1)",
    )
    p.add_argument(
        "--binary-steps",
        action="store_true",
        help="real time: put step times on multiples of 1/64 s (float-safe step times; the "
        "provisioner's capacity check compares absolute times, so only to compare)",
    )
    p.add_argument("--clients", type=int, default=32, help="real time: concurrent POSTs")
    p.add_argument(
        "--timeout",
        type=float,
        default=300.0,
        help="real time: seconds to wait for every request to end",
    )
    p.add_argument("--no-virtual", action="store_true", help="skip the virtual-time runs")
    p.add_argument("--no-services", action="store_true", help="skip the real-time run")
    p.add_argument(
        "--no-kueue",
        action="store_true",
        help="skip the virtual run through Kueue-style queued workloads",
    )
    p.add_argument(
        "--profile",
        type=int,
        default=0,
        metavar="N",
        help="also profile the virtual run and print the top N entries",
    )
    return p.parse_args(argv)


if __name__ == "__main__":
    main()
