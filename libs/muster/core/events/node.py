"""Node streams (``node-<name>``): inventory and pod lifecycle. Written by node-agent."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from muster.core.events.base import Event, event_class
from muster.core.model.inventory import Gpu, NodeInventory
from muster.core.model.queues import Taint


def stream(node: str) -> str:
    return f"node-{node}"


@event_class("node.registered")
@dataclass(frozen=True, slots=True, kw_only=True)
class NodeRegistered(Event):
    node: str
    allocatable: Mapping[str, int]
    labels: Mapping[str, str] = field(default_factory=dict)
    agent: str = ""
    taints: tuple[Taint, ...] = ()
    gpus: tuple[Gpu, ...] = ()
    # The interconnect between each pair of ``gpus`` (NodeInventory.links); () in logs
    # written before it was recorded, and on nodes whose matrix is not known.
    links: tuple[tuple[str, ...], ...] = ()
    # The ProvisioningRequest whose node this is (its pods come with the request), or ""
    # for an existing node the queue places workloads on.
    request_id: str = ""

    @staticmethod
    def of(inv: NodeInventory, agent: str, request_id: str = "") -> NodeRegistered:
        return NodeRegistered(
            node=inv.name,
            allocatable=inv.allocatable,
            labels=inv.labels,
            agent=agent,
            taints=inv.taints,
            gpus=inv.gpus,
            links=inv.links,
            request_id=request_id,
        )

    def inventory(self) -> NodeInventory:
        return NodeInventory(
            name=self.node,
            allocatable=self.allocatable,
            labels=self.labels,
            taints=self.taints,
            gpus=self.gpus,
            links=self.links,
        )


@event_class("node.lost")
@dataclass(frozen=True, slots=True, kw_only=True)
class NodeLost(Event):
    """No heartbeat from the node for longer than the grace period: its pods are gone."""

    node: str
    message: str
    last_heartbeat_at: float | None = None


@event_class("node.removed")
@dataclass(frozen=True, slots=True, kw_only=True)
class NodeRemoved(Event):
    node: str
    reason: str


@event_class("node.agent_started")
@dataclass(frozen=True, slots=True, kw_only=True)
class AgentStarted(Event):
    """A node agent (re)started: it registers again the existing nodes it owns that were
    declared lost. Its shell appends this at start-up (stream ``node-agent.<shard>``)."""

    agent: str
    shard: int = 0


def agent_stream(shard: int) -> str:
    return f"node-agent.{shard}"


@event_class("node.pod_started")
@dataclass(frozen=True, slots=True, kw_only=True)
class PodStarted(Event):
    node: str
    workload_id: str
    attempt: int
    pod: str
    finishes_at: float
    run: int = 0  # how many times this pod ran before (replacements after failures)


@event_class("node.pod_succeeded")
@dataclass(frozen=True, slots=True, kw_only=True)
class PodSucceeded(Event):
    node: str
    workload_id: str
    attempt: int
    pod: str


@event_class("node.pod_failed")
@dataclass(frozen=True, slots=True, kw_only=True)
class PodFailed(Event):
    node: str
    workload_id: str
    attempt: int
    pod: str
    exit_code: int
    reason: str


@event_class("node.pod_stopped")
@dataclass(frozen=True, slots=True, kw_only=True)
class PodStopped(Event):
    """The pod was stopped because its workload was evicted, cancelled or its node removed:
    sent SIGTERM, then SIGKILL ``grace_seconds`` later if it still runs (Kubernetes'
    terminationGracePeriodSeconds; ``muster.runtime.graceful``), so a trainer can
    checkpoint."""

    node: str
    workload_id: str
    attempt: int
    pod: str
    reason: str
    grace_seconds: float = 30.0
