"""The provisioner over the simulated cloud: one zone per request or nothing, regional
quotas, node lifetimes tied to the reservation, permanent failures, boot delays."""

from __future__ import annotations

import itertools
import pickle
from collections.abc import Iterable
from dataclasses import replace
from typing import Any, TypeVar

import msgspec
import pytest

from muster.core import inputs
from muster.core.events import (
    Envelope,
    Event,
    NewEvent,
    StreamAppend,
    decode_json,
    encode_json,
)
from muster.core.events import node as nev
from muster.core.events import provisioning as pev
from muster.core.events import queue as qev
from muster.core.model import parse
from muster.core.nodes.decider import NodeAgentDecider
from muster.core.provisioning.decider import ProvisionerDecider
from muster.core.queueing.decider import QueueDecider
from muster.core.runner import DeciderRunner
from muster.core.sim.harness import Harness, build
from muster.core.sim.log import MemoryLog
from muster.core.verify import verify_decisions
from muster.core.views.workloads import WorkloadsView
from tests.unit.harness_inputs import creations_apart, event_as, removals_apart, submissions

GPU = "nvidia.com/gpu"
ZA, ZB = "us-central1-a", "us-central1-b"
E = TypeVar("E", bound=Event)


def cluster_doc(
    *,
    capacity: list[dict[str, Any]] | None = None,
    delay: float = 0,
    quota: int | None = None,
    nominal: int = 64,
    max_nodes: int = 100,
    extra_pools: Iterable[dict[str, Any]] = (),
) -> dict[str, Any]:
    pool: dict[str, Any] = {
        "name": "a100",
        "machineType": "a2-highgpu-8g",
        "allocatable": {GPU: 8, "cpu": 96},
        "labels": {"accelerator": "a100"},
        "maxNodes": max_nodes,
        "provisioningDelaySeconds": delay,
    }
    if capacity is not None:
        pool["capacity"] = capacity
    doc: dict[str, Any] = {
        "name": "test",
        "region": "us-central1",
        "zones": [ZA, ZB],
        "nodePools": [pool, *extra_pools],
        "resourceFlavors": [{"name": "a100", "nodeLabels": {"accelerator": "a100"}}],
        "clusterQueues": [
            {
                "name": "cq",
                "resourceGroups": [
                    {
                        "coveredResources": [GPU],
                        "flavors": [
                            {"name": "a100", "resources": [{"name": GPU, "nominalQuota": nominal}]}
                        ],
                    }
                ],
            }
        ],
        "localQueues": [{"namespace": "default", "name": "lq", "clusterQueue": "cq"}],
    }
    if quota is not None:
        doc["quotas"] = [{"name": "NVIDIA_A100_GPUS", "resource": GPU, "limit": quota}]
    return doc


def workload_doc(
    name: str, nodes: int = 1, gpus: int = 8, duration: float = 100, **pod_set: Any
) -> dict[str, Any]:
    """``nodes`` pods of ``gpus`` GPUs: with 8 GPUs a pod, one node per pod."""
    return {
        "name": name,
        "queueName": "lq",
        "podSets": [{"name": "w", "count": nodes, "requests": {GPU: gpus}, **pod_set}],
        "runtime": {"durationSeconds": duration},
    }


def harness(
    cluster: dict[str, Any],
    workloads: Iterable[tuple[float, dict[str, Any]]],
    cancels: Iterable[tuple[float, str]] = (),
) -> Harness:
    """Workload ids are the workload names."""
    return build(parse.cluster(cluster), submissions(workloads), cancels)


def run(
    cluster: dict[str, Any],
    workloads: Iterable[tuple[float, dict[str, Any]]],
    cancels: Iterable[tuple[float, str]] = (),
) -> Harness:
    h = harness(cluster, workloads, cancels)
    h.run()
    return h


def of(h: Harness, cls: type[E], request: str | None = None) -> list[tuple[Envelope, E]]:
    """The events of ``cls`` (node creations in either form: ``event_as``)."""
    out = []
    for env in h.log.envelopes:
        ev = event_as(env, cls)
        if isinstance(ev, cls) and (request is None or getattr(ev, "request_id", None) == request):
            out.append((env, ev))
    return out


def one(h: Harness, cls: type[E], request: str) -> tuple[Envelope, E]:
    found = of(h, cls, request)
    assert len(found) == 1, found
    return found[0]


def workload_events(h: Harness, cls: type[E], workload: str) -> list[tuple[Envelope, E]]:
    return [(env, ev) for env, ev in of(h, cls) if getattr(ev, "workload_id", None) == workload]


# -- one zone or nothing -------------------------------------------------------------


STEPPED = [{"at": 0, "zones": {ZA: 3, ZB: 0}}, {"at": "10m", "zones": {ZB: 4}}]


def test_request_waits_for_one_zone_with_room_for_all_its_nodes() -> None:
    h = run(cluster_doc(capacity=STEPPED), [(0, workload_doc("gang", nodes=4))])
    waits = [
        (env.occurred_at, ev.reason, ev.message)
        for env, ev in of(h, pev.ProvisioningWaiting, "gang.1")
    ]
    assert waits == [
        (0.0, "NotProvisioned", "waiting for capacity: no single zone has room for 4 x a100")
    ]
    ((env, creating),) = of(h, pev.NodesCreating)
    assert env.occurred_at == 600.0
    assert creating.zone == ZB
    assert len(creating.nodes) == 4
    assert {n.zone for n in creating.nodes} == {ZB}
    assert all(n.labels["topology.kubernetes.io/zone"] == ZB for n in creating.nodes)
    env, up = one(h, pev.ProvisioningProvisioned, "gang.1")
    assert env.occurred_at == 600.0 and up.zone == ZB
    assert set(up.assignments.values()) == {n.name for n in creating.nodes}
    assert sorted(up.assignments) == ["w-0", "w-1", "w-2", "w-3"]
    # Admitted only then, and every pod runs on a zone-b node.
    ((env, admitted),) = workload_events(h, qev.WorkloadAdmitted, "gang")
    assert env.occurred_at == 600.0
    assert admitted.placements == up.assignments
    started = [ev for _, ev in workload_events(h, nev.PodStarted, "gang")]
    assert len(started) == 4 and all(ev.node in set(up.assignments.values()) for ev in started)
    assert workload_events(h, qev.WorkloadFinished, "gang")[0][1].outcome == "Succeeded"


def test_zone_a_still_serves_requests_that_fit_there() -> None:
    h = run(
        cluster_doc(capacity=STEPPED),
        [(0, workload_doc("gang", nodes=4)), (1, workload_doc("trio", nodes=3))],
    )
    creating = {
        ev.request_id: (env.occurred_at, ev.zone, len(ev.nodes))
        for env, ev in of(h, pev.NodesCreating)
    }
    assert creating == {"trio.1": (1.0, ZA, 3), "gang.1": (600.0, ZB, 4)}


def test_nodes_are_never_split_across_zones() -> None:
    # 2 + 2 free nodes in two zones never make room for 3.
    h = run(
        cluster_doc(capacity=[{"at": 0, "zones": {ZA: 2, ZB: 2}}]),
        [(0, workload_doc("three", nodes=3))],
    )
    assert of(h, pev.NodesCreating) == []
    assert [ev.reason for _, ev in of(h, pev.ProvisioningWaiting)] == ["NotProvisioned"]
    assert workload_events(h, qev.WorkloadAdmitted, "three") == []


def test_all_pod_sets_of_a_request_share_one_zone() -> None:
    cpu_pool = {
        "name": "cpu",
        "machineType": "n2",
        "allocatable": {"cpu": 32},
        "labels": {"kind": "cpu"},
    }
    cluster = cluster_doc(
        capacity=[{"at": 0, "zones": {ZA: 2, ZB: 1}}, {"at": 100, "zones": {ZB: 2}}],
        extra_pools=[{**cpu_pool, "capacity": [{"at": 0, "zones": {ZA: 0, ZB: 5}}]}],
    )
    cluster["clusterQueues"][0]["resourceGroups"].append(
        {
            "coveredResources": ["cpu"],
            "flavors": [{"name": "cpu", "resources": [{"name": "cpu", "nominalQuota": 1000}]}],
        }
    )
    cluster["resourceFlavors"].append({"name": "cpu", "nodeLabels": {"kind": "cpu"}})
    doc = workload_doc("mixed", nodes=2)
    doc["podSets"].append({"name": "driver", "count": 1, "requests": {"cpu": 8}})
    h = run(cluster, [(0, doc)])
    # a has the GPUs but no CPU node; b has the CPU node but one GPU node until t=100.
    ((env, creating),) = of(h, pev.NodesCreating)
    assert env.occurred_at == 100.0 and creating.zone == ZB
    assert sorted((n.pool, n.zone) for n in creating.nodes) == [
        ("a100", ZB),
        ("a100", ZB),
        ("cpu", ZB),
    ]


def test_max_nodes_bounds_a_pool_across_zones() -> None:
    h = run(
        cluster_doc(max_nodes=3),
        [
            (0, workload_doc("first", nodes=2, duration=50)),
            (1, workload_doc("second", nodes=2, duration=50)),
        ],
    )
    creating = {ev.request_id: env.occurred_at for env, ev in of(h, pev.NodesCreating)}
    assert creating == {"first.1": 0.0, "second.1": 50.0}


# -- regional quota --------------------------------------------------------------------


QUOTA_MESSAGE = "Quota 'NVIDIA_A100_GPUS' exceeded. Limit: 16.0 in region us-central1."


def test_regional_quota_exceeded() -> None:
    h = run(
        cluster_doc(quota=16),
        [
            (0, workload_doc("first", nodes=2, duration=100)),
            (5, workload_doc("second", nodes=1, duration=10)),
        ],
    )
    waits = [
        (env.occurred_at, ev.reason, ev.message)
        for env, ev in of(h, pev.ProvisioningWaiting, "second.1")
    ]
    assert waits == [(5.0, "QuotaExceeded", QUOTA_MESSAGE)]
    creating = {ev.request_id: env.occurred_at for env, ev in of(h, pev.NodesCreating)}
    # The quota is freed when first's nodes are deleted at t=100.
    assert creating == {"first.1": 0.0, "second.1": 100.0}


def test_request_larger_than_the_regional_quota_waits_with_quota_exceeded() -> None:
    h = run(cluster_doc(quota=16), [(0, workload_doc("big", nodes=3))])
    assert [(ev.reason, ev.message) for _, ev in of(h, pev.ProvisioningWaiting)] == [
        ("QuotaExceeded", QUOTA_MESSAGE)
    ]
    assert of(h, pev.NodesCreating) == []


def test_regional_quota_of_another_pool_does_not_apply() -> None:
    cluster = cluster_doc(quota=8)
    cluster["quotas"][0]["nodePools"] = ["some-other-pool"]
    h = run(cluster, [(0, workload_doc("big", nodes=3))])
    assert of(h, pev.ProvisioningWaiting) == []
    assert len(of(h, pev.NodesCreating, "big.1")) == 1


# -- node lifetimes -------------------------------------------------------------------


def test_nodes_are_deleted_at_finish_and_capacity_is_reused_with_fresh_names() -> None:
    cluster = cluster_doc(capacity=[{"at": 0, "zones": {ZA: 1, ZB: 0}}])
    h = run(
        cluster,
        [
            (0, workload_doc("a", duration=100)),
            (1, workload_doc("b", duration=50)),
            (2, workload_doc("c", duration=10)),
        ],
    )
    created = {
        ev.request_id: (env.position, env.occurred_at, {n.name for n in ev.nodes})
        for env, ev in of(h, pev.NodesCreating)
    }
    deleted = {
        ev.request_id: (env.position, env.occurred_at, set(ev.nodes))
        for env, ev in of(h, pev.NodesDeleted)
    }
    assert {r: t for r, (_, t, _) in created.items()} == {"a.1": 0.0, "b.1": 100.0, "c.1": 150.0}
    assert {r: t for r, (_, t, _) in deleted.items()} == {"a.1": 100.0, "b.1": 150.0, "c.1": 160.0}
    # The same names are deleted as were created ...
    assert all(deleted[r][2] == created[r][2] for r in created)
    # ... the one slot is reused only after the previous nodes are deleted ...
    assert deleted["a.1"][0] < created["b.1"][0] and deleted["b.1"][0] < created["c.1"][0]
    # ... and never under a name an earlier request used.
    names = [n for _, _, ns in created.values() for n in ns]
    assert len(names) == len(set(names)) == 3
    # Without pods by then, they went with their deletion (no node.removed: ``gone``).
    agent = next(r for r in h.runners if isinstance(r.decider, NodeAgentDecider))
    assert of(h, nev.NodeRemoved) == [] and sorted(agent.state.gone) == sorted(names)


def test_cancel_while_waiting_for_capacity_cancels_the_request() -> None:
    h = run(
        cluster_doc(capacity=STEPPED), [(0, workload_doc("gang", nodes=4))], cancels=[(60, "gang")]
    )
    env, _ = one(h, pev.ProvisioningCancelled, "gang.1")
    assert env.occurred_at == 60.0
    assert of(h, pev.NodesCreating) == []  # not even when zone b grows at 10m


def test_cancel_while_nodes_boot_stops_the_request_and_removes_them_after_booking() -> None:
    """GKE: deleting a request stops node creation, but nodes already booting appear anyway
    and are removed when their (10 minute) booking expires unused."""
    h = run(cluster_doc(delay=30), [(0, workload_doc("slow"))], cancels=[(10, "slow")])
    ((cenv, _),) = of(h, pev.ProvisioningCancelled, "slow.1")
    assert cenv.occurred_at == 10.0
    env, deleted = one(h, pev.NodesDeleted, "slow.1")
    assert env.occurred_at == 30.0 + 600.0  # ready_at + the booking window
    assert deleted.reason == "BookingExpired"
    assert of(h, pev.ProvisioningProvisioned) == []
    assert of(h, nev.NodeRegistered) == []
    assert set(deleted.nodes) == {n.name for _, ev in of(h, pev.NodesCreating) for n in ev.nodes}
    provisioner = next(r for r in h.runners if r.decider.name == "provisioner")
    # Its nodes gone, the request is over: forgotten, counted under its final status.
    assert "slow.1" not in provisioner.state.requests
    assert provisioner.state.over == {"Cancelled": 1}
    assert provisioner.state.in_use == {("a100", ZA): 0}


# -- permanent failure -----------------------------------------------------------------


def test_pod_set_no_pool_can_serve_is_rejected() -> None:
    # 16 GPUs per pod: an 8-GPU node has no room for even one.
    h = run(cluster_doc(), [(0, workload_doc("wide", nodes=1, gpus=16))])
    env, failed = one(h, pev.ProvisioningFailed, "wide.1")
    assert failed.reason == "NoSuitableNodePool"
    assert failed.message == (
        "no node pool can run pod set w: none matches node selector "
        "{'accelerator': 'a100'} with room for one pod"
    )
    ((renv, rejected),) = workload_events(h, qev.WorkloadRejected, "wide")
    assert renv.position > env.position
    assert rejected.reason == "ProvisioningFailed"
    assert rejected.message == f"NoSuitableNodePool: {failed.message}"
    assert of(h, pev.NodesCreating) == []
    queue = next(r for r in h.runners if r.decider.name == "queue")
    assert queue.state.status_of("wide") == "Rejected"
    assert all(q == 0 for res in queue.state.usage["cq"].values() for q in res.values())


def test_node_selector_no_pool_has_is_rejected() -> None:
    h = run(cluster_doc(), [(0, workload_doc("picky", nodeSelector={"disk": "ssd"}))])
    _, failed = one(h, pev.ProvisioningFailed, "picky.1")
    assert failed.reason == "NoSuitableNodePool"
    assert "pod set w" in failed.message and "'disk': 'ssd'" in failed.message
    assert [ev.reason for _, ev in workload_events(h, qev.WorkloadRejected, "picky")] == [
        "ProvisioningFailed"
    ]


def test_rejection_frees_quota_for_the_next_workload() -> None:
    h = run(
        cluster_doc(nominal=16),
        [(0, workload_doc("wide", nodes=1, gpus=16)), (0, workload_doc("fine", nodes=2))],
    )
    # wide (first in order) took all 16 GPUs, was rejected, and fine got them at once.
    reserved = [ev.workload_id for _, ev in of(h, qev.QuotaReserved)]
    assert reserved == ["wide", "fine"]
    assert workload_events(h, qev.WorkloadFinished, "fine")[0][1].outcome == "Succeeded"


# -- provisioning delay (virtual time) -------------------------------------------------


@pytest.mark.parametrize(("delay", "submit"), [(0, 0.0), (45, 7.0), (2.5, 3.25)])
def test_provisioned_exactly_at_accept_time_plus_delay(delay: float, submit: float) -> None:
    h = run(cluster_doc(delay=delay), [(submit, workload_doc("job", duration=10))])
    accepted, _ = one(h, pev.ProvisioningAccepted, "job.1")
    creating, nodes = one(h, pev.NodesCreating, "job.1")
    assert creating.occurred_at == submit  # capacity is there at once
    provisioned, _ = one(h, pev.ProvisioningProvisioned, "job.1")
    assert accepted.occurred_at == submit
    assert nodes.ready_at == submit + delay
    assert provisioned.occurred_at == submit + delay
    ((started, _),) = workload_events(h, nev.PodStarted, "job")
    assert started.occurred_at == submit + delay
    ((finished, _),) = workload_events(h, qev.WorkloadFinished, "job")
    assert finished.occurred_at == submit + delay + 10


def test_delay_counts_from_when_capacity_is_found() -> None:
    h = run(cluster_doc(capacity=STEPPED, delay=45), [(0, workload_doc("gang", nodes=4))])
    assert one(h, pev.ProvisioningAccepted, "gang.1")[0].occurred_at == 0.0
    assert one(h, pev.NodesCreating, "gang.1")[0].occurred_at == 600.0
    assert one(h, pev.ProvisioningProvisioned, "gang.1")[0].occurred_at == 645.0


# -- bugs -------------------------------------------------------------------------------


def test_zone_pinned_by_the_flavor_is_honoured() -> None:
    cluster = cluster_doc()
    cluster["resourceFlavors"][0]["nodeLabels"]["topology.kubernetes.io/zone"] = ZB
    h = run(cluster, [(0, workload_doc("pinned"))])
    ((_, reserved),) = workload_events(h, qev.QuotaReserved, "pinned")
    assert reserved.node_selectors["w"]["topology.kubernetes.io/zone"] == ZB
    ((_, creating),) = of(h, pev.NodesCreating)
    assert creating.zone == ZB


def test_zone_pinned_by_the_pod_node_selector_is_honoured() -> None:
    h = run(
        cluster_doc(),
        [(0, workload_doc("pinned", nodeSelector={"topology.kubernetes.io/zone": ZB}))],
    )
    ((_, creating),) = of(h, pev.NodesCreating)
    assert creating.zone == ZB


def test_node_names_are_unique_across_requests_whatever_the_ids() -> None:
    first = workload_doc("j", duration=100)
    first["podSets"][0]["name"] = "a-1-r1-b"
    second = workload_doc("j", duration=30)
    second["podSets"][0]["name"] = "b"
    h = Harness([QueueDecider(), ProvisionerDecider(), NodeAgentDecider()])
    for new in inputs.configuration(parse.cluster(cluster_doc()), 0.0):
        h.schedule(new, producer="admin")
    h.schedule(inputs.submission("j-0", parse.workload(first), 0.0), producer="intake")
    h.schedule(inputs.submission("j-0-r1-a-1", parse.workload(second), 0.0), producer="intake")
    h.run()
    names = [n.name for _, ev in of(h, pev.NodesCreating) for n in ev.nodes]
    assert len(names) == len(set(names)), names
    assert sorted(ev.workload_id for _, ev in of(h, qev.WorkloadFinished)) == ["j-0", "j-0-r1-a-1"]


@pytest.mark.parametrize("case", ["pools-share-no-zone", "more-nodes-than-max-nodes"])
def test_request_the_cloud_can_never_serve_fails_at_once(case: str) -> None:
    cpu_pool = {
        "name": "cpu",
        "machineType": "n2",
        "allocatable": {"cpu": 32},
        "labels": {"kind": "cpu"},
        "zones": [ZB],
    }
    cluster = cluster_doc(
        max_nodes=2 if case == "more-nodes-than-max-nodes" else 100, extra_pools=[cpu_pool]
    )
    cluster["nodePools"][0]["zones"] = [ZA]
    cluster["clusterQueues"][0]["resourceGroups"].append(
        {
            "coveredResources": ["cpu"],
            "flavors": [{"name": "cpu", "resources": [{"name": "cpu", "nominalQuota": 1000}]}],
        }
    )
    cluster["resourceFlavors"].append({"name": "cpu", "nodeLabels": {"kind": "cpu"}})
    doc = workload_doc("never", nodes=3 if case == "more-nodes-than-max-nodes" else 1)
    if case == "pools-share-no-zone":
        doc["podSets"].append({"name": "driver", "count": 1, "requests": {"cpu": 8}})
    h = run(cluster, [(0, doc)])
    assert of(h, pev.NodesCreating) == []
    assert [ev.reason for _, ev in workload_events(h, qev.WorkloadRejected, "never")] == [
        "ProvisioningFailed"
    ]


def test_release_at_the_instant_nodes_are_ready_does_not_provision() -> None:
    h = run(cluster_doc(delay=30), [(0, workload_doc("job"))], cancels=[(30, "job")])
    cancelled, _ = one(h, pev.ProvisioningCancelled, "job.1")
    assert cancelled.occurred_at == 30.0
    assert of(h, pev.ProvisioningProvisioned, "job.1") == []
    provisioner = next(r for r in h.runners if r.decider.name == "provisioner")
    # Cancelled, then its booted nodes deleted: over, forgotten (holding nothing).
    assert "job.1" not in provisioner.state.requests and not provisioner.state.held
    assert provisioner.state.over == {"Cancelled": 1}


# -- the active-requests quota ---------------------------------------------------------


def test_requests_beyond_the_active_requests_quota_fail_at_once() -> None:
    """GKE's ACTIVE_RESIZE_REQUESTS: at most N requests Accepted (not yet provisioned)."""
    doc = cluster_doc(
        capacity=[{"at": 0, "zones": {ZA: 0, ZB: 0}}, {"at": "10m", "zones": {ZA: 3}}]
    )
    doc["activeRequests"] = 2
    h = run(doc, [(i, workload_doc(f"w{i}")) for i in range(3)])
    accepted = [ev.request_id for _, ev in of(h, pev.ProvisioningAccepted)]
    assert accepted == ["w0.1", "w1.1"]
    ((env, failed),) = of(h, pev.ProvisioningFailed)
    assert (env.occurred_at, failed.request_id, failed.reason) == (2.0, "w2.1", "QuotaExceeded")
    assert failed.message == (
        "Quota 'ACTIVE_RESIZE_REQUESTS' exceeded. Limit: 2.0 in region us-central1."
    )
    # The two accepted requests were provisioned once capacity came.
    assert sorted(ev.request_id for _, ev in of(h, pev.ProvisioningProvisioned)) == ["w0.1", "w1.1"]


def test_provisioned_requests_do_not_count_against_the_active_quota() -> None:
    doc = cluster_doc()
    doc["activeRequests"] = 1
    h = run(doc, [(0, workload_doc("a")), (5, workload_doc("b"))])
    assert not of(h, pev.ProvisioningFailed)
    assert len(of(h, pev.ProvisioningProvisioned)) == 2


def test_a_capacity_step_counts_at_its_own_timer_on_a_wall_clock() -> None:
    """(T + at) - T can round below ``at`` for a wall-clock T: the step must still be in
    effect when its timer fires, or the request waits forever."""
    start = 1_763_840_000.123
    at = next(
        a / 1000 for a in range(1, 1000) if (start + a / 1000) - start < a / 1000
    )  # a step time that rounds below itself
    doc = cluster_doc(capacity=[{"at": 0, "zones": {ZA: 0, ZB: 0}}, {"at": at, "zones": {ZA: 1}}])
    h = Harness([QueueDecider(), ProvisionerDecider(), NodeAgentDecider()], start=start)
    for new in inputs.configuration(parse.cluster(doc), start):
        h.schedule(new, producer=inputs.ADMIN)
    ((_, _, spec),) = submissions([(0, workload_doc("w"))])
    h.schedule(inputs.submission("w", spec, start), producer=inputs.INTAKE)
    h.run(until=start + 3600)
    ((env, _),) = of(h, pev.ProvisioningProvisioned, "w.1")
    assert env.occurred_at == start + at


# -- one step from acceptance to Provisioned ---------------------------------------------


def _provisioner_batches(h: Harness) -> list[list[Envelope]]:
    """The provisioner's decisions, a batch per step (the events of one append)."""
    out: list[list[Envelope]] = []
    for env in h.log.envelopes:
        if env.producer != "provisioner" or env.causation_id is None:
            continue
        if out and out[-1][-1].causation_id == env.causation_id:
            out[-1].append(env)
        else:
            out.append([env])
    return out


def test_acceptance_node_creation_and_ready_nodes_are_one_decision() -> None:
    """peers.md §4.4 (GKE ProvisioningRequest, DWS): Accepted, then Provisioned once every
    node is up in one zone. With room at once and no boot delay the provisioner decides all
    of it in one step (one append), as its next two steps would at the same instant."""
    h = run(cluster_doc(), [(0, workload_doc("a", nodes=2)), (0, workload_doc("b", nodes=3))])
    first = next(b for b in _provisioner_batches(h) if pev.acceptance(b[0].event) is not None)
    # One Provisioned a request, standing for its acceptance and its node creation.
    assert [(e.type, e.event.request_id) for e in first] == [  # type: ignore[attr-defined]
        (pev.ProvisioningProvisioned.TYPE, rid) for rid in ("a.1", "b.1")
    ]
    assert [
        [type(ev).__name__ for ev in e.event.stands_for(e.occurred_at)]  # type: ignore[attr-defined]
        for e in first
    ] == [["ProvisioningAccepted", "NodesCreating"]] * 2
    assert {e.occurred_at for e in first} == {0.0}
    kinds = {e.type for e in h.log.envelopes}
    assert pev.NodesCreating.TYPE not in kinds and pev.ProvisioningAccepted.TYPE not in kinds
    creating = {ev.request_id: ev for _, ev in of(h, pev.NodesCreating)}
    assert {n.zone for n in creating["a.1"].nodes} | {n.zone for n in creating["b.1"].nodes} == {
        creating["a.1"].zone
    }  # the two requests, searched in acceptance order, share zone a's room
    for rid in ("a.1", "b.1"):
        _, up = one(h, pev.ProvisioningProvisioned, rid)
        assert set(up.assignments.values()) == {n.name for n in creating[rid].nodes}
    finished = [ev.outcome for _, ev in of(h, qev.WorkloadFinished)]
    assert finished == ["Succeeded", "Succeeded"]


def test_booting_nodes_are_provisioned_by_a_later_step() -> None:
    """With a boot delay the acceptance and the node creation are one step; Provisioned
    comes at ready_at (a timer), not before."""
    h = run(cluster_doc(delay=30), [(0, workload_doc("job"))])
    batches = [[e.type for e in b] for b in _provisioner_batches(h)]
    assert batches[0] == [pev.ProvisioningAccepted.TYPE, pev.NodesCreating.TYPE]
    assert one(h, pev.ProvisioningProvisioned, "job.1")[0].occurred_at == 30.0


def test_a_step_that_frees_capacity_searches_with_it() -> None:
    """A step that deletes nodes searches for room with what the deletion frees, in the
    same decision (one zone, max nodes): the deletion first, then the node creation it made
    room for, at the same instant, one append."""
    h = run(
        cluster_doc(max_nodes=2),
        [(0, workload_doc("first", nodes=2, duration=50)), (10, workload_doc("second", nodes=2))],
    )
    deleted, _ = one(h, pev.NodesDeleted, "first.1")
    creating, _ = one(h, pev.NodesCreating, "second.1")
    assert deleted.occurred_at == creating.occurred_at == 50.0
    assert creating.causation_id == deleted.causation_id  # one decision
    assert creating.position > deleted.position


def test_a_decision_deletes_before_it_creates_in_the_room_it_frees() -> None:
    """A booking that expires in the instant another request is accepted (max nodes 2: the
    cancelled request's two booted nodes hold the pool) frees the room the new request's
    nodes take in the same decision: its deletion is logged first, so the log never holds
    more nodes than the pool had room for. A log written with the creation first (before
    this order) still re-derives, at 0 mismatches."""
    h = run(
        cluster_doc(delay=30, max_nodes=2),
        [(0, workload_doc("slow", nodes=2)), (630, workload_doc("next", nodes=2, duration=10))],
        cancels=[(10, "slow")],
    )
    deletion, _ = one(h, pev.NodesDeleted, "slow.1")
    creation, _ = one(h, pev.NodesCreating, "next.1")
    assert deletion.occurred_at == creation.occurred_at == 630.0
    assert deletion.causation_id == creation.causation_id  # one decision
    assert deletion.position < creation.position
    checked, mismatches = verify_decisions(h.log.envelopes, ProvisionerDecider())
    assert checked > 0 and mismatches == []
    # As logged before: the new request's stream first in that append.
    batch = [e for e in h.log.envelopes if e.causation_id == deletion.causation_id]
    first = batch.index(deletion)
    reordered = [*batch[first + 1 :], *batch[: first + 1]]
    assert reordered[0].stream_id == "provisioning-next.1"
    start = h.log.envelopes.index(batch[0])
    old = [*h.log.envelopes[:start], *reordered, *h.log.envelopes[start + len(batch) :]]
    old = [msgspec.structs.replace(e, position=i + 1) for i, e in enumerate(old)]
    checked, mismatches = verify_decisions(old, ProvisionerDecider())
    assert checked > 0 and mismatches == [], mismatches[:1]


def _log_of(envs: list[Envelope]) -> MemoryLog:
    """A log of ``envs``' events, in that order (renumbered)."""
    log = MemoryLog()
    for env in envs:
        new = NewEvent(stream_id=env.stream_id, event=env.event, occurred_at=env.occurred_at)
        append = StreamAppend(env.stream_id, None, [new])
        log.append([append], producer=env.producer, recorded_at=env.recorded_at)
    return log


def _decided(log: MemoryLog, decide: str) -> list[list[NewEvent]]:
    """The provisioner's decisions over ``log`` until it is quiet (``decide``: the method
    of its first decision), each appended to ``log`` (caused by the last event folded) and
    folded before the next, as a service's step does."""
    runner = DeciderRunner(ProvisionerDecider())
    runner.fold(log.envelopes)
    out: list[list[NewEvent]] = []
    first = getattr(runner.decider, decide)(runner.state)
    news = [replace(n, causation_id=runner.last_event_id) for n in first]
    while news:
        out.append(news)
        runner.fold(log.append(runner.appends(news), producer="provisioner", recorded_at=0.0))
        news = runner.decide()
    return out


def test_a_request_accepted_as_nodes_are_deleted_is_one_provisioned() -> None:
    """GKE's conditions say the order, not the time between them: a request accepted in the
    step that deletes another's nodes (the queue committed the first workload's end and the
    second's reservation before the provisioner woke) is searched with the capacity the
    deletion frees, and its nodes (ready at once) are one Provisioned that carries its
    acceptance and names them, in the deletion's append. Before, its acceptance was an
    event of its own and the rest came in the next decision: the same events otherwise, at
    the same instant, folding to the same state; a log written either way re-derives."""
    h = run(
        cluster_doc(max_nodes=2, nominal=16),
        [(0, workload_doc("first", nodes=2, duration=50)), (10, workload_doc("second", nodes=2))],
    )
    envs = h.log.envelopes
    ((deletion, _),) = of(h, pev.NodesDeleted, "first.1")
    (reserved,) = [
        e
        for e in envs
        if isinstance(e.event, qev.QuotaReserved) and e.event.workload_id == "second"
    ]
    assert reserved.position > deletion.position  # the harness: one service at a time
    prefix = [*envs[: deletion.position - 1], reserved]
    logs = {way: _log_of(prefix) for way in ("decide", "decided_before")}
    now, before = (_decided(logs[way], way) for way in ("decide", "decided_before"))
    assert [[type(n.event).__name__ for n in b] for b in now] == [
        ["NodesDeleted", "ProvisioningProvisioned"]
    ]
    assert [[type(n.event).__name__ for n in b] for b in before] == [
        ["NodesDeleted", "ProvisioningAccepted"],
        ["ProvisioningProvisioned"],
    ]
    (deleted, up), ((was_deleted, accepted), (was_up,)) = (n.event for n in now[0]), before
    assert isinstance(up, pev.ProvisioningProvisioned) and up.created
    assert deleted == was_deleted.event and up.accepted == accepted.event
    assert replace(up, accepted=None) == was_up.event
    assert {n.occurred_at for b in [*now, *before] for n in b} == {50.0}
    # The same state after either; either log re-derives.
    states = []
    for log in logs.values():
        runner = DeciderRunner(ProvisionerDecider())
        runner.fold(log.envelopes)
        states.append(pickle.dumps(runner.state))
        checked, mismatches = verify_decisions(log.envelopes, ProvisionerDecider())
        assert checked > 0 and mismatches == []
    assert states[0] == states[1]


def _rid(env: Envelope) -> str:
    return str(getattr(env.event, "request_id", ""))


def _as_three_steps(log: list[Envelope]) -> list[Envelope]:
    """The log as the provisioner wrote it before: acceptances in one step, node creations
    in the next (caused by the previous step's last event; the search's order, oldest
    acceptance first), Provisioned in the one after (in acceptance order)."""
    out: list[Envelope] = []
    batch: list[Envelope] = []
    accepted = {
        e.event.request_id: (e.occurred_at, i)
        for i, e in enumerate(log)
        if isinstance(e.event, pev.ProvisioningAccepted)
    }

    def flush() -> None:
        if not batch:
            return
        kinds = (pev.NodesCreating, pev.ProvisioningProvisioned)
        first = [e for e in batch if not isinstance(e.event, kinds)]
        creating = [e for e in batch if isinstance(e.event, kinds[0])]
        up = [e for e in batch if isinstance(e.event, kinds[1])]
        creating.sort(key=lambda e: (accepted[_rid(e)][0], _rid(e)))
        up.sort(key=lambda e: accepted[_rid(e)][1])
        steps = [first, creating, up]
        cause = batch[0].causation_id
        for step in steps:
            for env in step:
                out.append(msgspec.structs.replace(env, causation_id=cause))
            cause = step[-1].event_id if step else cause
        batch.clear()

    for env in log:
        same = batch and env.causation_id == batch[-1].causation_id
        if batch and not (env.producer == "provisioner" and same):
            flush()
        if env.producer == "provisioner" and env.causation_id is not None:
            batch.append(env)
        else:
            out.append(env)
    flush()
    return [msgspec.structs.replace(e, position=i + 1) for i, e in enumerate(out)]


def _rows(log: list[Envelope]) -> list[Envelope]:
    """As a store hands them over: each event decoded from its stored JSON."""
    return [
        msgspec.structs.replace(
            e, event=decode_json(e.type, e.schema_version, encode_json(e.event))
        )
        for e in log
    ]


def test_a_log_with_node_creations_of_their_own_still_verifies_and_folds_alike() -> None:
    """Logs written before a Provisioned stood for the acceptance and node creation of the
    same decision (an Accepted, a NodesCreating, then a Provisioned, in one step), and
    before it registered the nodes it created Ready (the node agent's node.registered of
    each), re-derive at 0 mismatches, and fold to the same state in every decider and in
    intake's views as the log of today's form, after every event; the node agent's once
    the registrations of the older form are folded too (its state says whether a node
    registered by an event or by its Provisioned: ``implied``, ``registrant``)."""
    h = run(
        cluster_doc(max_nodes=6),
        [(10 * (i // 2), workload_doc(f"j{i}", nodes=1 + i % 3, duration=25)) for i in range(8)],
    )
    new = _rows(h.log.envelopes)
    old = _rows(creations_apart(h.log.envelopes))
    made = [type(e.event).__name__ for e in old if e.producer == "provisioner"]
    fused = [e for e in new if pev.acceptance(e.event) not in (None, e.event)]
    registered = [e for e in old if isinstance(e.event, nev.NodeRegistered)]
    assert [e for e in new if isinstance(e.event, nev.NodeRegistered)] == []
    assert len(registered) == sum(1 + i % 3 for i in range(8))  # every node, once
    assert made.count("NodesCreating") == 8
    assert len(old) == len(new) + 8 + len(fused) + len(registered)
    assert 0 < len(fused) < 8  # some accepted in the same decision, some waited for room
    for decider in (ProvisionerDecider(), NodeAgentDecider()):
        checked, mismatches = verify_decisions(old, decider)
        assert checked > 0 and mismatches == [], mismatches[:1]
    for decider in (ProvisionerDecider(), NodeAgentDecider(), QueueDecider(), WorkloadsView()):
        # Equal after every event of today's log (the older one folded to the same event,
        # and for the node agent to the registrations that follow it).
        now: DeciderRunner[Any] = DeciderRunner(decider)
        before: DeciderRunner[Any] = DeciderRunner(decider)
        rest = iter(old)
        # Its state says which nodes are registered: compared once the older form's
        # registrations are folded too.
        registers = isinstance(decider, NodeAgentDecider | WorkloadsView)
        for env, after in zip(new, [*new[1:], None], strict=True):
            now.fold([env])
            for older in rest:
                before.fold([older])
                if older.event_id == env.event_id:
                    break
            if not registers:
                assert pickle.dumps(now.state) == pickle.dumps(before.state), (decider.name, env)
            elif after is None or (after.producer, after.causation_id) != (
                env.producer,
                env.causation_id,
            ):  # the older form registers a batch's nodes after it: compare there
                for older in rest:
                    if not isinstance(older.event, nev.NodeRegistered):
                        rest = itertools.chain([older], rest)
                        break
                    before.fold([older])
                assert _as_registered(now.state) == _as_registered(before.state), env


def test_a_deletion_removes_nodes_without_pods_and_older_logs_still_verify() -> None:
    """A deletion removes at once the deleted nodes that have no pod (``gone``): no
    node.removed of theirs. Logs written before (each such node's node.removed after the
    deletion's batch: ``removals_apart``) re-derive at 0 mismatches, and fold to the same
    state in the queue, the provisioner and intake's view after every event, and in the
    node agent but for the nodes it keeps for ``decided_before`` (``gone``)."""
    h = run(
        cluster_doc(max_nodes=6),
        [(10 * (i // 2), workload_doc(f"j{i}", nodes=1 + i % 3, duration=25)) for i in range(8)],
    )
    new = _rows(h.log.envelopes)
    old = _rows(removals_apart(h.log.envelopes))
    deleted = [n for e in new if isinstance(e.event, pev.NodesDeleted) for n in e.event.nodes]
    assert [e for e in new if isinstance(e.event, nev.NodeRemoved)] == []
    assert len([e for e in old if isinstance(e.event, nev.NodeRemoved)]) == len(deleted)
    assert len(deleted) == sum(1 + i % 3 for i in range(8))  # every node, once
    for log in (new, old):
        for decider in (ProvisionerDecider(), NodeAgentDecider(), QueueDecider()):
            checked, mismatches = verify_decisions(log, decider)
            assert checked > 0 and mismatches == [], (decider.name, mismatches[:1])
    for decider in (ProvisionerDecider(), QueueDecider(), WorkloadsView()):
        now: DeciderRunner[Any] = DeciderRunner(decider)
        before: DeciderRunner[Any] = DeciderRunner(decider)
        rest = iter(old)
        for env in new:
            now.fold([env])
            for older in rest:
                before.fold([older])
                if older.event_id == env.event_id:
                    break
            assert pickle.dumps(now.state) == pickle.dumps(before.state), (decider.name, env)
    agent: DeciderRunner[Any] = DeciderRunner(NodeAgentDecider())
    older_agent: DeciderRunner[Any] = DeciderRunner(NodeAgentDecider())
    agent.fold(new)
    older_agent.fold(old)
    assert sorted(agent.state.gone) == sorted(deleted) and older_agent.state.gone == {}
    assert replace(agent.state, gone={}) == older_agent.state


def _as_registered(state: Any) -> Any:
    """A state, whether its nodes registered by events or by the Provisioned that created
    them (a node agent's says which: ``implied``, ``registrant``), to compare by value (a
    node's labels are the event's own dict in one, a copy in the other)."""
    if hasattr(state, "implied"):  # and whether a node gone was registered by an event
        gone = {n: (why, False) for n, (why, _) in state.gone.items()}
        return replace(state, implied={}, registrant={}, gone=gone)
    return pickle.dumps(replace(state, nodes={})), state.nodes  # intake's view


def test_a_log_with_the_three_steps_still_verifies() -> None:
    """Logs written before the provisioner's one step (acceptance, creation and Provisioned
    in three steps, a NodesCreating of its own) re-derive at 0 mismatches; one that lost a
    Provisioned does not."""
    h = run(
        cluster_doc(max_nodes=6),
        [(10 * (i // 2), workload_doc(f"j{i}", nodes=1 + i % 3, duration=25)) for i in range(8)],
    )
    old = _as_three_steps(creations_apart(h.log.envelopes))
    assert any(e.type == pev.NodesCreating.TYPE for e in old)
    assert [e.event_id for e in old] != [e.event_id for e in h.log.envelopes]  # reordered
    checked, mismatches = verify_decisions(old, ProvisionerDecider())
    assert checked > 0 and mismatches == [], mismatches[:1]
    lost = [
        e
        for e in old
        if not (isinstance(e.event, pev.ProvisioningProvisioned) and e.event.request_id == "j1.1")
    ]
    assert verify_decisions(lost, ProvisionerDecider())[1]


NAMES = ("done", "gone", "running")


def test_a_finished_workloads_spec_is_forgotten() -> None:
    """The provisioner keeps a workload's pod sets and name only until it is over
    (finished, cancelled or rejected): its state does not grow with every workload."""
    h = harness(
        cluster_doc(),
        [(0, workload_doc(name, duration=10 if name == "done" else 500)) for name in NAMES],
        cancels=[(5, "gone")],
    )
    h.run(until=100)
    provisioner = next(r for r in h.runners if r.decider.name == "provisioner")
    state = provisioner.state
    for over in ("done", "gone"):
        assert over not in state.pod_sets and over not in state.names
    assert "running" in state.pod_sets and state.names["running"] == ("default", "running")


# -- a request over is forgotten ------------------------------------------------------------


def test_a_request_whose_nodes_are_deleted_is_forgotten_and_still_counted() -> None:
    """Kueue deletes a workload's ProvisioningRequest once the workload is done with it
    (peers.md §4.4): its nodes deleted, the request is over. The provisioner keeps the live
    requests only (a long-running provisioner's state and snapshots do not grow with every
    workload it provisioned), counts the forgotten ones under their final status, and
    decides the same (every decision of the log re-derived)."""
    jobs = [(60.0 * i, workload_doc(f"job{i}", duration=30)) for i in range(5)]
    h = run(cluster_doc(), jobs)
    assert len(of(h, pev.NodesDeleted)) == 5
    provisioner = next(r for r in h.runners if r.decider.name == "provisioner")
    state = provisioner.state
    assert state.requests == {} and state.by_workload == {} and not state.held
    assert state.over == {"Deleted": 5}
    assert provisioner.decider.summary(state)["requests"] == {"Deleted": 5}
    checked, mismatches = verify_decisions(h.log.envelopes, ProvisionerDecider())
    assert checked > 0 and mismatches == []


def test_nodes_created_ready_are_registered_by_their_provisioned() -> None:
    """peers.md §4.4 (GKE DWS): a request is Provisioned once its nodes are Ready nodes of
    the cluster. Nodes the simulated cloud creates Ready at once are registered by the
    Provisioned that names them (``created``): no node.registered of the node agent's for
    every service to store, fold and publish; the pods start on them in the agent's next
    decision, intake's nodes view shows them Ready, and they go with their deletion (no
    node.removed either: ``gone``). Nodes that boot first register with an event of their
    own (test_core_nodes)."""
    h = run(cluster_doc(), [(0, workload_doc("job", nodes=2, duration=30))])
    ((up_env, up),) = of(h, pev.ProvisioningProvisioned, "job.1")
    assert up.created and len(up.nodes) == 2
    assert of(h, nev.NodeRegistered) == []
    started = of(h, nev.PodStarted)
    assert {ev.node for _, ev in started} == {n.name for n in up.nodes}
    assert all(env.occurred_at == 0.0 and env.position > up_env.position for env, _ in started)
    assert of(h, nev.NodeRemoved) == []
    ((_, deleted),) = of(h, pev.NodesDeleted)
    assert set(deleted.nodes) == {n.name for n in up.nodes}
    view = DeciderRunner(WorkloadsView())
    view.fold([e for e in h.log.envelopes if e.position <= up_env.position])
    assert {n: r.state for n, r in view.state.nodes.items()} == {
        n.name: "Ready" for n in up.nodes
    }
    agent = next(r for r in h.runners if r.decider.name == "node-agent").state
    assert not agent.nodes and not agent.implied  # removed: nothing left of them


def test_a_provisioned_event_stands_for_its_acceptance_then_its_node_creation() -> None:
    """``stands_for``, each of its four cases: nothing, the acceptance, the node creation (at
    the time it is folded at), both in that order."""
    node = pev.NodeSpec(name="n1", pool="p", zone="z", machine_type="m", allocatable={GPU: 8})
    accepted = pev.ProvisioningAccepted(
        request_id="w.1", workload_id="w", attempt=1, pod_sets=(), message="accepted"
    )
    up = pev.ProvisioningProvisioned(
        request_id="w.1", zone="z", assignments={"w-0": "n1"}, message="up", nodes=(node,)
    )
    creating = pev.NodesCreating(request_id="w.1", zone="z", nodes=(node,), ready_at=5.0)
    assert up.stands_for(5.0) == ()
    assert replace(up, accepted=accepted).stands_for(5.0) == (accepted,)
    assert replace(up, created=True).stands_for(5.0) == (creating,)
    assert replace(up, created=True, accepted=accepted).stands_for(5.0) == (accepted, creating)
