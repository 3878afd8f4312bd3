"""The Kubernetes backend's pure decisions: names, desired objects, and the mapping of what the
cluster autoscaler writes on a ProvisioningRequest to provisioning events (each once, in order).
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from muster.core.events import Event
from muster.core.events import provisioning as pev
from muster.core.events import queue as qev
from muster.core.events import workload as wev
from muster.core.model.cluster import ClusterSpec, NodePool
from muster.core.model.queues import DWS_CLASS, MAX_RUN_SECONDS
from muster.core.model.workload import (
    PodSet,
    ProvisioningRequestSpec,
    Toleration,
    WorkloadSpec,
)
from muster.core.provisioning import kube, names
from muster.core.provisioning.state import ProvisionerState, correlation_id, evolve
from muster.runtime.settings import SettingsError, load
from tests.unit.harness_inputs import envelope

GPU = "nvidia.com/gpu"
OPTIONS = kube.KubeOptions(booking_seconds=300.0)
W = "0123456789abcdef"  # a workload id
RID = f"{W}.1"
PR_NAME = "train-provisioning-1"  # <workload name>-<check>-<attempt>, check of no check
NS = "team"  # the workload's namespace
DWS_NAME = "train-dws-1"  # of its ClusterQueue's check "dws"
NODE_LABEL = kube.DEFAULT_NODE_LABEL


# --------------------------------------------------------------------------- helpers


def fold(state: ProvisionerState, *events: Event) -> ProvisionerState:
    for ev in events:
        n = int(state.now) + 1
        evolve(state, envelope(ev, n, at=float(n)))
    return state


def pod_set(name: str = "workers", count: int = 2, **kw: Any) -> PodSet:
    requests = kw.pop("requests", {"cpu": 500, "memory": 16 * 2**30, GPU: 8})
    return PodSet(name=name, count=count, requests=requests, **kw)


def reserved(
    *pod_sets: PodSet,
    provisioning_class: str = "",
    parameters: dict[str, str] | None = None,
    merge: str = "",
    attempt: int = 1,
    **kw: Any,
) -> ProvisionerState:
    """A state wanting ``<W>.<attempt>`` for a workload of ``pod_sets``."""
    spec = WorkloadSpec(
        name="train", namespace="team", queue_name="lq", pod_sets=pod_sets or (pod_set(),)
    )
    ask = (
        qev.ProvisioningAsk(
            check="dws",
            provisioning_class=provisioning_class,
            parameters=parameters or {},
            pod_set_merge_policy=merge,
        )
        if provisioning_class or parameters
        else None
    )
    return fold(
        ProvisionerState(),
        wev.WorkloadSubmitted(workload_id=W, spec=spec),
        qev.QuotaReserved(
            workload_id=W,
            cluster_queue="cq",
            flavors={},
            usage={},
            node_selectors=kw.pop("node_selectors", {}),
            attempt=attempt,
            message="",
            provisioning=ask,
            **kw,
        ),
    )


def standalone(*pod_sets: PodSet, cls: str = DWS_CLASS) -> ProvisionerState:
    spec = ProvisioningRequestSpec(
        name="capacity",
        namespace="ml",
        provisioning_class=cls,
        parameters={"maxRunDurationSeconds": "3600"},
        pod_sets=pod_sets or (pod_set("tmpl", 3),),
    )
    return fold(ProvisionerState(), pev.ProvisioningRequested(request_id="ml/capacity", spec=spec))


def cond(type_: str, status: str = "True", reason: str = "", message: str = "") -> kube.Condition:
    return kube.Condition(type=type_, status=status, reason=reason or type_, message=message)


def seen(
    *conditions: kube.Condition, rid: str = RID, name: str = PR_NAME, ns: str = NS
) -> kube.ObservedRequest:
    return kube.ObservedRequest(
        request_id=rid,
        namespace=ns,
        name=name,
        uid="u1",
        templates=(f"ppt-{name}-workers",),
        conditions=conditions,
    )


def observed(*requests: kube.ObservedRequest, **kw: Any) -> kube.Observed:
    return kube.Observed(requests={r.request_id: r for r in requests}, **kw)


def node(name: str, owner: str = PR_NAME, zone: str = "us-central1-a") -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "labels": {
                NODE_LABEL: owner,
                kube.ZONE_LABEL: zone,
                kube.POOL_LABEL: "a100",
                kube.INSTANCE_TYPE_LABEL: "a2-highgpu-8g",
            },
        },
        "status": {"allocatable": {"cpu": "95500m", "memory": "1300Gi", GPU: "8", "bad": "x"}},
    }


def events(state: ProvisionerState, obs: kube.Observed, rid: str = RID) -> list[Event]:
    return kube.events_for(state, rid, obs, OPTIONS)


def types(evs: list[Event]) -> list[str]:
    return [type(e).__name__ for e in evs]


def settle(state: ProvisionerState, obs: kube.Observed) -> list[Event]:
    """Fold what each pass appends until a pass appends nothing; everything appended."""
    out: list[Event] = []
    for _ in range(5):
        actions = kube.plan_actions(state, obs, OPTIONS)
        if not actions.events:
            return out
        evs = [e for _, e in actions.events]
        fold(state, *evs)
        out += evs
    raise AssertionError(f"no fixed point: {types(out)}")


# --------------------------------------------------------------------------- names


def test_request_names_follow_kueue_and_stay_valid() -> None:
    assert kube.request_name("train", "dws", 3) == "train-dws-3"
    assert kube.request_name("My_Job", "Check", 1) == "my-job-check-1"
    long = kube.request_name("w" * 300, "dws", 1)
    assert len(long) == names.MAX_NAME
    assert long.startswith("w" * 200) and long[-6] == "-"
    other = kube.request_name("w" * 300, "dws", 2)
    assert other != long and len(other) == names.MAX_NAME  # the hash tells attempts apart
    assert kube.pod_template_name("train-dws-3", "workers") == "ppt-train-dws-3-workers"
    assert names.dns1123("-A..b_c-") == "a.b-c"
    assert names.dns1123("___") == "x"


def test_object_refs() -> None:
    assert pev.split_request_id(RID) == (W, 1)
    assert pev.split_request_id("ns/name") is None
    assert kube.object_ref("ml/capacity", OPTIONS) == ("ml", "capacity")
    # A request of a log that does not name its workload: the id, the configured namespace.
    assert kube.object_ref(RID, OPTIONS) == ("default", f"{W}-provisioning-1")
    custom = kube.KubeOptions(namespace="muster", check="dws")
    assert kube.object_ref(f"{W}.4", custom) == ("muster", f"{W}-dws-4")


def test_a_queued_request_is_named_as_kueue_names_it() -> None:
    """peers.md §4.4: Kueue names a workload's request <workload>-<check>-<attempt>, in the
    workload's namespace; each retry is a new request of the next attempt."""
    state = reserved(provisioning_class=DWS_CLASS, attempt=2)
    assert kube.object_ref(f"{W}.2", OPTIONS, state.wanted[f"{W}.2"]) == ("team", "train-dws-2")
    d = kube.desired_objects(state, f"{W}.2", OPTIONS)
    assert (d.namespace, d.name) == ("team", "train-dws-2")
    assert d.templates[0]["metadata"]["name"] == "ppt-train-dws-2-workers"
    no_check = reserved(attempt=3)  # a ClusterQueue without a provisioning check
    assert kube.desired_objects(no_check, f"{W}.3", OPTIONS).name == "train-provisioning-3"


# --------------------------------------------------------------------------- desired objects


def test_desired_objects_of_a_quota_reservation() -> None:
    ps = pod_set(tolerations=(Toleration(key="gpu", operator="Exists", effect="NoSchedule"),))
    state = reserved(
        ps,
        provisioning_class=DWS_CLASS,
        parameters={"maxRunDurationSeconds": "7200"},
        node_selectors={"workers": {"accelerator": "a100"}},
        pod_counts={"workers": 1},
        tolerations={"workers": (Toleration(key="flavor", value="a100"),)},
    )
    d = kube.desired_objects(state, RID, OPTIONS)
    assert (d.namespace, d.name, d.standalone) == (NS, DWS_NAME, False)
    pr = d.request
    assert pr["apiVersion"] == "autoscaling.x-k8s.io/v1" and pr["kind"] == "ProvisioningRequest"
    assert pr["metadata"]["annotations"] == {kube.REQUEST_ID_ANNOTATION: RID}
    assert pr["metadata"]["labels"] == {kube.MANAGED_LABEL: "true"}
    assert pr["spec"] == {
        "provisioningClassName": DWS_CLASS,
        "parameters": {"maxRunDurationSeconds": "7200"},
        "podSets": [{"count": 1, "podTemplateRef": {"name": f"ppt-{DWS_NAME}-workers"}}],
    }
    (template,) = d.templates
    assert template["metadata"]["name"] == f"ppt-{DWS_NAME}-workers"
    assert template["metadata"]["annotations"] == {kube.REQUEST_ID_ANNOTATION: RID}
    spec = template["template"]["spec"]
    (container,) = spec["containers"]
    assert container["image"]
    assert container["resources"] == {
        "requests": {"cpu": "500m", "memory": "16Gi", GPU: "8"},
        "limits": {GPU: "8"},  # extended resources need limit == request
    }
    assert spec["nodeSelector"] == {"accelerator": "a100"}
    assert spec["tolerations"] == [
        {"operator": "Exists", "key": "gpu", "effect": "NoSchedule"},
        {"operator": "Equal", "key": "flavor", "value": "a100"},
    ]


def test_no_class_uses_the_default_and_no_parameters_are_left_out() -> None:
    d = kube.desired_objects(reserved(), RID, OPTIONS)
    assert d.request["spec"]["provisioningClassName"] == kube.DEFAULT_CLASS
    assert "parameters" not in d.request["spec"]
    custom = kube.KubeOptions(default_class="check-capacity.autoscaling.x-k8s.io")
    d = kube.desired_objects(reserved(), RID, custom)
    assert d.request["spec"]["provisioningClassName"] == "check-capacity.autoscaling.x-k8s.io"


def test_several_pod_sets_one_entry_each_unless_queued_provisioning() -> None:
    a, b = pod_set("a", 2), pod_set("b", 3)
    d = kube.desired_objects(reserved(a, b), RID, OPTIONS)
    assert [(p["count"], p["podTemplateRef"]["name"]) for p in d.request["spec"]["podSets"]] == [
        (2, f"ppt-{PR_NAME}-a"),
        (3, f"ppt-{PR_NAME}-b"),
    ]
    assert len(d.templates) == 2

    merged = kube.desired_objects(
        reserved(a, b, provisioning_class=DWS_CLASS, merge="IdenticalPodTemplates"),
        RID,
        OPTIONS,
    )
    assert merged.request["spec"]["podSets"] == [
        {"count": 5, "podTemplateRef": {"name": f"ppt-{DWS_NAME}-a"}}
    ]
    assert len(merged.templates) == 1


def test_unmergeable_queued_provisioning_fails_without_creating_anything() -> None:
    state = reserved(pod_set("a"), pod_set("b"), provisioning_class=DWS_CLASS)
    with pytest.raises(kube.plan.Unplannable):
        kube.desired_objects(state, RID, OPTIONS)
    actions = kube.plan_actions(state, observed(), OPTIONS)
    assert actions.create == ()
    ((rid, failed),) = actions.events
    assert rid == RID and isinstance(failed, pev.ProvisioningFailed)
    assert (failed.reason, failed.retryable) == ("InvalidRequest", False)
    fold(state, failed)
    assert kube.plan_actions(state, observed(), OPTIONS) == kube.Actions()


def test_a_standalone_request_is_named_as_the_users_with_its_templates() -> None:
    state = standalone(pod_set("tmpl", 3))
    actions = kube.plan_actions(state, observed(), OPTIONS)
    (d,) = actions.create
    assert (d.namespace, d.name, d.standalone) == ("ml", "capacity", True)
    assert d.request["spec"]["podSets"] == [{"count": 3, "podTemplateRef": {"name": "tmpl"}}]
    assert d.request["spec"]["parameters"] == {"maxRunDurationSeconds": "3600"}
    assert [t["metadata"]["name"] for t in d.templates] == ["tmpl"]


def test_wanted_requests_are_created_once_seen_and_not_when_released() -> None:
    state = reserved()
    assert [d.request_id for d in kube.plan_actions(state, observed(), OPTIONS).create] == [RID]
    assert kube.plan_actions(state, observed(seen()), OPTIONS) == kube.Actions()
    fold(state, qev.WorkloadCancelled(workload_id=W, message="bye"))
    actions = kube.plan_actions(state, observed(), OPTIONS)
    assert actions.create == ()
    assert types([e for _, e in actions.events]) == ["ProvisioningCancelled"]


# --------------------------------------------------------------------------- observing


def test_observe_request_keeps_only_ours() -> None:
    obj = {
        "metadata": {
            "name": PR_NAME,
            "namespace": "default",
            "uid": "u1",
            "annotations": {kube.REQUEST_ID_ANNOTATION: RID},
        },
        "spec": {"podSets": [{"count": 2, "podTemplateRef": {"name": "t"}}]},
        "status": {"conditions": [{"type": "Accepted", "status": "True", "reason": "R"}]},
    }
    got = kube.observe_request(obj)
    assert got is not None
    assert (got.request_id, got.name, got.uid, got.templates) == (RID, PR_NAME, "u1", ("t",))
    assert got.is_true("Accepted") and not got.is_true("Provisioned")
    assert kube.observe_request({"metadata": {"name": "foreign"}}) is None
    assert kube.is_ours(obj, RID) and not kube.is_ours(obj, "other.1")


def test_nodes_are_grouped_by_their_request_label() -> None:
    grouped = kube.nodes_by_request([node("n2"), node("n1"), node("x", owner="other")], NODE_LABEL)
    assert list(grouped) == sorted([PR_NAME, "other"])
    n1, n2 = grouped[PR_NAME]
    assert (n1.name, n2.name) == ("n1", "n2")
    assert (n1.pool, n1.zone, n1.machine_type) == ("a100", "us-central1-a", "a2-highgpu-8g")
    assert n1.allocatable == {"cpu": 95500, "memory": 1300 * 2**30, GPU: 8}  # "bad" left out
    assert kube.nodes_by_request([{"metadata": {"name": "plain"}}], NODE_LABEL) == {}


# --------------------------------------------------------------------------- conditions


def test_accepted_then_waiting_then_provisioned_each_once() -> None:
    state = reserved(provisioning_class=DWS_CLASS, parameters={"maxRunDurationSeconds": "60"})
    accepted = observed(seen(cond("Accepted", message="ok")))
    (acc,) = settle(state, accepted)
    assert isinstance(acc, pev.ProvisioningAccepted)
    assert (acc.request_id, acc.workload_id, acc.attempt, acc.message) == (RID, W, 1, "ok")
    assert acc.pod_sets == (pev.PodSetNodes(pod_set="workers", pods=2, pool="", per_node=1),)
    assert (acc.zones, acc.provisioning_class) == ((), DWS_CLASS)
    assert (acc.max_run_seconds, acc.booking_seconds) == (60.0, 300.0)
    assert state.requests[RID].status == "Accepted"
    assert settle(state, accepted) == []

    waiting = observed(
        seen(cond("Accepted"), cond("Provisioned", "False", "NotProvisioned", "no capacity"))
    )
    (w,) = settle(state, waiting)
    assert isinstance(w, pev.ProvisioningWaiting)
    assert (w.reason, w.message) == ("NotProvisioned", "no capacity")
    assert settle(state, waiting) == []  # unchanged: not recorded again
    moved = observed(
        seen(cond("Accepted"), cond("Provisioned", "False", "NotProvisioned", "still none"))
    )
    assert types(settle(state, moved)) == ["ProvisioningWaiting"]

    up = observed(
        seen(cond("Accepted"), cond("Provisioned", message="ready")),
        nodes=kube.nodes_by_request([node("n1"), node("n2")], NODE_LABEL),
    )
    (prov,) = settle(state, up)
    assert isinstance(prov, pev.ProvisioningProvisioned)
    assert (prov.zone, dict(prov.assignments), prov.message) == ("us-central1-a", {}, "ready")
    assert [n.name for n in prov.nodes] == ["n1", "n2"]
    req = state.requests[RID]
    assert (req.status, req.zone, req.held) == ("Provisioned", "us-central1-a", True)
    assert settle(state, up) == []


def test_conditions_seen_together_produce_every_missing_event_in_order() -> None:
    state = reserved()
    late = observed(seen(cond("Provisioned")))  # first seen (after a restart) already Provisioned
    assert types(settle(state, late)) == ["ProvisioningAccepted", "ProvisioningProvisioned"]
    assert state.requests[RID].status == "Provisioned"

    state = reserved()
    over = observed(
        seen(cond("Accepted"), cond("Provisioned"), cond("BookingExpired", message="m"))
    )
    assert types(settle(state, over)) == [
        "ProvisioningAccepted",
        "ProvisioningProvisioned",
        "ProvisioningBookingExpired",
        "NodesDeleted",
    ]


def test_per_node_comes_from_a_described_node_pool() -> None:
    state = reserved(pod_set(count=4, requests={GPU: 4}))
    pool = NodePool(name="a100", machine_type="a2", allocatable={GPU: 8})
    state.cloud = ClusterSpec(name="c", region="r", zones=("z",), node_pools=(pool,))
    (acc, *_) = settle(state, observed(seen(cond("Accepted"))))
    assert isinstance(acc, pev.ProvisioningAccepted)
    assert acc.pod_sets == (pev.PodSetNodes(pod_set="workers", pods=4, pool="a100", per_node=2),)


def test_failed_before_and_after_acceptance() -> None:
    state = reserved()
    failed = observed(seen(cond("Failed", reason="OutOfResources", message="stockout")))
    (f,) = settle(state, failed)
    assert isinstance(f, pev.ProvisioningFailed)
    assert (f.reason, f.message, f.retryable) == ("OutOfResources", "stockout", True)
    assert RID not in state.wanted

    state = reserved()
    both = observed(seen(cond("Accepted"), cond("Failed", reason="Timeout")))
    assert types(settle(state, both)) == ["ProvisioningAccepted", "ProvisioningFailed"]
    # It had no nodes: over at once (forgotten, counted as Failed); its ProvisioningRequest
    # is deleted (its stream, folded, tells it from one this replica has not heard of yet).
    assert RID not in state.requests and state.over == {"Failed": 1}
    actions = kube.plan_actions(state, both, OPTIONS, streams={pev.request_stream(RID)})
    assert [o.request_id for o in actions.delete] == [RID] and actions.events == ()


@pytest.mark.parametrize(
    ("condition", "event"),
    [
        ("BookingExpired", pev.ProvisioningBookingExpired),
        ("CapacityRevoked", pev.ProvisioningCapacityRevoked),
    ],
)
def test_end_of_booking_or_capacity_releases_the_nodes(condition: str, event: type) -> None:
    state = reserved()
    nodes = kube.nodes_by_request([node("n1")], NODE_LABEL)
    settle(state, observed(seen(cond("Provisioned")), nodes=nodes))
    assert state.in_use == {("a100", "us-central1-a"): 1}
    ended = observed(seen(cond("Provisioned"), cond(condition, message="over")), nodes=nodes)
    first, deleted = settle(state, ended)
    assert isinstance(first, event)
    assert isinstance(deleted, pev.NodesDeleted)
    assert (deleted.nodes, deleted.reason, deleted.message) == (("n1",), condition, "over")
    # Its nodes gone, the request is over: forgotten, counted as Deleted.
    assert RID not in state.requests and state.over == {"Deleted": 1}
    assert state.in_use == {("a100", "us-central1-a"): 0}
    # The request serves nothing now: its ProvisioningRequest is deleted, nothing more recorded
    # (its stream, folded, tells it from a request this replica has not heard of yet).
    actions = kube.plan_actions(state, ended, OPTIONS, streams={pev.request_stream(RID)})
    assert [o.request_id for o in actions.delete] == [RID] and actions.events == ()


# --------------------------------------------------------------------------- release


def test_release_while_accepted_deletes_then_cancels() -> None:
    state = reserved()
    pr = seen(cond("Accepted"))
    settle(state, observed(pr))
    fold(state, qev.WorkloadEvicted(workload_id=W, reason="Preempted", message=""))
    assert RID in state.released
    actions = kube.plan_actions(state, observed(pr), OPTIONS)
    assert [o.name for o in actions.delete] == [PR_NAME] and actions.events == ()
    (cancelled,) = settle(state, observed())  # once it is gone
    assert isinstance(cancelled, pev.ProvisioningCancelled)
    assert RID not in state.requests and state.over == {"Cancelled": 1} and not state.released


def test_a_finished_workloads_provisioned_request_deletes_its_nodes() -> None:
    state = reserved()
    nodes = kube.nodes_by_request([node("n1"), node("n2")], NODE_LABEL)
    settle(state, observed(seen(cond("Provisioned")), nodes=nodes))
    fold(
        state,
        qev.WorkloadAdmitted(
            workload_id=W, cluster_queue="cq", attempt=1, placements={}, message="", request_id=RID
        ),
        qev.WorkloadFinished(workload_id=W, outcome="Succeeded", reason="Done", message=""),
    )
    assert kube.plan_actions(state, observed(seen(cond("Provisioned"))), OPTIONS).delete
    (deleted,) = settle(state, observed(nodes=nodes))
    assert isinstance(deleted, pev.NodesDeleted)
    assert (deleted.nodes, deleted.reason) == (("n1", "n2"), "Released")
    assert not state.held and not state.released


def test_a_deleted_standalone_request_is_deleted_and_its_nodes_go_when_unneeded() -> None:
    state = standalone()
    rid = "ml/capacity"
    pr = seen(cond("Provisioned"), rid=rid, name="capacity", ns="ml")
    nodes = kube.nodes_by_request([node("n1", owner="capacity")], NODE_LABEL)
    assert types(settle(state, observed(pr, nodes=nodes))) == [
        "ProvisioningAccepted",
        "ProvisioningProvisioned",
    ]
    fold(state, pev.ProvisioningDeleteRequested(request_id=rid))
    actions = kube.plan_actions(state, observed(pr, nodes=nodes), OPTIONS)
    assert [o.request_id for o in actions.delete] == [rid] and actions.events == ()
    assert settle(state, observed(nodes=nodes)) == []  # deleting it is all...
    (gone,) = settle(state, observed())  # ...until the autoscaler removed the nodes
    assert isinstance(gone, pev.NodesDeleted) and gone.reason == "ScaleDown"
    assert not state.held


def test_standalone_deleted_before_acceptance_is_cancelled() -> None:
    state = standalone()
    rid = "ml/capacity"
    fold(state, pev.ProvisioningDeleteRequested(request_id=rid))
    pr = seen(rid=rid, name="capacity", ns="ml")
    assert [o.request_id for o in kube.plan_actions(state, observed(pr), OPTIONS).delete] == [rid]
    assert types(settle(state, observed())) == ["ProvisioningCancelled"]


# --------------------------------------------------------------------------- other paths


def test_a_refused_creation_fails_the_request_for_good() -> None:
    state = reserved()
    obs = observed(rejected={RID: ("AlreadyExists", "not ours")})
    actions = kube.plan_actions(state, obs, OPTIONS)
    assert actions.create == ()
    ((_, failed),) = actions.events
    assert isinstance(failed, pev.ProvisioningFailed)
    assert (failed.reason, failed.message, failed.retryable) == ("AlreadyExists", "not ours", False)


def test_a_request_deleted_outside_muster_fails_and_is_retried_by_the_queue() -> None:
    state = reserved()
    settle(state, observed(seen(cond("Accepted"))))
    assert settle(state, observed()) == []  # merely unseen: nothing
    (failed,) = settle(state, observed(vanished=frozenset({RID})))
    assert isinstance(failed, pev.ProvisioningFailed)
    assert (failed.reason, failed.retryable) == ("ProvisioningRequestDeleted", True)


def test_requests_this_state_does_not_know_are_left_alone() -> None:
    state = ProvisionerState()
    stranger = seen(cond("Accepted"), rid=f"{W}.7")
    assert kube.plan_actions(state, observed(stranger), OPTIONS) == kube.Actions()
    assert not kube.should_delete(state, f"{W}.7")
    # ...unless its stream shows it ended before it was accepted.
    assert kube.should_delete(state, f"{W}.7", {pev.request_stream(f"{W}.7"): 1})
    assert not kube.should_delete(state, "ns/x", {pev.request_stream("ns/x"): 1})


def test_planning_reads_the_state_without_changing_it() -> None:
    state = reserved(pod_set("a"), pod_set("b"))
    settle(state, observed(seen(cond("Accepted"))))
    before = copy.deepcopy(state)
    obs = observed(
        seen(cond("Accepted"), cond("Provisioned")),
        nodes=kube.nodes_by_request([node("n1")], NODE_LABEL),
    )
    first = kube.plan_actions(state, obs, OPTIONS)
    assert kube.plan_actions(state, obs, OPTIONS) == first
    assert state == before


def test_correlation_is_the_workload_or_the_request() -> None:
    state = reserved()
    assert correlation_id(state, RID) == W
    assert correlation_id(ProvisionerState(), RID) == W
    assert correlation_id(ProvisionerState(), "ml/capacity") == "ml/capacity"


def test_max_run_duration_follows_the_simulated_clouds_rule() -> None:
    for state, expected in (
        (reserved(provisioning_class=DWS_CLASS), float(MAX_RUN_SECONDS)),
        (reserved(), None),
    ):
        (acc,) = settle(state, observed(seen(cond("Accepted"))))
        assert isinstance(acc, pev.ProvisioningAccepted)
        assert acc.max_run_seconds == expected


def test_backend_settings() -> None:
    base = {"MUSTER_STORE_URL": "sqlite:///x.db", "MUSTER_KAFKA_BOOTSTRAP": "k:9092"}
    s = load(base)
    assert (s.provisioner_backend, s.kube_api_url) == ("simulated", "")
    assert (s.kube_node_label, s.kube_default_class) == (NODE_LABEL, kube.DEFAULT_CLASS)
    s = load(
        {
            **base,
            "MUSTER_PROVISIONER_BACKEND": "kubernetes",
            "MUSTER_KUBE_API_URL": "https://10.0.0.1:443",
            "MUSTER_KUBE_NODE_LABEL": "example.com/request",
            "MUSTER_KUBE_BOOKING_SECONDS": "120",
        }
    )
    assert (s.provisioner_backend, s.kube_booking_seconds) == ("kubernetes", 120.0)
    for name, value in (
        ("MUSTER_PROVISIONER_BACKEND", "gcp"),
        ("MUSTER_KUBE_NODE_LABEL", "not a label"),
        ("MUSTER_KUBE_DEFAULT_CLASS", "Not_DNS"),
        ("MUSTER_KUBE_NAMESPACE", "a/b"),
        ("MUSTER_KUBE_API_URL", "10.0.0.1"),
        ("MUSTER_KUBE_BOOKING_SECONDS", "0"),
    ):
        with pytest.raises(SettingsError, match=name):
            load({**base, name: value})
