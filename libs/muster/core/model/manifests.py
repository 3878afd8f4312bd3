"""Kubernetes manifests (Kueue queues and admission checks, PriorityClass, ResourceQuota,
JobSet, Job, Pod, PodTemplate + ProvisioningRequest) as muster's model objects.

Pure: the caller loads the YAML (``yaml.safe_load_all``) and hands the documents over.
Field validation stays in ``parse``: each object is turned into the flat shape ``parse``
reads (``{"name": metadata.name, **spec}``), and a refusal is re-raised with the path of
the field in the manifest, e.g. ``doc[2] (ClusterQueue research).spec.resourceGroups[0]``.
The rules are listed in docs/api.md ("Kubernetes manifests").
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, TypeVar

from muster.core.model import parse
from muster.core.model.cluster import ClusterSpec
from muster.core.model.fields import NAME, InvalidInput, Obj, parse_duration
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
from muster.core.model.workload import ProvisioningRequestSpec, WorkloadSpec

T = TypeVar("T")

QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"
MIN_PARALLELISM = "kueue.x-k8s.io/job-min-parallelism"
RUNTIME = "muster.dev/runtime-seconds"
MAX_RUN = "muster.dev/max-run-duration-seconds"
PROVREQ_MAX_RUN = "provreq.kueue.x-k8s.io/maxRunDurationSeconds"
SUBMIT_AT = "muster.dev/submit-at"
DELETE_AT = "muster.dev/delete-at"
ENFORCEMENT = "muster.dev/enforcement"
# A pod consuming a standalone ProvisioningRequest; the older prefix is still seen on GKE.
CONSUME = (
    "autoscaling.x-k8s.io/consume-provisioning-request",
    "cluster-autoscaler.kubernetes.io/consume-provisioning-request",
)
DEFAULT_QUEUE = "default"
DEFAULT_NAMESPACE = "default"

KUEUE = "kueue.x-k8s.io"
AUTOSCALING = "autoscaling.x-k8s.io"
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
    ("", "Pod"): ("v1",),
}
_NOT_QUEUEING = "not a queueing object, ignored"
# Recognised, but not muster's to configure: listed in ``Manifests.skipped``, any version.
IGNORED: dict[tuple[str, str], str] = {
    (KUEUE, "Topology"): _NOT_QUEUEING,
    ("", "Namespace"): "namespaces need no configuration, ignored",
    ("batch.volcano.sh", "Job"): "Volcano jobs are not converted, ignored",
}
_TOP_LEVEL = frozenset({"apiVersion", "kind", "metadata", "spec", "status"})
# A shell ``sleep N`` (N seconds, or with an s/m/h/d suffix) in a container's command line.
_SLEEP = re.compile(r"(?:^|[\s;&|(])sleep\s+([0-9]+(?:\.[0-9]+)?[smhd]?)(?=$|[\s;&|)])")


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkloadSource:
    """Where a converted workload came from: its kind, and when ``muster sim`` submits it."""

    kind: str  # JobSet, Job or Pod
    at: float = 0.0  # annotation muster.dev/submit-at, seconds from the simulation's start


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

    def __post_init__(self) -> None:
        if len(self.sources) != len(self.workloads):
            raise ValueError("Manifests: one source per workload")

    def submissions(self) -> list[tuple[float, WorkloadSpec]]:
        """The workloads with their submit times, in document order."""
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
    )


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
    namespace: object
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
    doc = _Doc(index, "", "", kind, name, metadata.get("namespace"), metadata, raw)
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
    unknown = sorted(k for k in doc.body if k not in _TOP_LEVEL)
    if doc.kind == "PodTemplate":
        unknown = [k for k in unknown if k != "template"]
    if unknown and doc.kind not in ("PriorityClass", "WorkloadPriorityClass"):
        raise InvalidInput(doc.at(str(unknown[0])), "unknown field")
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
        case _:
            spec, at = _workload(doc)
            return Manifests(workloads=(spec,), sources=(WorkloadSource(kind=doc.kind, at=at),))


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
        flat["namespace"] = doc.namespace or DEFAULT_NAMESPACE
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
        "namespace": doc.namespace or DEFAULT_NAMESPACE,
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
    value = annotations.get(key)
    if value is None:
        return None
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().isdigit():
        return int(value)
    raise InvalidInput(
        doc.at(f"metadata.annotations.{key}"), f"must be a whole number, not {value!r}"
    )


# -- workloads: JobSet, Job, Pod --------------------------------------------------------


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


@dataclass(frozen=True, slots=True)
class _PodSet:
    name: object
    name_path: str
    count: int
    count_path: str
    pod: _Pod


def _workload(doc: _Doc) -> tuple[WorkloadSpec, float]:
    spec = Obj(_spec(doc), doc.at("spec"))
    annotations = _annotations(doc)
    labels = _labels(doc)
    pod_sets_path = spec.path
    if doc.kind == "JobSet":
        pod_sets_path = spec.at("replicatedJobs")
        pod_sets = [
            _replicated_job(item, p) for item, p in spec.items("replicatedJobs", required=True)
        ]
    elif doc.kind == "Job":
        count, pod = _job(spec)
        pod_sets = [_PodSet("main", "", count, spec.at("parallelism"), pod)]
    else:
        pod_sets = [_PodSet("main", "", 1, spec.path, _pod(spec.data, spec.path))]
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
        "namespace": doc.namespace or DEFAULT_NAMESPACE,
        "queueName": labels.get(QUEUE_LABEL, DEFAULT_QUEUE),
        "labels": labels,
        "podSets": [],
    }
    if consumes is not None:
        # Its pods go to the request's nodes, not through a queue (unless one is named,
        # which parse refuses).
        flat["consumesProvisioningRequest"] = consumes
        origin["consumesProvisioningRequest"] = "metadata.annotations"
        if QUEUE_LABEL not in labels:
            del flat["queueName"]
    min_count = _whole_number(doc, annotations, MIN_PARALLELISM) if doc.kind == "Job" else None
    for i, ps in enumerate(pod_sets):
        ps_at = f"podSets[{i}]"
        pod_set: dict[str, Any] = {
            "name": ps.name,
            "count": ps.count,
            "requests": {r: format_quantity(r, q) for r, q in ps.pod.requests.items()},
            "nodeSelector": ps.pod.node_selector,
            "tolerations": ps.pod.tolerations,
        }
        if min_count is not None:
            pod_set["minCount"] = min_count
            origin[f"{ps_at}.minCount"] = f"metadata.annotations.{MIN_PARALLELISM}"
        flat["podSets"].append(pod_set)
        if ps.name_path:
            origin[f"{ps_at}.name"] = _relative(doc, ps.name_path)
        origin[f"{ps_at}.count"] = _relative(doc, ps.count_path)
        pod_path = _relative(doc, ps.pod.path)
        origin[f"{ps_at}.requests"] = f"{pod_path}.containers"
        origin[f"{ps_at}.nodeSelector"] = f"{pod_path}.nodeSelector"
        origin[f"{ps_at}.tolerations"] = f"{pod_path}.tolerations"

    if PRIORITY_LABEL in labels:
        flat["priorityClassName"] = labels[PRIORITY_LABEL]
        origin["priorityClassName"] = f"metadata.labels.{PRIORITY_LABEL}"
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

    if RUNTIME in annotations:
        flat["runtime"] = {"durationSeconds": annotations[RUNTIME]}
        origin["runtime.durationSeconds"] = f"metadata.annotations.{RUNTIME}"
    else:
        slept = [ps.pod for ps in pod_sets if ps.pod.sleep is not None]
        if slept:
            longest = max(slept, key=lambda p: p.sleep or 0.0)
            flat["runtime"] = {"durationSeconds": longest.sleep}
            origin["runtime.durationSeconds"] = f"{_relative(doc, longest.path)}.containers"

    workload = _parse(doc, parse.workload, flat, origin, "spec")
    submit_at = annotations.get(SUBMIT_AT)
    at = 0.0
    if submit_at is not None:
        at = parse_duration(submit_at, doc.at(f"metadata.annotations.{SUBMIT_AT}"))
    return workload, at


def _relative(doc: _Doc, path: str) -> str:
    """A path built from ``doc.where`` without that prefix (for ``origin``)."""
    return path.removeprefix(doc.where).removeprefix(".")


def _replicated_job(data: object, path: str) -> _PodSet:
    rj = Obj(data, path)
    replicas = rj.integer("replicas", default=1, lo=1) or 1
    template = Obj(rj.raw("template", required=True), rj.at("template"))
    job = Obj(template.raw("spec", required=True), template.at("spec"))
    pods, pod = _job(job)
    if replicas * pods > parse.MAX_PODS:
        raise InvalidInput(
            path, f"replicas x parallelism is {replicas * pods} pods; at most {parse.MAX_PODS}"
        )
    return _PodSet(rj.raw("name"), rj.at("name"), replicas * pods, path, pod)


def _job(job: Obj) -> tuple[int, _Pod]:
    """A JobSpec's pods at once, as Kueue counts them: parallelism, at most completions."""
    parallelism = job.integer("parallelism", default=1, lo=1) or 1
    completions = job.integer("completions", lo=1)
    template = Obj(job.raw("template", required=True), job.at("template"))
    pod = _pod(template.raw("spec", required=True), template.at("spec"))
    metadata = template.raw("metadata")
    if isinstance(metadata, Mapping) and isinstance(metadata.get("annotations"), Mapping):
        pod = replace(pod, consumes=_consumes(metadata["annotations"]))
    return min(parallelism, completions or parallelism), pod


def _pod(data: object, path: str) -> _Pod:
    o = Obj(data, path)
    containers = [_container(c, p) for c, p in o.items("containers", required=True)]
    inits = [_container(c, p) for c, p in o.items("initContainers")]
    selector = o.raw("nodeSelector") or {}
    if not isinstance(selector, Mapping):
        raise InvalidInput(o.at("nodeSelector"), "must be an object of strings")
    node_selector = {**_affinity_selector(o), **selector}
    tolerations = o.raw("tolerations") or []
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
        requests=_pod_requests([c.requests for c in containers], [c.requests for c in inits]),
        node_selector=node_selector,
        tolerations=tolerations,
        priority_class=o.raw("priorityClassName"),
        sleep=sum(init_sleeps) + max(sleeps) if sleeps else None,
    )


def _pod_requests(
    containers: Sequence[Mapping[str, int]], inits: Sequence[Mapping[str, int]]
) -> dict[str, int]:
    """Kubernetes' PodRequests: per resource, the larger of the containers' sum and the
    largest init container (they run one at a time, before the others)."""
    out: dict[str, int] = {}
    for requests in containers:
        for r, q in requests.items():
            out[r] = out.get(r, 0) + q
    for requests in inits:
        for r, q in requests.items():
            out[r] = max(out.get(r, 0), q)
    return {r: q for r, q in out.items() if q > 0}


@dataclass(frozen=True, slots=True)
class _Container:
    requests: dict[str, int]
    sleep: float | None


def _container(data: object, path: str) -> _Container:
    o = Obj(data, path)
    res = o.obj("resources")
    requests: dict[str, int] = {}
    if res is not None:
        # A resource with a limit and no request requests its limit.
        requests = {**res.quantities("limits", positive=False)}
        requests.update(res.quantities("requests", positive=False))
    return _Container(requests=requests, sleep=_sleep(o))


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
    """Required node affinity that a node selector can say: one term, ``In`` one value."""
    affinity = pod.raw("affinity")
    node = affinity.get("nodeAffinity") if isinstance(affinity, Mapping) else None
    required = (
        node.get("requiredDuringSchedulingIgnoredDuringExecution")
        if isinstance(node, Mapping)
        else None
    )
    terms = required.get("nodeSelectorTerms") if isinstance(required, Mapping) else None
    # Terms are alternatives (OR): a selector can only stand for a single one.
    if not isinstance(terms, list) or len(terms) != 1 or not isinstance(terms[0], Mapping):
        return {}
    expressions = terms[0].get("matchExpressions")
    out: dict[str, str] = {}
    for e in expressions if isinstance(expressions, list) else []:
        if (
            isinstance(e, Mapping)
            and e.get("operator") == "In"
            and isinstance(e.get("key"), str)
            and isinstance(e.get("values"), list)
            and len(e["values"]) == 1
            and isinstance(e["values"][0], str)
        ):
            out[e["key"]] = e["values"][0]
    return out


# -- standalone ProvisioningRequests: PodTemplate + ProvisioningRequest -------------------


def _consumes(annotations: Mapping[str, Any]) -> str | None:
    for key in CONSUME:
        value = annotations.get(key)
        if value is not None:
            return str(value)
    return None


def _pod_template(doc: _Doc) -> PodTemplateSource:
    name = _parse(doc, _name_only, {"name": doc.name}, _METADATA, "")
    namespace = doc.namespace or DEFAULT_NAMESPACE
    template = Obj(doc.body.get("template"), doc.at("template"))
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


def _name_only(data: object, path: str) -> str:
    o = Obj(data, path)
    name = o.req_text("name", pattern=NAME, max_len=63)
    o.done()
    return name


def _request_source(doc: _Doc) -> RequestSource:
    spec = Obj(_spec(doc), doc.at("spec"))
    flat: dict[str, Any] = {
        "name": doc.name,
        "namespace": doc.namespace or DEFAULT_NAMESPACE,
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
        namespace=str(flat["namespace"]),
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
