"""Admission checks: Kueue's two-phase admission, and standalone-request consumers.

A ClusterQueue's admission checks (those whose ``onFlavors`` match the flavors a reservation
was given) each hold a state per attempt: Pending, Ready, Retry or Rejected. The workload is
Admitted once quota is reserved and every check is Ready; Retry evicts it (quota released,
requeued with backoff, a new attempt whose checks start Pending again), Rejected ends it, at
any time, before or after admission (reference: shared/reference/kueue.md §1.8).

muster runs the ProvisioningRequest checks itself: Ready once the request made for the
reservation is Provisioned (its pod sets then carry the consume annotations). An external
check's controller reports its state through the API. What a request reports is mapped as
Kueue maps it (reference: shared/reference/peers.md §4.4, kueue.md §1.9):

- Failed: Retry (quota released, requeued after base * 2^(n-1) s) while retries remain
  (``backoffLimitCount``), then Rejected. A failure that no retry can change (no pool fits,
  over 1000 nodes, several pod sets) is Rejected at once.
- BookingExpired: as Failed before admission; ignored after.
- CapacityRevoked: evicted and deactivated.

A workload consuming a standalone request binds its pods to the request's nodes once the
request is Provisioned, without a queue or quota (what kube-scheduler does on GKE).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from muster.core.events import Event
from muster.core.events import provisioning as pev
from muster.core.events import queue as qev
from muster.core.model.queues import (
    PROVISIONING_CONTROLLER,
    ClusterQueueSpec,
    ProvisioningRequestConfigSpec,
    RetryStrategy,
)
from muster.core.model.workload import WorkloadSpec
from muster.core.queueing.state import QueueState, WorkloadEntry


def inactive(state: QueueState, cq: ClusterQueueSpec) -> tuple[str, str] | None:
    """(reason, message) when a ClusterQueue cannot admit: an admission check it names, or
    that check's ProvisioningRequestConfig, does not exist (Kueue marks it inactive)."""
    for name in cq.admission_checks:
        check = state.admission_checks.get(name)
        if check is None:
            return (
                "ClusterQueueInactive",
                f"ClusterQueue {cq.name} is inactive: AdmissionCheck {name} doesn't exist",
            )
        if check.config is not None and check.config not in state.provisioning_configs:
            return (
                "ClusterQueueInactive",
                f"ClusterQueue {cq.name} is inactive: AdmissionCheck {name} refers to "
                f"ProvisioningRequestConfig {check.config}, which doesn't exist",
            )
    ours = [n for n in cq.admission_checks if not state.admission_checks[n].external]
    if len(ours) > 1:
        return (
            "ClusterQueueInactive",
            f"ClusterQueue {cq.name} is inactive: it lists {len(ours)} ProvisioningRequest "
            f"admission checks ({', '.join(ours)}); muster makes one request per reservation",
        )
    return None


@dataclass(frozen=True, slots=True)
class Reservation:
    """What a reservation's admission checks are: the request to make (if any), the checks
    that start Pending, and those Ready at once (check -> why)."""

    ask: qev.ProvisioningAsk | None = None
    pending: tuple[str, ...] = ()
    ready: Mapping[str, str] = field(default_factory=dict)


NOT_NEEDED = "the provisioning request is not needed"


def for_reservation(
    state: QueueState,
    cq: ClusterQueueSpec,
    spec: WorkloadSpec,
    flavors: Mapping[str, Mapping[str, str]],
    placed: bool,
) -> Reservation:
    """The checks of a reservation in ``cq`` with ``flavors`` (pod set -> resource ->
    flavor); ``placed``: on existing nodes, so no request is made."""
    assigned = {f for per_pod_set in flavors.values() for f in per_pod_set.values()}
    ask: qev.ProvisioningAsk | None = None
    pending: list[str] = []
    ready: dict[str, str] = {}
    for name in cq.admission_checks:
        on = cq.check_flavors.get(name, ())
        if on and not assigned & set(on):
            continue  # Kueue: runs only for workloads assigned one of its flavors
        check = state.admission_checks.get(name)
        if check is not None and check.external:
            pending.append(name)
            continue
        made = None if placed else ask_for(state, name, spec)
        if made is None:
            ready[name] = "placed on existing nodes: " + NOT_NEEDED if placed else NOT_NEEDED
            continue
        ask = made
        pending.append(name)
    return Reservation(ask, tuple(pending), ready)


def ask_for(state: QueueState, name: str, spec: WorkloadSpec) -> qev.ProvisioningAsk | None:
    """The provisioning request check ``name`` asks for, or None when it manages no
    resource the workload requests ("the request is not needed")."""
    config = _config(state, name)
    if config is not None:
        requested = {r for ps in spec.pod_sets for r, q in ps.requests.items() if q > 0}
        if config.managed_resources and not requested & set(config.managed_resources):
            return None
        parameters = dict(config.parameters)
        if spec.max_run_duration_seconds is not None:
            # The job annotation provreq.kueue.x-k8s.io/maxRunDurationSeconds overrides.
            parameters["maxRunDurationSeconds"] = str(spec.max_run_duration_seconds)
        return qev.ProvisioningAsk(
            check=name,
            provisioning_class=config.provisioning_class,
            parameters=parameters,
            pod_set_merge_policy=config.pod_set_merge_policy,
        )
    return None


def _config(state: QueueState, check_name: str) -> ProvisioningRequestConfigSpec | None:
    """The ProvisioningRequestConfig of a provisioning admission check, if both exist."""
    check = state.admission_checks.get(check_name)
    if check is None or check.controller_name != PROVISIONING_CONTROLLER:
        return None
    return state.provisioning_configs.get(check.config or "")


def outcome(state: QueueState, wl: WorkloadEntry) -> Event | None:
    """What ends the attempt of a workload holding quota: what its request reported, or an
    external check's Retry or Rejected."""
    if not wl.holds_quota:
        return None
    if wl.run.check_event is None:
        return _external(state, wl)
    condition, reason, message, retryable = wl.run.check_event
    what = f"ProvisioningRequest {wl.run.request_id or pev.request_id(wl.id, wl.run.attempt)}"
    if condition == "CapacityRevoked":
        return qev.WorkloadEvicted(
            workload_id=wl.id,
            reason="CapacityRevoked",
            message=f"{what}: CapacityRevoked: {message}",
            deactivate=True,
        )
    if condition == "BookingExpired" and wl.status == "Admitted":
        return None  # "if the workload is Admitted we don't want to retry on BookingExpired"
    default = RetryStrategy()
    if (
        wl.run.ask is None
        and condition == "BookingExpired"
        and wl.check_retries < default.backoff_limit_count
    ):
        # Nodes muster made without a request check, expired while another check was
        # Pending: a new attempt gets new nodes after a backoff, as many times as Kueue's
        # default retryStrategy would retry a request.
        retry = wl.check_retries + 1
        delay = default.backoff(retry)
        return qev.WorkloadEvicted(
            workload_id=wl.id,
            reason="BookingExpired",
            message=f"{what} BookingExpired before admission: {message}; retry {retry} of "
            f"{default.backoff_limit_count} in {delay:g}s",
            requeue_after_seconds=delay,
        )
    if wl.run.ask is None:
        # No admission check: the nodes are muster's own business, and a failure final.
        if condition == "BookingExpired":
            message = f"{message} (after {wl.check_retries} retries: an admission check stayed "
            message += "Pending)"
        return qev.WorkloadRejected(
            workload_id=wl.id, reason="ProvisioningFailed", message=f"{reason}: {message}"
        )
    config = _config(state, wl.run.ask.check)
    limit = config.retry.backoff_limit_count if config is not None else 0
    if retryable and wl.check_retries < limit:
        assert config is not None
        retry = wl.check_retries + 1
        delay = config.retry.backoff(retry)
        return qev.WorkloadEvicted(
            workload_id=wl.id,
            reason="AdmissionCheck",
            message=(
                f"AdmissionCheck {wl.run.ask.check}: {what} {condition}: {reason}: {message}; "
                f"retry {retry} of {limit} in {delay:g}s"
            ),
            requeue_after_seconds=delay,
        )
    why = f"after {wl.check_retries} retries" if retryable else "no retry can succeed"
    return qev.WorkloadRejected(
        workload_id=wl.id,
        reason="AdmissionCheckRejected",
        message=f"AdmissionCheck {wl.run.ask.check} rejected the workload ({why}): "
        f"{what} {condition}: {reason}: {message}",
    )


def _external(state: QueueState, wl: WorkloadEntry) -> Event | None:
    """Kueue §1.8: a check in Rejected deactivates the workload (muster rejects it); one in
    Retry evicts it, admitted or not, and requeues it after the check's requeueAfterSeconds,
    else after the default retry backoff (60 s doubling, at most 1800 s)."""
    said = sorted((n, c) for n, c in wl.run.checks.items() if c.state in ("Retry", "Rejected"))
    rejected = next(((n, c) for n, c in said if c.state == "Rejected"), None)
    if rejected is not None:
        name, check = rejected
        message = f"AdmissionCheck {name} rejected the workload: {check.message}"
        if wl.status == "Admitted":
            # Its pods run: evicted (they stop) and deactivated, then closed as Rejected.
            return qev.WorkloadEvicted(
                workload_id=wl.id, reason="AdmissionCheckRejected", message=message, deactivate=True
            )
        return qev.WorkloadRejected(
            workload_id=wl.id, reason="AdmissionCheckRejected", message=message
        )
    if not said:
        return None
    name, check = said[0]
    retry = wl.check_retries + 1
    delay = check.requeue_after_seconds
    if delay is None:
        delay = RetryStrategy().backoff(retry)
    return qev.WorkloadEvicted(
        workload_id=wl.id,
        reason="AdmissionCheck",
        message=f"AdmissionCheck {name}: Retry: {check.message}; retry {retry} in {delay:g}s",
        requeue_after_seconds=delay,
    )


def ready(wl: WorkloadEntry) -> bool:
    """Every admission check of the attempt is Ready (true when it has none)."""
    return all(c.state == "Ready" for c in wl.run.checks.values())


def bind(state: QueueState, wl: WorkloadEntry) -> Event | None:
    """A consumer of a standalone request: bind it to free slots of the request's nodes, or
    say (on change) why its pods cannot be scheduled."""
    if wl.spec.consumes is None or wl.status != "Pending" or wl.problem is not None:
        return None
    rid = pev.standalone_id(wl.spec.namespace, wl.spec.consumes)
    req = state.requests.get(rid)
    waiting: tuple[str, str]
    if req is None or req.deleted or req.status in ("Failed", "Cancelled", "Gone"):
        state_of = "doesn't exist" if req is None else f"is {req.status.lower()}"
        if req is not None and req.deleted and req.status not in ("Failed", "Gone"):
            state_of = "was deleted"
        waiting = (
            "ProvisioningRequestNotFound",
            f"ProvisioningRequest {rid} {state_of}: the pods that consume it stay unschedulable",
        )
    elif req.status != "Provisioned":
        waiting = (
            "WaitingForProvisioningRequest",
            f"ProvisioningRequest {rid} is not provisioned yet ({req.status})",
        )
    else:
        free = req.free()
        pods = wl.admitted_pods
        if pods <= len(free):
            slots = [req.slots[i] for i in free[:pods]]
            names = [f"{ps.name}-{i}" for ps in wl.spec.pod_sets for i in range(ps.count)]
            return qev.WorkloadAdmitted(
                workload_id=wl.id,
                cluster_queue="",
                attempt=wl.run.attempt + 1,
                placements=dict(zip(names, slots, strict=True)),
                message=f"bound to the nodes of ProvisioningRequest {rid}",
                request_id=rid,
            )
        waiting = (
            "InsufficientProvisionedCapacity",
            f"ProvisioningRequest {rid} has {len(free)} free pod slot(s) of {len(req.slots)}; "
            f"this workload needs {pods}",
        )
    if wl.pending_reason == waiting:
        return None
    return qev.WorkloadPending(workload_id=wl.id, reason=waiting[0], message=waiting[1])
