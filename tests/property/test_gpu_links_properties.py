"""Properties of choosing GPUs by their links (HAMi topology-aware, peers.md §3.4).

1. ``links.choose`` returns ``count`` of the free cards, and no other set of free cards
   scores more within itself (checked against every set on small nodes);
2. on random clusters whose nodes carry random link matrices the book never
   over-allocates and always equals its held placements, and looking at one empty node
   per shape places as looking at every node (a node's links choose its devices, not
   the node: they are not part of its shape).
"""

from __future__ import annotations

from itertools import combinations
from typing import Any
from unittest import mock

from hypothesis import given
from hypothesis import strategies as st

from muster.core.model import parse
from muster.core.model.workload import PlacementPolicy, WorkloadSpec
from muster.core.placement import engine as placement_engine
from muster.core.placement import links
from muster.core.placement.book import NodeBook, Placement
from muster.core.placement.engine import demands, place
from tests.property.test_placement_properties import (
    SETTINGS,
    BookRun,
    _EveryNode,
    _placements,
    book_runs,
    check_book,
    check_shares,
    cluster_doc,
)

LINKS = ("SYS", "NODE", "PHB", "PXB", "PIX", "NV1", "NV2", "NV4", "NV12")


@st.composite
def matrices(draw: st.DrawFn, n: int) -> tuple[tuple[str, ...], ...]:
    """A symmetric link matrix of ``n`` GPUs, ``X`` on the diagonal."""
    rows = [["X"] * n for _ in range(n)]
    for i, j in combinations(range(n), 2):
        rows[i][j] = rows[j][i] = draw(st.sampled_from(LINKS))
    return tuple(tuple(r) for r in rows)


@st.composite
def choices(draw: st.DrawFn) -> tuple[tuple[tuple[str, ...], ...], list[int], int]:
    n = draw(st.integers(2, 8))
    free = sorted(draw(st.sets(st.integers(0, n - 1), min_size=1)))
    return draw(matrices(n)), free, draw(st.integers(1, len(free)))


def inside(links_: tuple[tuple[str, ...], ...], cards: tuple[int, ...]) -> int:
    return sum(links.score(links_[a][b]) for a, b in combinations(cards, 2))


@SETTINGS
@given(choices())
def test_the_chosen_cards_are_free_and_no_set_is_better_connected(
    case: tuple[tuple[tuple[str, ...], ...], list[int], int],
) -> None:
    matrix, free, count = case
    got = links.choose(matrix, free, count)
    assert len(got) == count and set(got) <= set(free) and list(got) == sorted(got)
    best = max(inside(matrix, c) for c in combinations(free, count))
    assert inside(matrix, got) == best
    if count == 1:  # the least connected card to the others free

        def outside(card: int) -> int:
            return sum(links.score(matrix[card][o]) for o in free if o != card)

        assert outside(got[0]) == min(outside(c) for c in free)


@st.composite
def linked_runs(draw: st.DrawFn) -> BookRun:
    """``book_runs`` whose node groups of 2+ GPUs mostly carry a random link matrix."""
    run = draw(book_runs())
    groups: list[dict[str, Any]] = []
    for g in run.nodes:
        n = g["gpus"]["count"]
        if n >= 2 and draw(st.integers(0, 3)):
            rows = [" ".join(r) for r in draw(matrices(n))]
            g = {**g, "gpus": {**g["gpus"], "links": rows}}
        groups.append(g)
    return BookRun(tuple(groups), run.ops)


@SETTINGS
@given(linked_runs())
def test_with_links_the_book_never_over_allocates(run: BookRun) -> None:
    cluster = parse.cluster(cluster_doc(list(run.nodes)))
    inventory = {n.name: n for n in cluster.nodes}
    names = sorted(inventory)
    node_gpus = {n.name: n.gpus for n in cluster.nodes}
    book = NodeBook(cluster.topology)
    for inv in cluster.nodes:
        book.register(inv)
    specs: dict[str, WorkloadSpec] = {}
    for step, (kind, arg, first_fit) in enumerate(run.ops):
        where = f"step {step} {kind}"
        if kind == "place":
            spec = specs[arg["name"]] = parse.workload(arg)
            policy = spec.placement or PlacementPolicy()
            got = place(book, spec.name, spec, demands(spec), policy, first_fit=first_fit)
            if isinstance(got, Placement):
                check_shares(spec, got, node_gpus, where)
        elif kind == "release" and book.held:
            book.release(sorted(book.held)[arg % len(book.held)])
        elif kind == "lose":
            book.lose(names[arg % len(names)])
        elif kind == "register":
            book.register(inventory[names[arg % len(names)]])
        check_book(book, specs, where)


@SETTINGS
@given(linked_runs())
def test_with_links_one_empty_node_per_shape_places_as_every_node(run: BookRun) -> None:
    indexed = _placements(run)
    with mock.patch.object(placement_engine, "_EmptyByShape", _EveryNode):
        assert _placements(run) == indexed
