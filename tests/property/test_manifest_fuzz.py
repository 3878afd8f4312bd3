"""Fuzzing the Kubernetes-manifest parser (``muster.core.model.manifests``).

Whatever the documents hold, ``read`` (and ``Manifests.provisioning_requests``, which
resolves PodTemplates) either returns or raises ``InvalidInput`` naming a document and a
field, never another exception. An unknown field is refused by name; inside what the
parser passes through (docs/api.md: metadata, status, and the workload fields that
``workload_fields`` passes through, such as volumes or env) it changes nothing. Whatever
is accepted is valid model input: names are RFC 1123. test_manifest_fields.py checks, field
by field, that none is silently dropped.
"""

from __future__ import annotations

import copy
import datetime
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from muster.core.model import manifests, workload_fields
from muster.core.model.fields import LABEL_KEY, NAME, InvalidInput
from muster.core.model.manifests import SUPPORTED, Manifests

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE_FILES = [
    *sorted((ROOT / "examples" / "scenarios").rglob("*.yaml")),
    ROOT / "examples" / "dws-demo.yaml",
    ROOT / "examples" / "placement-demo.yaml",
    ROOT / "examples" / "gangs-demo.yaml",
]
EXAMPLES: dict[str, list[Any]] = {
    str(p.relative_to(ROOT)): list(yaml.safe_load_all(p.read_text())) for p in EXAMPLE_FILES
}
# (file, document index) of every non-empty example document.
DOC_REFS = [(f, i) for f, docs in EXAMPLES.items() for i, d in enumerate(docs) if d is not None]

SETTINGS = settings(
    max_examples=120,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)

Loc = tuple[str | int, ...]

# -- what the parser reads strictly -------------------------------------------------------

# Workloads (and a PodTemplate's template) are read against workload_fields' table: a
# field it passes through is taken whole (what is inside is not read).
# Maps whose keys are data rather than field names (labels, resources, node labels...).
FREE_FORM = frozenset({"labels", "annotations", "nodeSelector", "requests", "limits"})
FREE_FORM_BY_KIND = {
    "ResourceFlavor": frozenset({"nodeLabels"}),
    "ProvisioningRequestConfig": frozenset({"parameters"}),
    "ProvisioningRequest": frozenset({"parameters"}),
    "ResourceQuota": frozenset({"hard"}),
}
# Kinds whose fields are at the top level (value) or under template: no spec.
NO_SPEC = frozenset({"PriorityClass", "WorkloadPriorityClass", "PodTemplate"})
# Objects refused as a whole when not empty, with their own message.
REFUSED_WHOLE = frozenset({"namespaceSelector"})

STRICT, IGNORED_FIELD, FREE = "strict", "ignored", "free"


def workload_shape(doc: dict[str, Any]) -> workload_fields.Shape | None:
    group = doc["apiVersion"].rpartition("/")[0]
    return workload_fields.WORKLOAD_SHAPES.get((group, doc["kind"]))


def classify(doc: dict[str, Any], loc: Loc) -> str:
    """How the parser treats an unknown key added to the object at ``loc`` of a document."""
    kind = doc["kind"]
    if not loc:
        return STRICT  # the top level: apiVersion, kind, metadata, spec, status (and kind's own)
    if loc[0] == "metadata":
        return IGNORED_FIELD if len(loc) == 1 else FREE
    if loc[0] == "status":
        return IGNORED_FIELD
    shape = workload_shape(doc)
    if shape is not None:
        names = [k for k in loc[1:] if isinstance(k, str)]
        if any(k in FREE_FORM for k in names):
            return FREE
        for k in names:
            if k == "tolerations":
                return STRICT  # read by parse
            nested = shape.nested.get(k)
            if nested is None:
                return IGNORED_FIELD  # inside a field taken whole (a template's metadata...)
            shape = nested
        return STRICT
    if any(k in FREE_FORM_BY_KIND.get(kind, ()) for k in loc):
        return FREE
    return STRICT


# -- helpers ------------------------------------------------------------------------------


def nodes(value: Any, loc: Loc = ()) -> Iterator[tuple[Loc, Any]]:
    """Every value in a document with its location (keys and list indexes)."""
    yield loc, value
    if isinstance(value, dict):
        for k, v in value.items():
            yield from nodes(v, (*loc, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from nodes(v, (*loc, i))


def get(value: Any, loc: Loc) -> Any:
    for k in loc:
        value = value[k]
    return value


def dotted(loc: Loc) -> str:
    """``("spec", "podSets", 0, "count")`` -> ``spec.podSets[0].count``."""
    return "".join(f"[{k}]" if isinstance(k, int) else f".{k}" for k in loc).lstrip(".")


def where(index: int, doc: dict[str, Any]) -> str:
    name = doc.get("metadata", {}).get("name")
    return f"doc[{index}] ({doc['kind']} {name})" if name else f"doc[{index}] ({doc['kind']})"


def attempt(docs: list[Any]) -> Manifests | None:
    """The manifests, or None when refused with a proper ``InvalidInput``; anything else
    raised fails the test."""
    try:
        m = manifests.read(docs)
        m.provisioning_requests()
    except InvalidInput as exc:
        assert isinstance(exc.path, str) and exc.path, exc
        assert isinstance(exc.problem, str) and exc.problem, exc
        return None
    check_accepted(m)
    return m


def check_accepted(m: Manifests) -> None:
    """What is accepted is valid: RFC 1123 names and label keys, positive counts."""

    def name(value: str) -> None:
        assert NAME.fullmatch(value), f"accepted the invalid name {value!r}"

    objects: list[Any] = [
        *m.resource_flavors,
        *m.cluster_queues,
        *m.local_queues,
        *m.cohorts,
        *m.priority_classes,
        *m.namespace_quotas,
        *m.admission_checks,
        *m.provisioning_configs,
    ]
    for obj in objects:
        name(obj.name)
    for lq in m.local_queues:
        name(lq.namespace)
        name(lq.cluster_queue)
    for t in m.pod_templates:
        namespace, _, template = t.key.partition("/")
        name(namespace)
        name(template)
    for wl in m.workloads:
        name(wl.name)
        name(wl.namespace)
        if wl.queue_name or wl.consumes is None:
            name(wl.queue_name)
        for key in wl.labels:
            assert LABEL_KEY.fullmatch(key), f"accepted the label key {key!r}"
        for ps in wl.pod_sets:
            name(ps.name)
            assert ps.count >= 1
            assert all(q >= 0 for q in ps.requests.values())
    for _, request, _ in m.provisioning_requests():
        name(request.name)
        name(request.namespace)
        for ps in request.pod_sets:
            name(ps.name)
            assert ps.count >= 1


# -- strategies ---------------------------------------------------------------------------

# Values that have broken parsers: unicode digits, more digits than int() reads, numbers
# beyond a float, names with a trailing newline, keys of mixed types.
NASTY: list[Any] = [
    None,
    True,
    False,
    0,
    -1,
    -(2**31) - 1,
    2**63,
    10**400,
    -(10**400),
    -0.5,
    1.5,
    1e308,
    float("nan"),
    float("inf"),
    "",
    " ",
    "-1",
    "²",
    "1,²",
    "٣",
    "9" * 5000,
    "0." + "0" * 5000 + "1",
    "1e400",
    "abc\n",
    "a b",
    "Nope",
    "10m",
    "spread",
    "sleep 10",
    datetime.date(2024, 1, 1),
    datetime.datetime(2024, 1, 1, 12, 0),
    b"\x00",
    [],
    {},
    [1, "a"],
    {"a": 1},
    {1: "a", "b": 2},
    {None: 1, True: 2},
]

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(),
    st.text(max_size=12),
    st.dates(),
    st.binary(max_size=3),
    st.sampled_from(NASTY),
)
# Keys as YAML gives them: strings mostly, also numbers, booleans, null and dates.
keys = st.one_of(
    st.text(max_size=8),
    st.integers(-3, 3),
    st.booleans(),
    st.none(),
    st.floats(allow_nan=False),
    st.dates(),
)
yamlish = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(keys, inner, max_size=4),
    max_leaves=16,
)

# Field names the parser reads, so that random documents reach past the first check.
VOCABULARY = sorted(
    {k for docs in EXAMPLES.values() for _, v in nodes(docs) if isinstance(v, dict) for k in v}
    | {
        *("initContainers", "affinity", "nodeAffinity", "nodeSelectorTerms", "operator"),
        *("matchExpressions", "requiredDuringSchedulingIgnoredDuringExecution", "values"),
        *("completions", "backoffLimit", "minAvailable", "policies", "event", "events"),
        *("action", "exitCode", "maxRetry", "queue", "networkTopology", "mode", "rules"),
        *("highestTierAllowed", "failurePolicy", "targetReplicatedJobs", "maxRestarts"),
        *("parentName", "fairSharing", "weight", "preemption", "borrowWithinCohort"),
        *("flavorFungibility", "cohort", "nodeTaints", "retryStrategy", "podSetUpdates"),
        *("managedResources", "value", "globalDefault", "template", "podTemplateRef"),
        *("args", "image", "command"),
    }
)
field_keys = st.one_of(st.sampled_from(VOCABULARY), keys)
structured = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(field_keys, inner, max_size=5),
    max_leaves=24,
)
ANNOTATIONS = sorted(
    {
        manifests.QUEUE_LABEL,
        manifests.PRIORITY_LABEL,
        manifests.MIN_PARALLELISM,
        manifests.RUNTIME,
        manifests.EXIT_CODES,
        manifests.MAX_RUN,
        manifests.PROVREQ_MAX_RUN,
        manifests.SUBMIT_AT,
        manifests.DELETE_AT,
        manifests.ENFORCEMENT,
        manifests.EXCLUSIVE,
        manifests.GPU_GROUP_SIZE,
        manifests.NODE_POLICY,
        manifests.GPU_POLICY,
        manifests.TAS_SLICE_SIZE,
        *manifests.CONSUME,
        *manifests.DEVICE_ANNOTATIONS.values(),
        *manifests.TAS_ANNOTATIONS.values(),
    }
)
names = st.one_of(st.sampled_from(["a", "main", "default", "q-1"]), yamlish)
metadata = st.one_of(
    yamlish,
    st.fixed_dictionaries(
        {},
        optional={
            "name": names,
            "namespace": names,
            "labels": st.dictionaries(st.sampled_from(ANNOTATIONS) | keys, yamlish, max_size=3),
            "annotations": st.dictionaries(
                st.sampled_from(ANNOTATIONS) | keys, yamlish, max_size=4
            ),
        },
    ),
)


def api_version(group: str, version: str) -> str:
    return f"{group}/{version}" if group else version


# Each kind muster reads, at its newest version (the version is only looked up).
KINDS = sorted((g, k, versions[-1]) for (g, k), versions in SUPPORTED.items())


# -- 1. arbitrary documents ---------------------------------------------------------------


@SETTINGS
@given(st.lists(yamlish, max_size=3))
def test_arbitrary_values_are_read_or_refused(docs: list[Any]) -> None:
    """Any YAML values as documents."""
    attempt(docs)


@SETTINGS
@given(st.lists(structured | st.dictionaries(field_keys, structured, max_size=6), max_size=3))
def test_arbitrary_objects_are_read_or_refused(docs: list[Any]) -> None:
    """Objects made of the field names the parser reads."""
    attempt(docs)


@settings(SETTINGS, max_examples=20)
@pytest.mark.parametrize(("group", "kind", "version"), KINDS)
@given(
    meta=metadata,
    spec=st.one_of(structured, st.dictionaries(field_keys, structured, max_size=6)),
    extra=st.dictionaries(
        st.sampled_from(["value", "template", "globalDefault", "description", "status"]),
        structured,
        max_size=2,
    ),
)
def test_each_kind_with_random_metadata_and_spec_is_read_or_refused(
    group: str, kind: str, version: str, meta: Any, spec: Any, extra: dict[str, Any]
) -> None:
    """A valid apiVersion and kind, with random metadata and spec (and without spec)."""
    doc = {"apiVersion": api_version(group, version), "kind": kind, "metadata": meta}
    doc.update(extra)
    doc["spec"] = spec
    attempt([doc])
    attempt([{k: v for k, v in doc.items() if k != "spec"}])


# -- 2. mutated example documents ---------------------------------------------------------


def draw_doc(data: st.DataObject) -> tuple[str, list[Any], int]:
    """An example file, a copy of its documents, and the index of the one to mutate (the
    others stay: a ProvisioningRequest needs its PodTemplate)."""
    file, index = data.draw(st.sampled_from(DOC_REFS), label="document")
    return file, copy.deepcopy(EXAMPLES[file]), index


# Unknown keys: field-like names, and the other keys YAML makes (numbers, null, dates).
unknown_keys = st.one_of(
    st.text("abcXYZ019_-", max_size=6).map(lambda s: f"unknownField{s}"),
    st.integers(100, 10**6),
    st.none(),
    st.dates(),
)


@SETTINGS
@given(st.data())
def test_an_unknown_field_is_refused_by_name_or_ignored(data: st.DataObject) -> None:
    """Unknown keys added to an object of an example: refused by name where the parser reads
    strictly, changing nothing where it ignores what it does not model."""
    file, docs, index = draw_doc(data)
    doc = docs[index]
    kind = doc["kind"]
    places = [loc for loc, v in nodes(doc) if isinstance(v, dict) and classify(doc, loc) != FREE]
    loc = data.draw(st.sampled_from(places), label="location")
    # At the top level also ``spec``, for the kinds that have none.
    choices = unknown_keys | st.just("spec") if not loc and kind in NO_SPEC else unknown_keys
    added = data.draw(st.lists(choices, min_size=1, max_size=3, unique=True), label="keys")
    for key in added:
        get(doc, loc)[key] = data.draw(yamlish, label="value")
    if classify(doc, loc) == IGNORED_FIELD:
        # Not modelled (docs/api.md): accepted, and nothing changes.
        assert attempt(docs) == manifests.read(EXAMPLES[file])
        return
    with pytest.raises(InvalidInput) as info:
        manifests.read(docs).provisioning_requests()
    exc = info.value
    at = where(index, doc)
    named = {f"{at}.{dotted(loc)}.{key}" if loc else f"{at}.{key}" for key in added}
    if exc.path in named:
        assert exc.problem.startswith("unknown field"), exc
    else:
        # An object refused as a whole, with its own reason.
        ancestors = {f"{at}.{dotted(loc[:n])}": loc[n - 1] for n in range(1, len(loc) + 1)}
        assert ancestors.get(exc.path) in REFUSED_WHOLE, exc
        assert not exc.problem.startswith("unknown field"), exc


def leaf_groups(doc: dict[str, Any]) -> dict[tuple[str, str], list[Loc]]:
    """A document's values (all but the document) by field name, so that a field met once is
    drawn as often as one met a hundred times; list items go by their list's name."""
    groups: dict[tuple[str, str], list[Loc]] = {}
    for loc, _ in nodes(doc):
        if loc:
            name = next((str(k) for k in reversed(loc) if isinstance(k, str)), "")
            groups.setdefault((doc["kind"], name), []).append(loc)
    return groups


def replace_at(doc: dict[str, Any], loc: Loc, value: Any) -> None:
    get(doc, loc[:-1])[loc[-1]] = value


@settings(SETTINGS, max_examples=250)
@given(st.data())
def test_a_value_of_the_wrong_type_or_size_is_read_or_refused(data: st.DataObject) -> None:
    """Any value of an example replaced: by a nasty value or random YAML."""
    _, docs, index = draw_doc(data)
    groups = leaf_groups(docs[index])
    group = data.draw(st.sampled_from(sorted(groups)), label="field")
    loc = data.draw(st.sampled_from(groups[group]), label="location")
    replace_at(docs[index], loc, data.draw(st.sampled_from(NASTY) | yamlish, label="value"))
    attempt(docs)


@SETTINGS
@given(st.data())
def test_a_missing_field_is_read_or_refused(data: st.DataObject) -> None:
    """Any key of an example deleted."""
    _, docs, index = draw_doc(data)
    places = [(loc, k) for loc, v in nodes(docs[index]) if isinstance(v, dict) for k in v]
    loc, key = data.draw(st.sampled_from(places), label="key")
    del get(docs[index], loc)[key]
    attempt(docs)


def free_form_maps(doc: dict[str, Any]) -> list[Loc]:
    """Where a document has (or could have) a map whose keys are data: the labels and
    annotations of its metadata and of its templates', resources, node selectors..."""
    free = FREE_FORM | FREE_FORM_BY_KIND.get(doc["kind"], frozenset())
    out = {loc for loc, v in nodes(doc) if loc and loc[-1] in free and isinstance(v, dict)}
    for loc, v in nodes(doc):
        if loc and loc[-1] == "metadata" and isinstance(v, dict):
            out |= {(*loc, "labels"), (*loc, "annotations")}
    return sorted(out, key=dotted)


@settings(SETTINGS, max_examples=200)
@given(st.data())
def test_any_entry_of_a_free_form_map_is_read_or_refused(data: st.DataObject) -> None:
    """Entries (annotations muster reads, resources, any key) added to a map whose keys are
    data, with nasty or random values."""
    _, docs, index = draw_doc(data)
    doc = docs[index]
    loc = data.draw(st.sampled_from(free_form_maps(doc)), label="map")
    parent = get(doc, loc[:-1])
    if not isinstance(parent.get(loc[-1]), dict):
        parent[loc[-1]] = {}
    entries = st.dictionaries(
        st.sampled_from([*ANNOTATIONS, "cpu", "memory", "nvidia.com/gpu", "maxRunDurationSeconds"])
        | keys,
        st.sampled_from(NASTY) | yamlish,
        min_size=1,
        max_size=3,
    )
    parent[loc[-1]].update(data.draw(entries, label="entries"))
    attempt(docs)


# The kinds that read annotations.
ANNOTATED = frozenset({"JobSet", "Job", "Pod", "ProvisioningRequest", "ResourceQuota"})


def context(file: str, index: int) -> list[Any]:
    """A copy of one example document, after the PodTemplates of its file (which a
    ProvisioningRequest needs); the document is the last."""
    docs = EXAMPLES[file]
    templates = [d for d in docs[:index] if d is not None and d["kind"] == "PodTemplate"]
    return copy.deepcopy([*templates, docs[index]])


def test_every_field_of_every_kind_takes_every_nasty_value() -> None:
    """Exhaustively: the first value of each field of each kind, and each annotation muster
    reads (on a document and on its first template), set to each value of ``NASTY``."""
    cases: dict[tuple[str, str], tuple[str, int, Loc]] = {}
    for file, index in DOC_REFS:
        doc = EXAMPLES[file][index]
        for group, locs in leaf_groups(doc).items():
            cases.setdefault(group, (file, index, locs[0]))
        if doc["kind"] not in ANNOTATED:
            continue
        metas = [loc for loc, v in nodes(doc) if loc and loc[-1] == "metadata"][:2]
        for meta in metas:
            for annotation in ANNOTATIONS:
                loc = (*meta, "annotations", annotation)
                cases.setdefault((doc["kind"], f"{dotted(meta)} {annotation}"), (file, index, loc))
    for file, index, loc in cases.values():
        docs = context(file, index)
        doc = docs[-1]
        if loc[-2:-1] == ("annotations",):
            metadata = get(doc, loc[:-2])
            if not isinstance(metadata.get("annotations"), dict):
                metadata["annotations"] = {}
        parent = get(doc, loc[:-1])
        for value in NASTY:
            parent[loc[-1]] = copy.deepcopy(value)
            try:
                attempt(docs)
            except Exception as exc:
                raise AssertionError(f"{file}: doc[{index}].{dotted(loc)} = {value!r}") from exc


# The JSON type of the fields muster reads (of any kind; containers' names are not read).
OBJECT, LIST, INTEGER, STRING = "object", "list", "integer", "string"
TYPED = {
    **dict.fromkeys(["apiVersion", "kind", "name", "namespace", "clusterQueue"], STRING),
    **dict.fromkeys(["provisioningClassName", "queue", "priorityClassName"], STRING),
    **dict.fromkeys(["controllerName", "queueingStrategy", "key", "operator", "effect"], STRING),
    **dict.fromkeys(["action", "event", "mode", "cohort"], STRING),
    **dict.fromkeys(["metadata", "spec", "template", "nodeSelector", "resources"], OBJECT),
    **dict.fromkeys(["requests", "limits", "podTemplateRef", "nodeLabels", "hard"], OBJECT),
    **dict.fromkeys(["labels", "annotations", "failurePolicy", "retryStrategy"], OBJECT),
    **dict.fromkeys(["preemption", "networkTopology", "affinity", "fairSharing"], OBJECT),
    **dict.fromkeys(["tolerations", "containers", "initContainers", "coveredResources"], LIST),
    **dict.fromkeys(["flavors", "resourceGroups", "podSets", "replicatedJobs", "tasks"], LIST),
    **dict.fromkeys(["policies", "events", "managedResources"], LIST),
    **dict.fromkeys(["replicas", "parallelism", "completions", "backoffLimit", "count"], INTEGER),
    **dict.fromkeys(["value", "minAvailable", "maxRetry", "maxRestarts"], INTEGER),
    "highestTierAllowed": INTEGER,
}
# Falsy ones too: [] is not an empty object, nor 0 an empty list.
WRONG_TYPE: dict[str, list[Any]] = {
    OBJECT: ["x", 7, 1.5, True, False, 0, "", [], ["a"]],
    LIST: ["x", 7, 1.5, True, False, 0, "", {}, {"a": "b"}],
    INTEGER: ["x", "7", 1.5, True, [], {}],
    STRING: [7, 1.5, True, [], {}, ["a"], {"a": "b"}],
}


def typed_fields() -> dict[tuple[str, str], tuple[str, int, Loc]]:
    """The first occurrence in the examples of each typed field of each kind (by its path,
    list indexes aside), outside the free-form maps."""
    out: dict[tuple[str, str], tuple[str, int, Loc]] = {}
    for file, index in DOC_REFS:
        doc = EXAMPLES[file][index]
        for loc, _ in nodes(doc):
            field = loc[-1] if loc else None
            if not isinstance(field, str) or field not in TYPED:
                continue
            if classify(doc, loc[:-1]) == FREE or (
                field == "name" and {"containers", "initContainers"} & set(loc)
            ):
                continue
            pattern = dotted(tuple(k for k in loc if isinstance(k, str)))
            out.setdefault((doc["kind"], pattern), (file, index, loc))
    return out


def test_a_field_of_the_wrong_type_is_refused_by_name() -> None:
    """Each field muster reads, set to a value of another type (falsy ones too): refused,
    the refusal naming it."""
    for file, index, loc in typed_fields().values():
        for value in WRONG_TYPE[TYPED[str(loc[-1])]]:
            docs = copy.deepcopy(EXAMPLES[file])
            replace_at(docs[index], loc, value)
            with pytest.raises(InvalidInput) as info:
                manifests.read(docs).provisioning_requests()
            case = f"{file}: doc[{index}].{dotted(loc)} = {value!r}"
            assert info.value.path.startswith(f"doc[{index}]"), (case, info.value)
            assert dotted(loc) in info.value.path, (case, info.value)


# -- 3. the examples ----------------------------------------------------------------------


@pytest.mark.parametrize("file", sorted(EXAMPLES))
def test_every_example_is_read_and_round_trips(file: str) -> None:
    docs = EXAMPLES[file]
    m = manifests.read(docs)
    check_accepted(m)
    assert m.workloads or m.queue_object_count or m.request_sources or m.pod_templates
    # Through YAML again: the same manifests.
    again = list(yaml.safe_load_all(yaml.safe_dump_all(docs)))
    assert manifests.read(again) == m
    # Document by document, then combined: the same (the documents' indexes aside).
    alone = manifests.combine(*(manifests.read([d]) for d in docs))
    assert without_paths(alone) == without_paths(m)
    assert alone.provisioning_requests() == m.provisioning_requests()


def without_paths(m: Manifests) -> Manifests:
    """Without where each request and PodTemplate came from (and which pod named a
    PodGroup)."""
    templates = tuple(replace(t, origin={}) for t in m.pod_templates)
    sources = tuple(replace(s, where="") for s in m.sources)
    return replace(m, request_sources=(), pod_templates=templates, sources=sources)


# -- what the fuzzing found, minimally ----------------------------------------------------


def job(annotations: dict[str, Any] | None = None, **pod: Any) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "j", "annotations": annotations or {}},
        "spec": {"template": {"spec": {"containers": [{}], **pod}}},
    }


JOB_ANNOTATIONS = "doc[0] (Job j).metadata.annotations"
POD = "doc[0] (Job j).spec.template.spec"
LOCAL_QUEUE = {"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "LocalQueue"}
POD_TEMPLATE = {"apiVersion": "v1", "kind": "PodTemplate"}
REQUEST = {"apiVersion": "autoscaling.x-k8s.io/v1", "kind": "ProvisioningRequest"}
REQUEST_SPEC = {
    "provisioningClassName": "c",
    "podSets": [{"count": 1, "podTemplateRef": {"name": "t"}}],
}
TEMPLATE: dict[str, Any] = {"spec": {"containers": [{}]}}


@pytest.mark.parametrize(
    ("doc", "path", "problem"),
    [
        # TypeError: sorting unknown keys of mixed types (YAML keys may be numbers, null...).
        (
            {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, 1: "x", "y": "z"},
            "doc[0] (Pod p).1",
            "unknown field",
        ),
        (
            {
                **LOCAL_QUEUE,
                "metadata": {"name": "q"},
                "spec": {"clusterQueue": "c", 1: 2, None: 3},
            },
            "doc[0] (LocalQueue q).spec.1",
            "unknown field",
        ),
        # ValueError: "²".isdigit() is true, int("²") fails; int() reads at most 4300 digits.
        (job({manifests.MAX_RUN: "²"}), f"{JOB_ANNOTATIONS}.{manifests.MAX_RUN}", "whole number"),
        (
            job({manifests.MAX_RUN: "9" * 5000}),
            f"{JOB_ANNOTATIONS}.{manifests.MAX_RUN}",
            "whole number",
        ),
        (job({manifests.EXIT_CODES: "1,²"}), f"{JOB_ANNOTATIONS}.{manifests.EXIT_CODES}", "exit"),
        (
            {
                "apiVersion": "kueue.x-k8s.io/v1beta1",
                "kind": "ProvisioningRequestConfig",
                "metadata": {"name": "c"},
                "spec": {
                    "provisioningClassName": "x",
                    "parameters": {"maxRunDurationSeconds": "²"},
                },
            },
            "doc[0] (ProvisioningRequestConfig c).spec.parameters.maxRunDurationSeconds",
            "whole number of seconds",
        ),
        (
            job(containers=[{"resources": {"requests": {"cpu": "9" * 5000}}}]),
            f"{POD}.containers[0].resources.requests.cpu",
            "too many digits",
        ),
        # OverflowError: float() of an int beyond any float.
        (job({manifests.SUBMIT_AT: 10**400}), f"{JOB_ANNOTATIONS}.{manifests.SUBMIT_AT}", "finite"),
        (job({manifests.RUNTIME: 10**400}), f"{JOB_ANNOTATIONS}.{manifests.RUNTIME}", "finite"),
        # Accepted: a name with a trailing newline ("$" matches before it).
        (
            {**LOCAL_QUEUE, "metadata": {"name": "q\n"}, "spec": {"clusterQueue": "c"}},
            "doc[0] (LocalQueue q\n).metadata.name",
            "not a valid name",
        ),
        (job(nodeSelector={"zone\n": "a"}), f"{POD}.nodeSelector", "not a valid label key"),
        # Dropped: a spec where the kind has none.
        (
            {
                "apiVersion": "scheduling.k8s.io/v1",
                "kind": "PriorityClass",
                "metadata": {"name": "p"},
                "value": 1,
                "spec": {"value": 2},
            },
            "doc[0] (PriorityClass p).spec",
            "unknown field",
        ),
        (
            {
                **POD_TEMPLATE,
                "metadata": {"name": "t"},
                "template": TEMPLATE,
                "spec": {},
            },
            "doc[0] (PodTemplate t).spec",
            "unknown field",
        ),
        # Accepted: a PodTemplate's namespace unchecked (key "True/t").
        (
            {
                **POD_TEMPLATE,
                "metadata": {"name": "t", "namespace": True},
                "template": TEMPLATE,
            },
            "doc[0] (PodTemplate t).metadata.namespace",
            "must be a string",
        ),
        # Accepted as absent: a falsy value of the wrong type.
        (
            {**job(), "metadata": {"name": "j", "namespace": []}},
            "doc[0] (Job j).metadata.namespace",
            "must be a string",
        ),
        (job(nodeSelector=[]), f"{POD}.nodeSelector", "must be an object"),
        (job(tolerations=0), f"{POD}.tolerations", "must be a list"),
        # Misreported as "no PodTemplate 7/t": the namespace was checked after the lookup.
        (
            {**REQUEST, "metadata": {"name": "r", "namespace": 7}, "spec": REQUEST_SPEC},
            "doc[0] (ProvisioningRequest r).metadata.namespace",
            "must be a string",
        ),
    ],
)
def test_found_by_fuzzing(doc: dict[str, Any], path: str, problem: str) -> None:
    with pytest.raises(InvalidInput) as info:
        manifests.read([doc]).provisioning_requests()
    assert info.value.path == path
    assert problem in info.value.problem
