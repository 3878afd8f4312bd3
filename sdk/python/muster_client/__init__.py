"""muster's Python client: submit, batch, get, list, cancel, watch and explain workloads,
set an external admission check's state, read nodes and the accounting report, over HTTP
(``AsyncClient``, blocking ``Client``) or gRPC (``muster_client.grpc_client``), with typed
answers, typed errors and retries that honour ``Retry-After``."""

from muster_client.errors import (
    ApiError,
    BadRequest,
    Conflict,
    Forbidden,
    InvalidInput,
    MusterError,
    NotFound,
    RateLimited,
    TooLarge,
    TransportError,
    Unauthenticated,
    Unavailable,
)
from muster_client.http import AsyncClient
from muster_client.models import (
    Event,
    Explanation,
    GangMembership,
    PodSet,
    QueuePosition,
    Report,
    ReportRow,
    ReportTotal,
    Submitted,
    Workload,
    WorkloadPage,
    WorkloadSpec,
)
from muster_client.retry import NO_RETRY, RetryPolicy
from muster_client.sync import Client

__all__ = [
    "NO_RETRY",
    "ApiError",
    "AsyncClient",
    "BadRequest",
    "Client",
    "Conflict",
    "Event",
    "Explanation",
    "Forbidden",
    "GangMembership",
    "InvalidInput",
    "MusterError",
    "NotFound",
    "PodSet",
    "QueuePosition",
    "RateLimited",
    "Report",
    "ReportRow",
    "ReportTotal",
    "RetryPolicy",
    "Submitted",
    "TooLarge",
    "TransportError",
    "Unauthenticated",
    "Unavailable",
    "Workload",
    "WorkloadPage",
    "WorkloadSpec",
]
