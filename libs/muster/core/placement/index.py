"""The ready nodes grouped by their state: what a pod's room on a node depends on.

Two nodes of one shape (allocatable and devices) with the same free quantities and the
same use of each device answer alike for any pod that names no device UUIDs: the same
room (``fit_count``) and the same reason not to take it (``why_not``). Binpack, spread
and first fit choose by (room, registration order), so of a group only its earliest
node the pod may use needs a look: a pod's search is one look per group (a handful on
a cluster of lookalike nodes), not one per node. The book keeps the groups across
admission cycles and moves a node between them when a pod is charged to it or given
back; a change of the node set drops them (rebuilt at the next search).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from sortedcontainers import SortedKeyList

if TYPE_CHECKING:
    from muster.core.placement.book import NodeState

StateKey = tuple[object, ...]


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


class ByState:
    """Ready nodes by ``state_key``, each group in registration order."""

    def __init__(self, nodes: Iterable[NodeState]) -> None:
        self.groups: dict[StateKey, SortedKeyList] = {}
        self.key_of: dict[str, StateKey] = {}
        for node in nodes:
            self._add(node)

    def _add(self, node: NodeState) -> None:
        key = state_key(node)
        group = self.groups.get(key)
        if group is None:
            group = self.groups[key] = SortedKeyList(key=_order)
        group.add(node)
        self.key_of[node.name] = key

    def move(self, node: NodeState) -> None:
        """The node's state changed: into the group of its new state."""
        old = self.key_of.pop(node.name, None)
        if old is not None:
            group = self.groups[old]
            i = group.bisect_key_left(node.order)
            del group[i]  # orders are unique: the one at its order is the node
            if not group:
                del self.groups[old]
        if node.ready:
            self._add(node)
