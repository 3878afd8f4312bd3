"""No manifest field is silently dropped (issue 17, item 4c).

Every field of every workload kind muster reads (``workload_fields``: Job, JobSet, Volcano
Job, Pod, PodTemplate, down to containers, affinity, ports, policies, partitions), set in a
document that uses every nested object:

* a field passed through (not scheduling's business): any value changes nothing;
* a field refused (scheduling muster does not model): any value but the harmless ones
  (Kubernetes' defaults, which ask for nothing) is refused at the field's path with "is
  not supported by muster"; the harmless ones change nothing;
* a field honoured: a different value changes what is read, or is refused naming the
  field (or its object, for a rule between fields: ``totalPartitions x partitionSize``).

Queue objects and ProvisioningRequests are read strictly by ``parse``: every field is read
or refused as unknown (test_manifest_fuzz.py). Peers: Kubernetes' PodSpec/JobSpec,
JobSet's JobSetSpec, Volcano's JobSpec/TaskSpec (peers.md §2.4-2.7, §4.5).
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from muster.core.model import manifests, workload_fields
from muster.core.model.fields import InvalidInput
from muster.core.model.manifests import Manifests
from muster.core.model.workload_fields import Field, Shape

SETTINGS = settings(
    max_examples=300,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)

Loc = tuple[str | int, ...]

# -- documents that hold every nested object of their kind --------------------------------

IN_ZONE = {"key": "zone", "operator": "In", "values": ["a"]}


def pod_spec() -> dict[str, Any]:
    return {
        "containers": [
            {
                "name": "main",
                "image": "alpine:3.19",
                "args": ["30"],
                "resources": {"requests": {"cpu": "1"}, "limits": {"nvidia.com/gpu": 1}},
                "ports": [{"containerPort": 80}],
            },
            # The simulated runtime: 20 s (what the first container's fields may change).
            {"name": "side", "image": "alpine:3.19", "command": ["sleep", "20"]},
        ],
        "initContainers": [
            {
                "name": "init",
                "image": "alpine:3.19",
                "args": ["1"],
                "resources": {"requests": {"cpu": "500m"}},
                "ports": [{"containerPort": 81}],
            }
        ],
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [{"matchExpressions": [IN_ZONE]}]
                }
            }
        },
    }


def template() -> dict[str, Any]:
    return {"metadata": {"annotations": {}}, "spec": pod_spec()}


def doc(api: str, kind: str, **body: Any) -> dict[str, Any]:
    return {"apiVersion": api, "kind": kind, "metadata": {"name": "w"}, **body}


JOB = doc("batch/v1", "Job", spec={"parallelism": 2, "template": template()})
POD = doc("v1", "Pod", spec=pod_spec())
POD_TEMPLATE = doc("v1", "PodTemplate", template=template())
JOBSET = doc(
    "jobset.x-k8s.io/v1alpha2",
    "JobSet",
    spec={
        "replicatedJobs": [
            {
                "name": "workers",
                "replicas": 1,
                "template": {
                    "metadata": {"annotations": {}},
                    "spec": {"parallelism": 2, "template": template()},
                },
            }
        ],
        "failurePolicy": {
            "maxRestarts": 1,
            "rules": [{"action": "FailJobSet"}],
        },
        "startupPolicy": {"startupPolicyOrder": "AnyOrder"},
    },
)
VOLCANO = doc(
    "batch.volcano.sh/v1alpha1",
    "Job",
    spec={
        "networkTopology": {"mode": "hard", "highestTierAllowed": 2},
        "policies": [{"event": "PodFailed", "action": "RestartJob"}],
        "tasks": [
            {
                "name": "a",
                "replicas": 1,
                "template": template(),
                "policies": [{"event": "PodFailed", "action": "RestartJob"}],
            },
            {
                "name": "b",
                "replicas": 8,
                "template": template(),
                "partitionPolicy": {
                    "totalPartitions": 2,
                    "partitionSize": 4,
                    "networkTopology": {"mode": "hard", "highestTierAllowed": 1},
                },
            },
        ],
    },
)
DOCS = {"Job": JOB, "Pod": POD, "PodTemplate": POD_TEMPLATE, "JobSet": JOBSET, "Volcano": VOLCANO}


def read(document: dict[str, Any]) -> Manifests:
    return manifests.read([document])


def shape_of(document: dict[str, Any]) -> Shape:
    group = document["apiVersion"].rpartition("/")[0]
    return workload_fields.WORKLOAD_SHAPES[group, document["kind"]]


def objects(name: str) -> list[tuple[Loc, Shape]]:
    """Every object of the document ``name`` that a shape describes, with that shape."""
    document = DOCS[name]
    root = "template" if document["kind"] == "PodTemplate" else "spec"
    out: list[tuple[Loc, Shape]] = []

    def walk(value: Any, loc: Loc, shape: Shape) -> None:
        if isinstance(value, list):
            for i, item in enumerate(value):
                walk(item, (*loc, i), shape)
            return
        out.append((loc, shape))
        for key, nested in shape.nested.items():
            if key in value:
                walk(value[key], (*loc, key), nested)

    walk(document[root], (root,), shape_of(document))
    return out


# (document, object location, field) for every field of every object of every document.
CASES: list[tuple[str, Loc, str, Field, bool]] = [
    (name, loc, key, rule, key in shape.nested)
    for name in DOCS
    for loc, shape in objects(name)
    for key, rule in shape.fields.items()
]


def cases(treatment: str) -> list[tuple[str, Loc, str]]:
    return [(n, loc, k) for n, loc, k, rule, _ in CASES if rule.treatment == treatment]


def dotted(loc: Loc) -> str:
    return "".join(f"[{k}]" if isinstance(k, int) else f".{k}" for k in loc).lstrip(".")


def with_value(name: str, loc: Loc, key: str, value: Any) -> dict[str, Any]:
    document = copy.deepcopy(DOCS[name])
    target: Any = document
    for k in loc:
        target = target[k]
    target[key] = value
    return document


def field_path(name: str, loc: Loc, key: str) -> str:
    kind = DOCS[name]["kind"]
    return f"doc[0] ({kind} w).{dotted((*loc, key))}"


def test_the_documents_reach_every_shape() -> None:
    """Every object the table describes is in some document, so every field is tried."""
    reached = {id(shape) for name in DOCS for _, shape in objects(name)}

    def all_shapes(shape: Shape) -> list[Shape]:
        return [shape, *(s for n in shape.nested.values() for s in all_shapes(n))]

    for root in workload_fields.WORKLOAD_SHAPES.values():
        for shape in all_shapes(root):
            assert id(shape) in reached, f"no document holds a {shape.name}"


@pytest.mark.parametrize("name", sorted(DOCS))
def test_the_documents_are_read(name: str) -> None:
    assert read(DOCS[name]).workloads or read(DOCS[name]).pod_templates


# -- passed through: any value changes nothing --------------------------------------------

values = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(),
        st.floats(allow_nan=False),
        st.text(max_size=8),
        st.sampled_from(["sleep 10", "Always", "hostPort", "InOrder", "nvidia.com/gpu"]),
    ),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner),
    max_leaves=8,
)


@SETTINGS
@given(st.sampled_from(cases("passed")), values)
def test_a_field_passed_through_changes_nothing(case: tuple[str, Loc, str], value: Any) -> None:
    name, loc, key = case
    assert read(with_value(name, loc, key, value)) == read(DOCS[name]), (
        field_path(name, loc, key),
        value,
    )


# -- refused: any value that asks for something is refused by name -------------------------


@SETTINGS
@given(st.sampled_from(cases("refused")), values)
def test_a_refused_field_is_refused_by_name(case: tuple[str, Loc, str], value: Any) -> None:
    name, loc, key = case
    rule = next(r for n, lo, k, r, _ in CASES if (n, lo, k) == case)
    if value is None or any(type(value) is type(h) and value == h for h in rule.harmless):
        assert read(with_value(name, loc, key, value)) == read(DOCS[name])
        return
    with pytest.raises(InvalidInput) as info:
        read(with_value(name, loc, key, value))
    assert info.value.path == field_path(name, loc, key)
    assert info.value.problem.startswith("is not supported by muster: ")


@pytest.mark.parametrize(("name", "loc", "key"), cases("refused"))
def test_a_refused_fields_harmless_values_change_nothing(name: str, loc: Loc, key: str) -> None:
    rule = next(r for n, lo, k, r, _ in CASES if (n, lo, k) == (name, loc, key))
    for value in rule.harmless:
        assert read(with_value(name, loc, key, value)) == read(DOCS[name])


# -- honoured: a different value changes what is read, or is refused by name ---------------

# (shape name, field) -> a value different from the documents' (or their default).
DIFFERENT: dict[tuple[str, str], Any] = {
    ("node selector requirement", "key"): "rack",
    ("node selector requirement", "operator"): "NotIn",
    ("node selector requirement", "values"): ["a", "b"],
    ("node selector term", "matchExpressions"): [],
    ("required node affinity", "nodeSelectorTerms"): [],
    ("container resources", "requests"): {"cpu": "3"},
    ("container resources", "limits"): {"memory": "1Gi"},
    ("container", "image"): "registry.k8s.io/sleep:v1",
    ("container", "command"): ["sleep", "90"],
    ("container", "args"): ["sleep 70"],
    ("init container", "image"): "registry.k8s.io/sleep:v1",
    ("init container", "command"): ["sleep", "90"],
    ("init container", "args"): ["sleep 70"],
    ("init container", "restartPolicy"): "Always",
    ("PodTemplate init container", "restartPolicy"): "Always",
    ("pod spec", "nodeSelector"): {"gpu": "a100"},
    ("pod spec", "tolerations"): [{"key": "k", "operator": "Exists"}],
    ("pod spec", "priorityClassName"): "other",
    ("pod spec", "overhead"): {"cpu": "1"},
    ("pod spec", "terminationGracePeriodSeconds"): 77,
    ("PodTemplate pod spec", "nodeSelector"): {"gpu": "a100"},
    ("PodTemplate pod spec", "tolerations"): [{"key": "k", "operator": "Exists"}],
    ("PodTemplate pod spec", "overhead"): {"cpu": "1"},
    ("pod template", "metadata"): {"annotations": {"metax-tech.com/gpu-group-size": "8"}},
    ("Job spec", "parallelism"): 3,
    ("Job spec", "completions"): 1,
    ("Job spec", "backoffLimit"): 1,
    ("Job template", "metadata"): {"annotations": {manifests.EXCLUSIVE: "rack"}},
    ("replicated job", "name"): "others",
    ("replicated job", "replicas"): 2,
    ("JobSet failure policy rule", "action"): "RestartJobSet",
    ("JobSet failure policy rule", "targetReplicatedJobs"): ["nobody"],
    ("JobSet failure policy rule", "onJobFailureReasons"): ["DeadlineExceeded"],
    ("JobSet failure policy", "maxRestarts"): 5,
    ("Volcano lifecycle policy", "event"): "PodEvicted",
    ("Volcano lifecycle policy", "events"): ["PodEvicted"],
    ("Volcano lifecycle policy", "action"): "AbortJob",
    ("Volcano networkTopology", "mode"): "soft",
    ("Volcano networkTopology", "highestTierAllowed"): 3,
    ("Volcano partitionPolicy", "totalPartitions"): 4,
    ("Volcano partitionPolicy", "partitionSize"): 2,
    ("Volcano task", "name"): "c",
    ("Volcano task", "replicas"): 2,
    ("Volcano task", "minAvailable"): 0,
    ("Volcano Job spec", "minAvailable"): 100,
    ("Volcano Job spec", "queue"): "research",
    ("Volcano Job spec", "priorityClassName"): "high",
    ("Volcano Job spec", "maxRetry"): 7,
}


def honoured_leaves() -> list[tuple[str, Loc, str, str]]:
    """Honoured fields that are values (an honoured object is tried through its fields), in
    the first object of each shape of each document (the others keep what they give: the
    second container's runtime)."""
    out: dict[tuple[str, str, str], tuple[str, Loc, str, str]] = {}
    for name, loc, key, rule, nested in CASES:
        if rule.treatment != "honoured" or nested:
            continue
        shape = dict(objects(name))[loc]
        out.setdefault((name, shape.name, key), (name, loc, key, shape.name))
    return list(out.values())


def test_every_honoured_field_has_a_different_value_to_try() -> None:
    missing = {(shape, key) for _, _, key, shape in honoured_leaves()} - set(DIFFERENT)
    assert not missing, f"add a value for {sorted(missing)}"


@pytest.mark.parametrize(("name", "loc", "key", "shape"), honoured_leaves())
def test_an_honoured_field_changes_what_is_read_or_is_refused_by_name(
    name: str, loc: Loc, key: str, shape: str
) -> None:
    changed = with_value(name, loc, key, DIFFERENT[shape, key])
    try:
        result = read(changed)
    except InvalidInput as exc:
        at = field_path(name, loc, key)
        # the field, inside it, or its object (a rule between its fields)
        assert (
            exc.path == at
            or exc.path.startswith((f"{at}.", f"{at}["))
            or (exc.path == at.rsplit(".", 1)[0])
        ), exc
        return
    assert result != read(DOCS[name]), f"{field_path(name, loc, key)} changed nothing"
