"""Shared by the core tests: workload documents as harness submissions (id = name)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import msgspec

from muster.core.decider import Decider
from muster.core.events import Envelope, Event
from muster.core.events import node as nev
from muster.core.events import provisioning as pev
from muster.core.model import parse
from muster.core.model.inventory import NodeInventory
from muster.core.sim.harness import Harness, Submission, build
from muster.core.verify import verify_decisions


def submissions(workloads: Iterable[tuple[float, dict[str, Any]]]) -> list[Submission]:
    return [(float(at), doc["name"], parse.workload(doc)) for at, doc in workloads]


GPU = "nvidia.com/gpu"


def event_as(env: Envelope, cls: type[Event]) -> Event | None:
    """``env``'s event, looked at as a ``cls``: for NodesCreating and ProvisioningAccepted,
    also those a Provisioned stands for (accepted, nodes Ready at once: ``stands_for``)."""
    if cls is pev.NodesCreating:
        return pev.node_creation(env.event, env.occurred_at)
    if cls is pev.ProvisioningAccepted:
        return pev.acceptance(env.event)
    return env.event


def creations_apart(log: Iterable[Envelope]) -> list[Envelope]:
    """The log as the provisioner and node agent wrote it before a Provisioned stood for the
    acceptance and node creation of the same decision (``stands_for``) and registered the
    nodes it created Ready: those events of the same instant and stream first, then
    Provisioned alone; after the provisioner's batch, the node agent's ``node.registered``
    of each of those nodes (caused by the batch's last event; positions renumbered, the
    nodes' stream versions moved up). Checkers of acceptances, node creations and
    registrations read this."""
    out: list[Envelope] = []
    moved: dict[str, int] = {}  # node stream -> registrations put before its events
    pending: list[tuple[Envelope, nev.NodeRegistered]] = []  # after the batch
    for env in log:
        if pending and (env.producer, env.causation_id) != (
            pending[0][0].producer,
            pending[0][0].causation_id,
        ):
            out += _registrations(pending, out[-1].event_id, moved)
            pending = []
        ev = env.event
        if env.stream_id in moved:
            env = msgspec.structs.replace(
                env, stream_version=env.stream_version + moved[env.stream_id]
            )
        if not isinstance(ev, pev.ProvisioningProvisioned):
            out.append(env)
            continue
        for i, before in enumerate(ev.stands_for(env.occurred_at)):
            out.append(
                msgspec.structs.replace(
                    env, event=before, type=before.TYPE, event_id=f"{env.event_id}-{i}"
                )
            )
        out.append(msgspec.structs.replace(env, event=ev.alone()))
        for node in ev.nodes if ev.created else ():
            inv = NodeInventory(name=node.name, allocatable=node.allocatable, labels=node.labels)
            pending.append((env, nev.NodeRegistered.of(inv, "node-agent", ev.request_id)))
    if pending:
        out += _registrations(pending, out[-1].event_id, moved)
    return [msgspec.structs.replace(e, position=i + 1) for i, e in enumerate(out)]


def _registrations(
    pending: list[tuple[Envelope, nev.NodeRegistered]], cause: str, moved: dict[str, int]
) -> list[Envelope]:
    out = []
    for env, registered in pending:
        stream = nev.stream(registered.node)
        moved[stream] = moved.get(stream, 0) + 1
        out.append(_agents(env, registered, "registered", moved[stream], cause))
    return out


def removals_apart(log: Iterable[Envelope]) -> list[Envelope]:
    """The log as the node agent wrote it before a deletion removed the deleted nodes that
    had no pod (``gone``): after the batch holding each NodesDeleted, the node agent's
    ``node.removed`` of each such node, in node order (caused by the batch's last event, at
    its time; positions renumbered). A node the log names again after its deletion (a pod
    of it) is not one of them."""
    envs = list(log)
    later: dict[str, int] = {}  # node stream -> index of its last event
    for i, env in enumerate(envs):
        later[env.stream_id] = i
    out: list[Envelope] = []
    pending: list[tuple[Envelope, str, str]] = []  # (deletion, node, reason) after the batch
    versions: dict[str, int] = {}  # stream -> its last version so far
    now = 0.0  # the node agent's clock: the latest time folded
    for i, env in enumerate(envs):
        if pending and (env.producer, env.causation_id) != (
            pending[0][0].producer,
            pending[0][0].causation_id,
        ):
            out += _removals(pending, out[-1].event_id, now, versions)
            pending = []
        out.append(env)
        versions[env.stream_id] = env.stream_version
        now = max(now, env.occurred_at)
        if isinstance(env.event, pev.NodesDeleted):
            pending += [
                (env, n, env.event.reason)
                for n in env.event.nodes
                if later.get(nev.stream(n), -1) < i  # no event of the node after it
            ]
    if pending:
        out += _removals(pending, out[-1].event_id, now, versions)
    return [msgspec.structs.replace(e, position=i + 1) for i, e in enumerate(out)]


def _removals(
    pending: list[tuple[Envelope, str, str]], cause: str, now: float, versions: dict[str, int]
) -> list[Envelope]:
    out = []
    for deletion, node, reason in sorted(pending, key=lambda p: p[1]):
        removed = nev.NodeRemoved(node=node, reason=reason)
        stream = nev.stream(node)
        versions[stream] = versions.get(stream, 0) + 1
        out.append(
            _agents(
                deletion,
                removed,
                "removed",
                versions[stream],
                cause,
                correlation_id=None,
                occurred_at=now,
            )
        )
    return out


def _agents(
    template: Envelope,
    event: nev.NodeRegistered | nev.NodeRemoved,
    what: str,
    version: int,
    cause: str,
    **more: Any,
) -> Envelope:
    """``event`` as the node agent logged it, on its node's stream, in ``template``'s place."""
    return msgspec.structs.replace(
        template,
        event=event,
        type=event.TYPE,
        schema_version=event.VERSION,
        event_id=f"{template.event_id}-{what}-{event.node}",
        stream_id=nev.stream(event.node),
        stream_version=version,
        causation_id=cause,
        producer="node-agent",
        **more,
    )


def gpu_node_cluster(
    name: str,
    *,
    nodes: int,
    gpus: int,
    nominal: int,
    namespaces: Iterable[str] = ("team",),
    **queue: Any,
) -> dict[str, Any]:
    """A cluster document: ``nodes`` existing nodes of ``gpus`` GPUs, one flavor, one
    ClusterQueue ``cq`` of ``nominal`` GPUs (``queue``: more of its fields) and a LocalQueue
    ``q`` in each namespace."""
    return {
        "name": name,
        "zones": ["z"],
        "resourceFlavors": [{"name": "gpu"}],
        "nodes": [{"name": "n", "count": nodes, "allocatable": {GPU: gpus}}],
        "clusterQueues": [
            {
                "name": "cq",
                "resourceGroups": [
                    {
                        "coveredResources": [GPU],
                        "flavors": [
                            {"name": "gpu", "resources": [{"name": GPU, "nominalQuota": nominal}]}
                        ],
                    }
                ],
                **queue,
            }
        ],
        "localQueues": [{"namespace": ns, "name": "q", "clusterQueue": "cq"} for ns in namespaces],
    }


def gpu_job(
    name: str,
    at: float,
    pods: int,
    gpus: int,
    seconds: float,
    *,
    namespace: str = "team",
    priority: int = 0,
    **pod_set: Any,
) -> Submission:
    """A submission of one pod set ``w`` of ``pods`` pods of ``gpus`` GPUs, to LocalQueue ``q``."""
    doc = {
        "name": name,
        "namespace": namespace,
        "queueName": "q",
        "priority": priority,
        "podSets": [{"name": "w", "count": pods, "requests": {GPU: gpus}, **pod_set}],
        "runtime": {"durationSeconds": seconds},
    }
    return (float(at), name, parse.workload(doc))


def envelope(event: Event, position: int, at: float = 0.0, stream: str = "test-1") -> Envelope:
    """One event as the store would hand it over, at ``position`` (a fold's input)."""
    return Envelope(
        position=position,
        event_id=f"e{position}",
        stream_id=stream,
        stream_version=position,
        type=event.TYPE,
        schema_version=event.VERSION,
        occurred_at=at,
        recorded_at=at,
        causation_id=None,
        correlation_id=None,
        producer="test",
        event=event,
    )


def run_verified(cluster: dict[str, Any], jobs: Iterable[Submission]) -> Harness:
    """The harness run to its end over ``cluster``; every decision re-derived from the log."""
    h = build(parse.cluster(cluster), list(jobs))
    h.run()
    for runner in h.runners:
        decider: Decider[Any] = runner.decider
        _, mismatches = verify_decisions(h.log.envelopes, decider)
        assert mismatches == [], mismatches[:1]
    return h
