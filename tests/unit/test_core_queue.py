"""The queue: flavor assignment, admission order, quota accounting, cancellation."""

from __future__ import annotations

import itertools
import pickle
from collections.abc import Iterable
from typing import Any, TypeVar

import pytest

from muster.core.events import Envelope, Event, FoldEnvelope
from muster.core.events import node as nev
from muster.core.events import provisioning as pev
from muster.core.events import queue as qev
from muster.core.events import workload as wev
from muster.core.model import parse
from muster.core.model.queues import ClusterQueueSpec, ResourceFlavorSpec
from muster.core.model.workload import ProvisioningRequestSpec
from muster.core.queueing import quota as qt
from muster.core.queueing.flavors import Assignment, Unassignable, assign
from muster.core.queueing.state import QueueState, evolve, shape_of
from muster.core.sim.harness import Harness, build
from tests.unit.harness_inputs import event_as, submissions

GPU = "nvidia.com/gpu"
E = TypeVar("E", bound=Event)


# -- building blocks ------------------------------------------------------------------


def assign_used(
    cq: ClusterQueueSpec,
    flavors: dict[str, ResourceFlavorSpec],
    spec: Any,
    used: dict[str, dict[str, int]],
) -> Assignment | Unassignable:
    """Flavor assignment for a lone queue that already uses ``used``."""
    tree = qt.build({cq.name: cq}, {}, {cq.name: used})
    return assign(cq, flavors, spec, tree, can_preempt=False)


def cluster_doc(
    *,
    flavors: Iterable[tuple[str, int, dict[str, Any]]] = (("a100", 16, {}),),
    strategy: str = "BestEffortFIFO",
    gpus_per_node: int = 16,
) -> dict[str, Any]:
    """One ClusterQueue ``cq`` (LocalQueue ``default/lq``) whose GPU flavors are tried in
    the given order; each flavor gets a node pool carrying its labels, so it can run."""
    flavors = list(flavors)
    return {
        "name": "test",
        "region": "us-central1",
        "zones": ["us-central1-a"],
        "nodePools": [
            {
                "name": f"{name}-pool",
                "machineType": "m",
                "allocatable": {GPU: gpus_per_node},
                "labels": {"flavor": name},
                "maxNodes": 100,
                **({"taints": extra["nodeTaints"]} if "nodeTaints" in extra else {}),
            }
            for name, _, extra in flavors
        ],
        "resourceFlavors": [
            {"name": name, "nodeLabels": {"flavor": name}, **extra} for name, _, extra in flavors
        ],
        "clusterQueues": [
            {
                "name": "cq",
                "queueingStrategy": strategy,
                "resourceGroups": [
                    {
                        "coveredResources": [GPU],
                        "flavors": [
                            {"name": name, "resources": [{"name": GPU, "nominalQuota": quota}]}
                            for name, quota, _ in flavors
                        ],
                    }
                ],
            }
        ],
        "localQueues": [{"namespace": "default", "name": "lq", "clusterQueue": "cq"}],
    }


def workload_doc(
    name: str, gpus: int = 8, count: int = 1, duration: float = 100, **pod_set: Any
) -> dict[str, Any]:
    return {
        "name": name,
        "queueName": pod_set.pop("queue", "lq"),
        "priority": pod_set.pop("priority", 0),
        "podSets": [{"name": "w", "count": count, "requests": {GPU: gpus}, **pod_set}],
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
    until: float | None = None,
) -> Harness:
    h = harness(cluster, workloads, cancels)
    h.run(until=until)
    return h


def queue_state(h: Harness) -> QueueState:
    runner = next(r for r in h.runners if r.decider.name == "queue")
    return runner.state  # type: ignore[no-any-return]


def of(h: Harness, cls: type[E], workload: str | None = None) -> list[tuple[Envelope, E]]:
    out = []
    for env in h.log.envelopes:
        ev = event_as(env, cls)  # node creations in either form
        if isinstance(ev, cls) and (
            workload is None or getattr(ev, "workload_id", None) == workload
        ):
            out.append((env, ev))
    return out


def at(h: Harness, cls: type[Event], workload: str) -> list[float]:
    return [env.occurred_at for env, _ in of(h, cls, workload)]


def pendings(h: Harness, workload: str) -> list[tuple[float, str, str]]:
    return [
        (env.occurred_at, ev.reason, ev.message) for env, ev in of(h, qev.WorkloadPending, workload)
    ]


def specs(doc: dict[str, Any]) -> tuple[ClusterQueueSpec, dict[str, ResourceFlavorSpec]]:
    c = parse.cluster(doc)
    return c.cluster_queues[0], {f.name: f for f in c.resource_flavors}


# -- flavor assignment (pure) ----------------------------------------------------------


THREE = [
    ("spot", 8, {"nodeTaints": [{"key": "spot", "value": "true"}]}),
    ("a100", 16, {}),
    ("h100", 32, {}),
]


def test_first_fitting_flavor_in_order() -> None:
    cq, flavors = specs(cluster_doc(flavors=[("a100", 16, {}), ("h100", 32, {})]))
    spec = parse.workload(workload_doc("j", gpus=8))
    got = assign_used(cq, flavors, spec, {})
    assert isinstance(got, Assignment)
    assert got.flavors == {"w": {GPU: "a100"}}
    assert got.usage == {"a100": {GPU: 8}}
    assert got.node_selectors == {"w": {"flavor": "a100"}}
    # a100 has 8 of 16 left: 8 more still fit there ...
    assert assign_used(cq, flavors, spec, {"a100": {GPU: 8}}).flavors == {"w": {GPU: "a100"}}  # type: ignore[union-attr]
    # ... 9 do not: the next flavor in order takes them.
    got = assign_used(cq, flavors, spec, {"a100": {GPU: 9}})
    assert isinstance(got, Assignment) and got.usage == {"h100": {GPU: 8}}


def test_node_selector_conflict_skips_a_flavor() -> None:
    cq, flavors = specs(cluster_doc(flavors=[("a100", 16, {}), ("h100", 32, {})]))
    spec = parse.workload(workload_doc("j", gpus=8, nodeSelector={"flavor": "h100"}))
    got = assign_used(cq, flavors, spec, {})
    assert isinstance(got, Assignment)
    assert got.flavors == {"w": {GPU: "h100"}}
    # A selector key the flavor does not define is no conflict; it is kept as is.
    spec = parse.workload(workload_doc("j", gpus=8, nodeSelector={"team": "x"}))
    got = assign_used(cq, flavors, spec, {})
    assert isinstance(got, Assignment)
    assert got.node_selectors == {"w": {"flavor": "a100", "team": "x"}}


def test_no_flavor_matches_the_node_selector() -> None:
    cq, flavors = specs(cluster_doc(flavors=[("a100", 16, {}), ("h100", 32, {})]))
    spec = parse.workload(workload_doc("j", gpus=8, nodeSelector={"flavor": "tpu"}))
    got = assign_used(cq, flavors, spec, {})
    assert isinstance(got, Unassignable)
    assert got.reason == "NoMatchingFlavor"
    assert got.message == (
        "couldn't assign flavors to pod set w: flavor a100 doesn't match node selector flavor, "
        "flavor h100 doesn't match node selector flavor"
    )


def test_taints_need_tolerations() -> None:
    cq, flavors = specs(cluster_doc(flavors=THREE))
    plain = parse.workload(workload_doc("j", gpus=8))
    got = assign_used(cq, flavors, plain, {})
    assert isinstance(got, Assignment) and got.flavors == {"w": {GPU: "a100"}}

    for tol in (
        {"key": "spot", "operator": "Exists"},
        {"key": "spot", "operator": "Equal", "value": "true"},
        {"operator": "Exists"},
        {"key": "spot", "value": "true", "effect": "NoSchedule"},
    ):
        tolerant = parse.workload(workload_doc("j", gpus=8, tolerations=[tol]))
        got = assign_used(cq, flavors, tolerant, {})
        assert isinstance(got, Assignment) and got.flavors == {"w": {GPU: "spot"}}, tol

    for tol in (
        {"key": "spot", "operator": "Equal", "value": "false"},
        {"key": "other", "operator": "Exists"},
        {"key": "spot", "operator": "Exists", "effect": "NoExecute"},
    ):
        wrong = parse.workload(workload_doc("j", gpus=8, tolerations=[tol]))
        got = assign_used(cq, flavors, wrong, {})
        assert isinstance(got, Assignment) and got.flavors == {"w": {GPU: "a100"}}, tol


def test_waiting_for_quota_names_the_shortfall() -> None:
    cq, flavors = specs(cluster_doc(flavors=[("a100", 16, {})]))
    spec = parse.workload(workload_doc("j", gpus=4, count=2))  # 8 GPUs in all
    got = assign_used(cq, flavors, spec, {"a100": {GPU: 11}})
    assert isinstance(got, Unassignable)
    assert got.reason == "WaitingForQuota"
    assert got.message == (
        "couldn't assign flavors to pod set w: "
        "insufficient quota for nvidia.com/gpu in flavor a100, 3 more needed"
    )
    assert got.shortfall == {GPU: 3}


def test_request_above_nominal_exceeds_max_quota() -> None:
    cq, flavors = specs(cluster_doc(flavors=[("a100", 16, {})]))
    got = assign_used(cq, flavors, parse.workload(workload_doc("j", gpus=8, count=3)), {})
    assert isinstance(got, Unassignable)
    assert got.reason == "ExceedsMaxQuota"
    assert got.message == (
        "couldn't assign flavors to pod set w: insufficient quota for nvidia.com/gpu in flavor "
        "a100, request > maximum capacity (24 > 16)"
    )


def test_quota_shortfall_is_reported_over_max_and_mismatch() -> None:
    cq, flavors = specs(cluster_doc(flavors=THREE))
    # spot: untolerated; a100: 10 GPUs already used; h100: 24 > 32 is fine but used up.
    got = assign_used(
        cq,
        flavors,
        parse.workload(workload_doc("j", gpus=12)),
        {"a100": {GPU: 10}, "h100": {GPU: 30}},
    )
    assert isinstance(got, Unassignable)
    assert got.reason == "WaitingForQuota"
    assert "insufficient quota for nvidia.com/gpu in flavor a100, 6 more needed" in got.message
    assert "insufficient quota for nvidia.com/gpu in flavor h100, 10 more needed" in got.message
    assert "spot" not in got.message


def test_resource_not_covered_gives_no_matching_flavor() -> None:
    cq, flavors = specs(cluster_doc())
    doc = workload_doc("j")
    doc["podSets"][0]["requests"] = {GPU: 1, "example.com/tpu": 1}
    got = assign_used(cq, flavors, parse.workload(doc), {})
    assert isinstance(got, Unassignable)
    assert got.reason == "NoMatchingFlavor"
    assert got.message == (
        "couldn't assign flavors to pod set w: "
        "resource example.com/tpu unavailable in ClusterQueue cq"
    )


def test_pod_sets_charge_the_sum_of_their_requests() -> None:
    cq, flavors = specs(cluster_doc(flavors=[("a100", 16, {}), ("h100", 32, {})]))
    doc = workload_doc("j")
    doc["podSets"] = [
        {"name": "a", "count": 2, "requests": {GPU: 4}},
        {"name": "b", "count": 3, "requests": {GPU: 4}},
    ]
    got = assign_used(cq, flavors, parse.workload(doc), {})
    assert isinstance(got, Assignment)
    # a: 8 in a100 (8 left); b: 12 does not fit a100's remaining 8, so h100.
    assert got.flavors == {"a": {GPU: "a100"}, "b": {GPU: "h100"}}
    assert got.usage == {"a100": {GPU: 8}, "h100": {GPU: 12}}


# -- the admission cycle in the harness ------------------------------------------------


def test_flavor_choice_reaches_the_log_and_the_nodes() -> None:
    cluster = cluster_doc(flavors=[("a100", 8, {}), ("h100", 32, {})])
    h = run(cluster, [(0, workload_doc("one")), (0, workload_doc("two"))])
    ((_, first),) = of(h, qev.QuotaReserved, "one")
    ((_, second),) = of(h, qev.QuotaReserved, "two")
    assert first.flavors == {"w": {GPU: "a100"}} and first.usage == {"a100": {GPU: 8}}
    assert second.flavors == {"w": {GPU: "h100"}} and second.usage == {"h100": {GPU: 8}}
    assert second.node_selectors == {"w": {"flavor": "h100"}}
    # The provisioner honours the flavor's labels: the nodes come from the matching pool.
    pools = {ev.request_id: {n.pool for n in ev.nodes} for _, ev in of(h, pev.NodesCreating)}
    assert pools == {"one.1": {"a100-pool"}, "two.1": {"h100-pool"}}


def test_waiting_for_quota_is_recorded_with_its_message() -> None:
    h = run(
        cluster_doc(),
        [(0, workload_doc("hold", gpus=4, count=3)), (5, workload_doc("next", gpus=8))],
    )
    assert pendings(h, "next")[0] == (
        5.0,
        "WaitingForQuota",
        "couldn't assign flavors to pod set w: "
        "insufficient quota for nvidia.com/gpu in flavor a100, 4 more needed",
    )
    # It gets in once `hold` finishes and releases its 12 GPUs.
    assert at(h, qev.QuotaReserved, "next") == [100.0]
    assert at(h, qev.WorkloadFinished, "next") == [200.0]


def test_exceeds_max_quota_is_never_admitted() -> None:
    h = run(cluster_doc(), [(0, workload_doc("huge", gpus=8, count=3))])
    assert [(t, r) for t, r, _ in pendings(h, "huge")] == [(0.0, "ExceedsMaxQuota")]
    assert of(h, qev.QuotaReserved, "huge") == []
    assert queue_state(h).workloads["huge"].status == "Pending"


def test_uncovered_resource_is_no_matching_flavor() -> None:
    doc = workload_doc("tpu")
    doc["podSets"][0]["requests"] = {"example.com/tpu": 4}
    h = run(cluster_doc(), [(0, doc)])
    assert pendings(h, "tpu") == [
        (
            0.0,
            "NoMatchingFlavor",
            "couldn't assign flavors to pod set w: resource "
            "example.com/tpu unavailable in ClusterQueue cq",
        )
    ]
    assert of(h, qev.QuotaReserved) == []


def test_pending_reason_is_recorded_only_when_it_changes() -> None:
    h = run(
        cluster_doc(),
        [
            (0, workload_doc("hold", gpus=16, duration=300)),
            (10, workload_doc("w1", gpus=16)),
            (20, workload_doc("w2", gpus=8)),
            (30, workload_doc("w3", gpus=8)),
        ],
    )
    for wid in ("w1", "w2", "w3"):
        reasons = [(r, m) for _, r, m in pendings(h, wid)]
        assert reasons, wid
        assert all(a != b for a, b in itertools.pairwise(reasons)), wid


def test_best_effort_fifo_admits_later_workloads_that_fit() -> None:
    h = run(
        cluster_doc(strategy="BestEffortFIFO"),
        [
            (0, workload_doc("hold", gpus=8, duration=100)),
            (1, workload_doc("big", gpus=16, duration=10)),
            (2, workload_doc("small", gpus=8, duration=10)),
        ],
    )
    assert at(h, qev.QuotaReserved, "small") == [2.0]  # jumps the head that does not fit
    assert at(h, qev.QuotaReserved, "big") == [100.0]  # after hold (t=100) ...
    assert at(h, qev.WorkloadFinished, "small") == [12.0]  # ... small was long done
    assert pendings(h, "small") == []


def test_strict_fifo_blocks_behind_its_head() -> None:
    h = run(
        cluster_doc(strategy="StrictFIFO"),
        [
            (0, workload_doc("hold", gpus=8, duration=100)),
            (1, workload_doc("big", gpus=16, duration=10)),
            (2, workload_doc("small", gpus=8, duration=10)),
        ],
    )
    assert pendings(h, "small")[0] == (
        2.0,
        "BlockedByStrictFIFO",
        "waiting behind big in StrictFIFO ClusterQueue cq",
    )
    assert at(h, qev.QuotaReserved, "big") == [100.0]
    # big holds all 16 GPUs until 110: small, though it would have fit at t=2, waits.
    assert at(h, qev.QuotaReserved, "small") == [110.0]
    reserved = [ev.workload_id for _, ev in of(h, qev.QuotaReserved)]
    assert reserved == ["hold", "big", "small"]


def test_strict_fifo_does_not_block_other_cluster_queues() -> None:
    cluster = cluster_doc(strategy="StrictFIFO")
    other = {**cluster["clusterQueues"][0], "name": "cq2"}
    cluster["clusterQueues"].append(other)
    cluster["localQueues"].append({"namespace": "default", "name": "lq2", "clusterQueue": "cq2"})
    h = run(
        cluster,
        [
            (0, workload_doc("hold", gpus=8)),
            (1, workload_doc("big", gpus=16)),
            (2, workload_doc("elsewhere", gpus=8, queue="lq2")),
        ],
    )
    assert at(h, qev.QuotaReserved, "elsewhere") == [2.0]


def test_priority_orders_within_a_cluster_queue() -> None:
    h = run(
        cluster_doc(),
        [
            (0, workload_doc("hold", gpus=16, duration=50)),
            (1, workload_doc("low", gpus=16, duration=10, priority=0)),
            (2, workload_doc("mid", gpus=16, duration=10, priority=5)),
            (3, workload_doc("high", gpus=16, duration=10, priority=10)),
            (4, workload_doc("mid2", gpus=16, duration=10, priority=5)),
        ],
    )
    reserved = [(env.occurred_at, ev.workload_id) for env, ev in of(h, qev.QuotaReserved)]
    # Highest priority first; equal priorities in submission order.
    assert reserved == [(0.0, "hold"), (50.0, "high"), (60.0, "mid"), (70.0, "mid2"), (80.0, "low")]


def test_priority_decides_who_gets_the_last_quota_in_one_cycle() -> None:
    h = run(
        cluster_doc(),
        [
            (0, workload_doc("first", gpus=16, priority=1)),
            (0, workload_doc("second", gpus=16, priority=2)),
        ],
    )
    assert [ev.workload_id for _, ev in of(h, qev.QuotaReserved)] == ["second", "first"]


def _usage(h: Harness) -> dict[str, Any]:
    return queue_state(h).usage["cq"]


def test_usage_is_charged_while_running_and_released_on_finish() -> None:
    h = harness(
        cluster_doc(),
        [
            (0, workload_doc("a", gpus=4, count=2, duration=100)),
            (10, workload_doc("b", gpus=4, duration=200)),
        ],
    )
    h.run(until=50)
    assert _usage(h) == {"a100": {GPU: 12}}
    h.run(until=150)
    assert {k: {r: q for r, q in v.items() if q} for k, v in _usage(h).items()} == {
        "a100": {GPU: 4}
    }
    h.run()
    assert all(q == 0 for res in _usage(h).values() for q in res.values())
    statuses = {w: queue_state(h).status_of(w) for w in ("a", "b")}
    assert statuses == {"a": "Finished", "b": "Finished"}


def test_usage_is_released_on_cancel_and_the_next_workload_gets_it() -> None:
    h = run(
        cluster_doc(),
        [
            (0, workload_doc("running", gpus=16, duration=1000)),
            (1, workload_doc("waiting", gpus=16, duration=10)),
        ],
        cancels=[(50, "running")],
    )
    assert at(h, qev.WorkloadCancelled, "running") == [50.0]
    assert at(h, qev.QuotaReserved, "waiting") == [50.0]
    assert of(h, qev.WorkloadFinished, "running") == []
    # Its pods were stopped and its nodes removed at the cancellation.
    assert [env.occurred_at for env, _ in of(h, nev.PodStopped, "running")] == [50.0]
    deleted = [
        env.occurred_at for env, ev in of(h, pev.NodesDeleted) if ev.request_id == "running.1"
    ]
    assert deleted == [50.0]
    assert queue_state(h).status_of("running") == "Cancelled"


def test_cancelled_pending_workload_is_never_admitted() -> None:
    h = run(
        cluster_doc(),
        [
            (0, workload_doc("hold", gpus=16, duration=100)),
            (1, workload_doc("victim", gpus=8, duration=10)),
            (2, workload_doc("after", gpus=8, duration=10)),
        ],
        cancels=[(20, "victim")],
    )
    assert at(h, qev.WorkloadCancelled, "victim") == [20.0]
    for cls in (qev.QuotaReserved, qev.WorkloadAdmitted, qev.WorkloadFinished):
        assert of(h, cls, "victim") == []
    assert not [ev for _, ev in of(h, pev.ProvisioningAccepted) if ev.workload_id == "victim"]
    # The quota it would have taken goes to the next one.
    assert at(h, qev.QuotaReserved, "after") == [100.0]
    st = queue_state(h)
    assert st.status_of("victim") == "Cancelled"
    assert "victim" not in st.pending


def test_cancel_after_finish_changes_nothing() -> None:
    h = run(cluster_doc(), [(0, workload_doc("done", gpus=8, duration=10))], cancels=[(50, "done")])
    assert of(h, qev.WorkloadCancelled) == []
    assert queue_state(h).status_of("done") == "Finished"


def test_unknown_local_queue() -> None:
    h = run(cluster_doc(), [(0, workload_doc("lost", queue="nope"))])
    assert pendings(h, "lost") == [
        (0.0, "LocalQueueNotFound", "LocalQueue nope doesn't exist in namespace default")
    ]
    assert of(h, qev.QuotaReserved) == []


def test_local_queue_pointing_at_a_missing_cluster_queue() -> None:
    cluster = cluster_doc()
    cluster["localQueues"].append(
        {"namespace": "default", "name": "dangling", "clusterQueue": "ghost"}
    )
    h = run(cluster, [(0, workload_doc("lost", queue="dangling"))])
    assert pendings(h, "lost") == [
        (0.0, "ClusterQueueNotFound", "ClusterQueue ghost doesn't exist")
    ]


@pytest.mark.parametrize("strategy", ["BestEffortFIFO", "StrictFIFO"])
def test_everything_that_fits_eventually_finishes(strategy: str) -> None:
    docs = [
        (float(i), workload_doc(f"w{i}", gpus=8 if i % 3 else 16, duration=10 + i))
        for i in range(8)
    ]
    h = run(cluster_doc(strategy=strategy), docs)
    finished = sorted(ev.workload_id for _, ev in of(h, qev.WorkloadFinished))
    assert finished == sorted(f"w{i}" for i in range(8))


def test_a_flavors_own_tolerations_count_against_its_taints() -> None:
    """Kueue injects a ResourceFlavor's tolerations into the pods: its taints are tolerated."""
    taint = {"key": "reserved", "value": "yes", "effect": "NoSchedule"}
    toleration = {"key": "reserved", "operator": "Equal", "value": "yes", "effect": "NoSchedule"}
    for tolerations, admitted in (([], False), ([toleration], True)):
        extra = {"nodeTaints": [taint], "tolerations": tolerations}
        cq, flavors = specs(cluster_doc(flavors=[("a100", 16, extra)]))
        got = assign_used(cq, flavors, parse.workload(workload_doc("j", gpus=8)), {})
        assert isinstance(got, Assignment) is admitted, got
        if not admitted:
            assert isinstance(got, Unassignable) and got.reason == "NoMatchingFlavor"


def test_flavor_tolerations_reach_the_pods_on_tainted_nodes() -> None:
    """Admitted on a tainted flavor that tolerates its own taint, the pods get the
    toleration (QuotaReserved carries it) and the tainted pool's nodes take them."""
    taint = {"key": "reserved", "value": "yes", "effect": "NoSchedule"}
    toleration = {"key": "reserved", "operator": "Equal", "value": "yes", "effect": "NoSchedule"}
    doc = cluster_doc(flavors=[("a100", 16, {"nodeTaints": [taint], "tolerations": [toleration]})])
    h = run(doc, [(0, workload_doc("j", gpus=8))])
    ((_, reserved),) = of(h, qev.QuotaReserved, "j")
    assert [t.key for t in reserved.tolerations["w"]] == ["reserved"]
    assert [ev.outcome for _, ev in of(h, qev.WorkloadFinished, "j")] == ["Succeeded"]


def test_submissions_of_one_template_share_their_parts_and_shape() -> None:
    """A submission's entry holds a spec equal to the one submitted, with the parts (pod
    sets, runtime, failure policy) and the shape of an earlier submission of the same
    template, one object each (snapshots pickle them once); the shape is ``shape_of``'s,
    and another queue, pod set or placement is another shape."""
    docs = {
        "a": workload_doc("a"),
        "b": workload_doc("b"),
        "other-queue": workload_doc("other-queue", queue="lq2"),
        "other-pods": workload_doc("other-pods", gpus=4),
        "spread": {**workload_doc("spread"), "placement": {"node": "spread"}},
    }
    state = QueueState()
    submitted = {}
    for position, (name, doc) in enumerate(docs.items(), 1):
        spec = submitted[name] = parse.workload(doc)
        event = wev.WorkloadSubmitted(workload_id=name, spec=spec)
        env = FoldEnvelope(position, f"e{position}", f"workload-{name}", 1, event.TYPE, 1.0, event)
        state = evolve(state, env)
    wls = state.workloads
    for name, spec in submitted.items():
        assert wls[name].spec == spec
        assert wls[name].shape == shape_of(spec)
    a, b = wls["a"], wls["b"]
    assert b.spec is not submitted["b"] and b.spec.name == "b"
    assert b.spec.pod_sets is a.spec.pod_sets and b.spec.runtime is a.spec.runtime
    assert b.spec.failure_policy is a.spec.failure_policy
    assert b.shape is a.shape
    assert len({wls[n].shape for n in docs}) == 4  # a and b one; the three others apart


def test_nodes_deleted_reports_gone_on_a_standalone_request_only() -> None:
    """A standalone request's nodes removed: its status is Gone, with the reason; a
    workload's own request's (every provisioned workload's end) changes nothing but the
    clock."""

    def fold(state: QueueState, position: int, event: Event) -> QueueState:
        stream = f"provisioning-{position}"
        return evolve(
            state, FoldEnvelope(position, f"e{position}", stream, 1, event.TYPE, 5.0, event)
        )

    spec = ProvisioningRequestSpec(name="capacity", namespace="ml", provisioning_class="dws")
    state = fold(QueueState(), 1, pev.ProvisioningRequested(request_id="ml/capacity", spec=spec))
    before = pickle.dumps(state)
    deleted = pev.NodesDeleted(request_id="w-1/prov/1", nodes=("n1",), reason="Done", message="m")
    state = fold(state, 2, deleted)
    assert pickle.dumps(state) == before  # the same clock: nothing else to change
    gone = pev.NodesDeleted(
        request_id="ml/capacity", nodes=("n2",), reason="Unneeded", message="idle"
    )
    state = fold(state, 3, gone)
    req = state.requests["ml/capacity"]
    assert (req.status, req.message) == ("Gone", "nodes removed (Unneeded): idle")
