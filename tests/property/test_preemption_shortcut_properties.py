"""The victim search's shortcut never changes its answer: over random small books (holders
of random sizes and ranks on nodes of 8 GPUs, a preemptor of random size and rank, quota
at or below the nodes' GPUs), ``preemption.victims`` with ``monotone`` (no search when
every candidate gone at once leaves no room, ``_room_with_all``) returns the same victims
and reasons as without it, and with it never asks for more placement trials.

Kueue's preemption (reference §1.6) gives no targets when the workload does not fit even
with every candidate removed; the minimal set it finds otherwise is the one the search
would find anyway.
"""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from muster.core.queueing import preemption as pre
from tests.property.test_core_properties import SETTINGS
from tests.unit.harness_inputs import GPU
from tests.unit.test_queueing_preemption import holder, preemptor, quota_tree, spec

NODE_GPUS = 8


@st.composite
def books(draw: st.DrawFn) -> tuple[int, list[tuple[int, int, int]], int, int]:
    """(nodes, holders as (node, gpus, priority), preemptor GPUs, quota)."""
    nodes = draw(st.integers(1, 4))
    free = [NODE_GPUS] * nodes
    held = []
    for _ in range(draw(st.integers(0, 10))):
        n = draw(st.integers(0, nodes - 1))
        if free[n] == 0:
            continue
        gpus = draw(st.integers(1, free[n]))
        free[n] -= gpus
        held.append((n, gpus, draw(st.integers(0, 3))))
    used = sum(g for _, g, _ in held)
    quota = draw(st.integers(max(used, 1), nodes * NODE_GPUS))
    return nodes, held, draw(st.integers(1, NODE_GPUS)), quota


def _search(book: tuple[int, list[tuple[int, int, int]], int, int], monotone: bool) -> Any:
    nodes, held, need, quota = book
    holders = [holder(f"h{i}", "a", g, p, i) for i, (_, g, p) in enumerate(held)]
    on = {f"h{i}": n for i, (n, _, _) in enumerate(held)}
    used = [0] * nodes
    for n, g, _ in held:
        used[n] += g
    calls = [0]

    def placeable(gone: Any) -> bool:  # one pod of ``need`` GPUs: counted room
        calls[0] += 1
        freed = [0] * nodes
        for h in gone:
            freed[on[h.id]] += h.usage["f"][GPU]
        return any(NODE_GPUS - used[n] + freed[n] >= need for n in range(nodes))

    queue = spec("a", quota, withinClusterQueue="LowerPriority")
    got = pre.victims(
        quota_tree([queue], holders),
        preemptor(queue, need, priority=2),
        holders,
        placeable=placeable,
        nodes_of=lambda h: frozenset({f"n{on[h.id]}"}),
        monotone=monotone,
    )
    return (None if got is None else [(v.holder.id, v.reason) for v in got]), calls[0]


@SETTINGS
@given(books())
def test_the_shortcut_finds_what_the_search_finds(
    book: tuple[int, list[tuple[int, int, int]], int, int],
) -> None:
    with_it, trials = _search(book, monotone=True)
    without, trials_before = _search(book, monotone=False)
    assert with_it == without
    assert trials <= trials_before + 1
    if with_it is None:
        assert trials <= 1
