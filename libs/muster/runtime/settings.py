"""Settings for every service, read once at start from the environment (or CLI flags).

Each setting is an environment variable ``MUSTER_<NAME>``; a missing or malformed
value stops the service at once with a message naming the variable.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, fields

DEFAULT_PORTS = {"intake": 8080, "queue": 8081, "provisioner": 8082, "node-agent": 8083}


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
    poll_seconds: float = 1.0  # MUSTER_POLL_SECONDS: store poll when Kafka is quiet
    max_body_bytes: int = 1_048_576  # MUSTER_MAX_BODY_BYTES (intake)
    heartbeat_seconds: float = 5.0  # MUSTER_HEARTBEAT_SECONDS: node-agent liveness interval
    node_agent_shard: int = 0  # MUSTER_NODE_AGENT_SHARD
    node_agent_shards: int = 1  # MUSTER_NODE_AGENT_SHARDS

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
    if s.poll_seconds <= 0 or s.max_body_bytes <= 0 or s.snapshot_every < 0:
        raise SettingsError("MUSTER_POLL_SECONDS and MUSTER_MAX_BODY_BYTES must be positive")
    if not 0 < s.heartbeat_seconds <= 3600:
        raise SettingsError(f"MUSTER_HEARTBEAT_SECONDS={s.heartbeat_seconds}: use 0 < s <= 3600")
    if not s.store_url.startswith(("sqlite", "postgres")):
        raise SettingsError(f"MUSTER_STORE_URL={s.store_url!r}: use sqlite:/// or postgresql://")
