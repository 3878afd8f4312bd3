"""Properties of atomic provisioning (DWS) over random clouds, requests and workloads.

Random zones and capacity arriving over time, regional quotas, stockouts, the
active-request quota, booking windows and run durations; standalone requests (some
deleted, some consumed) and queued workloads behind a provisioning admission check
(some cancelled), sometimes with an external check too whose controller says random things
at random times. Every check reads the event log, not the deciders' state:

- no request ever runs work on part of its nodes (a pod starts only on a request that is
  Provisioned, all of whose nodes exist);
- a request's nodes come up in one NodesCreating, in one zone, never reused;
- capacity per pool and zone, and the regional quota, are never exceeded;
- the active-request quota (Accepted, not yet provisioned) is never exceeded;
- every request ends in exactly one terminal state, holding no nodes;
- a workload is admitted only while every admission check of its attempt is Ready
  (kueue.md §1.8);
- replaying the log re-derives every decision.
"""

from __future__ import annotations

import pickle
from dataclasses import dataclass, replace
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from muster.core import inputs
from muster.core.events import Envelope
from muster.core.events import node as nev
from muster.core.events import provisioning as pev
from muster.core.events import queue as qev
from muster.core.events import workload as wev
from muster.core.events.base import round_trip
from muster.core.model import parse
from muster.core.model.cluster import ClusterSpec
from muster.core.nodes.decider import NodeAgentDecider
from muster.core.provisioning.decider import ProvisionerDecider
from muster.core.provisioning.state import ProvisionerState
from muster.core.queueing.decider import QueueDecider
from muster.core.runner import DeciderRunner
from muster.core.sim.harness import Harness, build
from muster.core.verify import verify_decisions
from tests.unit.harness_inputs import creations_apart

GPU = "nvidia.com/gpu"
EXTERNAL = "approval"  # an external admission check
SETTINGS = settings(
    max_examples=60,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@dataclass(frozen=True)
class Scenario:
    cluster: dict[str, Any]
    requests: tuple[tuple[float, dict[str, Any]], ...]
    deletions: tuple[tuple[float, str], ...]
    workloads: tuple[tuple[float, str, dict[str, Any]], ...]
    cancels: tuple[tuple[float, str], ...]
    # What the external check's controller says: (at, workload, state, attempt or 0).
    words: tuple[tuple[float, str, str, int], ...] = ()

    def spec(self) -> ClusterSpec:
        return parse.cluster(self.cluster)

    def harness(self) -> Harness:
        subs = [(at, wid, parse.workload(doc)) for at, wid, doc in self.workloads]
        reqs = [(at, parse.provisioning_request(doc)) for at, doc in self.requests]
        deciders = [QueueDecider(), ProvisionerDecider(), NodeAgentDecider()]
        h = build(
            self.spec(), subs, self.cancels, deciders, requests=reqs, deletions=self.deletions
        )
        for at, wid, state, attempt in self.words:
            word = wev.AdmissionCheckUpdated(
                workload_id=wid,
                check=EXTERNAL,
                state=state,  # type: ignore[arg-type]
                attempt=attempt,
            )
            h.schedule(inputs.admission_check_updated(word, at), producer=inputs.INTAKE)
        return h


@st.composite
def scenarios(draw: st.DrawFn) -> Scenario:
    zones = [f"z{i}" for i in range(draw(st.integers(1, 3)))]
    biggest = 6  # nodes of the largest request: the final capacity fits it in every zone
    steps = [{"at": 0, "zones": {z: draw(st.integers(0, 4)) for z in zones}}]
    for _ in range(draw(st.integers(0, 3))):
        at = draw(st.integers(1, 4000))
        steps.append({"at": at, "zones": {draw(st.sampled_from(zones)): draw(st.integers(0, 8))}})
    steps.append({"at": 5000, "zones": {z: 2 * biggest for z in zones}})
    pool: dict[str, Any] = {
        "name": "dws-pool",
        "machineType": "g2-standard-8",
        "allocatable": {"cpu": 8, GPU: 1},
        "provisioningDelaySeconds": draw(st.sampled_from([0, 30, 120])),
        "capacity": steps,
    }
    if draw(st.booleans()):
        start = draw(st.integers(0, 3000))
        pool["failures"] = [{"at": start, "until": start + draw(st.integers(1, 900))}]
    cluster: dict[str, Any] = {
        "name": "c",
        "region": "r",
        "zones": zones,
        "nodePools": [pool],
        "activeRequests": draw(st.integers(1, 5)),
        "bookingSeconds": draw(st.sampled_from([60, 300, 600])),
        "resourceFlavors": [{"name": "f"}],
        "clusterQueues": [
            {
                "name": "cq",
                "resourceGroups": [
                    {
                        "coveredResources": [GPU],
                        "flavors": [
                            {"name": "f", "resources": [{"name": GPU, "nominalQuota": 12}]}
                        ],
                    }
                ],
                "admissionChecks": ["prov"],
            }
        ],
        "localQueues": [{"namespace": "ns", "name": "lq", "clusterQueue": "cq"}],
        "admissionChecks": [{"name": "prov", "parameters": {"name": "cfg"}}],
        "provisioningRequestConfigs": [
            {
                "name": "cfg",
                "provisioningClassName": "queued-provisioning.gke.io",
                "retryStrategy": {
                    "backoffLimitCount": draw(st.integers(0, 3)),
                    "backoffBaseSeconds": draw(st.sampled_from([10, 60])),
                },
            }
        ],
    }
    if draw(st.booleans()):
        cluster["quotas"] = [{"name": "GPUS", "resource": GPU, "limit": draw(st.integers(6, 12))}]
    external = draw(st.booleans())
    if external:
        cluster["clusterQueues"][0]["admissionChecks"].append(EXTERNAL)
        cluster["admissionChecks"].append({"name": EXTERNAL, "controllerName": "example.com/x"})

    requests: list[tuple[float, dict[str, Any]]] = []
    deletions: list[tuple[float, str]] = []
    workloads: list[tuple[float, str, dict[str, Any]]] = []
    cancels: list[tuple[float, str]] = []
    words: list[tuple[float, str, str, int]] = []
    for i in range(draw(st.integers(0, 6))):
        at = float(draw(st.integers(0, 3000)))
        count = draw(st.integers(1, biggest))
        params = {}
        if draw(st.booleans()):
            params["maxRunDurationSeconds"] = str(draw(st.integers(60, 7200)))
        requests.append(
            (
                at,
                {
                    "name": f"r{i}",
                    "namespace": "ns",
                    "parameters": params,
                    "podSets": [{"name": "t", "count": count, "requests": {GPU: 1}}],
                },
            )
        )
        if draw(st.booleans()):
            deletions.append((at + draw(st.integers(0, 6000)), f"ns/r{i}"))
        if draw(st.booleans()):
            pods = draw(st.integers(1, count + 1))  # one too many: stays unschedulable
            workloads.append(
                (
                    at + draw(st.integers(0, 3000)),
                    f"c{i}",
                    {
                        "name": f"c{i}",
                        "namespace": "ns",
                        "consumesProvisioningRequest": f"r{i}",
                        "podSets": [{"count": pods, "requests": {GPU: 1}}],
                        "runtime": {"durationSeconds": draw(st.integers(10, 9000))},
                    },
                )
            )
    for i in range(draw(st.integers(0, 5))):
        at = float(draw(st.integers(0, 3000)))
        wid = f"w{i}"
        workloads.append(
            (
                at,
                wid,
                {
                    "name": wid,
                    "namespace": "ns",
                    "queueName": "lq",
                    "podSets": [{"count": draw(st.integers(1, biggest)), "requests": {GPU: 1}}],
                    "runtime": {"durationSeconds": draw(st.integers(10, 3000))},
                },
            )
        )
        if draw(st.booleans()):
            cancels.append((at + draw(st.integers(0, 3000)), wid))
        for _ in range(draw(st.integers(0, 4)) if external else 0):
            words.append(
                (
                    at + draw(st.integers(0, 6000)),
                    wid,
                    draw(
                        st.sampled_from(["Ready", "Ready", "Ready", "Pending", "Retry", "Rejected"])
                    ),
                    draw(st.integers(0, 3)),
                )
            )
    return Scenario(
        cluster,
        tuple(requests),
        tuple(deletions),
        tuple(workloads),
        tuple(cancels),
        tuple(words),
    )


def lifecycle(log: list[Envelope]) -> dict[str, list[Envelope]]:
    out: dict[str, list[Envelope]] = {}
    for env in log:
        rid = getattr(env.event, "request_id", None)
        if rid is not None and env.stream_id.startswith("provisioning-"):
            out.setdefault(rid, []).append(env)
    return out


@given(scenarios())
@SETTINGS
def test_atomic_one_zone_never_partial_and_within_capacity(s: Scenario) -> None:
    h = s.harness()
    h.run()
    log = creations_apart(h.log.envelopes)  # node creations as events of their own
    spec = s.spec()
    pool = spec.node_pools[0]
    node_owner: dict[str, str] = {}
    expected_nodes: dict[str, int] = {}
    live: dict[str, set[str]] = {}  # request -> its nodes that exist
    provisioned: set[str] = set()
    in_use: dict[str, int] = {}
    gpus = 0
    limit = spec.quotas[0].limit if spec.quotas else None
    for env in log:
        ev = env.event
        if isinstance(ev, pev.ProvisioningAccepted):
            expected_nodes[ev.request_id] = sum(p.nodes for p in ev.pod_sets)
        elif isinstance(ev, pev.NodesCreating):
            assert ev.request_id not in live, "a request got nodes twice"
            assert len({n.zone for n in ev.nodes}) == 1, "nodes of one request in two zones"
            assert len(ev.nodes) == expected_nodes[ev.request_id], "not every node at once"
            for n in ev.nodes:
                assert n.name not in node_owner, "a node reused across requests"
                node_owner[n.name] = ev.request_id
            live[ev.request_id] = {n.name for n in ev.nodes}
            in_use[ev.zone] = in_use.get(ev.zone, 0) + len(ev.nodes)
            capacity = pool.capacity_at(env.occurred_at - 0.0, spec.zones).get(ev.zone, 0)
            assert in_use[ev.zone] <= capacity, "zone capacity exceeded"
            gpus += len(ev.nodes)
            assert limit is None or gpus <= limit, "regional quota exceeded"
        elif isinstance(ev, pev.ProvisioningProvisioned):
            assert ev.request_id in live
            provisioned.add(ev.request_id)
        elif isinstance(ev, pev.NodesDeleted):
            nodes = live.pop(ev.request_id)
            assert set(ev.nodes) == nodes, "a request lost only part of its nodes"
            for name in nodes:
                z = name.split(".")[1]
                in_use[z] -= 1
            gpus -= len(nodes)
            provisioned.discard(ev.request_id)
        elif isinstance(ev, nev.PodStarted):
            rid = node_owner[ev.node]
            assert rid in provisioned, "a pod started before its request was Provisioned"
            assert live[rid] >= {ev.node}, "a pod started on a request missing nodes"
    assert live == {}, f"nodes still held at the end: {sorted(live)}"


@given(scenarios())
@SETTINGS
def test_active_quota_never_exceeded_and_each_request_ends_once(s: Scenario) -> None:
    h = s.harness()
    h.run()
    log = creations_apart(h.log.envelopes)  # node creations as events of their own
    limit = s.spec().active_requests
    active: set[str] = set()
    for env in log:
        ev = env.event
        if isinstance(ev, pev.ProvisioningAccepted):
            active.add(ev.request_id)
            assert len(active) <= limit, "more Accepted requests than activeRequests"
        elif isinstance(
            ev, pev.ProvisioningProvisioned | pev.ProvisioningFailed | pev.ProvisioningCancelled
        ):
            active.discard(ev.request_id)
    for rid, envs in lifecycle(log).items():
        user = ("ProvisioningRequested", "ProvisioningDeleteRequested")
        kinds = [type(e.event).__name__ for e in envs if type(e.event).__name__ not in user]
        ends = [
            k
            for k in kinds
            if k in ("ProvisioningFailed", "ProvisioningCancelled", "ProvisioningProvisioned")
        ]
        # Exactly one outcome, and a provisioned or booting request's nodes are removed once.
        assert len(ends) == 1, f"{rid}: {kinds}"
        created = kinds.count("NodesCreating")
        assert kinds.count("NodesDeleted") == created, f"{rid}: {kinds}"
        if ends[0] == "ProvisioningFailed":
            assert created == 0
        last_outcome = max(i for i, k in enumerate(kinds) if k in ends)
        assert all(
            k in ("NodesDeleted", "ProvisioningBookingExpired", "ProvisioningCapacityRevoked")
            for k in kinds[last_outcome + 1 :]
        ), f"{rid}: {kinds}"


@given(scenarios())
@SETTINGS
def test_admitted_only_while_every_check_is_ready(s: Scenario) -> None:
    """kueue.md §1.8: Admitted = quota reserved and every admission check Ready; the
    external check's word counts for the attempt it names (or the current one) while the
    workload holds quota, and a new attempt starts every check afresh."""
    h = s.harness()
    h.run()
    attempt: dict[str, int] = {}
    checks: dict[str, tuple[str, ...]] = {}
    said: dict[str, str] = {}  # workload -> the external check's state this attempt
    provisioned: set[str] = set()
    for env in h.log.envelopes:
        ev = env.event
        if isinstance(ev, qev.QuotaReserved):
            attempt[ev.workload_id] = ev.attempt
            checks[ev.workload_id] = ev.checks
            said[ev.workload_id] = "Pending"
        elif isinstance(ev, qev.WorkloadEvicted | qev.WorkloadRejected | qev.WorkloadCancelled):
            attempt.pop(ev.workload_id, None)
        elif isinstance(ev, wev.AdmissionCheckUpdated):
            now = attempt.get(ev.workload_id)
            if now is not None and ev.attempt in (0, now):
                said[ev.workload_id] = ev.state
        elif isinstance(ev, pev.ProvisioningProvisioned):
            provisioned.add(ev.request_id)
        elif isinstance(ev, qev.WorkloadAdmitted) and ev.cluster_queue:
            wid = ev.workload_id
            assert pev.request_id(wid, attempt[wid]) in provisioned
            if EXTERNAL in checks[wid]:
                assert said[wid] == "Ready", f"{wid} admitted with {EXTERNAL} {said[wid]}"


@given(scenarios())
@settings(SETTINGS, max_examples=15)
def test_replay_re_derives_every_decision(s: Scenario) -> None:
    h = s.harness()
    h.run()
    for decider in (QueueDecider(), ProvisionerDecider(), NodeAgentDecider()):
        _, mismatches = verify_decisions(h.log.envelopes, decider)
        assert mismatches == [], mismatches[:1]


@given(scenarios())
@settings(SETTINGS, max_examples=25)
def test_the_deadline_index_is_every_held_requests_deadline_after_every_event(
    s: Scenario,
) -> None:
    """peers.md §4.4 (GKE DWS: a booking expires unused, maxRunDurationSeconds revokes
    capacity, a standalone request's idle nodes scale down): what expires at a step, and the
    next time one does, come from an index of the held requests' deadlines (``deadlines``,
    ``by_deadline``), not a walk over every held request. After every event of runs with
    bookings, run durations, cancellations and deletions, the index is exactly each held
    request's ``deadline()``, what is due is what the walk finds (in held order), and the
    next deadline is the walk's."""
    h = s.harness()
    h.run()
    runner: DeciderRunner[ProvisionerState] = DeciderRunner(ProvisionerDecider())
    for env in h.log.envelopes:
        runner.fold([env])
        state = runner.state
        walked = {
            r.id: t for r in state.held_requests() if (t := r.deadline()) is not None
        }
        assert state.deadlines == walked, env.type
        assert list(state.by_deadline) == sorted((t, rid) for rid, t in walked.items())
        due = [r.id for r in state.held_requests() if walked.get(r.id, state.now + 1) <= state.now]
        assert [r.id for r in state.due_requests()] == due, env.type
        after = [t for t in walked.values() if t > state.now]
        assert state.next_held_deadline() == min(after, default=None), env.type


@given(scenarios())
@settings(SETTINGS, max_examples=25)
def test_what_a_loop_is_not_woken_for_never_makes_a_decision_due(s: Scenario) -> None:
    """The provisioner's and node agent's loops are not woken by a commit of only
    ``workload.submitted`` (``wakes_later``: the spec waits for the reservation or the
    admission, whose commits wake them). Sound only if folding such an event never makes
    a decision due that was not already due, or due by time alone: after every such event
    of runs with requests, cancellations and checks, a decider that had nothing to say
    before it has nothing to say after it, unless its own next deadline had come."""
    h = s.harness()
    h.run()
    for decider in (ProvisionerDecider(), NodeAgentDecider()):
        later = decider.wakes_later
        assert later == frozenset({"workload.submitted"})
        runner: DeciderRunner[Any] = DeciderRunner(decider)
        for env in h.log.envelopes:
            if env.type in later:
                quiet_before = not decider.decide(runner.state)
                deadline = decider.next_deadline(runner.state)
                runner.fold([env])
                timed = deadline is not None and deadline <= runner.state.now
                if quiet_before and not timed:
                    assert decider.decide(runner.state) == [], (decider.name, env.position)
            else:
                runner.fold([env])


def _folded(runner: DeciderRunner[ProvisionerState], news: list[Any]) -> None:
    """Fold the provisioner's own ``news`` as the store gives them back (round-tripped)."""
    envs = []
    for i, new in enumerate(news, start=runner.position + 1):
        version = runner.versions.get(new.stream_id, 0) + 1 + sum(
            1 for e in envs if e.stream_id == new.stream_id
        )
        envs.append(
            Envelope(
                position=i,
                event_id=f"own-{i}",
                stream_id=new.stream_id,
                stream_version=version,
                type=new.event.TYPE,
                schema_version=new.event.VERSION,
                occurred_at=new.occurred_at,
                recorded_at=0.0,
                causation_id=None,
                correlation_id=new.correlation_id,
                producer="provisioner",
                event=round_trip(new.event),
            )
        )
    runner.fold(envs)


def _fused(first: list[Any], then: list[Any]) -> list[Any]:
    """``first`` then ``then``, a request accepted in ``first`` and Provisioned at once in
    ``then`` as one Provisioned that carries its acceptance, where the acceptance was."""
    ready = {
        n.event.request_id: n
        for n in then
        if isinstance(n.event, pev.ProvisioningProvisioned) and n.event.created
    }
    out, fused = [], set()
    for n in first:
        if isinstance(n.event, pev.ProvisioningAccepted) and n.event.request_id in ready:
            up = ready[n.event.request_id]
            out.append(replace(up, event=replace(up.event, accepted=n.event)))
            fused.add(n.event.request_id)
        else:
            out.append(n)
    return out + [n for n in then if getattr(n.event, "request_id", None) not in fused]


@given(scenarios())
@settings(SETTINGS, max_examples=25)
def test_a_deletions_decision_searches_as_the_next_decision_did(s: Scenario) -> None:
    """peers.md §4.4 (GKE DWS: capacity, stockouts, quotas, bookings, cancellations): a
    provisioner decision that deletes nodes or cancels requests also searches for capacity,
    with what it frees. After every event of random runs, where it decides otherwise than
    before (``decided_before``: no search in such a decision), what it decides is exactly
    what before was decided in that decision and, having folded it, the next one at the
    same instant (an acceptance and its at-once Provisioned fused, as within one decision),
    and folding either leaves the same state."""
    h = s.harness()
    h.run()
    decider = ProvisionerDecider()
    runner: DeciderRunner[ProvisionerState] = DeciderRunner(decider)
    for env in h.log.envelopes:
        runner.fold([env])
        now, first = decider.decide(runner.state), decider.decided_before(runner.state)
        if now == first:
            continue
        new, old = pickle.loads(pickle.dumps(runner)), pickle.loads(pickle.dumps(runner))
        _folded(old, first)
        then = decider.decide(old.state)
        assert {n.occurred_at for n in then} <= {runner.state.now}
        assert now == _fused(first, then), env.position
        _folded(old, then)
        _folded(new, now)
        assert decider.summary(new.state) == decider.summary(old.state)
        assert new.state.requests.keys() == old.state.requests.keys()
        assert (new.state.in_use, new.state.quota_used, new.state.held, new.state.deadlines) == (
            old.state.in_use,
            old.state.quota_used,
            old.state.held,
            old.state.deadlines,
        )


@given(scenarios())
@settings(SETTINGS, max_examples=15)
def test_a_log_of_the_older_form_re_derives(s: Scenario) -> None:
    """Logs written before a Provisioned stood for its acceptance and node creation and
    registered the nodes it created Ready (the node agent's node.registered of each, after
    the provisioner's batch: ``creations_apart``) re-derive every decision of the
    provisioner and the node agent (``decided_before``, ``as_logged_before``)."""
    h = s.harness()
    h.run()
    old = creations_apart(h.log.envelopes)
    for decider in (ProvisionerDecider(), NodeAgentDecider()):
        _, mismatches = verify_decisions(old, decider)
        assert mismatches == [], mismatches[:1]
