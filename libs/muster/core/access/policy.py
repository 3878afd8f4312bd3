"""What a principal may do: namespace tenancy plus an admin scope, as in Kueue.

Tenants read, submit and cancel in their own namespaces; cluster-scoped objects
(ClusterQueues, flavors) are readable by everyone, as Kueue lets them be listed;
everything that changes the cluster's shape needs the admin scope.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from muster.core.access.tokens import Principal


class Action(StrEnum):
    READ = "read"
    SUBMIT = "submit"
    CANCEL = "cancel"
    ADMIN = "admin"  # queues, quotas, flavors, priority classes, replay


@dataclass(frozen=True, slots=True)
class Denied:
    reason: str  # a sentence naming the tenant, fit for a 403 body


def authorize(
    p: Principal, action: Action, namespace: str | None = None, queue: str | None = None
) -> Denied | None:
    """None when allowed; otherwise why not. ``queue`` is the LocalQueue name in ``namespace``."""
    if p.admin:
        return None
    if action is Action.ADMIN:
        return Denied(f"tenant {p.name} needs the admin scope")
    if namespace is None:
        if action is Action.READ:  # cluster-scoped objects are visible to every tenant
            return None
        return Denied(f"tenant {p.name} may not {action} without naming a namespace")
    if namespace not in p.namespaces and "*" not in p.namespaces:
        return Denied(f"tenant {p.name} may not {action} in namespace {namespace}")
    if action is Action.SUBMIT and p.queues:
        if queue is None:
            allowed = ", ".join(sorted(p.queues))
            return Denied(f"tenant {p.name} may only submit to queues {allowed}")
        if f"{namespace}/{queue}" not in p.queues:
            return Denied(f"tenant {p.name} may not submit to queue {namespace}/{queue}")
    return None


def visible_namespaces(p: Principal) -> frozenset[str] | None:
    """The namespaces whose objects a list may show ``p``; None means all."""
    if p.admin or "*" in p.namespaces:
        return None
    return p.namespaces
