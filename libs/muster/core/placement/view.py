"""A copy-on-write view of a ``NodeBook``: placements are tried on it, never on the book.

The admission cycle places the workloads it admits on a view of the queue's book, and
tries a preemptor's placement on a view of that one with its victims' pods taken away;
the book itself changes only when the log says so (``QuotaReserved`` folded). A view
shares the book's node set and its indexes (it never registers or loses a node), copies
a node's usage the first time it changes it, and keeps its own room cache for the
domains it changed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

from muster.core.placement import index
from muster.core.placement.book import NodeBook, NodeState


def view(book: NodeBook) -> BookView:
    return BookView(book)


class BookView(NodeBook):
    def __init__(self, base: NodeBook) -> None:  # no super().__init__: the base's node set
        self.base = base
        self.topology = base.topology
        self.levels = base.levels
        self.nodes = base.nodes
        self.exclusive = dict(base.exclusive)
        self.held = dict(base.held)
        self._registrations = base._registrations
        self.freed = base.freed
        self.version = base.version
        self._domains = base._domains  # what only the node set decides: shared
        self._eligible = base._eligible
        self._room = {}
        self._changed: set[tuple[str, tuple[str, ...]]] = set()  # domains whose room moved
        self._own: dict[str, NodeState] = {}
        # The groups by state it moved a node of (copied from the base's at the first
        # move: the base does not change while a view of it is used), and all of them.
        self._groups: index.Groups = {}
        self._group_of: dict[str, index.StateKey | None] = {}  # nodes it changed: their state
        self._all_groups: Mapping[index.StateKey, Sequence[NodeState]] | None = None

    def state_of(self, node: NodeState) -> NodeState:
        return self._own.get(node.name) or self.base.state_of(node)

    def _writable(self, node: NodeState) -> NodeState:
        mine = self._own.get(node.name)
        if mine is None:
            seen = self.base.state_of(node)
            mine = self._own[node.name] = replace(
                seen,
                free=dict(seen.free),
                devices=[replace(u) for u in seen.devices],
                workloads=dict(seen.workloads),
            )
        return mine

    def room(self, key: str, value: tuple[str, ...], shape: object) -> int | None:
        mine = self._room.get((key, value), {}).get(shape)
        if mine is not None or (key, value) in self._changed:
            return mine
        return self.base.room(key, value, shape)

    def _touched(self, node: NodeState) -> None:
        for domain in self.domains_of(node):
            self._room.pop(domain, None)
            self._changed.add(domain)
        self._regroup(node)  # ``node`` is its own copy (``_writable``)

    def state_groups(self) -> Mapping[index.StateKey, Sequence[NodeState]]:
        if not self._groups:
            return self.base.state_groups()
        if self._all_groups is None:
            self._all_groups = {**self.base.state_groups(), **self._groups}
        return self._all_groups

    def _regroup(self, node: NodeState) -> None:
        if node.name in self._group_of:
            old = self._group_of[node.name]
        else:  # its first change here: it is where the base has it
            seen = self.base.state_of(self.nodes[node.name])  # not ``node``: the copy
            old = index.state_key(seen) if seen.ready else None
        if old is not None:
            index.take(self._own_group(old), node)
        key = self._group_of[node.name] = index.state_key(node) if node.ready else None
        if key is not None:
            index.put(self._own_group(key), node)

    def _own_group(self, key: index.StateKey) -> list[NodeState]:
        """This view's copy of a group, made at the first change of one of its nodes."""
        mine = self._groups.get(key)
        if mine is None:
            mine = self._groups[key] = list(self.base.state_groups().get(key, ()))
            self._all_groups = None
        return mine

    def changed(self) -> bool:
        """Anything was placed or taken away on this view."""
        return bool(self._own)
