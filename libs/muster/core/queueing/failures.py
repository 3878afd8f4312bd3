"""A workload's failure policy applied to what happened to its pods.

Volcano job policies (PodEvicted/PodFailed -> RestartJob, TaskCompleted ->
CompleteJob, ``maxRetry``), JobSet's ``failurePolicy`` (``maxRestarts``, rules; no
match restarts) and Job's ``backoffLimit`` (a failed pod is replaced in place until
its pod set has failed more often than that) are all one ``FailurePolicy`` here.
A pod evicted with its node (lost) restarts the whole gang unless a rule says
otherwise: the workload is evicted and requeued, and comes back as a whole.
"""

from __future__ import annotations

from muster.core.events import Event
from muster.core.events import queue as qev
from muster.core.model.workload import FailureAction
from muster.core.queueing.state import WorkloadEntry, pod_set_of


def verdict(wl: WorkloadEntry) -> Event | None:
    """What the policy does now, or None when nothing happened that it acts on."""
    if not wl.holds_quota:
        return None
    if wl.run.pods_evicted:
        pod, (reason, message) = sorted(wl.run.pods_evicted.items())[0]
        action = wl.spec.failure_policy.action("PodEvicted", pod_set_of(pod))
        return _act(wl, action or "RestartJob", reason, f"pod {pod} evicted: {message}")
    if wl.status != "Admitted":
        return None
    if wl.run.pods_failed:
        pod, why = sorted(wl.run.pods_failed.items())[0]
        ps_name = pod_set_of(pod)
        ps = next((p for p in wl.spec.pod_sets if p.name == ps_name), None)
        failures = wl.run.pod_failures.get(ps_name, 0)
        if ps is not None and failures <= ps.backoff_limit:
            return qev.PodReplaced(
                workload_id=wl.id,
                attempt=wl.run.attempt,
                pod=pod,
                node=(wl.run.placements or {}).get(pod, ""),
                failures=failures,
                message=(
                    f"pod {pod} failed ({why}); replaced ({failures} of backoffLimit "
                    f"{ps.backoff_limit} failures in pod set {ps_name})"
                ),
            )
        action = wl.spec.failure_policy.action("PodFailed", ps_name) or "FailJob"
        message = f"pod {pod} failed: {why}"
        if ps is not None and ps.backoff_limit:
            message += f" (backoffLimit {ps.backoff_limit} reached)"
        return _act(wl, action, "PodFailed", message)
    for ps in wl.spec.pod_sets:
        names = ps.pod_names(wl.run.pod_counts.get(ps.name, ps.count))
        if names and all(n in wl.run.pods_succeeded for n in names):
            action = wl.spec.failure_policy.action("TaskCompleted", ps.name)
            if action is not None:
                return _act(wl, action, "TaskCompleted", f"all pods of {ps.name} succeeded")
    return None


def _act(wl: WorkloadEntry, action: FailureAction, reason: str, message: str) -> Event:
    policy = wl.spec.failure_policy
    if action == "CompleteJob":
        return qev.WorkloadFinished(
            workload_id=wl.id, outcome="Succeeded", reason="CompleteJob", message=message
        )
    if action == "FailJob":
        return qev.WorkloadFinished(
            workload_id=wl.id, outcome="Failed", reason=reason, message=message
        )
    if action == "RestartJob" and policy.max_restarts is not None:
        if wl.restarts >= policy.max_restarts:
            return qev.WorkloadFinished(
                workload_id=wl.id,
                outcome="Failed",
                reason="MaxRestartsReached",
                message=(
                    f"{message}; restarted {wl.restarts} times already, maxRestarts "
                    f"{policy.max_restarts}"
                ),
            )
        message += f"; restarting the whole workload ({wl.restarts + 1} of {policy.max_restarts})"
    else:
        message += "; restarting the whole workload"
    return qev.WorkloadEvicted(
        workload_id=wl.id, reason=reason, message=message, restart=action == "RestartJob"
    )
