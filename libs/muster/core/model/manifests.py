"""Kubernetes manifests (Kueue queues and admission checks, PriorityClass, ResourceQuota,
JobSet, Job, Volcano Job, Pod, PodTemplate + ProvisioningRequest) as muster's model objects.

Pure: the caller loads the YAML (``yaml.safe_load_all``) and hands the documents over.
Field validation stays in ``parse``: each object is turned into the flat shape ``parse``
reads (``{"name": metadata.name, **spec}``), and a refusal is re-raised with the path of
the field in the manifest, e.g. ``doc[2] (ClusterQueue research).spec.resourceGroups[0]``.
The rules are listed in docs/api.md ("Kubernetes manifests").
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

from muster.core.model import parse, workload_fields
from muster.core.model.cluster import ClusterSpec
from muster.core.model.fields import LABEL_KEY, NAME, InvalidInput, Obj, parse_duration
from muster.core.model.queues import (
    AdmissionCheckSpec,
    ClusterQueueSpec,
    CohortSpec,
    LocalQueueSpec,
    NamespaceQuotaSpec,
    PriorityClassSpec,
    ProvisioningRequestConfigSpec,
    ResourceFlavorSpec,
)
from muster.core.model.resources import format_quantity
from muster.core.model.workload import (
    FAILURE_EVENTS,
    GPU_POLICIES,
    Gang,
    PodSetTopology,
    ProvisioningRequestSpec,
    WorkloadSpec,
)

T = TypeVar("T")

QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"
MIN_PARALLELISM = "kueue.x-k8s.io/job-min-parallelism"
RUNTIME = "muster.dev/runtime-seconds"
EXIT_CODES = "muster.dev/exit-codes"
MAX_RUN = "muster.dev/max-run-duration-seconds"
PROVREQ_MAX_RUN = "provreq.kueue.x-k8s.io/maxRunDurationSeconds"
SUBMIT_AT = "muster.dev/submit-at"
CHECKPOINT = "muster.dev/checkpoint-interval-seconds"
DELETE_AT = "muster.dev/delete-at"
ENFORCEMENT = "muster.dev/enforcement"
# A pod consuming a standalone ProvisioningRequest; the older prefix is still seen on GKE.
CONSUME = (
    "autoscaling.x-k8s.io/consume-provisioning-request",
    "cluster-autoscaler.kubernetes.io/consume-provisioning-request",
)
# JobSet: each child Job on its own value of this node label (on the JobSet, or on one
# replicated job's template).
EXCLUSIVE = "alpha.jobset.sigs.k8s.io/exclusive-topology"
# Pod (template) annotations.
GPU_GROUP_SIZE = "metax-tech.com/gpu-group-size"
NODE_POLICY = "hami.io/node-scheduler-policy"
GPU_POLICY = "hami.io/gpu-scheduler-policy"
# HAMi's GPU pinning, comma-separated: pod set ``devices`` field -> annotation.
DEVICE_ANNOTATIONS = {
    "useUuids": "nvidia.com/use-gpuuuid",
    "avoidUuids": "nvidia.com/nouse-gpuuuid",
    "useTypes": "nvidia.com/use-gputype",
    "avoidTypes": "nvidia.com/nouse-gputype",
}
# Kueue topology-aware scheduling: pod set ``topology`` field -> annotation.
TAS_ANNOTATIONS = {
    "required": "kueue.x-k8s.io/podset-required-topology",
    "preferred": "kueue.x-k8s.io/podset-preferred-topology",
    "sliceRequired": "kueue.x-k8s.io/podset-slice-required-topology",
}
TAS_SLICE_SIZE = "kueue.x-k8s.io/podset-slice-size"
DEFAULT_QUEUE = "default"
DEFAULT_NAMESPACE = "default"
# Kubernetes' default Job backoffLimit, Volcano's default maxRetry.
DEFAULT_BACKOFF_LIMIT = 6
DEFAULT_MAX_RETRY = 3
# HAMi scheduler's defaults, for the level a pod's annotations leave out.
HAMI_NODE_POLICY = "binpack"
HAMI_GPU_POLICY = "spread"

KUEUE = "kueue.x-k8s.io"
AUTOSCALING = "autoscaling.x-k8s.io"
VOLCANO = "batch.volcano.sh"
VOLCANO_SCHEDULING = "scheduling.volcano.sh"
COSCHEDULING = "scheduling.x-k8s.io"  # kubernetes-sigs/scheduler-plugins coscheduling
_BETA = ("v1beta1", "v1beta2")

# (API group, kind) -> the versions read.
SUPPORTED: dict[tuple[str, str], tuple[str, ...]] = {
    (KUEUE, "ResourceFlavor"): _BETA,
    (KUEUE, "ClusterQueue"): _BETA,
    (KUEUE, "LocalQueue"): _BETA,
    (KUEUE, "Cohort"): ("v1alpha1", *_BETA),
    (KUEUE, "WorkloadPriorityClass"): _BETA,
    (KUEUE, "AdmissionCheck"): _BETA,
    (KUEUE, "ProvisioningRequestConfig"): _BETA,
    (AUTOSCALING, "ProvisioningRequest"): ("v1", "v1beta1"),
    ("", "PodTemplate"): ("v1",),
    ("scheduling.k8s.io", "PriorityClass"): ("v1",),
    ("", "ResourceQuota"): ("v1",),
    ("jobset.x-k8s.io", "JobSet"): ("v1alpha2",),
    ("batch", "Job"): ("v1",),
    (VOLCANO, "Job"): ("v1alpha1",),
    ("", "Pod"): ("v1",),
    (VOLCANO_SCHEDULING, "PodGroup"): ("v1beta1",),
    (COSCHEDULING, "PodGroup"): ("v1alpha1",),
}
_NOT_QUEUEING = "not a queueing object, ignored"
# Recognised, but not muster's to configure: listed in ``Manifests.skipped``, any version.
IGNORED: dict[tuple[str, str], str] = {
    (KUEUE, "Topology"): _NOT_QUEUEING,
    ("", "Namespace"): "namespaces need no configuration, ignored",
}
_TOP_LEVEL = frozenset({"apiVersion", "kind", "metadata", "spec", "status"})
# Kinds with no spec: their fields are top-level (value) or under template.
_NO_SPEC = frozenset({"PriorityClass", "WorkloadPriorityClass", "PodTemplate"})
# A shell ``sleep N`` (N seconds, or with an s/m/h/d suffix) in a container's command line.
_SLEEP = re.compile(r"(?:^|[\s;&|(])sleep\s+([0-9]+(?:\.[0-9]+)?[smhd]?)(?=$|[\s;&|)])")
# A whole number in a string: ASCII digits ("²".isdigit() is true, int() refuses it), at
# most 18 (within int64; int() refuses thousands).
_DIGITS = re.compile(r"[0-9]{1,18}")


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkloadSource:
    """Where a converted workload came from: its kind, and when ``muster sim`` submits it."""

    kind: str  # JobSet, Job (batch or Volcano) or Pod
    at: float = 0.0  # annotation muster.dev/submit-at, seconds from the simulation's start
    # A gang member naming a PodGroup (its key, ``PodGroupSource.key``), until resolved;
    # ``where`` the annotation or label that names it.
    pod_group: str | None = None
    where: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class PodTemplateSource:
    """A PodTemplate, as the pod set a ProvisioningRequest's ``podTemplateRef`` stands for."""

    key: str  # namespace/name
    pod_set: Mapping[str, Any]  # parse's flat pod set, without name and count
    origin: Mapping[str, str]  # its fields' paths in the manifest


@dataclass(frozen=True, slots=True, kw_only=True)
class RequestSource:
    """A ProvisioningRequest whose PodTemplates may come in a later document or file."""

    where: str  # "doc[1] (ProvisioningRequest pi-request)"
    namespace: str
    flat: Mapping[str, Any]  # parse's flat request; pod sets as {"template", "count"}
    origin: Mapping[str, str]
    at: float = 0.0
    delete_at: float | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class PodGroupSource:
    """A PodGroup (Volcano's or scheduler-plugins'): the gang its pods join."""

    key: str  # "<API group>/<namespace>/<name>": pods name it through their group's key
    name: str
    min_member: int  # the gang forms at this many member pods
    queue: str | None = None  # Volcano's spec.queue: the members' LocalQueue
    priority_class: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Manifests:
    """What a set of manifests holds; ``sources[i]`` describes ``workloads[i]``."""

    resource_flavors: tuple[ResourceFlavorSpec, ...] = ()
    cluster_queues: tuple[ClusterQueueSpec, ...] = ()
    local_queues: tuple[LocalQueueSpec, ...] = ()
    cohorts: tuple[CohortSpec, ...] = ()
    priority_classes: tuple[PriorityClassSpec, ...] = ()
    namespace_quotas: tuple[NamespaceQuotaSpec, ...] = ()
    admission_checks: tuple[AdmissionCheckSpec, ...] = ()
    provisioning_configs: tuple[ProvisioningRequestConfigSpec, ...] = ()
    workloads: tuple[WorkloadSpec, ...] = ()
    sources: tuple[WorkloadSource, ...] = ()
    pod_templates: tuple[PodTemplateSource, ...] = ()
    request_sources: tuple[RequestSource, ...] = ()
    skipped: tuple[str, ...] = ()  # "Topology default: not a queueing object, ignored"
    pod_groups: tuple[PodGroupSource, ...] = ()

    def __post_init__(self) -> None:
        if len(self.sources) != len(self.workloads):
            raise ValueError("Manifests: one source per workload")

    def with_gangs(self) -> Manifests:
        """Pods naming a PodGroup of these manifests join its gang: it forms at
        ``minMember`` pods; its queue and priority class go to pods that name none."""
        groups = {g.key: g for g in self.pod_groups}
        joined = tuple(
            _join(wl, groups[src.pod_group]) if src.pod_group in groups and wl.gang is None else wl
            for src, wl in zip(self.sources, self.workloads, strict=True)
        )
        return self if joined == self.workloads else replace(self, workloads=joined)

    def check_gangs(self) -> None:
        """Every pod naming a PodGroup found it (muster keeps no PodGroup objects: the
        PodGroup comes in the same apply or simulation)."""
        for src, wl in zip(self.sources, self.workloads, strict=True):
            if src.pod_group is not None and wl.gang is None:
                _, _, key = src.pod_group.partition("/")
                raise InvalidInput(
                    src.where,
                    f"PodGroup {key} is not among these manifests: give it in the same apply "
                    "as its pods (muster keeps no PodGroup objects between applies)",
                )

    def submissions(self) -> list[tuple[float, WorkloadSpec]]:
        """The workloads with their submit times, in document order; ``InvalidInput``
        names a pod whose PodGroup no manifest defines."""
        self.check_gangs()
        return [(src.at, wl) for src, wl in zip(self.sources, self.workloads, strict=True)]

    @property
    def queue_object_count(self) -> int:
        return (
            len(self.resource_flavors)
            + len(self.cluster_queues)
            + len(self.local_queues)
            + len(self.cohorts)
            + len(self.priority_classes)
            + len(self.namespace_quotas)
            + len(self.admission_checks)
            + len(self.provisioning_configs)
        )

    def provisioning_requests(
        self,
    ) -> list[tuple[float, ProvisioningRequestSpec, float | None]]:
        """The standalone requests with their submit and delete times (annotations
        muster.dev/submit-at and muster.dev/delete-at, for ``muster sim``), each PodTemplate
        resolved in its namespace; ``InvalidInput`` names a ``podTemplateRef`` no manifest
        defines."""
        templates = {t.key: t for t in self.pod_templates}
        return [(src.at, _resolve(src, templates), src.delete_at) for src in self.request_sources]


def is_manifests(docs: Sequence[object]) -> bool:
    """Kubernetes manifests rather than muster's own formats: some document has a ``kind``."""
    return any(isinstance(d, Mapping) and "kind" in d for d in docs)


def read(docs: Sequence[object]) -> Manifests:
    """Convert the documents of a multi-document YAML; empty documents (None) are skipped.

    A later object with the same name (namespace/name for LocalQueues and ResourceQuotas)
    replaces an earlier one, as ``kubectl apply`` would. Raises ``InvalidInput``.
    """
    parts: list[Manifests] = []
    for index, raw in enumerate(docs):
        if raw is None:
            continue
        doc = _header(index, raw)
        parts.append(_convert(doc))
    return combine(*parts)


def combine(*parts: Manifests) -> Manifests:
    """Several sets in order: later queue objects replace earlier ones; workloads add up."""
    return Manifests(
        resource_flavors=_upsert((), (o for p in parts for o in p.resource_flavors), _name),
        cluster_queues=_upsert((), (o for p in parts for o in p.cluster_queues), _name),
        local_queues=_upsert((), (o for p in parts for o in p.local_queues), _key),
        cohorts=_upsert((), (o for p in parts for o in p.cohorts), _name),
        priority_classes=_upsert((), (o for p in parts for o in p.priority_classes), _name),
        namespace_quotas=_upsert((), (o for p in parts for o in p.namespace_quotas), _key),
        admission_checks=_upsert((), (o for p in parts for o in p.admission_checks), _name),
        provisioning_configs=_upsert((), (o for p in parts for o in p.provisioning_configs), _name),
        workloads=tuple(w for p in parts for w in p.workloads),
        sources=tuple(s for p in parts for s in p.sources),
        pod_templates=_upsert((), (t for p in parts for t in p.pod_templates), _key),
        request_sources=tuple(r for p in parts for r in p.request_sources),
        skipped=tuple(s for p in parts for s in p.skipped),
        pod_groups=_upsert((), (g for p in parts for g in p.pod_groups), _key),
    ).with_gangs()


def merge(cluster: ClusterSpec, m: Manifests) -> ClusterSpec:
    """The cluster with the manifests' queue objects added; same name replaces."""
    return replace(
        cluster,
        resource_flavors=_upsert(cluster.resource_flavors, m.resource_flavors, _name),
        cluster_queues=_upsert(cluster.cluster_queues, m.cluster_queues, _name),
        local_queues=_upsert(cluster.local_queues, m.local_queues, _key),
        cohorts=_upsert(cluster.cohorts, m.cohorts, _name),
        priority_classes=_upsert(cluster.priority_classes, m.priority_classes, _name),
        namespace_quotas=_upsert(cluster.namespace_quotas, m.namespace_quotas, _key),
        admission_checks=_upsert(cluster.admission_checks, m.admission_checks, _name),
        provisioning_configs=_upsert(cluster.provisioning_configs, m.provisioning_configs, _name),
    )


def _name(obj: Any) -> str:
    return str(obj.name)


def _key(obj: Any) -> str:
    return str(obj.key)


def _upsert(base: Iterable[T], new: Iterable[T], key: Callable[[T], str]) -> tuple[T, ...]:
    """``base`` with each of ``new`` replacing the item of the same key in place, or appended."""
    out = {key(item): item for item in base}
    for item in new:
        out[key(item)] = item
    return tuple(out.values())


# -- one document ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Doc:
    index: int
    group: str
    version: str
    kind: str
    name: object  # validated by parse, as metadata.name
    namespace: object  # metadata.namespace, "default" when absent
    metadata: Mapping[str, Any]
    body: Mapping[str, Any]

    @property
    def where(self) -> str:
        if isinstance(self.name, str) and self.name:
            return f"doc[{self.index}] ({self.kind} {self.name})"
        return f"doc[{self.index}] ({self.kind})"

    def at(self, path: str) -> str:
        return f"{self.where}.{path}"

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version


def _header(index: int, raw: object) -> _Doc:
    at = f"doc[{index}]"
    if not isinstance(raw, Mapping):
        raise InvalidInput(at, "must be an object with apiVersion, kind, metadata")
    kind = raw.get("kind")
    if not isinstance(kind, str) or not kind:
        raise InvalidInput(f"{at}.kind", "is required: a string such as ClusterQueue or Job")
    metadata = raw.get("metadata")
    if metadata is None:
        metadata = {}
    if not isinstance(metadata, Mapping):
        raise InvalidInput(f"{at} ({kind}).metadata", "must be an object")
    name = metadata.get("name")
    # Absent or empty: the default namespace; anything else is checked where it is read.
    namespace = metadata.get("namespace")
    namespace = DEFAULT_NAMESPACE if namespace is None or namespace == "" else namespace
    doc = _Doc(index, "", "", kind, name, namespace, metadata, raw)
    api = raw.get("apiVersion")
    if not isinstance(api, str) or not api:
        raise InvalidInput(doc.at("apiVersion"), "is required: a string such as batch/v1")
    group, _, version = api.rpartition("/")
    return replace(doc, group=group, version=version)


def _convert(doc: _Doc) -> Manifests:
    key = (doc.group, doc.kind)
    if key in IGNORED:
        name = doc.name if isinstance(doc.name, str) and doc.name else "(unnamed)"
        return Manifests(skipped=(f"{doc.kind} {name}: {IGNORED[key]}",))
    versions = SUPPORTED.get(key)
    if versions is None:
        groups = [g for g, k in SUPPORTED if k == doc.kind]
        if groups:
            expected = " or ".join(_api(g, SUPPORTED[(g, doc.kind)]) for g in groups)
            raise InvalidInput(
                doc.at("apiVersion"), f"{doc.kind} is read from {expected}, not {doc.api_version}"
            )
        raise InvalidInput(
            doc.at("kind"),
            f"{doc.kind} ({doc.api_version}) is not supported; supported kinds: {_supported()}",
        )
    if doc.version not in versions:
        raise InvalidInput(
            doc.at("apiVersion"),
            f"{doc.kind} is read from {_api(doc.group, versions)}, not {doc.api_version}",
        )
    unknown = sorted((k for k in doc.body if k not in _TOP_LEVEL), key=str)
    if doc.kind == "PodTemplate":
        unknown = [k for k in unknown if k != "template"]
    if unknown and doc.kind not in ("PriorityClass", "WorkloadPriorityClass"):
        raise InvalidInput(doc.at(str(unknown[0])), "unknown field")
    if "spec" in doc.body and doc.kind in _NO_SPEC:
        raise InvalidInput(doc.at("spec"), f"unknown field: a {doc.kind} has no spec")
    match doc.kind:
        case "ResourceFlavor":
            return Manifests(resource_flavors=(_queue_object(doc, parse.resource_flavor),))
        case "ClusterQueue":
            return Manifests(cluster_queues=(_queue_object(doc, parse.cluster_queue),))
        case "LocalQueue":
            return Manifests(local_queues=(_queue_object(doc, parse.local_queue, True),))
        case "Cohort":
            return Manifests(cohorts=(_queue_object(doc, parse.cohort),))
        case "PriorityClass" | "WorkloadPriorityClass":
            return Manifests(priority_classes=(_priority_class(doc),))
        case "ResourceQuota":
            return Manifests(namespace_quotas=(_resource_quota(doc),))
        case "AdmissionCheck":
            return Manifests(admission_checks=(_queue_object(doc, parse.admission_check),))
        case "ProvisioningRequestConfig":
            return Manifests(provisioning_configs=(_queue_object(doc, parse.provisioning_config),))
        case "PodTemplate":
            return Manifests(pod_templates=(_pod_template(doc),))
        case "ProvisioningRequest":
            return Manifests(request_sources=(_request_source(doc),))
        case "PodGroup":
            return Manifests(pod_groups=(_pod_group(doc),))
        case _:
            spec, at = _workload(doc)
            spec, source = _membership(doc, spec, WorkloadSource(kind=doc.kind, at=at))
            return Manifests(workloads=(spec,), sources=(source,))


def _api(group: str, versions: tuple[str, ...]) -> str:
    return (f"{group}/" if group else "") + " or ".join(versions)


def _supported() -> str:
    return ", ".join(
        f"{kind} ({_api(group, versions)})" for (group, kind), versions in SUPPORTED.items()
    )


# -- validation through parse, with the manifest's paths --------------------------------

_METADATA = {"name": "metadata.name", "namespace": "metadata.namespace"}


def _parse(
    doc: _Doc,
    build: Callable[[object, str], T],
    flat: Mapping[str, Any],
    origin: Mapping[str, str],
    default: str,
) -> T:
    """``build(flat)``; a refusal's path (``podSets[0].count``) is mapped back to the manifest:
    the longest key of ``origin`` it starts with is replaced by its value, any other path is
    put under ``default`` (``spec``)."""
    try:
        return build(flat, "")
    except InvalidInput as exc:
        raise InvalidInput(_locate(doc, exc.path, origin, default), exc.problem) from None


def _locate(doc: _Doc, path: str, origin: Mapping[str, str], default: str) -> str:
    matches = [k for k in origin if path == k or path.startswith((f"{k}.", f"{k}["))]
    if matches:
        best = max(matches, key=len)
        rel = origin[best] + path[len(best) :]
    else:
        rel = ".".join(p for p in (default, path) if p)
    return doc.at(rel) if rel else doc.where


def _spec(doc: _Doc) -> Mapping[str, Any]:
    spec = doc.body.get("spec")
    if spec is None:
        return {}
    if not isinstance(spec, Mapping):
        raise InvalidInput(doc.at("spec"), "must be an object")
    return spec


def _queue_object(doc: _Doc, build: Callable[[object, str], T], namespaced: bool = False) -> T:
    spec = _spec(doc)
    for key in ("name", "namespace"):
        if key in spec:
            raise InvalidInput(doc.at(f"spec.{key}"), f"unknown field (use metadata.{key})")
    flat: dict[str, Any] = {"name": doc.name, **spec}
    if namespaced:
        flat["namespace"] = doc.namespace
    return _parse(doc, build, flat, _METADATA, "spec")


def _priority_class(doc: _Doc) -> PriorityClassSpec:
    flat = {"name": doc.name}
    flat.update((k, v) for k, v in doc.body.items() if k not in _TOP_LEVEL)

    def build(data: object, path: str) -> PriorityClassSpec:
        return parse.priority_class(data, path, doc.kind)

    return _parse(doc, build, flat, _METADATA, "")


def _resource_quota(doc: _Doc) -> NamespaceQuotaSpec:
    spec = _spec(doc)
    flat: dict[str, Any] = {
        "name": doc.name,
        "namespace": doc.namespace,
        **spec,
    }
    annotations = _annotations(doc)
    if ENFORCEMENT in annotations:
        flat["enforcement"] = annotations[ENFORCEMENT]
    origin = {**_METADATA, "enforcement": f"metadata.annotations.{ENFORCEMENT}"}
    return _parse(doc, parse.namespace_quota, flat, origin, "spec")


def _annotations(doc: _Doc) -> Mapping[str, Any]:
    value = doc.metadata.get("annotations")
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise InvalidInput(doc.at("metadata.annotations"), "must be an object of strings")
    return value


def _labels(doc: _Doc) -> Mapping[str, Any]:
    value = doc.metadata.get("labels")
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise InvalidInput(doc.at("metadata.labels"), "must be an object of strings")
    return value


def _whole_number(doc: _Doc, annotations: Mapping[str, Any], key: str) -> int | None:
    return _whole(annotations.get(key), doc.at(f"metadata.annotations.{key}"))


def _whole(value: object, path: str) -> int | None:
    """A whole number, as a number or a string of digits (annotations are strings)."""
    if value is None:
        return None
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str) and _DIGITS.fullmatch(value.strip()):
        return int(value)
    raise InvalidInput(path, f"must be a whole number, not {value!r}")


# -- workloads: JobSet, Job, Volcano Job, Pod ---------------------------------------------


@dataclass(frozen=True, slots=True)
class _Pod:
    """What one pod template contributes to a pod set."""

    path: str  # the pod spec's path in the manifest
    requests: dict[str, int]
    node_selector: dict[str, Any]
    tolerations: list[Any]
    priority_class: object
    sleep: float | None  # seconds of ``sleep N`` in the command lines, if any
    consumes: str | None = None  # its template's consume-provisioning-request annotation
    grace: object = None  # terminationGracePeriodSeconds, as given
    # Its template's annotations (a Pod's own) and their path in the manifest.
    annotations: Mapping[str, Any] = field(default_factory=dict)
    annotations_path: str = ""


@dataclass(frozen=True, slots=True)
class _PodSet:
    name: object
    name_path: str
    count: int
    count_path: str
    pod: _Pod
    min_count: object = None
    min_count_path: str = ""
    surplus: str = "Drop"  # Volcano's minAvailable: the pods above it wait (Wait)
    backoff_limit: object = None  # a Job's backoffLimit (None for a Pod)
    backoff_path: str = ""
    exclusive: object = None  # JobSet exclusive-topology: a node label
    exclusive_path: str = ""
    slice_size: int | None = None  # with exclusive: the pods of one child Job
    # A Volcano task's partitionPolicy as parse's topology fields, with their paths.
    partition: Mapping[str, Any] = field(default_factory=dict)
    partition_origin: Mapping[str, str] = field(default_factory=dict)


# Volcano policy actions and JobSet failure policy rule actions -> muster's FailureAction.
VOLCANO_ACTIONS = {
    "RestartJob": "RestartJob",
    "RestartTask": "RestartJob",
    "RestartPod": "RestartJob",
    "AbortJob": "FailJob",
    "TerminateJob": "FailJob",
    "CompleteJob": "CompleteJob",
}
JOBSET_ACTIONS = {
    "FailJobSet": "FailJob",
    "RestartJobSet": "RestartJob",
    "RestartJobSetAndIgnoreMaxRestarts": "RestartJobIgnoreMax",
    "RestartJob": "RestartJob",
    "RestartJobAndIgnoreMaxRestarts": "RestartJobIgnoreMax",
}
_ANY_EVENT = "*"


def _workload(doc: _Doc) -> tuple[WorkloadSpec, float]:
    spec = Obj(_spec(doc), doc.at("spec"))
    # Every field honoured, passed through or refused by name (workload_fields).
    shape = workload_fields.WORKLOAD_SHAPES.get((doc.group, doc.kind))
    if shape is not None:  # every workload kind has one (tests/unit/test_workload_fields.py)
        workload_fields.check(shape, spec.data, spec.path)
    annotations = _annotations(doc)
    labels = _labels(doc)
    workload_fields.check_annotations(annotations, doc.at("metadata.annotations"))
    workload_fields.check_annotations(labels, doc.at("metadata.labels"))
    volcano = doc.group == VOLCANO
    pod_sets_path = spec.path
    # parse's failurePolicy, with its fields' (absolute) paths
    failure: tuple[dict[str, Any], dict[str, str]] | None = None
    if doc.kind == "JobSet":
        pod_sets_path = spec.at("replicatedJobs")
        exclusive = (annotations.get(EXCLUSIVE), doc.at(f"metadata.annotations.{EXCLUSIVE}"))
        pod_sets = [
            _replicated_job(item, p, exclusive)
            for item, p in spec.items("replicatedJobs", required=True)
        ]
        failure = _jobset_failure_policy(spec)
    elif volcano:
        pod_sets_path = spec.at("tasks")
        pod_sets = [
            _task(item, p, i) for i, (item, p) in enumerate(spec.items("tasks", required=True))
        ]
        pod_sets = _min_available(spec, pod_sets)
        failure = _volcano_failure_policy(spec, [ps.name for ps in pod_sets])
    elif doc.kind == "Job":
        count, pod, backoff = _job(spec)
        pod_sets = [
            _PodSet(
                "main",
                "",
                count,
                spec.at("parallelism"),
                pod,
                min_count=_whole_number(doc, annotations, MIN_PARALLELISM),
                min_count_path=doc.at(f"metadata.annotations.{MIN_PARALLELISM}"),
                backoff_limit=backoff,
                backoff_path=spec.at("backoffLimit"),
            )
        ]
    else:
        pod = replace(
            _pod(spec.data, spec.path),
            annotations=annotations,
            annotations_path=doc.at("metadata.annotations"),
        )
        pod_sets = [_PodSet("main", "", 1, spec.path, pod)]
    consumes = _consumes(annotations) if doc.kind == "Pod" else None
    consumes = consumes or next((ps.pod.consumes for ps in pod_sets if ps.pod.consumes), None)

    origin: dict[str, str] = {
        **_METADATA,
        "labels": "metadata.labels",
        "queueName": f"metadata.labels.{QUEUE_LABEL}",
        "podSets": _relative(doc, pod_sets_path),
    }
    flat: dict[str, Any] = {
        "name": doc.name,
        "namespace": doc.namespace,
        "queueName": labels.get(QUEUE_LABEL, DEFAULT_QUEUE),
        "labels": labels,
        "podSets": [],
    }
    if volcano and QUEUE_LABEL not in labels and spec.raw("queue") is not None:
        # Volcano's queue stands for the LocalQueue; Kueue's label wins.
        flat["queueName"] = spec.raw("queue")
        origin["queueName"] = "spec.queue"
    if consumes is not None:
        # Its pods go to the request's nodes, not through a queue (unless one is named,
        # which parse refuses).
        flat["consumesProvisioningRequest"] = consumes
        origin["consumesProvisioningRequest"] = "metadata.annotations"
        if QUEUE_LABEL not in labels:
            del flat["queueName"]
    network = spec.obj("networkTopology") if volcano else None
    if network is not None:
        _network_tier(network)  # refuses what is not read below, by name
    found: dict[str, list[tuple[object, str]]] = {"gpuGroupSize": [], "node": [], "gpu": []}
    for i, ps in enumerate(pod_sets):
        ps_at = f"podSets[{i}]"
        pod_set: dict[str, Any] = {
            "name": ps.name,
            "count": ps.count,
            "requests": {r: format_quantity(r, q) for r, q in ps.pod.requests.items()},
            "nodeSelector": ps.pod.node_selector,
            "tolerations": ps.pod.tolerations,
        }
        if ps.min_count is not None:
            pod_set["minCount"] = ps.min_count
            origin[f"{ps_at}.minCount"] = _relative(doc, ps.min_count_path)
            if ps.surplus != "Drop":
                pod_set["surplus"] = ps.surplus
        if ps.backoff_limit is not None:
            pod_set["backoffLimit"] = ps.backoff_limit
            origin[f"{ps_at}.backoffLimit"] = _relative(doc, ps.backoff_path)
        extras, extras_origin = _pod_set_extras(ps, network)
        pod_set.update(extras)
        origin.update({f"{ps_at}.{k}": _relative(doc, v) for k, v in extras_origin.items()})
        for key, value, path in _workload_annotations(ps.pod):
            found[key].append((value, path))
        flat["podSets"].append(pod_set)
        if ps.name_path:
            origin[f"{ps_at}.name"] = _relative(doc, ps.name_path)
        origin[f"{ps_at}.count"] = _relative(doc, ps.count_path)
        pod_path = _relative(doc, ps.pod.path)
        origin[f"{ps_at}.requests"] = f"{pod_path}.containers"
        origin[f"{ps_at}.nodeSelector"] = f"{pod_path}.nodeSelector"
        origin[f"{ps_at}.tolerations"] = f"{pod_path}.tolerations"

    group_size = _agreed(doc, found["gpuGroupSize"])
    if group_size is not None:
        flat["gpuGroupSize"] = group_size[0]
        origin["gpuGroupSize"] = _relative(doc, group_size[1])
    node, gpu = _agreed(doc, found["node"]), _agreed(doc, found["gpu"])
    if node is not None or gpu is not None:
        # One level named: the other is the HAMi scheduler's default.
        flat["placement"] = {
            "node": HAMI_NODE_POLICY if node is None else node[0],
            "gpu": HAMI_GPU_POLICY if gpu is None else gpu[0],
        }
        for key, given in (("node", node), ("gpu", gpu)):
            if given is not None:
                origin[f"placement.{key}"] = _relative(doc, given[1])

    if failure is not None:
        flat["failurePolicy"] = failure[0]
        origin.update({k: _relative(doc, v) for k, v in failure[1].items()})

    if PRIORITY_LABEL in labels:
        flat["priorityClassName"] = labels[PRIORITY_LABEL]
        origin["priorityClassName"] = f"metadata.labels.{PRIORITY_LABEL}"
    elif volcano and spec.raw("priorityClassName") is not None:
        flat["priorityClassName"] = spec.raw("priorityClassName")
        origin["priorityClassName"] = "spec.priorityClassName"
    else:
        named = next((ps.pod for ps in pod_sets if ps.pod.priority_class is not None), None)
        if named is not None:
            flat["priorityClassName"] = named.priority_class
            origin["priorityClassName"] = f"{_relative(doc, named.path)}.priorityClassName"

    for key in (MAX_RUN, PROVREQ_MAX_RUN):
        seconds = _whole_number(doc, annotations, key)
        if seconds is not None:
            flat["maxRunDurationSeconds"] = seconds
            origin["maxRunDurationSeconds"] = f"metadata.annotations.{key}"
            break

    # Stopped, every pod gets the longest grace period its templates give (one workload).
    graced = [ps.pod for ps in pod_sets if ps.pod.grace is not None]
    if graced:
        longest_grace = max(graced, key=lambda p: _grace(p) or 0)
        flat["terminationGracePeriodSeconds"] = longest_grace.grace
        origin["terminationGracePeriodSeconds"] = (
            f"{_relative(doc, longest_grace.path)}.terminationGracePeriodSeconds"
        )
    if CHECKPOINT in annotations:
        flat["checkpointIntervalSeconds"] = annotations[CHECKPOINT]
        origin["checkpointIntervalSeconds"] = f"metadata.annotations.{CHECKPOINT}"

    runtime: dict[str, Any] = {}
    if RUNTIME in annotations:
        runtime["durationSeconds"] = annotations[RUNTIME]
        origin["runtime.durationSeconds"] = f"metadata.annotations.{RUNTIME}"
    else:
        slept = [ps.pod for ps in pod_sets if ps.pod.sleep is not None]
        if slept:
            longest = max(slept, key=lambda p: p.sleep or 0.0)
            runtime["durationSeconds"] = longest.sleep
            origin["runtime.durationSeconds"] = f"{_relative(doc, longest.path)}.containers"
    codes = _exit_codes(annotations.get(EXIT_CODES), doc.at(f"metadata.annotations.{EXIT_CODES}"))
    if codes is not None:
        runtime["exitCodes"] = codes
        origin["runtime.exitCodes"] = f"metadata.annotations.{EXIT_CODES}"
    if runtime:
        flat["runtime"] = runtime

    workload = _parse(doc, parse.workload, flat, origin, "spec")
    submit_at = annotations.get(SUBMIT_AT)
    at = 0.0
    if submit_at is not None:
        at = parse_duration(submit_at, doc.at(f"metadata.annotations.{SUBMIT_AT}"))
    return workload, at


def _grace(pod: _Pod) -> int | None:
    return _whole(pod.grace, f"{pod.path}.terminationGracePeriodSeconds")


def _relative(doc: _Doc, path: str) -> str:
    """A path built from ``doc.where`` without that prefix (for ``origin``)."""
    return path.removeprefix(doc.where).removeprefix(".")


def _replicated_job(data: object, path: str, exclusive: tuple[object, str]) -> _PodSet:
    """One replicated job: ``exclusive`` is the JobSet's exclusive-topology annotation (value
    or None, path); the job template's own annotation wins."""
    rj = Obj(data, path)
    replicas = rj.integer("replicas", default=1, lo=1) or 1
    template = Obj(rj.raw("template", required=True), rj.at("template"))
    job = Obj(template.raw("spec", required=True), template.at("spec"))
    pods, pod, backoff = _job(job)
    if replicas * pods > parse.MAX_PODS:
        raise InvalidInput(
            path, f"replicas x parallelism is {replicas * pods} pods; at most {parse.MAX_PODS}"
        )
    job_annotations, job_annotations_path = _template_annotations(template)
    if EXCLUSIVE in job_annotations:
        exclusive = (job_annotations[EXCLUSIVE], f"{job_annotations_path}.{EXCLUSIVE}")
    return _PodSet(
        rj.raw("name"),
        rj.at("name"),
        replicas * pods,
        path,
        pod,
        backoff_limit=backoff,
        backoff_path=job.at("backoffLimit"),
        exclusive=exclusive[0],
        exclusive_path=exclusive[1],
        slice_size=pods,
    )


def _job(job: Obj) -> tuple[int, _Pod, object]:
    """A JobSpec's pods at once, as Kueue counts them (parallelism, at most completions), its
    pod, and its backoffLimit (Kubernetes' default 6)."""
    parallelism = job.integer("parallelism", default=1, lo=1) or 1
    completions = job.integer("completions", lo=1)
    template = Obj(job.raw("template", required=True), job.at("template"))
    backoff = job.raw("backoffLimit")
    return (
        min(parallelism, completions or parallelism),
        _template_pod(template),
        DEFAULT_BACKOFF_LIMIT if backoff is None else backoff,
    )


def _task(data: object, path: str, index: int) -> _PodSet:
    """A Volcano Job's task: ``replicas`` pods of its template (name ``default<i>`` when
    unnamed, as Volcano's webhook names it)."""
    task = Obj(data, path)
    replicas = task.integer("replicas", required=True, lo=1)
    assert replicas is not None
    own_minimum = task.integer("minAvailable", lo=0)
    if own_minimum is not None and own_minimum != replicas:
        raise InvalidInput(
            task.at("minAvailable"),
            f"{workload_fields.NOT_SUPPORTED}: a task's own gang minimum below its {replicas} "
            "replicas (give the job's minAvailable)",
        )
    template = Obj(task.raw("template", required=True), task.at("template"))
    name = task.raw("name")
    partition, partition_origin = _partition_policy(task.obj("partitionPolicy"), replicas)
    return _PodSet(
        f"default{index}" if name is None else name,
        task.at("name"),
        replicas,
        task.at("replicas"),
        _template_pod(template),
        partition=partition,
        partition_origin=partition_origin,
    )


def _partition_policy(policy: Obj | None, replicas: int) -> tuple[dict[str, Any], dict[str, str]]:
    """A task's ``partitionPolicy`` (Volcano network-topology-aware scheduling): its
    ``totalPartitions`` groups of ``partitionSize`` pods are the pod set's slices, each
    inside one HyperNode of its ``networkTopology`` tier (a hard limit); as parse's
    topology fields, with their paths. Each partition is all-or-nothing in Volcano; in
    muster the whole job is."""
    if policy is None:
        return {}, {}
    total = policy.req_integer("totalPartitions", lo=1)
    size = policy.req_integer("partitionSize", lo=1)
    if total * size != replicas:
        raise InvalidInput(
            policy.path,
            f"totalPartitions x partitionSize is {total} x {size} = {total * size}; "
            f"it must equal the task's replicas ({replicas})",
        )
    topology: dict[str, Any] = {"sliceSize": size}
    origin = {"topology.sliceSize": policy.at("partitionSize")}
    network = policy.obj("networkTopology")
    policy.done()
    if network is not None:
        mode = network.choice("mode", ("hard", "soft"), "hard")
        if mode == "soft":
            raise InvalidInput(
                network.at("mode"),
                f"{workload_fields.NOT_SUPPORTED}: soft for a partition (a best-effort tier "
                "per partition); give hard or leave mode out",
            )
        tier = _network_tier(network)
        if tier is not None:
            topology["sliceHighestTierAllowed"] = tier
            origin["topology.sliceHighestTierAllowed"] = network.at("highestTierAllowed")
    return topology, origin


def _network_tier(network: Obj) -> object:
    """A ``networkTopology``'s ``highestTierAllowed`` (checked by parse); the other fields
    are refused by name (``mode`` is read by the caller)."""
    network.raw("mode")
    if network.raw("highestTierName") is not None:
        raise InvalidInput(
            network.at("highestTierName"),
            f"{workload_fields.NOT_SUPPORTED}: HyperNode tier names are not modelled; give "
            "highestTierAllowed, tier 1 being the lowest level above the nodes",
        )
    tier = network.raw("highestTierAllowed")
    network.done()
    return tier


def _min_available(spec: Obj, pod_sets: list[_PodSet]) -> list[_PodSet]:
    """Volcano's gang minimum (peers.md §2.4): for a job of one task, a ``minCount`` whose
    surplus pods wait (Volcano keeps them pending and starts them when room appears). With
    several tasks only the whole job is a gang (only one pod set may have a minimum): a
    minimum below it is refused rather than read as all pods."""
    min_available = spec.integer("minAvailable", lo=0)
    total = sum(ps.count for ps in pod_sets)
    if min_available and min_available > total:
        raise InvalidInput(
            spec.at("minAvailable"), f"must be at most the tasks' {total} pods, got {min_available}"
        )
    if not min_available or min_available == total:
        return pod_sets
    if len(pod_sets) != 1:
        raise InvalidInput(
            spec.at("minAvailable"),
            f"{min_available} below the {total} pods of a job of several tasks is not supported "
            f"by muster (a job of one task may start with fewer; here give {total} or leave it "
            "out)",
        )
    only = replace(pod_sets[0], min_count=min_available, min_count_path=spec.at("minAvailable"))
    return [replace(only, surplus="Wait")]


def _volcano_failure_policy(
    spec: Obj, task_names: list[object]
) -> tuple[dict[str, Any], dict[str, str]]:
    """``policies`` of the tasks (for their own pods, first) then of the job; ``maxRetry``
    (Volcano's default 3) bounds the restarts; a failed pod no policy matches fails the job."""
    rules: list[dict[str, Any]] = []
    origin: dict[str, str] = {"failurePolicy": spec.path, "failurePolicy.rules": spec.path}

    def add(owner: Obj, pod_sets: list[object]) -> None:
        for item, path in owner.items("policies", max_items=64):
            for event, action in _volcano_policy(item, path):
                origin[f"failurePolicy.rules[{len(rules)}]"] = path
                rule: dict[str, Any] = {"event": event, "action": action}
                if pod_sets:
                    rule["podSets"] = pod_sets
                rules.append(rule)

    for (item, path), name in zip(spec.items("tasks"), task_names, strict=True):
        add(Obj(item, path), [name])
    add(spec, [])
    max_retry = spec.raw("maxRetry")
    origin["failurePolicy.maxRestarts"] = spec.at("maxRetry")
    policy = {
        "maxRestarts": DEFAULT_MAX_RETRY if max_retry is None else max_retry,
        "rules": rules,
    }
    return policy, origin


def _volcano_policy(data: object, path: str) -> list[tuple[str, str]]:
    """One Volcano LifecyclePolicy as (event, action) rules: ``*`` is one per event."""
    p = Obj(data, path)
    if p.raw("exitCode") is not None:
        raise InvalidInput(
            p.at("exitCode"), "exit-code policies are not supported; give event or events"
        )
    events: list[tuple[object, str]] = []
    if p.raw("event") is not None:
        events.append((p.raw("event"), p.at("event")))
    events.extend(p.items("events"))
    if not events:
        raise InvalidInput(path, "give event or events")
    action = p.raw("action", required=True)
    mapped = VOLCANO_ACTIONS.get(action) if isinstance(action, str) else None
    if mapped is None:
        raise InvalidInput(
            p.at("action"), f"action {action} is not supported ({', '.join(VOLCANO_ACTIONS)})"
        )
    out: list[tuple[str, str]] = []
    for event, at in events:
        if event == _ANY_EVENT:
            out.extend((e, mapped) for e in FAILURE_EVENTS)
        elif isinstance(event, str) and event in FAILURE_EVENTS:
            out.append((event, mapped))
        else:
            raise InvalidInput(
                at, f"event {event} is not supported ({', '.join(FAILURE_EVENTS)}, {_ANY_EVENT})"
            )
    return out


# A child Job's failure reasons JobSet rules match; muster's child Jobs fail by the first.
JOB_FAILURE_REASONS = ("BackoffLimitExceeded", "DeadlineExceeded", "PodFailurePolicy")


def _may_match(rule: Obj) -> bool:
    """Whether a JobSet rule can fire in muster: a child Job fails only by exceeding its
    backoffLimit (activeDeadlineSeconds and podFailurePolicy are refused), so a rule whose
    ``onJobFailureReasons`` leave BackoffLimitExceeded out never matches."""
    reasons = rule.texts("onJobFailureReasons")
    for i, reason in enumerate(reasons):
        if reason not in JOB_FAILURE_REASONS:
            raise InvalidInput(
                f"{rule.at('onJobFailureReasons')}[{i}]",
                f"must be one of {', '.join(JOB_FAILURE_REASONS)}, not {reason!r}",
            )
    return not reasons or JOB_FAILURE_REASONS[0] in reasons


def _jobset_failure_policy(spec: Obj) -> tuple[dict[str, Any], dict[str, str]]:
    """``failurePolicy``: ``maxRestarts`` (0 without one); each rule fires on a failed pod
    (its child Job failing) of its ``targetReplicatedJobs``; no rule matching restarts."""
    origin: dict[str, str] = {"failurePolicy": spec.at("failurePolicy")}
    fp = spec.obj("failurePolicy")
    if fp is None:
        return {"maxRestarts": 0, "onFailure": "RestartJob"}, origin
    rules: list[dict[str, Any]] = []
    origin["failurePolicy.rules"] = fp.at("rules")
    for item, path in fp.items("rules", max_items=64):
        r = Obj(item, path)
        action = r.raw("action", required=True)
        mapped = JOBSET_ACTIONS.get(action) if isinstance(action, str) else None
        if mapped is None:
            raise InvalidInput(
                r.at("action"), f"action {action} is not supported ({', '.join(JOBSET_ACTIONS)})"
            )
        if not _may_match(r):
            continue
        k = len(rules)
        rule: dict[str, Any] = {"event": "PodFailed", "action": mapped}
        targets = r.raw("targetReplicatedJobs")
        if targets is not None:
            rule["podSets"] = targets
        origin[f"failurePolicy.rules[{k}]"] = path
        origin[f"failurePolicy.rules[{k}].podSets"] = r.at("targetReplicatedJobs")
        rules.append(rule)
    max_restarts = fp.raw("maxRestarts")
    origin["failurePolicy.maxRestarts"] = fp.at("maxRestarts")
    policy = {
        "maxRestarts": 0 if max_restarts is None else max_restarts,
        "rules": rules,
        "onFailure": "RestartJob",
    }
    return policy, origin


def _pod_set_extras(ps: _PodSet, network: Obj | None) -> tuple[dict[str, Any], dict[str, str]]:
    """A pod set's ``topology`` (JobSet exclusive slices, Kueue TAS annotations, Volcano's
    ``networkTopology``) and ``devices`` (HAMi pinning annotations); origin keys relative
    to the pod set, paths absolute."""
    a, at = ps.pod.annotations, ps.pod.annotations_path
    fields: dict[str, Any] = {}
    origin: dict[str, str] = {}
    topology: dict[str, Any] = {}
    if ps.exclusive is not None:
        topology["exclusive"] = ps.exclusive
        topology["sliceSize"] = ps.slice_size
        origin["topology"] = ps.exclusive_path
        origin["topology.exclusive"] = ps.exclusive_path
        origin["topology.sliceSize"] = ps.exclusive_path
    if network is not None:
        origin.setdefault("topology", network.path)
        for key in ("highestTierAllowed", "mode"):
            if network.raw(key) is not None:
                topology[key] = network.raw(key)
                origin[f"topology.{key}"] = network.at(key)
    if ps.partition:
        origin.setdefault("topology", ps.partition_origin["topology.sliceSize"])
        topology.update(ps.partition)
        origin.update(ps.partition_origin)
    tas = [(key, annotation) for key, annotation in TAS_ANNOTATIONS.items() if annotation in a]
    for key, annotation in tas:
        topology[key] = a[annotation]
        origin[f"topology.{key}"] = f"{at}.{annotation}"
    if TAS_SLICE_SIZE in a:
        path = f"{at}.{TAS_SLICE_SIZE}"
        topology["sliceSize"] = _whole(a[TAS_SLICE_SIZE], path)
        origin["topology.sliceSize"] = path
    if ps.partition and (TAS_SLICE_SIZE in a or TAS_ANNOTATIONS["sliceRequired"] in a):
        raise InvalidInput(
            ps.partition_origin["topology.sliceSize"].rsplit(".", 1)[0],
            "give partitionPolicy or Kueue's podset-slice annotations, not both",
        )
    if tas or TAS_SLICE_SIZE in a:
        origin["topology"] = at  # e.g. both required and preferred
    if topology:
        fields["topology"] = topology
    devices: dict[str, list[str]] = {}
    for key, annotation in DEVICE_ANNOTATIONS.items():
        path = f"{at}.{annotation}"
        values = _comma_list(a.get(annotation), path)
        if values:
            devices[key] = values
            origin[f"devices.{key}"] = path
    if devices:
        fields["devices"] = devices
    return fields, origin


def _workload_annotations(pod: _Pod) -> list[tuple[str, object, str]]:
    """Workload-wide settings in one pod template's annotations, as (key, value, path):
    ``gpuGroupSize`` and the HAMi placement policies ``node`` and ``gpu``."""
    a, at = pod.annotations, pod.annotations_path
    out: list[tuple[str, object, str]] = []
    if GPU_GROUP_SIZE in a:
        path = f"{at}.{GPU_GROUP_SIZE}"
        out.append(("gpuGroupSize", _whole(a[GPU_GROUP_SIZE], path), path))
    if NODE_POLICY in a:
        path = f"{at}.{NODE_POLICY}"
        value = a[NODE_POLICY]
        policy = value.strip() if isinstance(value, str) else None
        if policy not in ("binpack", "spread"):
            raise InvalidInput(path, f"must be binpack or spread, not {value!r}")
        out.append(("node", policy, path))
    if GPU_POLICY in a:
        path = f"{at}.{GPU_POLICY}"
        value = a[GPU_POLICY]
        # HAMi chains GPU policies (spread,topology-aware): the first one places the pods.
        policy = value.split(",", 1)[0].strip() if isinstance(value, str) else None
        if policy not in GPU_POLICIES:
            raise InvalidInput(
                path,
                "must be binpack, spread or topology-aware (the first of a comma-separated "
                f"list), not {value!r}",
            )
        out.append(("gpu", policy, path))
    return out


def _agreed(doc: _Doc, found: list[tuple[object, str]]) -> tuple[object, str] | None:
    """The one value the pod templates give for a workload-wide setting, with its path."""
    if not found:
        return None
    value, path = found[0]
    for other, other_path in found[1:]:
        if other != value:
            raise InvalidInput(
                other_path,
                f"is {other!r} but {_relative(doc, path)} is {value!r}: one value per workload",
            )
    return value, path


def _comma_list(value: object, path: str) -> list[str]:
    """``"a, b,"`` -> ``["a", "b"]``; empty items are dropped."""
    if value is None:
        return []
    if not isinstance(value, str):
        raise InvalidInput(path, f"must be a comma-separated string, not {value!r}")
    return [item.strip() for item in value.split(",") if item.strip()]


def _exit_codes(value: object, path: str) -> list[int] | None:
    """``muster.dev/exit-codes: "1,1,0"``: the simulated pods' exit codes, run by run."""
    if value is None:
        return None
    if isinstance(value, int) and not isinstance(value, bool):
        return [value]
    if isinstance(value, str):
        items = [item.strip() for item in value.split(",")]
        if all(_DIGITS.fullmatch(item) for item in items):
            return [int(item) for item in items]
    raise InvalidInput(
        path, f"must be exit codes separated by commas, such as 1,1,0, not {value!r}"
    )


def _template_annotations(template: Obj) -> tuple[Mapping[str, Any], str]:
    """A (pod or job) template's ``metadata.annotations`` and their path."""
    path = f"{template.at('metadata')}.annotations"
    metadata = template.raw("metadata")
    if metadata is None:
        return {}, path
    if not isinstance(metadata, Mapping):
        raise InvalidInput(template.at("metadata"), "must be an object")
    workload_fields.check_annotations(metadata.get("labels"), f"{template.at('metadata')}.labels")
    workload_fields.check_annotations(metadata.get("annotations"), path)
    annotations = metadata.get("annotations")
    if annotations is None:
        return {}, path
    if not isinstance(annotations, Mapping):
        raise InvalidInput(path, "must be an object of strings")
    return annotations, path


def _template_pod(template: Obj) -> _Pod:
    """A PodTemplateSpec's pod, with its annotations."""
    pod = _pod(template.raw("spec", required=True), template.at("spec"))
    annotations, path = _template_annotations(template)
    return replace(
        pod, consumes=_consumes(annotations), annotations=annotations, annotations_path=path
    )


def _pod(data: object, path: str) -> _Pod:
    o = Obj(data, path)
    containers = [_container(c, p) for c, p in o.items("containers", required=True)]
    inits = [_container(c, p) for c, p in o.items("initContainers")]
    selector = o.raw("nodeSelector")
    selector = {} if selector is None else selector  # [] or 0 is not an empty selector
    if not isinstance(selector, Mapping):
        raise InvalidInput(o.at("nodeSelector"), "must be an object of strings")
    affinity = _affinity_selector(o)
    for key, value in affinity.items():
        if key in selector and selector[key] != value:
            raise InvalidInput(
                o.at("affinity"),
                f"requires {key}={value} but nodeSelector says {key}={selector[key]}: "
                "no node can match both",
            )
    node_selector = {**affinity, **selector}
    tolerations = o.raw("tolerations")
    tolerations = [] if tolerations is None else tolerations
    if isinstance(tolerations, list):
        # tolerationSeconds only bounds how long a NoExecute taint is tolerated: not modelled.
        tolerations = [
            {k: v for k, v in t.items() if k != "tolerationSeconds"}
            if isinstance(t, Mapping)
            else t
            for t in tolerations
        ]
    sleeps = [c.sleep for c in containers if c.sleep is not None]
    init_sleeps = [c.sleep for c in inits if c.sleep is not None]
    return _Pod(
        path=path,
        requests=_with_overhead(
            _pod_requests(
                [c.requests for c in containers],
                [c.requests for c in inits],
                [c.sidecar for c in inits],
            ),
            o.quantities("overhead", positive=False),
        ),
        node_selector=node_selector,
        tolerations=tolerations,
        priority_class=o.raw("priorityClassName"),
        sleep=sum(init_sleeps) + max(sleeps) if sleeps else None,
        grace=o.raw("terminationGracePeriodSeconds"),
    )


def _pod_requests(
    containers: Sequence[Mapping[str, int]],
    inits: Sequence[Mapping[str, int]],
    sidecars: Sequence[bool] = (),
) -> dict[str, int]:
    """Kubernetes' PodRequests: per resource, the larger of the containers' sum and the
    largest init container (they run one at a time, before the others); a sidecar (an
    init container with ``restartPolicy: Always``) keeps running, so its requests add to
    the containers' and to those of the init containers after it."""
    out: dict[str, int] = {}
    for requests in containers:
        for r, q in requests.items():
            out[r] = out.get(r, 0) + q
    running: dict[str, int] = {}  # the sidecars started so far
    peak: dict[str, int] = {}  # the most the init phase asks for at once
    for i, requests in enumerate(inits):
        if i < len(sidecars) and sidecars[i]:
            for r, q in requests.items():
                running[r] = running.get(r, 0) + q
            now = running
        else:
            now = {r: running.get(r, 0) + requests.get(r, 0) for r in {*running, *requests}}
        for r, q in now.items():
            peak[r] = max(peak.get(r, 0), q)
    for r, q in running.items():
        out[r] = out.get(r, 0) + q
    for r, q in peak.items():
        out[r] = max(out.get(r, 0), q)
    return {r: q for r, q in out.items() if q > 0}


def _with_overhead(requests: Mapping[str, int], overhead: Mapping[str, int]) -> dict[str, int]:
    """A pod's ``overhead`` (its RuntimeClass's cost) counts with its requests, as in
    Kubernetes' scheduler and quota."""
    out = dict(requests)
    for r, q in overhead.items():
        if q > 0:
            out[r] = out.get(r, 0) + q
    return out


@dataclass(frozen=True, slots=True)
class _Container:
    requests: dict[str, int]
    sleep: float | None
    sidecar: bool = False  # restartPolicy: Always (an init container that keeps running)


def _container(data: object, path: str) -> _Container:
    o = Obj(data, path)
    res = o.obj("resources")
    requests: dict[str, int] = {}
    if res is not None:
        # A resource with a limit and no request requests its limit.
        requests = {**res.quantities("limits", positive=False)}
        requests.update(res.quantities("requests", positive=False))
    restart = o.raw("restartPolicy")
    if restart is not None and restart != "Always":
        raise InvalidInput(o.at("restartPolicy"), f"must be Always (a sidecar), not {restart!r}")
    return _Container(requests=requests, sleep=_sleep(o), sidecar=restart == "Always")


def _sleep(o: Obj) -> float | None:
    words = [w for key in ("command", "args") for w in _strings(o.raw(key))]
    image = o.raw("image")
    if isinstance(image, str) and _image_name(image) == "sleep":
        words.insert(0, "sleep")  # an image whose entrypoint is sleep, given a duration
    found = _SLEEP.findall(" ".join(words))
    if not found:
        return None
    return sum(parse_duration(n, o.at("command")) for n in found)


def _strings(value: object) -> list[str]:
    return [w for w in value if isinstance(w, str)] if isinstance(value, list) else []


def _image_name(image: str) -> str:
    """``gcr.io/k8s-staging-perf-tests/sleep:v0.0.3`` -> ``sleep``."""
    last = image.split("@", 1)[0].rsplit("/", 1)[-1]
    return last.split(":", 1)[0]


def _affinity_selector(pod: Obj) -> dict[str, str]:
    """Required node affinity as node selector entries: one term of ``In`` expressions
    with one value each, which is what a node selector can say; any other requirement
    is refused by name rather than dropped (workload_fields refuses preferred affinity,
    pod affinity and matchFields)."""
    affinity = pod.obj("affinity")
    node = affinity.obj("nodeAffinity") if affinity is not None else None
    required = node.obj("requiredDuringSchedulingIgnoredDuringExecution") if node else None
    if required is None:
        return {}
    terms = list(required.items("nodeSelectorTerms", max_items=64))
    if len(terms) > 1:
        raise InvalidInput(
            terms[1][1],
            f"{workload_fields.NOT_SUPPORTED}: alternative node selector terms (any of "
            "several); give one term",
        )
    out: dict[str, str] = {}
    for term, term_at in terms:
        t = Obj(term, term_at)
        for item, at in t.items("matchExpressions", max_items=64):
            e = Obj(item, at)
            key = e.req_text("key")
            operator = e.req_text("operator")
            values = e.texts("values")
            if operator != "In" or len(values) != 1:
                raise InvalidInput(
                    e.at("operator") if operator != "In" else e.at("values"),
                    f"{workload_fields.NOT_SUPPORTED}: {operator} with {len(values)} values; "
                    "only In with one value (a node selector) is",
                )
            if out.get(key, values[0]) != values[0]:
                raise InvalidInput(e.at("values"), f"{key} is required to be two values at once")
            out[key] = values[0]
    return out


# -- standalone ProvisioningRequests: PodTemplate + ProvisioningRequest -------------------


def _consumes(annotations: Mapping[str, Any]) -> str | None:
    for key in CONSUME:
        value = annotations.get(key)
        if value is not None:
            return str(value)
    return None


def _pod_template(doc: _Doc) -> PodTemplateSource:
    metadata = {"name": doc.name, "namespace": doc.namespace}
    name, namespace = _parse(doc, _name_and_namespace, metadata, _METADATA, "")
    template = Obj(doc.body.get("template"), doc.at("template"))
    workload_fields.check(workload_fields.CAPACITY_POD_TEMPLATE, template.data, template.path)
    pod = _pod(template.raw("spec", required=True), template.at("spec"))
    pod_path = _relative(doc, pod.path)
    return PodTemplateSource(
        key=f"{namespace}/{name}",
        pod_set={
            "requests": {r: format_quantity(r, q) for r, q in pod.requests.items()},
            "nodeSelector": pod.node_selector,
            "tolerations": pod.tolerations,
        },
        origin={
            "requests": doc.at(f"{pod_path}.containers"),
            "nodeSelector": doc.at(f"{pod_path}.nodeSelector"),
            "tolerations": doc.at(f"{pod_path}.tolerations"),
        },
    )


def _name_and_namespace(data: object, path: str) -> tuple[str, str]:
    o = Obj(data, path)
    name = o.req_text("name", pattern=NAME, max_len=63)
    namespace = o.req_text("namespace", pattern=NAME, max_len=63)
    o.done()
    return name, namespace


def _request_source(doc: _Doc) -> RequestSource:
    # Checked now: the namespace is where its PodTemplates are looked up.
    metadata = {"name": doc.name, "namespace": doc.namespace}
    name, namespace = _parse(doc, _name_and_namespace, metadata, _METADATA, "")
    spec = Obj(_spec(doc), doc.at("spec"))
    flat: dict[str, Any] = {
        "name": name,
        "namespace": namespace,
        "provisioningClassName": spec.req_text("provisioningClassName"),
        "parameters": spec.raw("parameters"),
        "podSets": [],
    }
    origin = {
        **{k: doc.at(v) for k, v in _METADATA.items()},
        "parameters": doc.at("spec.parameters"),
    }
    for i, (item, path) in enumerate(spec.items("podSets", required=True, max_items=32)):
        ps = Obj(item, path)
        ref = Obj(ps.raw("podTemplateRef", required=True), ps.at("podTemplateRef"))
        template = ref.req_text("name", pattern=NAME, max_len=63)
        ref.done()
        flat["podSets"].append({"template": template, "count": ps.raw("count", required=True)})
        origin[f"podSets[{i}].count"] = ps.at("count")
        origin[f"podSets[{i}].name"] = ref.at("name")
        ps.done()
    spec.done()
    annotations = _annotations(doc)
    at = 0.0
    if SUBMIT_AT in annotations:
        at = parse_duration(annotations[SUBMIT_AT], doc.at(f"metadata.annotations.{SUBMIT_AT}"))
    delete_at = None
    if DELETE_AT in annotations:
        path = doc.at(f"metadata.annotations.{DELETE_AT}")
        delete_at = parse_duration(annotations[DELETE_AT], path)
        if delete_at < at:
            raise InvalidInput(path, f"must not be before {SUBMIT_AT}")
    return RequestSource(
        where=doc.where,
        namespace=namespace,
        flat=flat,
        origin=origin,
        at=at,
        delete_at=delete_at,
    )


def _resolve(
    src: RequestSource, templates: Mapping[str, PodTemplateSource]
) -> ProvisioningRequestSpec:
    flat = dict(src.flat)
    origin = dict(src.origin)
    pod_sets = []
    for i, ref in enumerate(src.flat["podSets"]):
        key = f"{src.namespace}/{ref['template']}"
        template = templates.get(key)
        if template is None:
            raise InvalidInput(
                origin[f"podSets[{i}].name"],
                f"no PodTemplate {key} in the manifests (a ProvisioningRequest's pod templates "
                "live in its namespace)",
            )
        pod_sets.append({"name": ref["template"], "count": ref["count"], **template.pod_set})
        origin.update({f"podSets[{i}].{k}": v for k, v in template.origin.items()})
    flat["podSets"] = pod_sets
    try:
        return parse.provisioning_request(flat, "")
    except InvalidInput as exc:
        matches = [k for k in origin if exc.path == k or exc.path.startswith((f"{k}.", f"{k}["))]
        if not matches:
            raise InvalidInput(f"{src.where}.spec.{exc.path}".rstrip("."), exc.problem) from None
        best = max(matches, key=len)
        raise InvalidInput(origin[best] + exc.path[len(best) :], exc.problem) from None


# -- gang members: Pods of an Armada gang, a Kueue pod group, a PodGroup ------------------

ARMADA_GANG_ID = "armadaproject.io/gangId"
ARMADA_GANG_CARDINALITY = "armadaproject.io/gangCardinality"
ARMADA_UNIFORMITY = "armadaproject.io/gangNodeUniformityLabel"
KUEUE_POD_GROUP = "kueue.x-k8s.io/pod-group-name"  # a label
KUEUE_POD_GROUP_COUNT = "kueue.x-k8s.io/pod-group-total-count"  # an annotation
COSCHEDULING_POD_GROUP = "scheduling.x-k8s.io/pod-group"  # a label
VOLCANO_GROUP_NAMES = ("scheduling.k8s.io/group-name", "scheduling.volcano.sh/group-name")
# PodGroup fields muster does not act on, refused by name rather than as unknown.
_POD_GROUP_UNSUPPORTED = {
    "minTaskMember": "per-task minimums",
    "networkTopology": "a network topology for the group",
    "subGroupPolicy": "sub-group gangs",
    "scheduleTimeoutSeconds": "a timeout for the group to gather",
}


@dataclass(frozen=True, slots=True)
class _Mark:
    """What makes a pod a gang member: its gang's name, and its cardinality, or the key
    of the PodGroup that gives it; ``path``: where the name is."""

    name: object
    path: str
    cardinality: int | None = None
    pod_group: str | None = None


def _membership(
    doc: _Doc, spec: WorkloadSpec, source: WorkloadSource
) -> tuple[WorkloadSpec, WorkloadSource]:
    marks = _marks(doc)
    if not marks:
        return spec, source
    mark = marks[0]
    if len(marks) > 1:
        raise InvalidInput(marks[1].path, f"a pod joins one gang; {mark.path} names another")
    if doc.kind != "Pod":
        raise InvalidInput(
            mark.path, f"gangs are read from Pods (one member each), not a {doc.kind}"
        )
    if spec.consumes is not None:
        raise InvalidInput(mark.path, "a gang member cannot consume a ProvisioningRequest")
    name = mark.name
    if not isinstance(name, str) or len(name) > 63 or not NAME.fullmatch(name):
        raise InvalidInput(mark.path, "must be a lowercase RFC 1123 name of at most 63 characters")
    if mark.pod_group is not None:
        return spec, replace(source, pod_group=mark.pod_group, where=mark.path)
    assert mark.cardinality is not None
    spec = _uniform(doc, spec)
    return replace(spec, gang=Gang(name=name, cardinality=mark.cardinality)), source


def _uniform(doc: _Doc, spec: WorkloadSpec) -> WorkloadSpec:
    """Armada's gangNodeUniformityLabel (all members on nodes with one value of that
    label) as the pod set's required topology: the gang's pods of one shape go in one
    domain of the label, as Kueue's podset-required-topology puts them."""
    label = _annotations(doc).get(ARMADA_UNIFORMITY)
    if label is None:
        return spec
    path = doc.at(f"metadata.annotations.{ARMADA_UNIFORMITY}")
    if not isinstance(label, str) or len(label) > 253 or not LABEL_KEY.fullmatch(label):
        raise InvalidInput(path, "must be a node label key")
    [ps] = spec.pod_sets
    topology = ps.topology or PodSetTopology()
    if topology.required not in (None, label):
        raise InvalidInput(path, f"the pod already requires topology {topology.required!r}")
    pod_set = replace(ps, topology=replace(topology, required=label))
    return replace(spec, pod_sets=(pod_set,))


def _marks(doc: _Doc) -> list[_Mark]:
    annotations, labels = _annotations(doc), _labels(doc)
    marks = []
    armada = _counted(doc, annotations, annotations, ARMADA_GANG_ID, ARMADA_GANG_CARDINALITY)
    if armada is None and ARMADA_UNIFORMITY in annotations:
        raise InvalidInput(
            doc.at(f"metadata.annotations.{ARMADA_UNIFORMITY}"), f"needs {ARMADA_GANG_ID}"
        )
    kueue = _counted(doc, labels, annotations, KUEUE_POD_GROUP, KUEUE_POD_GROUP_COUNT)
    marks += [m for m in (armada, kueue) if m is not None]
    if COSCHEDULING_POD_GROUP in labels:
        name = labels[COSCHEDULING_POD_GROUP]
        path = doc.at(f"metadata.labels.{COSCHEDULING_POD_GROUP}")
        marks.append(_Mark(name, path, pod_group=f"{COSCHEDULING}/{doc.namespace}/{name}"))
    volcano = [(annotations[k], k) for k in VOLCANO_GROUP_NAMES if k in annotations]
    if volcano:
        name, key = volcano[0]
        path = doc.at(f"metadata.annotations.{key}")
        if any(other != name for other, _ in volcano):
            raise InvalidInput(path, f"names another PodGroup than {VOLCANO_GROUP_NAMES[1]}")
        marks.append(_Mark(name, path, pod_group=f"{VOLCANO_SCHEDULING}/{doc.namespace}/{name}"))
    return marks


def _counted(
    doc: _Doc, names: Mapping[str, Any], counts: Mapping[str, Any], name_key: str, count_key: str
) -> _Mark | None:
    """A gang named by ``name_key`` with its size in annotation ``count_key`` (both, or
    neither: Armada and Kueue need the count to know when the gang is complete)."""
    where = "labels" if names is not counts else "annotations"
    if name_key not in names and count_key not in counts:
        return None
    if name_key not in names:
        raise InvalidInput(doc.at(f"metadata.{where}"), f"{name_key} is required with {count_key}")
    count = _whole_number(doc, counts, count_key)
    if count is None:
        raise InvalidInput(
            doc.at("metadata.annotations"), f"{count_key} is required with {name_key}"
        )
    if not 1 <= count <= parse.MAX_PODS:
        raise InvalidInput(
            doc.at(f"metadata.annotations.{count_key}"), f"must be 1 to {parse.MAX_PODS}"
        )
    return _Mark(names[name_key], doc.at(f"metadata.{where}.{name_key}"), cardinality=count)


def _pod_group(doc: _Doc) -> PodGroupSource:
    """Volcano's PodGroup (minMember, queue, priorityClassName) or scheduler-plugins'
    (minMember). ``minResources`` is read and not needed: the members' requests are."""
    metadata = {"name": doc.name, "namespace": doc.namespace}
    name, namespace = _parse(doc, _name_and_namespace, metadata, _METADATA, "")
    spec = Obj(_spec(doc), doc.at("spec"))
    for key, what in _POD_GROUP_UNSUPPORTED.items():
        if spec.raw(key) is not None:
            raise InvalidInput(spec.at(key), f"not supported: muster has no {what}")
    volcano = doc.group == VOLCANO_SCHEDULING
    group = PodGroupSource(
        key=f"{doc.group}/{namespace}/{name}",
        name=name,
        min_member=spec.req_integer("minMember", lo=1, hi=parse.MAX_PODS),
        queue=spec.text("queue", pattern=NAME, max_len=63) if volcano else None,
        priority_class=spec.text("priorityClassName", pattern=NAME) if volcano else None,
    )
    spec.raw("minResources")
    spec.done()
    return group


def _join(wl: WorkloadSpec, group: PodGroupSource) -> WorkloadSpec:
    """A pod joins its PodGroup's gang; the Kueue queue label wins over the group's queue."""
    queue = group.queue if group.queue and QUEUE_LABEL not in wl.labels else wl.queue_name
    return replace(
        wl,
        gang=Gang(name=group.name, cardinality=group.min_member),
        queue_name=queue,
        priority_class=wl.priority_class or group.priority_class,
    )
