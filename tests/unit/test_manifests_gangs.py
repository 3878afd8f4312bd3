"""Pods that join a gang, from their manifests: Armada's gang annotations (peers.md §1.5),
Kueue's plain pod groups (pod-group-name label, pod-group-total-count annotation; kueue.md
"pod-group"), Volcano's PodGroup and group-name annotation (peers.md §2.4) and
scheduler-plugins' coscheduling PodGroup (scheduling.x-k8s.io/pod-group label)."""

from __future__ import annotations

from typing import Any

import pytest

from muster.core import inputs
from muster.core.events import node as nev
from muster.core.model import manifests, parse
from muster.core.model.fields import InvalidInput
from muster.core.model.workload import Gang
from muster.core.sim.harness import build
from tests.unit.harness_inputs import GPU, gpu_node_cluster


def pod(
    name: str,
    annotations: dict[str, str] | None = None,
    labels: dict[str, str] | None = None,
    kind: str = "Pod",
) -> dict[str, Any]:
    container = {"name": "c", "image": "x", "resources": {"requests": {GPU: 1}}}
    spec: dict[str, Any] = {"containers": [container]}
    if kind == "Job":
        spec = {"template": {"spec": spec}}
    return {
        "apiVersion": "v1" if kind == "Pod" else "batch/v1",
        "kind": kind,
        "metadata": {
            "name": name,
            "namespace": "team",
            "annotations": annotations or {},
            "labels": {"kueue.x-k8s.io/queue-name": "q", **(labels or {})},
        },
        "spec": spec,
    }


def pod_group(api: str, name: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": api,
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": "team"},
        "spec": spec,
    }


ARMADA = {"armadaproject.io/gangId": "g", "armadaproject.io/gangCardinality": "3"}


def test_armada_gang_annotations_make_members() -> None:
    m = manifests.read([pod(f"p{i}", ARMADA) for i in range(3)])
    assert {wl.gang for wl in m.workloads} == {Gang(name="g", cardinality=3)}


def test_armada_node_uniformity_label_is_the_required_topology() -> None:
    """peers.md §1.5: gangNodeUniformityLabel, all members on nodes sharing one value."""
    marks = {**ARMADA, "armadaproject.io/gangNodeUniformityLabel": "rack"}
    [wl] = manifests.read([pod("p", marks)]).workloads
    assert wl.pod_sets[0].topology is not None
    assert wl.pod_sets[0].topology.required == "rack"
    with pytest.raises(InvalidInput) as exc:
        manifests.read([pod("p", {"armadaproject.io/gangNodeUniformityLabel": "rack"})])
    assert exc.value.path.endswith("armadaproject.io/gangNodeUniformityLabel")


def test_kueue_pod_group_label_and_total_count() -> None:
    doc = pod(
        "p",
        {"kueue.x-k8s.io/pod-group-total-count": "2"},
        {"kueue.x-k8s.io/pod-group-name": "grp"},
    )
    [wl] = manifests.read([doc]).workloads
    assert wl.gang == Gang(name="grp", cardinality=2)


@pytest.mark.parametrize(
    ("doc", "path"),
    [
        (
            pod("p", {"armadaproject.io/gangId": "g"}),
            "doc[0] (Pod p).metadata.annotations",
        ),
        (
            pod("p", {"kueue.x-k8s.io/pod-group-total-count": "2"}),
            "doc[0] (Pod p).metadata.labels",
        ),
        (
            pod("p", {**ARMADA, "armadaproject.io/gangCardinality": "0"}),
            "doc[0] (Pod p).metadata.annotations.armadaproject.io/gangCardinality",
        ),
        (
            pod("p", {**ARMADA, "armadaproject.io/gangId": "Not_A_Name"}),
            "doc[0] (Pod p).metadata.annotations.armadaproject.io/gangId",
        ),
        (
            pod("j", ARMADA, kind="Job"),
            "doc[0] (Job j).metadata.annotations.armadaproject.io/gangId",
        ),
    ],
)
def test_bad_gang_marks_are_refused_by_path(doc: dict[str, Any], path: str) -> None:
    with pytest.raises(InvalidInput) as exc:
        manifests.read([doc])
    assert exc.value.path == path


def test_volcano_pod_group_gives_min_member_and_queue() -> None:
    """peers.md §2.4: minMember, queue (the members' LocalQueue, as a Volcano Job's queue),
    priorityClassName; pods join by the scheduling.k8s.io/group-name annotation."""
    group = pod_group(
        "scheduling.volcano.sh/v1beta1", "pg", minMember=2, queue="vq", priorityClassName="high"
    )
    member = pod("p", {"scheduling.k8s.io/group-name": "pg"})
    del member["metadata"]["labels"]["kueue.x-k8s.io/queue-name"]
    # the PodGroup may come after its pods, or in another file
    m = manifests.combine(manifests.read([member]), manifests.read([group]))
    [wl] = m.workloads
    assert wl.gang == Gang(name="pg", cardinality=2)
    assert (wl.queue_name, wl.priority_class) == ("vq", "high")


def test_coscheduling_pod_group_by_label() -> None:
    group = pod_group("scheduling.x-k8s.io/v1alpha1", "pg", minMember=3)
    member = pod("p", labels={"scheduling.x-k8s.io/pod-group": "pg"})
    [wl] = manifests.read([member, group]).workloads
    assert wl.gang == Gang(name="pg", cardinality=3) and wl.queue_name == "q"


def test_a_pod_naming_a_pod_group_not_given_is_refused() -> None:
    m = manifests.read([pod("p", {"scheduling.volcano.sh/group-name": "pg"})])
    with pytest.raises(InvalidInput) as exc:
        m.submissions()
    assert exc.value.path == "doc[0] (Pod p).metadata.annotations.scheduling.volcano.sh/group-name"
    assert "PodGroup team/pg" in exc.value.problem


def test_pod_group_fields_muster_does_not_act_on_are_refused() -> None:
    group = pod_group("scheduling.x-k8s.io/v1alpha1", "pg", minMember=2, scheduleTimeoutSeconds=10)
    with pytest.raises(InvalidInput) as exc:
        manifests.read([group])
    assert exc.value.path == "doc[0] (PodGroup pg).spec.scheduleTimeoutSeconds"
    with pytest.raises(InvalidInput) as exc:
        manifests.read([pod_group("scheduling.volcano.sh/v1beta1", "pg")])
    assert exc.value.path == "doc[0] (PodGroup pg).spec.minMember"


def test_pods_beyond_min_member_run_on_their_own_and_the_gang_at_min_member() -> None:
    """Volcano: minMember pods start together or not at all; pods beyond it are not held
    to the gang. Three pods, minMember 2: the first two make the gang and start together,
    the third runs as a workload of its own."""
    group = pod_group("scheduling.volcano.sh/v1beta1", "pg", minMember=2)
    pods = [pod(f"p{i}", {"scheduling.k8s.io/group-name": "pg"}) for i in range(3)]
    m = manifests.read([group, *pods])
    subs = [(at, wl.name, wl) for at, wl in m.submissions()]
    h = build(parse.cluster(gpu_node_cluster("c", nodes=3, gpus=1, nominal=3)), subs)
    h.run(until=1_000)
    started: dict[str, list[float]] = {}
    for e in h.log.envelopes:
        if isinstance(e.event, nev.PodStarted):
            started.setdefault(e.event.workload_id, []).append(e.occurred_at)
    gid = inputs.gang_workload_id("team", "pg")
    assert started == {gid: [0.0, 0.0], "p2": [0.0]}


def test_a_uniform_armada_gang_lands_in_one_rack() -> None:
    """Rack a has one 1-GPU node, rack b two: a gang of two 1-GPU pods with
    gangNodeUniformityLabel rack starts both in rack b."""
    cluster = gpu_node_cluster("c", nodes=1, gpus=1, nominal=8)
    cluster["nodes"] = [
        {"name": "a", "count": 1, "allocatable": {GPU: 1}, "labels": {"rack": "a"}},
        {"name": "b", "count": 2, "allocatable": {GPU: 1}, "labels": {"rack": "b"}},
    ]
    marks = {
        "armadaproject.io/gangId": "g",
        "armadaproject.io/gangCardinality": "2",
        "armadaproject.io/gangNodeUniformityLabel": "rack",
    }
    m = manifests.read([pod(f"p{i}", marks) for i in range(2)])
    h = build(parse.cluster(cluster), [(at, wl.name, wl) for at, wl in m.submissions()])
    h.run(until=1_000)
    nodes = [e.event.node for e in h.log.envelopes if isinstance(e.event, nev.PodStarted)]
    assert len(nodes) == 2 and all(n.startswith("b") for n in nodes), nodes
