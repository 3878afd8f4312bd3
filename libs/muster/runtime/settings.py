"""Settings for every service, read once at start from the environment (or CLI flags).

Each setting is an environment variable ``MUSTER_<NAME>``; a missing or malformed
value stops the service at once with a message naming the variable.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, fields

DEFAULT_PORTS = {"intake": 8080, "queue": 8081, "provisioner": 8082, "node-agent": 8083}
PROVISIONER_BACKENDS = ("simulated", "kubernetes")
NODE_AGENT_BACKENDS = ("simulated", "kubernetes")
_QUEUE_NAME = re.compile(r"^queue(-[a-z0-9]([-a-z0-9]{0,40}[a-z0-9])?)?$")
_DNS1123 = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
_LABEL_KEY = re.compile(
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$"
)


class SettingsError(ValueError):
    pass


@dataclass(frozen=True, slots=True, kw_only=True)
class Settings:
    store_url: str  # MUSTER_STORE_URL: sqlite:///path/muster.db or postgresql://...
    kafka_bootstrap: str  # MUSTER_KAFKA_BOOTSTRAP: host:port[,host:port]
    http_host: str = "0.0.0.0"  # MUSTER_HTTP_HOST
    http_port: int = 0  # MUSTER_HTTP_PORT: 0 means the service's default port
    log_level: str = "info"  # MUSTER_LOG_LEVEL: debug | info | warning | error
    topic_prefix: str = "muster."  # MUSTER_TOPIC_PREFIX
    migrate: bool = True  # MUSTER_MIGRATE: bring the store schema up to date at start
    snapshot_every: int = 5000  # MUSTER_SNAPSHOT_EVERY: events folded between snapshots (0: off)
    # MUSTER_SNAPSHOT_SECONDS: and at least this long between them. A snapshot pickles the
    # whole state; every 5,000 events under load it took a quarter of intake's CPU, and a
    # restart replays a minute of events in well under a second.
    snapshot_seconds: float = 60.0
    poll_seconds: float = 5.0  # MUSTER_POLL_SECONDS: store poll, should a doorbell miss
    # MUSTER_KAFKA_DOORBELL: also wake on the category topics' messages. Off: the store's
    # own doorbell (store/bell.py) wakes every service, and consuming every event from
    # Kafka in every service would cost more CPU than the rest of an admission.
    kafka_doorbell: bool = False
    max_body_bytes: int = 1_048_576  # MUSTER_MAX_BODY_BYTES (intake: HTTP bodies, gRPC messages)
    grpc_port: int = 9090  # MUSTER_GRPC_PORT: intake's gRPC API (0: off)
    # MUSTER_AUTH_TOKEN_FILE / MUSTER_AUTH_SECRET_FILE: static tokens (docs/operations.md) and
    # the HS256 key of signed tokens; with neither, intake is open and every caller is admin
    auth_token_file: str = ""
    auth_secret_file: str = ""
    submit_rate: float = 200.0  # MUSTER_SUBMIT_RATE: submissions/s per tenant (0: no limit)
    submit_burst: int = 2000  # MUSTER_SUBMIT_BURST: and its burst (also the largest batch)
    max_batch: int = 1000  # MUSTER_MAX_BATCH: workloads in one batch submission
    # MUSTER_INGEST_TOPIC: a Kafka topic intake takes submissions from ("": off); answers go
    # to <topic>.replies
    ingest_topic: str = ""
    # MUSTER_QUEUE_NAME: "queue" decides for every cohort tree; another name (queue-<id>)
    # makes this process one of a split queue's deciders (docs/architecture.md)
    queue_name: str = "queue"
    # MUSTER_QUEUE_PREFERS: the cohorts (or lone ClusterQueues) a split decider claims first,
    # comma-separated
    queue_prefers: str = ""
    # MUSTER_QUEUE_CLAIM_SECONDS: how long a split decider's claim on a tree lasts; renewed
    # half way, taken over by another decider a claim's length after it ends
    queue_claim_seconds: float = 30.0
    heartbeat_seconds: float = 5.0  # MUSTER_HEARTBEAT_SECONDS: node-agent liveness interval
    node_agent_shard: int = 0  # MUSTER_NODE_AGENT_SHARD
    node_agent_shards: int = 1  # MUSTER_NODE_AGENT_SHARDS
    # MUSTER_NODE_GRACE_SECONDS: no heartbeat for this long and the queue declares a node lost
    # (Kubernetes' node-monitor-grace-period is 40 s)
    node_grace_seconds: float = 40.0
    # MUSTER_NODE_NAME: the node this agent runs on (a DaemonSet pod's spec.nodeName): the agent
    # acts for that node only, and registers it from NVML when it has GPUs and the cluster
    # description does not declare it ("" = the nodes by hash over the shards: simulated)
    node_name: str = ""
    # MUSTER_PROVISIONER_BACKEND: simulated (the cloud a CloudConfigured event describes) or
    # kubernetes (ProvisioningRequests served by a real cluster's autoscaler)
    provisioner_backend: str = "simulated"
    # MUSTER_NODE_AGENT_BACKEND: simulated (pods run for their declared duration) or kubernetes
    # (the cluster's pods labelled muster.dev/workload-id report their start and end)
    node_agent_backend: str = "simulated"
    kube_api_url: str = ""  # MUSTER_KUBE_API_URL: "" = in-cluster config, else kubeconfig
    # MUSTER_KUBE_NODE_LABEL: the node label naming the ProvisioningRequest a node came up for
    kube_node_label: str = "muster.dev/provisioning-request"
    # MUSTER_KUBE_DEFAULT_CLASS: provisioningClassName when the queue's check names none
    kube_default_class: str = "best-effort-atomic-scale-up.autoscaling.x-k8s.io"
    # MUSTER_KUBE_NAMESPACE: where a queued workload's ProvisioningRequests go when the log
    # does not name the workload's namespace (otherwise they go there, as Kueue's do)
    kube_namespace: str = "default"
    # MUSTER_KUBE_BOOKING_SECONDS: the autoscaler's booking window, recorded on acceptance
    kube_booking_seconds: float = 600.0

    def port_for(self, service: str) -> int:
        return self.http_port or DEFAULT_PORTS[service]


ENV_NAMES = tuple(f"MUSTER_{f.name.upper()}" for f in fields(Settings))


def load(env: Mapping[str, str] | None = None, **overrides: object) -> Settings:
    """Settings from ``env`` (default: the process environment), then explicit overrides."""
    env = os.environ if env is None else env
    values: dict[str, object] = {}
    for f in fields(Settings):
        name = f"MUSTER_{f.name.upper()}"
        if overrides.get(f.name) is not None:
            values[f.name] = overrides[f.name]
        elif name in env and env[name] != "":
            values[f.name] = _convert(name, env[name], f.type)
    for required in ("store_url", "kafka_bootstrap"):
        if required not in values:
            raise SettingsError(f"MUSTER_{required.upper()} is not set (see docs/operations.md)")
    settings = Settings(**values)  # type: ignore[arg-type]
    _check(settings)
    return settings


def _convert(name: str, raw: str, kind: object) -> object:
    try:
        if kind in ("int", int):
            return int(raw)
        if kind in ("float", float):
            return float(raw)
        if kind in ("bool", bool):
            if raw.lower() in ("1", "true", "yes", "on"):
                return True
            if raw.lower() in ("0", "false", "no", "off"):
                return False
            raise ValueError(raw)
    except ValueError:
        raise SettingsError(f"{name}={raw!r} is not a valid {kind}") from None
    return raw


def _check(s: Settings) -> None:
    if s.log_level not in ("debug", "info", "warning", "error"):
        raise SettingsError(f"MUSTER_LOG_LEVEL={s.log_level!r}: use debug, info, warning or error")
    if not 0 <= s.http_port < 65536:
        raise SettingsError(f"MUSTER_HTTP_PORT={s.http_port}: not a TCP port")
    if not 0 <= s.node_agent_shard < s.node_agent_shards:
        raise SettingsError(
            f"MUSTER_NODE_AGENT_SHARD={s.node_agent_shard} must be below "
            f"MUSTER_NODE_AGENT_SHARDS={s.node_agent_shards}"
        )
    if not 0 <= s.grpc_port < 65536:
        raise SettingsError(f"MUSTER_GRPC_PORT={s.grpc_port}: not a TCP port")
    if s.submit_rate < 0 or s.submit_burst < 1 or not 1 <= s.max_batch <= 100_000:
        raise SettingsError(
            "MUSTER_SUBMIT_RATE must be >= 0, MUSTER_SUBMIT_BURST >= 1, MUSTER_MAX_BATCH 1..100000"
        )
    if s.ingest_topic and not re.fullmatch(r"[A-Za-z0-9._-]{1,200}", s.ingest_topic):
        raise SettingsError(f"MUSTER_INGEST_TOPIC={s.ingest_topic!r}: not a Kafka topic name")
    if s.poll_seconds <= 0 or s.max_body_bytes <= 0 or s.snapshot_every < 0:
        raise SettingsError("MUSTER_POLL_SECONDS and MUSTER_MAX_BODY_BYTES must be positive")
    if s.snapshot_seconds < 0:
        raise SettingsError(f"MUSTER_SNAPSHOT_SECONDS={s.snapshot_seconds}: must be >= 0")
    if not _QUEUE_NAME.match(s.queue_name):
        raise SettingsError(f"MUSTER_QUEUE_NAME={s.queue_name!r}: use queue or queue-<id>")
    if s.queue_prefers and s.queue_name == "queue":
        raise SettingsError("MUSTER_QUEUE_PREFERS needs MUSTER_QUEUE_NAME=queue-<id>")
    if not 0 < s.queue_claim_seconds <= 3600:
        raise SettingsError(
            f"MUSTER_QUEUE_CLAIM_SECONDS={s.queue_claim_seconds}: use 0 < s <= 3600"
        )
    if not 0 < s.heartbeat_seconds <= 3600:
        raise SettingsError(f"MUSTER_HEARTBEAT_SECONDS={s.heartbeat_seconds}: use 0 < s <= 3600")
    if s.node_grace_seconds <= s.heartbeat_seconds:
        raise SettingsError(
            f"MUSTER_NODE_GRACE_SECONDS={s.node_grace_seconds} must be longer than "
            f"MUSTER_HEARTBEAT_SECONDS={s.heartbeat_seconds}"
        )
    if s.node_name and not _DNS1123.match(s.node_name):
        raise SettingsError(f"MUSTER_NODE_NAME={s.node_name!r}: not a node name")
    if s.node_name and s.node_agent_shards != 1:
        raise SettingsError(
            "MUSTER_NODE_NAME binds the node agent to its node: leave MUSTER_NODE_AGENT_SHARDS "
            "unset (it is for agents that split the simulated nodes by hash)"
        )
    if s.provisioner_backend not in PROVISIONER_BACKENDS:
        raise SettingsError(
            f"MUSTER_PROVISIONER_BACKEND={s.provisioner_backend!r}: use "
            + " or ".join(PROVISIONER_BACKENDS)
        )
    if s.node_agent_backend not in NODE_AGENT_BACKENDS:
        raise SettingsError(
            f"MUSTER_NODE_AGENT_BACKEND={s.node_agent_backend!r}: use "
            + " or ".join(NODE_AGENT_BACKENDS)
        )
    if not _LABEL_KEY.match(s.kube_node_label):
        raise SettingsError(
            f"MUSTER_KUBE_NODE_LABEL={s.kube_node_label!r}: not a label key ([prefix/]name)"
        )
    if not _DNS1123.match(s.kube_default_class) or len(s.kube_default_class) > 253:
        raise SettingsError(
            f"MUSTER_KUBE_DEFAULT_CLASS={s.kube_default_class!r}: not a DNS-1123 subdomain"
        )
    if not _DNS1123_LABEL.match(s.kube_namespace):
        raise SettingsError(f"MUSTER_KUBE_NAMESPACE={s.kube_namespace!r}: not a namespace name")
    if s.kube_api_url and not s.kube_api_url.startswith(("http://", "https://")):
        raise SettingsError(f"MUSTER_KUBE_API_URL={s.kube_api_url!r}: use http:// or https://")
    if s.kube_booking_seconds <= 0:
        raise SettingsError(
            f"MUSTER_KUBE_BOOKING_SECONDS={s.kube_booking_seconds}: must be positive"
        )
    if not s.store_url.startswith(("sqlite", "postgres")):
        raise SettingsError(f"MUSTER_STORE_URL={s.store_url!r}: use sqlite:/// or postgresql://")
