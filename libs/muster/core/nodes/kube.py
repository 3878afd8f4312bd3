"""The node agent's Kubernetes backend: what a cluster's pods say, as node events (pure).

With ``MUSTER_NODE_AGENT_BACKEND=kubernetes`` the node agent's decider starts and ends no pod
(``NodeAgentDecider(simulated=False)``); the shell (``services/node_agent/kube.py``) watches the
cluster's pods and appends, for each pod the folded :class:`NodeAgentState` expects on a node of
this agent, what the pod reports: ``node.pod_started``, then ``node.pod_succeeded`` or
``node.pod_failed``. Everything it appends is decided here, from the state and plain snapshots
of the observed pods (:class:`ObservedPod`), so it is a function of the facts observed. Like the
provisioner's Kubernetes events they are appended without a causation id: they record facts,
not decisions ``muster replay --decisions`` could re-derive from the log.

The contract with whatever creates the pods (the batch platform or job integration):

* every pod of a workload carries the labels ``muster.dev/workload-id: <workload id>``,
  ``muster.dev/attempt: "<attempt>"`` (of the admission that placed it) and
  ``muster.dev/pod: <muster's pod name>`` (``<pod set>-<index>``, e.g. ``main-0``);
* it is bound to the node muster placed it on (``spec.nodeName``); a pod on another node is
  not reported;
* a failed pod that muster replaces (``admission.pod_replaced``, Job ``backoffLimit``) is
  replaced by a new pod with the same labels on the same node. Runs are told apart by creation
  order: the first pod created for (workload, attempt, pod) on the node is run 0, the next run 1,
  and so on, which holds while the failed pods are kept (the Job controller keeps them until the
  Job goes). Where they are deleted sooner, label each pod ``muster.dev/run: "<run>"``: when any
  pod of the key carries it, only the label counts;
* each pod carries what the admission checks of its attempt ask of its pod set (Kueue's
  ``podSetUpdates``, shown by ``GET /v1/workloads/{id}`` as ``admissionChecks[].podSetUpdates``:
  labels, annotations, node selector). A Ready ProvisioningRequest check asks for the
  annotations ``autoscaling.x-k8s.io/consume-provisioning-request: <request name>`` and
  ``autoscaling.x-k8s.io/provisioning-class-name: <class>``, which let the pods use the nodes
  booked for ``<workload name>-<check>-<attempt>``.

The mapping, each event at most once (the state is the memory: a started pod has
``finishes_at`` set, an ended pod is gone from ``state.pods``):

* started: phase ``Running``, or a container running or terminated, or phase ``Succeeded``.
  ``finishes_at`` is not a prediction on a cluster: it is the time the pod started (its first
  container's ``startedAt``, else ``status.startTime``, else the time of observation);
* succeeded: phase ``Succeeded``;
* failed: phase ``Failed``, or the pod was deleted before it ended (reason ``Deleted``). The exit
  code and reason are the first terminated container's with a non-zero exit code (else the first
  terminated container's); the pod's own ``status.reason`` (``Evicted``, ``DeadlineExceeded``,
  ...) replaces the container's reason. With no terminated container the exit code is 137, what
  the kubelet records for a container it could not account for (``ContainerStatusUnknown``).

A pod seen only once it has ended gets both events at once (started only if it ran).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from muster.core.events import Event
from muster.core.events import node as nev
from muster.core.nodes.state import NodeAgentState, Pod, mine

WORKLOAD_LABEL = "muster.dev/workload-id"
ATTEMPT_LABEL = "muster.dev/attempt"
POD_LABEL = "muster.dev/pod"
RUN_LABEL = "muster.dev/run"  # optional
# The label selector of the pods the backend lists and watches (every namespace).
SELECTOR = WORKLOAD_LABEL

RUNNING, SUCCEEDED, FAILED, PENDING = "Running", "Succeeded", "Failed", "Pending"
DELETED_REASON = "Deleted"
UNKNOWN_EXIT_CODE = 137  # the kubelet's ContainerStatusUnknown

PodKey = tuple[str, int, str]  # (workload id, attempt, pod name), as state.pods keys them


@dataclass(frozen=True, slots=True, kw_only=True)
class ObservedPod:
    """A Kubernetes pod of a muster workload, as last seen."""

    uid: str
    namespace: str
    name: str
    node: str  # spec.nodeName ("" until bound)
    workload_id: str
    attempt: int
    pod: str  # muster's pod name
    run: int | None = None  # the muster.dev/run label, when set
    created: str = ""  # metadata.creationTimestamp (RFC 3339, sorts as text)
    phase: str = PENDING
    reason: str = ""  # status.reason: Evicted, DeadlineExceeded, ...
    ran: bool = False  # a container started (or the pod is Running or Succeeded)
    started_at: float | None = None  # seconds since the epoch, when known
    exit_code: int | None = None  # of the terminated container that speaks for the pod
    exit_reason: str = ""  # its reason (Error, OOMKilled, Completed, ...)
    deleted: bool = False  # gone from the API server; this is its last state

    @property
    def key(self) -> PodKey:
        return (self.workload_id, self.attempt, self.pod)

    @property
    def ended(self) -> bool:
        return self.phase in (SUCCEEDED, FAILED) or self.deleted


# --------------------------------------------------------------------------- observing


def observe_pod(obj: Mapping[str, Any], *, deleted: bool = False) -> ObservedPod | None:
    """A Pod object (JSON), or None if it is not a muster workload's pod (a label is missing or
    the attempt or run is not a number)."""
    meta = obj.get("metadata") or {}
    labels = meta.get("labels") or {}
    workload, attempt, pod = (labels.get(k) for k in (WORKLOAD_LABEL, ATTEMPT_LABEL, POD_LABEL))
    if not (isinstance(workload, str) and workload and isinstance(pod, str) and pod):
        return None
    attempt_n, run = _count(attempt), _count(labels.get(RUN_LABEL))
    if attempt_n is None or (RUN_LABEL in labels and run is None):
        return None
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    phase = str(status.get("phase") or PENDING)
    containers = _dicts(status.get("containerStatuses"))
    init_containers = _dicts(status.get("initContainerStatuses"))
    starts = [
        t
        for c in containers
        for state in ("running", "terminated")
        if (t := _epoch(((c.get("state") or {}).get(state) or {}).get("startedAt"))) is not None
    ]
    ran = (
        phase in (RUNNING, SUCCEEDED)
        or any(c.get("started") is True for c in containers)
        or any(
            (c.get("state") or {}).get(s) is not None
            for c in containers
            for s in ("running", "terminated")
        )
    )
    exit_code, exit_reason = _exit(containers, init_containers)
    return ObservedPod(
        uid=str(meta.get("uid") or ""),
        namespace=str(meta.get("namespace") or ""),
        name=str(meta.get("name") or ""),
        node=str(spec.get("nodeName") or ""),
        workload_id=workload,
        attempt=attempt_n,
        pod=pod,
        run=run,
        created=str(meta.get("creationTimestamp") or ""),
        phase=phase,
        reason=str(status.get("reason") or ""),
        ran=ran,
        started_at=min(starts) if starts else _epoch(status.get("startTime")),
        exit_code=exit_code,
        exit_reason=exit_reason,
        deleted=deleted,
    )


def _count(raw: object) -> int | None:
    return int(raw) if isinstance(raw, str) and raw.isascii() and raw.isdigit() else None


def _dicts(raw: object) -> list[dict[str, Any]]:
    return [c for c in raw if isinstance(c, dict)] if isinstance(raw, list) else []


def _epoch(raw: object) -> float | None:
    """An RFC 3339 time as seconds since the epoch (UTC when it names no zone), or None."""
    if not isinstance(raw, str) or not raw:
        return None
    try:
        at = datetime.fromisoformat(raw.replace("Z", "+00:00"))
    except ValueError:
        return None
    return (at if at.tzinfo is not None else at.replace(tzinfo=UTC)).timestamp()


def _exit(
    containers: Sequence[Mapping[str, Any]], init_containers: Sequence[Mapping[str, Any]]
) -> tuple[int | None, str]:
    """The first terminated container with a non-zero exit code (regular containers first),
    else the first terminated one: (exit code, reason); (None, "") when none terminated."""
    ended: list[tuple[int | None, str]] = []
    for c in (*containers, *init_containers):
        term = (c.get("state") or {}).get("terminated")
        if isinstance(term, dict) and isinstance(term.get("exitCode"), int):
            ended.append((int(term["exitCode"]), str(term.get("reason") or "")))
    failed = [e for e in ended if e[0] != 0]
    return (failed or ended or [(None, "")])[0]


# --------------------------------------------------------------------------- deciding


def plan_events(
    state: NodeAgentState, observed: Iterable[ObservedPod], now: float
) -> list[tuple[str, Event]]:
    """(node, event) to append, in order: for each pod the state expects (and is not stopping),
    what its run's Kubernetes pod reports that the state has not recorded yet. ``now``: the
    time of observation (a start time when the pod gives none)."""
    by_key: dict[PodKey, list[ObservedPod]] = {}
    for seen in observed:
        expected = state.pods.get(seen.key)
        if expected is not None and seen.node == expected.node and mine(seen.node, state):
            by_key.setdefault(seen.key, []).append(seen)
    out: list[tuple[str, Event]] = []
    for key in sorted(by_key):
        if key in state.stopping:
            continue  # the decider stops it (its workload or node went away)
        expected = state.pods[key]
        out += [(expected.node, ev) for ev in events_for(expected, by_key[key], now)]
    return out


def run_of(expected: Pod, objects: Sequence[ObservedPod]) -> ObservedPod | None:
    """The Kubernetes pod of the expected pod's run among those of its key on its node."""
    if any(o.run is not None for o in objects):
        labelled = sorted((o for o in objects if o.run == expected.run), key=_age)
        return labelled[0] if labelled else None
    ordered = sorted(objects, key=_age)
    return ordered[expected.run] if expected.run < len(ordered) else None


def _age(o: ObservedPod) -> tuple[str, float, str, str]:
    """Creation order. Creation times have whole seconds: a pod that started (or has a name
    sorting first) goes first among those created in the same second."""
    started = o.started_at if o.started_at is not None else float("inf")
    return (o.created, started, o.name, o.uid)


def events_for(expected: Pod, objects: Sequence[ObservedPod], now: float) -> list[Event]:
    """What the state does not know yet about the expected pod's run, in order."""
    seen = run_of(expected, objects)
    if seen is None:
        return []
    out: list[Event] = []
    if expected.finishes_at is None and seen.ran:
        out.append(
            nev.PodStarted(
                node=expected.node,
                workload_id=expected.workload_id,
                attempt=expected.attempt,
                pod=expected.name,
                finishes_at=seen.started_at if seen.started_at is not None else now,
                run=expected.run,
            )
        )
    if seen.ended:
        out.append(_end(expected, seen))
    return out


def _end(expected: Pod, seen: ObservedPod) -> Event:
    if seen.phase == SUCCEEDED:
        return nev.PodSucceeded(
            node=expected.node,
            workload_id=expected.workload_id,
            attempt=expected.attempt,
            pod=expected.name,
        )
    if seen.reason:  # the pod's own: Evicted, DeadlineExceeded, ...
        reason = seen.reason
    elif seen.phase != FAILED:  # deleted before it ended
        reason = DELETED_REASON
    else:
        reason = seen.exit_reason or "Error"
    return nev.PodFailed(
        node=expected.node,
        workload_id=expected.workload_id,
        attempt=expected.attempt,
        pod=expected.name,
        exit_code=seen.exit_code if seen.exit_code is not None else UNKNOWN_EXIT_CODE,
        reason=reason,
    )
