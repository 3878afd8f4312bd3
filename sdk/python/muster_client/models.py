"""What the API takes and answers, as typed structs (msgspec), in the HTTP API's JSON names
(``queueName``, ``podSets``; docs/api.md). Fields a newer server adds are ignored on
decoding, so an older client keeps working; fields the server leaves out take defaults."""

from __future__ import annotations

from typing import Any, TypeVar

import msgspec

T = TypeVar("T")


class _Input(msgspec.Struct, rename="camel", omit_defaults=True, kw_only=True):
    """A request body: fields left at None are not sent (the server applies its defaults)."""


class PodSet(_Input):
    count: int
    requests: dict[str, str | int] = msgspec.field(default_factory=dict)
    name: str | None = None
    min_count: int | None = None
    surplus: str | None = None
    node_selector: dict[str, str] | None = None
    tolerations: list[dict[str, Any]] | None = None
    topology: dict[str, Any] | None = None
    devices: dict[str, Any] | None = None
    backoff_limit: int | None = None


class WorkloadSpec(_Input):
    """A workload to submit (docs/api.md, "Workload"). Nested objects the SDK does not model
    field by field (``topology``, ``runtime``, ``failurePolicy``...) are the API's JSON."""

    name: str
    namespace: str
    pod_sets: list[PodSet]
    queue_name: str | None = None
    priority: int | None = None
    priority_class_name: str | None = None
    labels: dict[str, str] | None = None
    max_run_duration_seconds: int | None = None
    runtime: dict[str, Any] | None = None
    consumes_provisioning_request: str | None = None
    gpu_group_size: int | None = None
    placement: dict[str, str] | None = None
    failure_policy: dict[str, Any] | None = None
    gang: dict[str, Any] | None = None


class _Output(msgspec.Struct, rename="camel", kw_only=True):
    """An answer: unknown fields are ignored, missing ones take their defaults."""


class QueuePosition(_Output):
    position_in_cluster_queue: int | None = None
    position_in_local_queue: int | None = None
    reason: str | None = None
    message: str | None = None


class GangMembership(_Output):
    name: str = ""
    cardinality: int = 0
    workload_id: str | None = None


class Workload(_Output):
    id: str
    name: str = ""
    namespace: str = ""
    queue_name: str = ""
    cluster_queue: str | None = None
    priority: int = 0
    pods: int = 0
    status: str = ""
    reason: str = ""
    message: str = ""
    attempt: int = 0
    submitted_at: float = 0.0
    updated_at: float = 0.0
    cancel_requested: bool = False
    # A pending workload: its positions and the reason it waits right now.
    queue: QueuePosition | None = None
    gang: GangMembership | None = None
    # Kueue's status.admissionChecks, as the API's JSON.
    admission_checks: list[dict[str, Any]] | None = None
    # Kueue's status.conditions (type, status, reason, message, lastTransitionTime) and the
    # times in RFC 3339, as the API's JSON.
    conditions: list[dict[str, Any]] | None = None
    submitted_time: str | None = None
    updated_time: str | None = None


class Submitted(_Output):
    """One submission's answer: ``created`` is False when an idempotency key was repeated
    and the server answered with the original workload."""

    workload: Workload
    created: bool = False


class WorkloadPage(_Output):
    items: list[Workload] = msgspec.field(default_factory=list)
    # The last id of this page: pass it as ``after`` for the next one (None: no more).
    next: str | None = None


class Event(_Output):
    """One event of the log, as a watch yields it: ``position`` is where to resume."""

    position: int
    time: float = 0.0
    occurred_time: str = ""  # the same moment in RFC 3339
    type: str = ""
    producer: str = ""
    stream: str = ""
    workload_id: str | None = None
    reason: str | None = None
    message: str | None = None
    data: dict[str, Any] = msgspec.field(default_factory=dict)


class Explanation(_Output):
    """A workload's state and why at a log position (``explain``): ``detail`` is the whole
    answer as the API's JSON (queue, flavors, shortfall, victims, nodes, admissionChecks,
    provisioningRequest, evictions; docs/api.md, "Explain")."""

    id: str
    position: int = 0
    time: str = ""  # RFC 3339
    status: str = ""
    reason: str = ""
    message: str = ""
    conditions: list[dict[str, Any]] = msgspec.field(default_factory=list)
    detail: dict[str, Any] = msgspec.field(default_factory=dict)


class ReportRow(_Output):
    """One workload in ``report``, as sacct shows a job (times in RFC 3339)."""

    id: str
    name: str = ""
    namespace: str = ""
    queue_name: str = ""
    cluster_queue: str = ""
    status: str = ""
    attempts: int = 0
    submit_time: str | None = None
    start_time: str | None = None
    end_time: str | None = None
    wait_seconds: float | None = None
    run_seconds: float = 0.0
    gpu_hours: float = 0.0


class ReportTotal(_Output):
    name: str
    workloads: int = 0
    finished: int = 0
    mean_wait_seconds: float | None = None
    run_seconds: float = 0.0
    gpu_hours: float = 0.0


class Report(_Output):
    """Accounting over ``[since, until)``: per workload, per namespace, per ClusterQueue."""

    since: str | None = None
    until: str | None = None
    now: str = ""
    workloads: list[ReportRow] = msgspec.field(default_factory=list)
    namespaces: list[ReportTotal] = msgspec.field(default_factory=list)
    cluster_queues: list[ReportTotal] = msgspec.field(default_factory=list)


Spec = WorkloadSpec | dict[str, Any]


def spec_json(spec: Spec) -> dict[str, Any]:
    """A workload spec as the API's JSON: a ``WorkloadSpec`` encoded, a dict as it is."""
    if isinstance(spec, WorkloadSpec):
        out: dict[str, Any] = msgspec.to_builtins(spec)
        return out
    return dict(spec)


def convert(value: Any, into: type[T]) -> T:
    """An answer's JSON as a typed struct (lax: gRPC's JSON writes int64 as strings)."""
    return msgspec.convert(value, into, strict=False)
