"""The events that come from outside the deciders: configuration and submissions.

The CLI (``muster apply``), intake and the simulation harness all build them here,
so the services and the harness see identical inputs.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

import msgspec

from muster.core.events import Event, NewEvent
from muster.core.events import node as nev
from muster.core.events import provisioning as pev
from muster.core.events import queue as qev
from muster.core.events import workload as wev
from muster.core.model.cluster import ClusterSpec
from muster.core.model.manifests import Manifests
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
from muster.core.model.workload import ProvisioningRequestSpec, WorkloadSpec

ADMIN = "admin"  # producer of configuration events (muster apply)
INTAKE = "intake"  # producer of submissions and cancellations


def configuration(spec: ClusterSpec, at: float) -> list[NewEvent]:
    """The cloud and every queue object of a cluster description, one stream each."""
    items: list[tuple[str, Event]] = [(pev.cloud_stream(spec.name), pev.CloudConfigured(spec=spec))]
    items += _queue_items(
        flavors=spec.resource_flavors,
        cluster_queues=spec.cluster_queues,
        local_queues=spec.local_queues,
        cohorts=spec.cohorts,
        priority_classes=spec.priority_classes,
        namespace_quotas=spec.namespace_quotas,
        admission_checks=spec.admission_checks,
        provisioning_configs=spec.provisioning_configs,
    )
    items.append(
        (
            qev.config_stream("fairsharing", "cluster"),
            qev.FairSharingConfigured(spec=spec.fair_sharing),
        )
    )
    items.append(
        (
            qev.config_stream("waitforpodsready", "cluster"),
            qev.WaitForPodsReadyConfigured(spec=spec.wait_for_pods_ready),
        )
    )
    return [NewEvent(stream_id=s, event=e, occurred_at=at) for s, e in items]


def queue_configuration(m: Manifests, at: float) -> list[NewEvent]:
    """The queue objects of Kubernetes manifests alone (no cloud, no fair-sharing switch),
    on the same streams ``configuration`` uses."""
    items = _queue_items(
        flavors=m.resource_flavors,
        cluster_queues=m.cluster_queues,
        local_queues=m.local_queues,
        cohorts=m.cohorts,
        priority_classes=m.priority_classes,
        namespace_quotas=m.namespace_quotas,
        admission_checks=m.admission_checks,
        provisioning_configs=m.provisioning_configs,
    )
    return [NewEvent(stream_id=s, event=e, occurred_at=at) for s, e in items]


def _queue_items(
    *,
    flavors: Iterable[ResourceFlavorSpec],
    cluster_queues: Iterable[ClusterQueueSpec],
    local_queues: Iterable[LocalQueueSpec],
    cohorts: Iterable[CohortSpec],
    priority_classes: Iterable[PriorityClassSpec],
    namespace_quotas: Iterable[NamespaceQuotaSpec],
    admission_checks: Iterable[AdmissionCheckSpec],
    provisioning_configs: Iterable[ProvisioningRequestConfigSpec],
) -> list[tuple[str, Event]]:
    """One configuration event per queue object, each on its own stream."""
    items: list[tuple[str, Event]] = [
        (qev.config_stream("flavor", f.name), qev.ResourceFlavorConfigured(spec=f)) for f in flavors
    ]
    items += [
        (qev.config_stream("clusterqueue", q.name), qev.ClusterQueueConfigured(spec=q))
        for q in cluster_queues
    ]
    items += [
        (
            qev.config_stream("localqueue", f"{q.namespace}.{q.name}"),
            qev.LocalQueueConfigured(spec=q),
        )
        for q in local_queues
    ]
    items += [(qev.config_stream("cohort", c.name), qev.CohortConfigured(spec=c)) for c in cohorts]
    items += [
        (qev.config_stream("priorityclass", c.name), qev.PriorityClassConfigured(spec=c))
        for c in priority_classes
    ]
    items += [
        (
            qev.config_stream("namespacequota", f"{q.namespace}.{q.name}"),
            qev.NamespaceQuotaConfigured(spec=q),
        )
        for q in namespace_quotas
    ]
    items += [
        (qev.config_stream("admissioncheck", c.name), qev.AdmissionCheckConfigured(spec=c))
        for c in admission_checks
    ]
    items += [
        (
            qev.config_stream("provisioningrequestconfig", c.name),
            qev.ProvisioningRequestConfigConfigured(spec=c),
        )
        for c in provisioning_configs
    ]
    return items


def digest(spec: WorkloadSpec) -> str:
    """A stable digest of a submission: the same key with another body is a conflict.
    The bytes are ``orjson.dumps(to_plain(spec), option=OPT_SORT_KEYS)``'s (digests are
    stored, so they must not change), written by msgspec in C: 1.6 us, not 21 us
    (tests/unit/test_intake_submissions.py holds the two equal)."""
    return hashlib.sha256(_SORTED.encode(spec)).hexdigest()


_SORTED = msgspec.json.Encoder(order="sorted")


def workload_id(namespace: str, idempotency_key: str) -> str:
    """Ids derive from the key, so a retried submission lands on the same stream."""
    return hashlib.sha256(f"{namespace}/{idempotency_key}".encode()).hexdigest()[:16]


def gang_workload_id(namespace: str, gang: str) -> str:
    """The workload a gang becomes (its stream holds the members): a namespace never holds
    a colon, so no idempotency key's id can be it."""
    return hashlib.sha256(f"gang:{namespace}/{gang}".encode()).hexdigest()[:16]


def submission(
    workload: str,
    spec: WorkloadSpec,
    at: float,
    idempotency_key: str | None = None,
    request_digest: str | None = None,
) -> NewEvent:
    """``request_digest``: ``digest(spec)`` when the caller has it already (intake's plan
    compares it with the stored one first), so it is not computed twice."""
    return NewEvent(
        stream_id=wev.stream(workload),
        event=wev.WorkloadSubmitted(
            workload_id=workload,
            spec=spec,
            idempotency_key=idempotency_key,
            request_digest=request_digest or digest(spec),
        ),
        occurred_at=at,
        correlation_id=workload,
    )


def cancellation(workload: str, at: float) -> NewEvent:
    return NewEvent(
        stream_id=wev.stream(workload),
        event=wev.WorkloadCancelRequested(workload_id=workload),
        occurred_at=at,
        correlation_id=workload,
    )


def admission_check_updated(event: wev.AdmissionCheckUpdated, at: float) -> NewEvent:
    """An external admission check's controller reports the check's state for a workload."""
    return NewEvent(
        stream_id=wev.stream(event.workload_id),
        event=event,
        occurred_at=at,
        correlation_id=event.workload_id,
    )


def provisioning_request(spec: ProvisioningRequestSpec, at: float) -> NewEvent:
    """A standalone ProvisioningRequest; its stream is named by namespace and name, so
    creating it twice is a conflict on the stream, as in Kubernetes."""
    rid = pev.standalone_id(spec.namespace, spec.name)
    return NewEvent(
        stream_id=pev.request_stream(rid),
        event=pev.ProvisioningRequested(request_id=rid, spec=spec),
        occurred_at=at,
        correlation_id=rid,
    )


def provisioning_deletion(request_id: str, at: float) -> NewEvent:
    return NewEvent(
        stream_id=pev.request_stream(request_id),
        event=pev.ProvisioningDeleteRequested(request_id=request_id),
        occurred_at=at,
        correlation_id=request_id,
    )


MONITOR = "node-monitor"  # producer of node-lost events (the queue's heartbeat watch)


def node_lost(
    node: str, at: float, message: str, last_heartbeat_at: float | None = None
) -> NewEvent:
    """A node whose heartbeats stopped: its pods are gone, its workloads come back."""
    return NewEvent(
        stream_id=nev.stream(node),
        event=nev.NodeLost(node=node, message=message, last_heartbeat_at=last_heartbeat_at),
        occurred_at=at,
    )


def queue_shard_started(
    owner: str, prefers: Iterable[str], claim_seconds: float, at: float
) -> NewEvent:
    """A split queue's decider (re)started: the cohort trees it prefers."""
    return NewEvent(
        stream_id=qev.shard_stream(owner),
        event=qev.QueueShardStarted(
            owner=owner, prefers=tuple(sorted(set(prefers))), claim_seconds=claim_seconds
        ),
        occurred_at=at,
    )


def agent_started(agent: str, shard: int, at: float) -> NewEvent:
    """A node agent (re)started: it registers again the lost nodes it owns."""
    return NewEvent(
        stream_id=nev.agent_stream(shard),
        event=nev.AgentStarted(agent=agent, shard=shard),
        occurred_at=at,
    )
