"""muster's Python client: submit, batch, get, list, cancel and watch workloads over HTTP
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
    GangMembership,
    PodSet,
    QueuePosition,
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
    "Forbidden",
    "GangMembership",
    "InvalidInput",
    "MusterError",
    "NotFound",
    "PodSet",
    "QueuePosition",
    "RateLimited",
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
