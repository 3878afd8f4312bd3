"""A copy-on-write view of a ``NodeBook``: placements are tried on it, never on the book.

The admission cycle places the workloads it admits on a view of the queue's book, and
tries a preemptor's placement on a view of that one with its victims' pods taken away;
the book itself changes only when the log says so (``QuotaReserved`` folded). A view
shares the book's node set and its indexes (it never registers or loses a node), copies
a node's usage the first time it changes it, and keeps its own room cache for the
domains it changed.
"""

from __future__ import annotations

from collections.abc import Callable, Container, Mapping, Sequence
from dataclasses import replace

from muster.core.placement.book import NodeBook, NodeState
from muster.core.placement.index import ByState, StateKey


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
        self._own_by_state = ByState(())  # the nodes it changed, by their state here

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
        self._own_by_state.move(node)  # ``node`` is its own copy (``_writable``)

    def state_groups(self) -> Mapping[StateKey, Sequence[NodeState]]:
        mine = self._own_by_state.groups
        if not mine:
            return self.base.state_groups()
        return {**self.base.state_groups(), **mine}

    def first_in(
        self,
        key: StateKey,
        ok: Callable[[NodeState], bool],
        hidden: tuple[Container[str], ...] = (),
    ) -> NodeState | None:
        mine = next(
            (
                n
                for n in self._own_by_state.groups.get(key, ())
                if not (hidden and any(n.name in h for h in hidden)) and ok(n)
            ),
            None,
        )
        theirs = self.base.first_in(key, ok, (*hidden, self._own))
        if mine is None or (theirs is not None and theirs.order < mine.order):
            return theirs
        return mine

    def changed(self) -> bool:
        """Anything was placed or taken away on this view."""
        return bool(self._own)
