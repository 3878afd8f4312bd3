"""The Kubernetes backend's decisions, as pure functions of (folded state, observed objects).

With ``MUSTER_PROVISIONER_BACKEND=kubernetes`` a real cluster's autoscaler is the cloud: the
provisioner creates a ``ProvisioningRequest`` (``autoscaling.x-k8s.io/v1``) and its PodTemplates
for each request the state wants, and turns what the autoscaler writes on it (``status.
conditions``) and the Nodes it brings up into the provisioning events the simulated cloud would
have appended. The shell (``services/provisioner/kube.py``) does the I/O; everything it decides
is decided here, from the folded :class:`ProvisionerState` and plain snapshots of the observed
objects, so what it appends is a function of the facts it observed.

The events carry those facts (the conditions' reasons and messages, the nodes), never a
decision that could come out differently on replay. They are appended without a causation id,
so ``muster replay --decisions`` does not try to re-derive them from the log alone.

Conventions:

* Objects muster creates carry the label ``muster.dev/managed: "true"`` and the annotation
  ``muster.dev/request-id: <request id>``; an object of the same name without that annotation
  is someone else's and is never adopted.
* A queued workload's request ``<workload>.<attempt>`` is named like Kueue's,
  ``<workload-name>-<check>-<attempt>`` (DNS-1123, cut to 253 characters with a hash) in the
  workload's namespace, its PodTemplates ``ppt-<request name>-<pod set>``. A workload whose
  ClusterQueue has no provisioning check (muster makes its nodes anyway) uses
  ``KubeOptions.check`` as the check's name.
* A standalone request ``<namespace>/<name>`` is created under that name; its PodTemplates are
  the user's (named after its pod sets), created only if absent and never deleted.
* Nodes belong to a request when they carry the label ``KubeOptions.node_label`` (default
  ``muster.dev/provisioning-request``) whose value is the ProvisioningRequest's name. This is a
  convention for clusters whose node startup copies it (e.g. from the node pool's labels or a
  startup script); GKE documents no such label. Without it, Provisioned carries no nodes.
"""

from __future__ import annotations

from collections.abc import Container, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from muster.core.events import Event
from muster.core.events import provisioning as pev
from muster.core.model import resources
from muster.core.model.queues import DWS_CLASS
from muster.core.model.workload import PodSet, Toleration
from muster.core.provisioning import plan
from muster.core.provisioning.decider import max_run_seconds, unplannable
from muster.core.provisioning.names import pod_template_name, request_name
from muster.core.provisioning.state import ProvisionerState, Request, Wanted

JsonObj = dict[str, Any]

GROUP = "autoscaling.x-k8s.io"
VERSION = "v1"
PLURAL = "provisioningrequests"
KIND = "ProvisioningRequest"
API_VERSION = f"{GROUP}/{VERSION}"

REQUEST_ID_ANNOTATION = "muster.dev/request-id"
MANAGED_LABEL = "muster.dev/managed"
MANAGED_SELECTOR = f"{MANAGED_LABEL}=true"
DEFAULT_NODE_LABEL = "muster.dev/provisioning-request"
DEFAULT_CLASS = "best-effort-atomic-scale-up.autoscaling.x-k8s.io"
DEFAULT_NAMESPACE = "default"
DEFAULT_CHECK = "provisioning"
POOL_LABEL = "cloud.google.com/gke-nodepool"
INSTANCE_TYPE_LABEL = "node.kubernetes.io/instance-type"
ZONE_LABEL = plan.ZONE_LABEL
# PodTemplates only describe pods to the autoscaler's scheduling simulation: no pod runs this.
TEMPLATE_IMAGE = "registry.k8s.io/pause:3.10"
# Resources a container may request without a limit; any other (GPUs, hugepages, ...) must
# have its limit equal to its request (the API server refuses the template otherwise).
OVERCOMMITTABLE = frozenset({"cpu", "memory", "ephemeral-storage"})

# The autoscaler's condition types (autoscaling.x-k8s.io/v1).
ACCEPTED = "Accepted"
PROVISIONED = "Provisioned"
FAILED = "Failed"
BOOKING_EXPIRED = "BookingExpired"
CAPACITY_REVOKED = "CapacityRevoked"

TERMINAL = frozenset({"Failed", "Cancelled", "Deleted"})


@dataclass(frozen=True, slots=True, kw_only=True)
class KubeOptions:
    """What the backend is configured with (from ``Settings``)."""

    default_class: str = DEFAULT_CLASS
    node_label: str = DEFAULT_NODE_LABEL
    booking_seconds: float = 600.0
    namespace: str = DEFAULT_NAMESPACE  # of a request whose workload the log does not name
    check: str = DEFAULT_CHECK  # the check name in a queued workload's request name


# --------------------------------------------------------------------------- names


def object_ref(
    request_id: str, options: KubeOptions, wanted: Wanted | None = None
) -> tuple[str, str]:
    """``(namespace, name)`` of the ProvisioningRequest that stands for ``request_id``: a
    queued workload's is ``<workload name>-<check>-<attempt>`` in the workload's namespace,
    as Kueue names it (the workload id, ``KubeOptions.check`` and ``KubeOptions.namespace``
    stand in for what a request of an older log does not say)."""
    if "/" in request_id:
        namespace, _, name = request_id.partition("/")
        return namespace, name
    parts = pev.split_request_id(request_id)
    workload, attempt = parts if parts is not None else (request_id, 0)
    if wanted is not None:
        workload = wanted.name or workload
        namespace = wanted.namespace or options.namespace
        return namespace, request_name(workload, wanted.check or options.check, attempt)
    return options.namespace, request_name(workload, options.check, attempt)


# --------------------------------------------------------------------------- desired objects


@dataclass(frozen=True, slots=True, kw_only=True)
class DesiredRequest:
    """The objects to create for one request: PodTemplates first, then the request."""

    request_id: str
    namespace: str
    name: str
    standalone: bool  # its PodTemplates are the user's: create if absent, never delete
    templates: tuple[JsonObj, ...]
    request: JsonObj


def _metadata(name: str, namespace: str, request_id: str) -> JsonObj:
    return {
        "name": name,
        "namespace": namespace,
        "labels": {MANAGED_LABEL: "true"},
        "annotations": {REQUEST_ID_ANNOTATION: request_id},
    }


def _toleration(t: Toleration) -> JsonObj:
    out: JsonObj = {"operator": t.operator}
    if t.key:
        out["key"] = t.key
    if t.value and t.operator != "Exists":
        out["value"] = t.value
    if t.effect:
        out["effect"] = t.effect
    return out


def pod_spec(
    ps: PodSet, node_selector: Mapping[str, str], injected: Sequence[Toleration] = ()
) -> JsonObj:
    """A pod of ``ps`` as the autoscaler simulates it: its requests (as quantities), node
    selector and tolerations (its own, then those its flavors inject)."""
    requests = {
        r: resources.format_quantity(r, q)
        for r, q in sorted(ps.requests.items())
        if r != "pods" and q > 0
    }
    limits = {r: q for r, q in requests.items() if r not in OVERCOMMITTABLE}
    container: JsonObj = {"name": "main", "image": TEMPLATE_IMAGE, "resources": {}}
    if requests:
        container["resources"]["requests"] = requests
    if limits:
        container["resources"]["limits"] = limits
    spec: JsonObj = {"containers": [container]}
    if node_selector:
        spec["nodeSelector"] = dict(sorted(node_selector.items()))
    tolerations = [_toleration(t) for t in (*ps.tolerations, *injected)]
    if tolerations:
        spec["tolerations"] = tolerations
    return spec


def desired_objects(
    state: ProvisionerState, request_id: str, options: KubeOptions
) -> DesiredRequest:
    """The PodTemplates and ProvisioningRequest for a wanted request.

    GKE's queued provisioning takes one podSet per request: several pod sets that
    ``plan.one_pod_set`` accepts become one (counts summed, the first one's template);
    ``plan.Unplannable`` otherwise, or when there is no pod set at all."""
    wanted = state.wanted[request_id]
    namespace, name = object_ref(request_id, options, wanted)
    standalone = not wanted.workload_id
    if not wanted.pod_sets:
        raise plan.Unplannable(f"request {request_id} has no pod set to provision")
    plan.one_pod_set(
        wanted.provisioning_class,
        wanted.merge_policy,
        wanted.pod_sets,
        wanted.node_selectors,
        wanted.tolerations,
    )
    counts = [(ps, wanted.pod_counts.get(ps.name, ps.count)) for ps in wanted.pod_sets]
    if wanted.provisioning_class == DWS_CLASS and len(counts) > 1:
        counts = [(counts[0][0], sum(n for _, n in counts))]
    templates: list[JsonObj] = []
    pod_sets: list[JsonObj] = []
    for ps, count in counts:
        template = ps.name if standalone else pod_template_name(name, ps.name)
        spec = pod_spec(
            ps,
            wanted.node_selectors.get(ps.name, ps.node_selector),
            wanted.tolerations.get(ps.name, ()),
        )
        templates.append(
            {
                "apiVersion": "v1",
                "kind": "PodTemplate",
                "metadata": _metadata(template, namespace, request_id),
                "template": {"spec": spec},
            }
        )
        pod_sets.append({"count": count, "podTemplateRef": {"name": template}})
    spec_out: JsonObj = {
        "provisioningClassName": wanted.provisioning_class or options.default_class,
        "podSets": pod_sets,
    }
    if wanted.parameters:
        spec_out["parameters"] = {k: str(v) for k, v in sorted(wanted.parameters.items())}
    return DesiredRequest(
        request_id=request_id,
        namespace=namespace,
        name=name,
        standalone=standalone,
        templates=tuple(templates),
        request={
            "apiVersion": API_VERSION,
            "kind": KIND,
            "metadata": _metadata(name, namespace, request_id),
            "spec": spec_out,
        },
    )


def is_ours(obj: Mapping[str, Any], request_id: str) -> bool:
    """Whether an existing object was created by muster for ``request_id``."""
    meta = obj.get("metadata") or {}
    return bool((meta.get("annotations") or {}).get(REQUEST_ID_ANNOTATION) == request_id)


# --------------------------------------------------------------------------- observed objects


@dataclass(frozen=True, slots=True, kw_only=True)
class Condition:
    type: str
    status: str  # True | False | Unknown
    reason: str = ""
    message: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class ObservedRequest:
    """A ProvisioningRequest muster created, as last seen."""

    request_id: str
    namespace: str
    name: str
    uid: str = ""
    templates: tuple[str, ...] = ()  # its podTemplateRef names
    conditions: tuple[Condition, ...] = ()

    def condition(self, type_: str) -> Condition | None:
        return next((c for c in self.conditions if c.type == type_), None)

    def is_true(self, type_: str) -> bool:
        c = self.condition(type_)
        return c is not None and c.status == "True"


def observe_request(obj: Mapping[str, Any]) -> ObservedRequest | None:
    """A ProvisioningRequest object (JSON), or None if muster did not create it."""
    meta = obj.get("metadata") or {}
    rid = (meta.get("annotations") or {}).get(REQUEST_ID_ANNOTATION)
    if not isinstance(rid, str) or not rid:
        return None
    spec = obj.get("spec") or {}
    templates = tuple(
        str((ps.get("podTemplateRef") or {}).get("name", ""))
        for ps in spec.get("podSets") or ()
        if isinstance(ps, dict)
    )
    status = obj.get("status") or {}
    conditions = tuple(
        Condition(
            type=str(c.get("type", "")),
            status=str(c.get("status", "")),
            reason=str(c.get("reason") or ""),
            message=str(c.get("message") or ""),
        )
        for c in status.get("conditions") or ()
        if isinstance(c, dict)
    )
    return ObservedRequest(
        request_id=rid,
        namespace=str(meta.get("namespace") or ""),
        name=str(meta.get("name") or ""),
        uid=str(meta.get("uid") or ""),
        templates=templates,
        conditions=conditions,
    )


def observe_node(obj: Mapping[str, Any]) -> pev.NodeSpec:
    """A Node object (JSON) as the state records nodes: pool, zone and machine type from the
    well-known labels ("" when absent), allocatable in muster's integer units (resources whose
    quantity does not parse are left out)."""
    meta = obj.get("metadata") or {}
    labels = {str(k): str(v) for k, v in (meta.get("labels") or {}).items()}
    allocatable: dict[str, int] = {}
    for resource, raw in ((obj.get("status") or {}).get("allocatable") or {}).items():
        try:
            allocatable[str(resource)] = resources.parse_quantity(str(resource), raw)
        except resources.QuantityError:
            continue
    return pev.NodeSpec(
        name=str(meta.get("name") or ""),
        pool=labels.get(POOL_LABEL, ""),
        zone=labels.get(ZONE_LABEL, ""),
        machine_type=labels.get(INSTANCE_TYPE_LABEL, ""),
        allocatable=dict(sorted(allocatable.items())),
        labels=dict(sorted(labels.items())),
    )


def nodes_by_request(
    nodes: Iterable[Mapping[str, Any]], node_label: str
) -> dict[str, tuple[pev.NodeSpec, ...]]:
    """ProvisioningRequest name -> the nodes labelled ``node_label=<name>``, by node name."""
    out: dict[str, list[pev.NodeSpec]] = {}
    for obj in nodes:
        labels = (obj.get("metadata") or {}).get("labels") or {}
        owner = labels.get(node_label)
        if isinstance(owner, str) and owner:
            out.setdefault(owner, []).append(observe_node(obj))
    return {k: tuple(sorted(v, key=lambda n: n.name)) for k, v in sorted(out.items())}


@dataclass(frozen=True, slots=True, kw_only=True)
class Observed:
    """What the shell observed of the cluster, complete (after the initial lists)."""

    requests: Mapping[str, ObservedRequest] = field(default_factory=dict)  # by request id
    nodes: Mapping[str, tuple[pev.NodeSpec, ...]] = field(default_factory=dict)  # by PR name
    # Request id -> (reason, message): the API server refused to create its objects for good
    # (invalid, or a same-named object that is not ours).
    rejected: Mapping[str, tuple[str, str]] = field(default_factory=dict)
    # Request ids whose ProvisioningRequest someone else deleted while it was being served.
    vanished: frozenset[str] = frozenset()


# --------------------------------------------------------------------------- decisions


@dataclass(frozen=True, slots=True, kw_only=True)
class Actions:
    """One reconcile pass: create, delete, then append (each event on its request's stream)."""

    create: tuple[DesiredRequest, ...] = ()
    delete: tuple[ObservedRequest, ...] = ()
    events: tuple[tuple[str, Event], ...] = ()


def plan_actions(
    state: ProvisionerState,
    observed: Observed,
    options: KubeOptions,
    streams: Container[str] = (),
) -> Actions:
    """Everything one pass does, over every request that can still change. ``streams``: the
    streams folded into ``state`` (the runner's versions), which tell a request that ended
    before it was accepted from one this replica has not heard of yet."""
    rids = (
        set(state.wanted)
        | set(state.open)
        | set(state.held)
        | state.released
        | set(observed.requests)
        | set(observed.vanished)
    )
    create: list[DesiredRequest] = []
    delete: list[ObservedRequest] = []
    events: list[tuple[str, Event]] = []
    for rid in sorted(rids):
        obs = observed.requests.get(rid)
        if obs is not None and should_delete(state, rid, streams):
            delete.append(obs)
            continue
        if obs is None and _should_create(state, rid, observed):
            try:
                create.append(desired_objects(state, rid, options))
            except plan.Unplannable as exc:
                events.append((rid, unplannable(rid, "InvalidRequest", exc)))
            continue
        events += [(rid, ev) for ev in events_for(state, rid, observed, options)]
    return Actions(create=tuple(create), delete=tuple(delete), events=tuple(events))


def streams_asked(state: ProvisionerState, observed: Observed) -> list[str]:
    """The request streams ``should_delete`` asks about: of the requests seen that the
    state holds nothing of."""
    return [
        pev.request_stream(rid)
        for rid in observed.requests
        if rid not in state.requests
        and rid not in state.wanted
        and pev.split_request_id(rid) is not None
    ]


def _should_create(state: ProvisionerState, rid: str, observed: Observed) -> bool:
    return rid in state.wanted and rid not in state.released and rid not in observed.rejected


def should_delete(state: ProvisionerState, rid: str, streams: Container[str] = ()) -> bool:
    """Whether a request's ProvisioningRequest (seen to exist) is to be deleted: its workload
    let go of it, the user deleted it, or (a queued workload's) it ended and serves nothing.
    A request the state does not know yet (a replica ahead of this one created it) stays."""
    if rid in state.released:
        return True
    req = state.requests.get(rid)
    if req is None:
        # Failed or cancelled before it was accepted: only its stream remembers it.
        return (
            rid not in state.wanted
            and pev.split_request_id(rid) is not None
            and pev.request_stream(rid) in streams
        )
    if req.standalone:
        return req.deleted
    return req.status in TERMINAL and rid not in state.wanted


def events_for(
    state: ProvisionerState, rid: str, observed: Observed, options: KubeOptions
) -> list[Event]:
    """The events that bring the state's record of ``rid`` up to what was observed, each once,
    in order. Conditions seen together (or after a restart) produce every missing event."""
    obs = observed.requests.get(rid)
    req = state.requests.get(rid)
    wanted = state.wanted.get(rid)
    if rid in state.released:
        return [] if obs is not None else _released(rid, req)
    if obs is None:
        return _gone(state, rid, req, observed)
    if req is None and wanted is None:
        return []  # not (yet) known to this replica's state
    status = req.status if req is not None else "Pending"
    if status in TERMINAL:
        return []
    out: list[Event] = []
    waiting = req.waiting if req is not None else None
    node_names = tuple(n.name for n in req.nodes) if req is not None else ()
    if status == "Pending":
        assert wanted is not None
        if any(obs.is_true(t) for t in (ACCEPTED, PROVISIONED, BOOKING_EXPIRED, CAPACITY_REVOKED)):
            out.append(_accepted(state, rid, wanted, obs, options))
            status = "Accepted"
        elif obs.is_true(FAILED):
            return [_failed(rid, obs)]
        else:
            return []
    if status in ("Accepted", "Creating"):
        if obs.is_true(PROVISIONED):
            provisioned = _provisioned(rid, obs, observed.nodes.get(obs.name, ()))
            out.append(provisioned)
            node_names = node_names or tuple(n.name for n in provisioned.nodes)
            status = "Provisioned"
        elif obs.is_true(FAILED):
            return [*out, _failed(rid, obs)]
        else:
            cond = obs.condition(PROVISIONED)
            if (
                cond is not None
                and cond.status == "False"
                and cond.reason
                and (cond.reason, cond.message) != waiting
            ):
                out.append(
                    pev.ProvisioningWaiting(
                        request_id=rid, reason=cond.reason, message=cond.message
                    )
                )
            return out
    if status == "Provisioned":
        for type_, make in (
            (BOOKING_EXPIRED, pev.ProvisioningBookingExpired),
            (CAPACITY_REVOKED, pev.ProvisioningCapacityRevoked),
        ):
            cond = obs.condition(type_)
            if cond is not None and cond.status == "True":
                message = cond.message or f"{type_}: {cond.reason}"
                out.append(make(request_id=rid, message=message))
                out.append(
                    pev.NodesDeleted(
                        request_id=rid, nodes=node_names, reason=type_, message=message
                    )
                )
                break
    return out


def _released(rid: str, req: Request | None) -> list[Event]:
    """Its ProvisioningRequest is gone: record how the request ended."""
    if req is not None and req.status == "Provisioned":
        if req.standalone:
            return []  # the autoscaler removes the nodes once unneeded
        return [
            pev.NodesDeleted(
                request_id=rid,
                nodes=tuple(n.name for n in req.nodes),
                reason="Released",
                message=(
                    f"workload {req.workload_id} no longer holds quota: ProvisioningRequest "
                    "deleted, its nodes are removed by the cluster autoscaler"
                ),
            )
        ]
    who = "the request was deleted" if req is None or req.standalone else "quota released"
    return [
        pev.ProvisioningCancelled(
            request_id=rid,
            message=f"{who} before it was provisioned: ProvisioningRequest deleted",
        )
    ]


def _gone(
    state: ProvisionerState, rid: str, req: Request | None, observed: Observed
) -> list[Event]:
    """No ProvisioningRequest for a request the state does not release."""
    if rid in observed.rejected and rid in state.wanted:
        reason, message = observed.rejected[rid]
        return [
            pev.ProvisioningFailed(request_id=rid, reason=reason, message=message, retryable=False)
        ]
    if req is None:
        return []
    if req.status in ("Accepted", "Creating") and rid in observed.vanished:
        return [
            pev.ProvisioningFailed(
                request_id=rid,
                reason="ProvisioningRequestDeleted",
                message="the ProvisioningRequest was deleted outside muster before it was "
                "provisioned",
            )
        ]
    if (
        req.standalone
        and req.deleted
        and req.held
        and req.status == "Provisioned"
        and not req.consumers
        and not {n.name for n in req.nodes} & _node_names(observed)
    ):
        return [
            pev.NodesDeleted(
                request_id=rid,
                nodes=tuple(n.name for n in req.nodes),
                reason="ScaleDown",
                message="the request was deleted and the cluster autoscaler removed its nodes",
            )
        ]
    return []


def _node_names(observed: Observed) -> set[str]:
    return {n.name for nodes in observed.nodes.values() for n in nodes}


def _accepted(
    state: ProvisionerState,
    rid: str,
    wanted: Wanted,
    obs: ObservedRequest,
    options: KubeOptions,
) -> pev.ProvisioningAccepted:
    """The autoscaler's booking window is not observable on the request: it is configured."""
    pod_sets = tuple(_pod_set_nodes(state, wanted, ps) for ps in wanted.pod_sets)
    cond = obs.condition(ACCEPTED)
    message = (
        cond.message
        if cond is not None and cond.status == "True" and cond.message
        else f"ProvisioningRequest {obs.namespace}/{obs.name} accepted"
    )
    return pev.ProvisioningAccepted(
        request_id=rid,
        workload_id=wanted.workload_id,
        attempt=wanted.attempt,
        pod_sets=pod_sets,
        message=message,
        zones=(),
        provisioning_class=wanted.provisioning_class,
        max_run_seconds=max_run_seconds(wanted),
        booking_seconds=options.booking_seconds,
    )


def _pod_set_nodes(state: ProvisionerState, wanted: Wanted, ps: PodSet) -> pev.PodSetNodes:
    """One pod per node unless a described node pool (``CloudConfigured``) says how many fit."""
    pods = wanted.pod_counts.get(ps.name, ps.count)
    if state.cloud is not None:
        try:
            pool = plan.pool_for(
                state.cloud,
                ps,
                wanted.node_selectors.get(ps.name, ps.node_selector),
                wanted.tolerations.get(ps.name, ()),
            )
        except plan.Unplannable:
            pass
        else:
            return pev.PodSetNodes(
                pod_set=ps.name,
                pods=pods,
                pool=pool.name,
                per_node=max(1, plan.pods_per_node(pool, ps.requests)),
            )
    return pev.PodSetNodes(pod_set=ps.name, pods=pods, pool="", per_node=1)


def _provisioned(
    rid: str, obs: ObservedRequest, nodes: tuple[pev.NodeSpec, ...]
) -> pev.ProvisioningProvisioned:
    zones = sorted({n.zone for n in nodes if n.zone})
    zone = zones[0] if zones else ""
    cond = obs.condition(PROVISIONED)
    message = (
        cond.message
        if cond is not None and cond.message
        else f"{len(nodes)} node(s) ready" + (f" in zone {zone}" if zone else "")
    )
    return pev.ProvisioningProvisioned(
        request_id=rid, zone=zone, assignments={}, message=message, nodes=nodes
    )


def _failed(rid: str, obs: ObservedRequest) -> pev.ProvisioningFailed:
    cond = obs.condition(FAILED)
    reason = cond.reason if cond is not None and cond.reason else "Failed"
    message = cond.message if cond is not None else ""
    return pev.ProvisioningFailed(request_id=rid, reason=reason, message=message, retryable=True)
