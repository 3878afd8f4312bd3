"""Node streams (``node-<name>``): inventory and pod lifecycle. Written by node-agent."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from muster.core.events.base import Event, event_class


def stream(node: str) -> str:
    return f"node-{node}"


@event_class("node.registered")
@dataclass(frozen=True, slots=True, kw_only=True)
class NodeRegistered(Event):
    node: str
    allocatable: Mapping[str, int]
    labels: Mapping[str, str] = field(default_factory=dict)
    agent: str = ""


@event_class("node.removed")
@dataclass(frozen=True, slots=True, kw_only=True)
class NodeRemoved(Event):
    node: str
    reason: str


@event_class("node.pod_started")
@dataclass(frozen=True, slots=True, kw_only=True)
class PodStarted(Event):
    node: str
    workload_id: str
    attempt: int
    pod: str
    finishes_at: float


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
    """The pod was killed because its workload was evicted, cancelled or its node removed."""

    node: str
    workload_id: str
    attempt: int
    pod: str
    reason: str
