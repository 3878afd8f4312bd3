"""The ready nodes grouped by their state: what a pod's room on a node depends on.

Two nodes of one shape (allocatable and devices) with the same free quantities and the
same use of each device answer alike for any pod that names no device UUIDs or types:
the same room (``fit_count``) and the same reason not to take it (``why_not``).
Binpack, spread and first fit choose by (room, registration order), so of a group only
its earliest node the pod may use needs a look: a pod's search is one look per group (a
handful on a cluster of lookalike nodes), not one per node. The book keeps the groups
across admission cycles and moves a node between them when a pod is charged to it or
given back; a change of the node set drops them (rebuilt at the next search). A view
copies a group the first time it moves one of its nodes (``view.py``).
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections.abc import Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from muster.core.placement.book import NodeState

StateKey = tuple[object, ...]
Groups = dict[StateKey, list["NodeState"]]


def state_key(node: NodeState) -> StateKey:
    """What a pod's room on the node depends on (not its UUIDs, links, labels or taints:
    those choose devices on a node, or whether a pod may use it at all)."""
    return (
        node.shape,
        tuple(node.free.items()),
        tuple((u.cores, u.memory_mib, u.pods, u.exclusive) for u in node.devices),
    )


def _order(node: NodeState) -> int:
    return node.order


def group(nodes: Iterable[NodeState]) -> Groups:
    """``nodes`` (in registration order) by state, each group in registration order."""
    out: Groups = {}
    for node in nodes:
        out.setdefault(state_key(node), []).append(node)
    return out


def take(nodes: list[NodeState], node: NodeState) -> None:
    """Take ``node`` out of its group (orders are unique: the one at its order is it)."""
    i = bisect_left(nodes, node.order, key=_order)
    if i < len(nodes) and nodes[i].order == node.order:
        del nodes[i]


def put(nodes: list[NodeState], node: NodeState) -> None:
    insort(nodes, node, key=_order)
