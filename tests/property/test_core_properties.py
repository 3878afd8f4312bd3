"""Properties of whole simulated runs over random clusters and workloads.

Every check here is written against the event log, independently of the deciders'
own state: quota is never over-committed, replay reproduces the live state, runs
are deterministic, provisioning is atomic per zone, and every workload ends once.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from muster.core.decider import Decider
from muster.core.events import Envelope, encode_payload
from muster.core.events import node as nev
from muster.core.events import provisioning as pev
from muster.core.events import queue as qev
from muster.core.events import workload as wev
from muster.core.model import parse
from muster.core.model.cluster import ClusterSpec
from muster.core.model.workload import WorkloadSpec
from muster.core.nodes.decider import NodeAgentDecider
from muster.core.provisioning.decider import ProvisionerDecider
from muster.core.queueing.decider import QueueDecider
from muster.core.runner import DeciderRunner
from muster.core.sim.harness import Harness, build
from muster.core.verify import verify_decisions
from tests.unit.harness_inputs import creations_apart

GPU = "nvidia.com/gpu"
ZONE_LABEL = "topology.kubernetes.io/zone"
TERMINAL = (qev.WorkloadFinished, qev.WorkloadCancelled, qev.WorkloadRejected)

SETTINGS = settings(
    max_examples=50,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


# -- inputs -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Scenario:
    cluster: dict[str, Any]
    workloads: tuple[tuple[float, str, dict[str, Any]], ...]  # (at, id, document)
    cancels: tuple[tuple[float, str], ...]
    shards: int
    feasible: bool  # every workload fits its quota and a pool, capacity eventually suffices

    def deciders(self) -> list[Decider[Any]]:
        agents: list[Decider[Any]] = (
            [NodeAgentDecider()]
            if self.shards == 1
            else [NodeAgentDecider(i, self.shards) for i in range(self.shards)]
        )
        return [QueueDecider(), ProvisionerDecider(), *agents]

    def harness(self) -> Harness:
        subs = [(at, wid, parse.workload(doc)) for at, wid, doc in self.workloads]
        return build(parse.cluster(self.cluster), subs, self.cancels, self.deciders())

    def run(self) -> Harness:
        h = self.harness()
        h.run()
        return h


MAX_PODS_PER_SET = 4
MAX_POD_SETS = 2
MAX_NODES_PER_REQUEST = MAX_PODS_PER_SET * MAX_POD_SETS  # one pod a node at worst


@st.composite
def scenarios(draw: st.DrawFn, feasible: bool | None = None) -> Scenario:
    if feasible is None:
        feasible = draw(st.booleans())
    zones = [f"r1-{c}" for c in "abc"[: draw(st.integers(1, 3))]]
    n_pools = draw(st.integers(1, 2))
    pool_gpus = [draw(st.sampled_from([1, 2, 4, 8])) for _ in range(n_pools)]
    # Feasible: every pod fits a node of every pool, so any flavor can serve it.
    pod_gpus = [g for g in (1, 2, 4, 8) if not feasible or g <= min(pool_gpus)]

    pools = []
    for i, gpus in enumerate(pool_gpus):
        pool: dict[str, Any] = {
            "name": f"pool{i}",
            "machineType": f"m{gpus}",
            "allocatable": {GPU: gpus},
            "labels": {"pool": f"pool{i}"},
            "provisioningDelaySeconds": draw(st.sampled_from([0, 0, 1, 2.5, 30])),
            "maxNodes": draw(st.integers(MAX_NODES_PER_REQUEST, 30))
            if feasible
            else draw(st.integers(0, 30)),
        }
        if draw(st.integers(0, 3)):  # mostly stepped capacity
            steps = draw(
                st.lists(
                    st.tuples(
                        st.integers(0, 400),
                        st.dictionaries(st.sampled_from(zones), st.integers(0, 6)),
                    ),
                    min_size=1,
                    max_size=3,
                )
            )
            capacity = [{"at": at, "zones": counts} for at, counts in steps]
            if feasible:
                last = max(at for at, _ in steps) + draw(st.integers(1, 200))
                big = {z: draw(st.integers(MAX_NODES_PER_REQUEST, 12)) for z in zones}
                capacity.append({"at": last, "zones": big})
            pool["capacity"] = capacity
        if draw(st.booleans()):
            pool["zones"] = draw(st.lists(st.sampled_from(zones), min_size=1, unique=True))
            if feasible and zones[0] not in pool["zones"]:
                # Pod sets of one workload may land on different pools: they need a zone
                # in common (a request whose pools share none is rejected at once; see
                # test_core_provisioning.py), and "feasible" promises no rejection.
                pool["zones"].append(zones[0])
        pools.append(pool)

    order = draw(st.permutations(range(n_pools)))
    n_queues = draw(st.integers(1, 2))
    max_total = MAX_NODES_PER_REQUEST * max(pod_gpus)
    queues = []
    for q in range(n_queues):
        flavors = []
        for i in order:
            nominal = (
                draw(st.integers(max_total, 3 * max_total))
                if feasible
                else draw(st.integers(0, 3 * max_total))
            )
            flavors.append({"name": f"f{i}", "resources": [{"name": GPU, "nominalQuota": nominal}]})
        queues.append(
            {
                "name": f"cq{q}",
                "queueingStrategy": draw(st.sampled_from(["BestEffortFIFO", "StrictFIFO"])),
                "resourceGroups": [{"coveredResources": [GPU], "flavors": flavors}],
            }
        )
    cluster: dict[str, Any] = {
        "name": "prop",
        "region": "r1",
        "zones": zones,
        "nodePools": pools,
        "resourceFlavors": [
            {"name": f"f{i}", "nodeLabels": {"pool": f"pool{i}"}} for i in range(n_pools)
        ],
        "clusterQueues": queues,
        "localQueues": [
            {"namespace": "default", "name": f"lq{q}", "clusterQueue": f"cq{q}"}
            for q in range(n_queues)
        ],
    }
    if draw(st.booleans()):
        most = MAX_NODES_PER_REQUEST * max(pool_gpus)
        limit = draw(st.integers(most, 2 * most)) if feasible else draw(st.integers(1, 2 * most))
        cluster["quotas"] = [{"name": "GPUS", "resource": GPU, "limit": limit}]

    workloads = []
    for n in range(draw(st.integers(1, 30))):
        sets = []
        for s in range(draw(st.integers(1, MAX_POD_SETS))):
            pod_set: dict[str, Any] = {
                "name": f"ps{s}",
                "count": draw(st.integers(1, MAX_PODS_PER_SET)),
                "requests": {
                    GPU: draw(st.sampled_from(pod_gpus if feasible else [1, 2, 4, 8, 16]))
                },
            }
            if n_pools > 1 and draw(st.integers(0, 4)) == 0:
                pod_set["nodeSelector"] = {"pool": f"pool{draw(st.integers(0, n_pools - 1))}"}
            sets.append(pod_set)
        queue = f"lq{draw(st.integers(0, n_queues - 1))}"
        if not feasible and draw(st.integers(0, 9)) == 0:
            queue = "missing"
        doc = {
            "name": f"job{n}",
            "queueName": queue,
            "priority": draw(st.integers(0, 3)),
            "podSets": sets,
            "runtime": {
                "durationSeconds": draw(st.integers(1, 200)),
                "exitCode": draw(st.sampled_from([0, 0, 0, 1])),
            },
        }
        at = draw(st.integers(0, 300)) + draw(st.sampled_from([0.0, 0.25, 0.5]))
        workloads.append((float(at), f"w{n}", doc))
    ids = [wid for _, wid, _ in workloads]
    cancelled = draw(st.lists(st.sampled_from(ids), unique=True, max_size=len(ids) // 3))
    cancels = tuple((float(draw(st.integers(0, 500))), wid) for wid in cancelled)
    return Scenario(cluster, tuple(workloads), cancels, draw(st.sampled_from([1, 1, 2])), feasible)


# -- independent checkers --------------------------------------------------------------


@dataclass
class QuotaChecker:
    """Folds the log and checks every QuotaReserved against the ClusterQueue's quota."""

    cluster: ClusterSpec
    specs: dict[str, WorkloadSpec] = field(default_factory=dict)
    nominal: dict[str, dict[str, dict[str, int]]] = field(default_factory=dict)
    usage: dict[str, dict[tuple[str, str], int]] = field(default_factory=dict)
    holding: dict[str, tuple[str, dict[tuple[str, str], int]]] = field(default_factory=dict)
    flavors: dict[str, Mapping[str, Mapping[str, str]]] = field(default_factory=dict)

    def local_queue(self, spec: WorkloadSpec) -> str | None:
        lq = next(
            (
                q
                for q in self.cluster.local_queues
                if (q.namespace, q.name) == (spec.namespace, spec.queue_name)
            ),
            None,
        )
        return lq.cluster_queue if lq else None

    def fold(self, env: Envelope) -> None:
        ev = env.event
        if isinstance(ev, qev.ClusterQueueConfigured):
            self.nominal[ev.spec.name] = {
                fq.name: {q.name: q.nominal_quota for q in fq.resources}
                for g in ev.spec.resource_groups
                for fq in g.flavors
            }
            self.usage.setdefault(ev.spec.name, {})
        elif isinstance(ev, wev.WorkloadSubmitted):
            self.specs[ev.workload_id] = ev.spec
        elif isinstance(ev, qev.QuotaReserved):
            self.reserve(env, ev)
        elif isinstance(ev, qev.WorkloadShrunk | qev.WorkloadGrown):
            self.resize(env, ev)
        elif isinstance(ev, (*TERMINAL, qev.WorkloadEvicted)):
            held = self.holding.pop(ev.workload_id, None)
            if held is not None:
                cq, charge = held
                for key, qty in charge.items():
                    self.usage[cq][key] -= qty
        self.check(env)

    def reserve(self, env: Envelope, ev: qev.QuotaReserved) -> None:
        wid = ev.workload_id
        assert wid not in self.holding, f"{wid} reserved twice at {env.position}"
        spec = self.specs[wid]
        assert self.local_queue(spec) == ev.cluster_queue
        # The charge is exactly the pod sets' requests, in the flavors they were given.
        expected = _charge(spec, ev.flavors, ev.pod_counts)
        charged = {(f, r): q for f, res in ev.usage.items() for r, q in res.items() if q}
        assert charged == expected, (wid, charged, expected)
        # Flavor labels are injected into the pod sets' node selectors.
        for ps in spec.pod_sets:
            for flavor in set(ev.flavors[ps.name].values()):
                labels = next(f for f in self.cluster.resource_flavors if f.name == flavor)
                for k, v in labels.node_labels.items():
                    assert ev.node_selectors[ps.name].get(k) == v
        self.holding[wid] = (ev.cluster_queue, charged)
        self.flavors[wid] = ev.flavors
        for key, qty in charged.items():
            self.usage[ev.cluster_queue][key] = self.usage[ev.cluster_queue].get(key, 0) + qty

    def resize(self, env: Envelope, ev: qev.WorkloadShrunk | qev.WorkloadGrown) -> None:
        """Pods taken (shrunk) or added (grown): it then holds exactly what its pods ask,
        in the flavors it was given."""
        wid = ev.workload_id
        if wid not in self.holding:
            return  # a late event of an attempt that ended: the queue ignores it too
        cq, before = self.holding[wid]
        flavors = self.flavors[wid]
        charged = {(f, r): q for f, res in ev.usage.items() for r, q in res.items() if q}
        expected = _charge(self.specs[wid], flavors, ev.pod_counts)
        assert charged == expected, (env.position, wid, charged, expected)
        for key, qty in before.items():
            self.usage[cq][key] -= qty
        for key, qty in charged.items():
            self.usage[cq][key] = self.usage[cq].get(key, 0) + qty
        self.holding[wid] = (cq, charged)

    def check(self, env: Envelope) -> None:
        for cq, used in self.usage.items():
            for (flavor, resource), qty in used.items():
                limit = self.nominal[cq].get(flavor, {}).get(resource, 0)
                assert 0 <= qty <= limit, (
                    f"{cq}/{flavor}/{resource}: {qty} > {limit} after position {env.position}"
                )


def _charge(
    spec: WorkloadSpec, flavors: Mapping[str, Mapping[str, str]], counts: Mapping[str, int]
) -> dict[tuple[str, str], int]:
    """What the pod sets ask at these counts (partial admission, shrunk, grown)."""
    out: dict[tuple[str, str], int] = {}
    for ps in spec.pod_sets:
        n = counts.get(ps.name, ps.count)
        for resource, qty in ps.requests.items():
            if qty * n:
                key = (flavors[ps.name][resource], resource)
                out[key] = out.get(key, 0) + qty * n
    return out


def check_quota(h: Harness, cluster: ClusterSpec) -> QuotaChecker:
    checker = QuotaChecker(cluster)
    for env in h.log.envelopes:
        checker.fold(env)
    return checker


def check_provisioning(log: Iterable[Envelope], cluster: ClusterSpec) -> None:
    """One zone per request, fresh names, capacity and quotas respected, pods after Ready."""
    owner: dict[str, str] = {}  # node -> request
    live: dict[str, pev.NodesCreating] = {}  # request -> its nodes, while they exist
    provisioned: set[str] = set()
    deleted: set[str] = set()
    registered: set[str] = set()
    start = 0.0
    for env in log:
        ev = env.event
        if isinstance(ev, pev.CloudConfigured):
            start = env.occurred_at
        elif isinstance(ev, pev.NodesCreating):
            assert ev.request_id not in live and ev.request_id not in deleted
            assert ev.nodes
            for node in ev.nodes:
                assert node.zone == ev.zone, (ev.request_id, node.name, node.zone, ev.zone)
                assert node.labels.get(ZONE_LABEL) == ev.zone
                assert node.name not in owner, f"{node.name} reused by {ev.request_id}"
                owner[node.name] = ev.request_id
            live[ev.request_id] = ev
            check_capacity(cluster, live, ev, env.occurred_at - start)
        elif isinstance(ev, pev.ProvisioningProvisioned):
            # Never after its nodes were deleted (released and Ready at one instant).
            assert ev.request_id in live, f"{ev.request_id} Provisioned but not live"
            assert ev.zone == live[ev.request_id].zone
            assert env.occurred_at >= live[ev.request_id].ready_at
            assert set(ev.assignments.values()) <= {n.name for n in live[ev.request_id].nodes}
            provisioned.add(ev.request_id)
        elif isinstance(ev, pev.NodesDeleted):
            gone = live.pop(ev.request_id)
            assert set(ev.nodes) == {n.name for n in gone.nodes}
            deleted.add(ev.request_id)
        elif isinstance(ev, nev.NodeRegistered):
            assert owner[ev.node] in provisioned, f"{ev.node} registered before Ready"
            registered.add(ev.node)
        elif isinstance(ev, nev.PodStarted):
            request = owner[ev.node]
            assert request in provisioned, f"pod on {ev.node} before {request} was Provisioned"
            assert request not in deleted, f"pod on {ev.node} after its nodes were deleted"
            assert ev.node in registered
            assert request == f"{ev.workload_id}.{ev.attempt}"


def check_capacity(
    cluster: ClusterSpec, live: dict[str, pev.NodesCreating], new: pev.NodesCreating, elapsed: float
) -> None:
    """At a claim, the claimed zone has room for every live node of the pools claimed in
    it (capacity may later shrink under running nodes: that is no violation)."""
    per_zone: dict[tuple[str, str], int] = {}
    per_pool: dict[str, int] = {}
    for ev in live.values():
        for node in ev.nodes:
            per_zone[(node.pool, node.zone)] = per_zone.get((node.pool, node.zone), 0) + 1
            per_pool[node.pool] = per_pool.get(node.pool, 0) + 1
    for pool_name in {n.pool for n in new.nodes}:
        pool = cluster.pool(pool_name)
        assert pool is not None and new.zone in pool.zones_or(cluster.zones)
        room = pool.capacity_at(elapsed, cluster.zones).get(new.zone, 0)
        assert per_zone[(pool_name, new.zone)] <= room, (pool_name, new.zone, elapsed)
        assert per_pool[pool_name] <= pool.max_nodes, pool_name
    for quota in cluster.quotas:
        used = sum(
            n.allocatable.get(quota.resource, 0)
            for ev in live.values()
            for n in ev.nodes
            if quota.covers(n.pool)
        )
        assert used <= quota.limit, (quota.name, used, quota.limit)


def wire(h: Harness) -> list[tuple[str, str, Any, float]]:
    return [(e.stream_id, e.type, encode_payload(e.event), e.occurred_at) for e in h.log.envelopes]


# -- properties ------------------------------------------------------------------------


@SETTINGS
@given(scenarios())
def test_quota_is_never_exceeded(sc: Scenario) -> None:
    h = sc.run()
    cluster = parse.cluster(sc.cluster)
    checker = check_quota(h, cluster)
    # The queue's own books agree with the independent ones at the end.
    queue = h.runners[0].state
    for cq, used in checker.usage.items():
        mine = {k: q for k, q in used.items() if q}
        theirs = {
            (f, r): q for f, res in queue.usage.get(cq, {}).items() for r, q in res.items() if q
        }
        assert mine == theirs
    assert set(checker.holding) == {w.id for w in queue.workloads.values() if w.holds_quota}


@SETTINGS
@given(scenarios())
def test_replay_from_scratch_gives_the_live_state(sc: Scenario) -> None:
    h = sc.run()
    log = h.log.envelopes
    for live in h.runners:
        decider = live.decider
        replayed: DeciderRunner[Any] = DeciderRunner(decider)
        replayed.fold(log)
        assert decider.summary(replayed.state) == decider.summary(live.state), decider.name
        assert replayed.versions == live.versions
        assert replayed.next_deadline() == live.next_deadline()
        # Through a snapshot half way, too.
        half: DeciderRunner[Any] = DeciderRunner(decider)
        half.fold(log[: len(log) // 2])
        resumed: DeciderRunner[Any] = DeciderRunner(decider)
        resumed.restore(half.snapshot())
        resumed.fold(log)
        assert decider.summary(resumed.state) == decider.summary(live.state), decider.name


@SETTINGS
@given(scenarios())
def test_runs_are_deterministic(sc: Scenario) -> None:
    first, second = sc.run(), sc.run()
    assert wire(first) == wire(second)
    assert [(e.producer, e.causation_id, e.correlation_id) for e in first.log.envelopes] == [
        (e.producer, e.causation_id, e.correlation_id) for e in second.log.envelopes
    ]


@SETTINGS
@given(scenarios())
def test_provisioning_is_atomic_per_zone(sc: Scenario) -> None:
    h = sc.run()
    # Node creations as events of their own (a Provisioned may name the nodes it created).
    check_provisioning(creations_apart(h.log.envelopes), parse.cluster(sc.cluster))


@SETTINGS
@given(scenarios(feasible=True))
def test_every_workload_ends_exactly_once(sc: Scenario) -> None:
    h = sc.run()
    log = h.log.envelopes
    ends: dict[str, list[Any]] = {}
    for env in log:
        if isinstance(env.event, TERMINAL):
            ends.setdefault(env.event.workload_id, []).append(env.event)
    submitted = {wid for _, wid, _ in sc.workloads}
    assert set(ends) == submitted, submitted - set(ends)
    assert all(len(evs) == 1 for evs in ends.values()), ends
    cancel_asked = {wid for _, wid in sc.cancels}
    docs = {wid: doc for _, wid, doc in sc.workloads}
    for wid, (end,) in ends.items():
        assert not isinstance(end, qev.WorkloadRejected), end  # everything fits somewhere
        if isinstance(end, qev.WorkloadCancelled):
            assert wid in cancel_asked
        else:
            failed = docs[wid]["runtime"]["exitCode"] != 0
            assert end.outcome == ("Failed" if failed else "Succeeded")
    # Everything was let go of.
    queue, provisioner, *agents = h.runners
    assert all(w.status in ("Finished", "Cancelled") for w in queue.state.workloads.values())
    assert not any(
        q for res in queue.state.usage.values() for fl in res.values() for q in fl.values()
    )
    assert provisioner.decider.summary(provisioner.state)["nodes_in_use"] == {}
    assert not any(provisioner.state.quota_used.values())
    for agent in agents:
        assert agent.state.pods == {} and agent.state.nodes == set()
    for runner in h.runners:
        checked, mismatches = verify_decisions(log, runner.decider)
        assert checked > 0 or runner.decider.name != "queue"
        assert mismatches == [], mismatches[:1]
