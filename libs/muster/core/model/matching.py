"""Label selectors and taints, the way Kubernetes matches them."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from muster.core.model.queues import Taint
from muster.core.model.workload import Toleration


def tolerates(tolerations: Iterable[Toleration], taint: Taint) -> bool:
    for tol in tolerations:
        if tol.effect and tol.effect != taint.effect:
            continue
        if tol.operator == "Exists" and (not tol.key or tol.key == taint.key):
            return True
        if tol.operator == "Equal" and tol.key == taint.key and tol.value == taint.value:
            return True
    return False


def tolerates_all(tolerations: Iterable[Toleration], taints: Iterable[Taint]) -> bool:
    tols = tuple(tolerations)
    return all(tolerates(tols, t) for t in taints if t.effect in ("NoSchedule", "NoExecute"))


def conflicts(selector: Mapping[str, str], labels: Mapping[str, str]) -> list[str]:
    """Selector keys that ``labels`` defines with another value (Kueue's flavor check)."""
    return [k for k, v in selector.items() if k in labels and labels[k] != v]


def selects(selector: Mapping[str, str], labels: Mapping[str, str]) -> bool:
    """A node selector picks a node only if the node carries every pair."""
    return all(labels.get(k) == v for k, v in selector.items())
