"""``kubectl apply`` for muster, decided purely: the text read into manifests within
bounds (``read``, run wherever the shell puts it: a worker process for large bodies, so
one tenant's big file never holds up another's requests), then everything checked
against what intake knows (``check``): access, references, queues, immutable specs. The
shell appends the lot in one transaction, or nothing."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from muster.core import inputs
from muster.core.access.policy import Action
from muster.core.access.tokens import Principal
from muster.core.intake import requests as provreqs
from muster.core.intake.refusal import Refusal, forbidden, invalid
from muster.core.intake.submissions import Item
from muster.core.model import manifests
from muster.core.model.documents import DocumentError, load_documents
from muster.core.model.fields import InvalidInput
from muster.core.model.workload import ProvisioningRequestSpec
from muster.core.views.workloads import WorkloadsState

Read = tuple[manifests.Manifests, list[Any]]  # the manifests, their ProvisioningRequests


@dataclass(frozen=True, slots=True)
class Checked:
    """An apply that may go ahead: its workloads as submissions (keyed by namespace/name,
    so applying again lands on the same streams) and its standalone requests."""

    manifests: manifests.Manifests
    items: list[Item]
    requests: list[ProvisioningRequestSpec]


def read(text: str | bytes) -> Read | Refusal:
    try:
        docs = [d for d in load_documents(text) if d is not None]
    except DocumentError as exc:
        return Refusal("MalformedYAML", str(exc))
    if len(docs) == 1 and isinstance(docs[0], dict) and isinstance(docs[0].get("items"), list):
        docs = docs[0]["items"]  # a kubectl List
    if not docs:
        return Refusal("InvalidField", "no manifests given")
    if not manifests.is_manifests(docs):
        return Refusal("InvalidField", "not Kubernetes manifests: no document has a kind")
    try:
        m = manifests.read(docs)
        m.check_gangs()
        return m, m.provisioning_requests()
    except InvalidInput as exc:
        return invalid(exc)


def check(who: Principal, got: Read, state: WorkloadsState) -> Checked | Refusal:
    """Access first (queue objects are the admin's; workloads and requests the tenant's
    namespaces), then what the apply names must exist, then nothing it submits may change
    a spec already stored."""
    m, timed = got
    reqs = [req for _, req, _ in timed]
    items = [
        Item(wl, key, inputs.workload_id(wl.namespace, key), "")
        for wl, key in ((wl, f"{wl.namespace}/{wl.name}") for wl in m.workloads)
    ]
    refused = (
        _access(who, m, reqs)
        or _references(m, state)
        or _queues(m, state)
        or _unchanged(items, reqs, state)
    )
    return refused or Checked(m, items, reqs)


def _access(
    who: Principal, m: manifests.Manifests, reqs: list[ProvisioningRequestSpec]
) -> Refusal | None:
    if m.queue_object_count and (refused := forbidden(who, Action.ADMIN)):
        return refused
    for wl in m.workloads:
        if refused := forbidden(who, Action.SUBMIT, wl.namespace, wl.queue_name or None):
            return refused
    for req in reqs:
        if refused := forbidden(who, Action.SUBMIT, req.namespace):
            return refused
    return None


def _references(m: manifests.Manifests, state: WorkloadsState) -> Refusal | None:
    """Flavors and ClusterQueues named must exist, or come in the same apply. (Kueue
    would accept and mark the queue inactive; a typo is better refused at once.)"""
    q = state.queue
    flavors = set(q.flavors) | {f.name for f in m.resource_flavors}
    queues = set(q.cluster_queues) | {c.name for c in m.cluster_queues}
    owners = [("ClusterQueue", c.name, c.resource_groups) for c in m.cluster_queues]
    owners += [("Cohort", c.name, c.resource_groups) for c in m.cohorts]
    for kind, name, groups in owners:
        for gi, group in enumerate(groups):
            for fi, fq in enumerate(group.flavors):
                if fq.name not in flavors:
                    return Refusal(
                        "UnknownFlavor",
                        f"{kind} {name}: ResourceFlavor {fq.name!r} does not exist "
                        "(apply it first, or in the same file)",
                        f"{kind} {name}.spec.resourceGroups[{gi}].flavors[{fi}].name",
                    )
    for lq in m.local_queues:
        if lq.cluster_queue not in queues:
            return Refusal(
                "UnknownQueue",
                f"LocalQueue {lq.namespace}/{lq.name}: ClusterQueue {lq.cluster_queue!r} "
                "does not exist (apply it first, or in the same file)",
                f"LocalQueue {lq.namespace}/{lq.name}.spec.clusterQueue",
            )
    return None


def _queues(m: manifests.Manifests, state: WorkloadsState) -> Refusal | None:
    """Each workload's LocalQueue exists or comes in the apply (a consumer of a request
    runs on its nodes, through no queue)."""
    known = state.local_queues | {f"{q.namespace}/{q.name}" for q in m.local_queues}
    for src, wl in zip(m.sources, m.workloads, strict=True):
        if wl.consumes is None and f"{wl.namespace}/{wl.queue_name}" not in known:
            return Refusal(
                "UnknownQueue",
                f"{src.kind} {wl.namespace}/{wl.name}: LocalQueue {wl.queue_name!r} does "
                f"not exist in namespace {wl.namespace!r}",
            )
    return None


def _unchanged(
    items: list[Item], reqs: list[ProvisioningRequestSpec], state: WorkloadsState
) -> Refusal | None:
    """A submitted workload's spec is immutable, and so is a request's."""
    for item in items:
        seen = state.workloads.get(item.workload_id)
        if seen is not None and seen.digest != inputs.digest(item.spec):
            return Refusal(
                "IdempotencyKeyReused",
                f"workload {item.key} exists with another spec; a submitted workload's "
                "spec is immutable (delete it, then apply)",
            )
    for req in reqs:
        existing = state.requests.get(req.key)
        if refused := provreqs.conflict(req, existing.spec if existing is not None else None):
            return refused
    return None
