"""The quota tree (reference §1.3, §1.7): subtree quota, usage bubbling, available,
potential, borrowing level and dominant resource share.

Every expected number below is worked out by hand from Kueue's formulas
(``pkg/cache/scheduler/resource_node.go``, ``fair_sharing.go``):

* ``subtree(cq) = nominal``; ``subtree(cohort) = own + sum(child.subtree - child.local)``
* ``local(n) = max(0, subtree(n) - lendingLimit)`` when a lending limit is set, else 0
* ``available(root) = subtree - usage``; otherwise
  ``max(0, local - usage) + min(available(parent), subtree - local - max(0, usage - local) + bl)``
* ``potential(root) = subtree``; otherwise ``min(local + potential(parent), subtree + bl)``
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping

import pytest

from muster.core.model.queues import (
    ClusterQueueSpec,
    CohortSpec,
    FlavorQuotas,
    ResourceGroup,
    ResourceQuota,
)
from muster.core.queueing import quota as qt

CPU = "cpu"
GPU = "nvidia.com/gpu"
F = "f"  # the one flavor of most examples

# A quota is a nominal amount, or (nominal, borrowingLimit, lendingLimit).
Quota = int | tuple[int, int | None, int | None]


def groups(quotas: Mapping[str, Mapping[str, Quota]]) -> tuple[ResourceGroup, ...]:
    """One resource group: flavor -> resource -> quota, flavors in the given order."""
    flavors = []
    covered: list[str] = []
    for flavor, resources in quotas.items():
        rqs = []
        for resource, q in resources.items():
            nominal, borrowing, lending = (q, None, None) if isinstance(q, int) else q
            rqs.append(
                ResourceQuota(
                    name=resource,
                    nominal_quota=nominal,
                    borrowing_limit=borrowing,
                    lending_limit=lending,
                )
            )
            if resource not in covered:
                covered.append(resource)
        flavors.append(FlavorQuotas(name=flavor, resources=tuple(rqs)))
    return (ResourceGroup(covered_resources=tuple(covered), flavors=tuple(flavors)),)


def cq(
    name: str,
    quotas: Mapping[str, Mapping[str, Quota]] | Quota,
    cohort: str | None = "co",
    weight: float = 1.0,
) -> ClusterQueueSpec:
    if not isinstance(quotas, Mapping):
        quotas = {F: {CPU: quotas}}
    return ClusterQueueSpec(
        name=name, resource_groups=groups(quotas), cohort=cohort, fair_sharing_weight=weight
    )


def cohort(
    name: str, parent: str | None = None, quotas: Mapping[str, Mapping[str, Quota]] | None = None
) -> CohortSpec:
    return CohortSpec(name=name, parent=parent, resource_groups=groups(quotas) if quotas else ())


def tree(
    *queues: ClusterQueueSpec,
    cohorts: tuple[CohortSpec, ...] = (),
    usage: Mapping[str, int] | None = None,
) -> qt.QuotaTree:
    """A tree whose queues use ``usage[queue]`` of (f, cpu)."""
    return qt.build(
        {q.name: q for q in queues},
        {c.name: c for c in cohorts},
        {name: {F: {CPU: n}} for name, n in (usage or {}).items()},
    )


FR = (F, CPU)


def node(t: qt.QuotaTree, name: str) -> qt.QuotaNode:
    return t.queues[name] if name in t.queues else t.cohorts[name]


# -- Kueue's documented example (cluster_queue.md) ---------------------------------------


@pytest.mark.parametrize(
    ("a", "b", "a_max", "b_max"),
    [
        # Cohort of A (9) and B (12), no limits: either may use all 21 while the other idles.
        pytest.param(9, 12, 21, 21, id="no-limits"),
        # A.borrowingLimit=1: potential(A) = min(0 + 21, 9 + 1) = 10. B unaffected: 21.
        pytest.param((9, 1, None), 12, 10, 21, id="A-borrowingLimit-1"),
        # B.lendingLimit=1: local(B) = 12 - 1 = 11, subtree(cohort) = 9 + (12 - 11) = 10.
        # potential(A) = 0 + 10 = 10; potential(B) = 11 + 10 = 21.
        pytest.param(9, (12, None, 1), 10, 21, id="B-lendingLimit-1"),
    ],
)
def test_documented_example_maximum_capacity(a: Quota, b: Quota, a_max: int, b_max: int) -> None:
    t = tree(cq("a", a), cq("b", b))
    assert qt.potential(t.queues["a"], FR) == a_max
    assert qt.potential(t.queues["b"], FR) == b_max
    # With both idle, what each may take now is its maximum.
    assert qt.available(t.queues["a"], FR) == a_max
    assert qt.available(t.queues["b"], FR) == b_max


@pytest.mark.parametrize(
    ("a", "b"),
    [
        pytest.param((9, 1, None), 12, id="A-borrowingLimit-1"),
        pytest.param(9, (12, None, 1), id="B-lendingLimit-1"),
    ],
)
def test_documented_example_b_keeps_11_while_a_uses_10(a: Quota, b: Quota) -> None:
    # A at its maximum of 10 borrows exactly 1 from B; B can still use the other 11.
    # borrowingLimit: available(A) = min(21 - 10, 9 - 10 + 1) = 0; available(B) = 21 - 10 = 11.
    # lendingLimit: cohort usage 10 = subtree 10, so A gets 0 more; B has its local 11.
    t = tree(cq("a", a), cq("b", b), usage={"a": 10})
    assert qt.available(t.queues["a"], FR) == 0
    assert qt.available(t.queues["b"], FR) == 11


def test_borrowing_limit_caps_what_is_taken_from_the_parent_not_the_nominal() -> None:
    # A (9, borrowingLimit 1) and B (12); B borrows 3 of A's quota (uses 15).
    # available(A) = 0 + min(21 - 15, 9 - 0 + 1) = 6: A cannot even get its nominal back
    # without preemption; the limit only bounds borrowing.
    t = tree(cq("a", (9, 1, None)), cq("b", 12), usage={"b": 15})
    assert qt.available(t.queues["a"], FR) == 6
    t = tree(cq("a", (9, 1, None)), cq("b", 12), usage={"b": 5})
    # min(21 - 5, 9 + 1) = 10
    assert qt.available(t.queues["a"], FR) == 10


@pytest.mark.parametrize("seed", range(20))
def test_flat_cohort_available_matches_the_docs_formulation(seed: int) -> None:
    """cluster_queue.md: a request fits if it is within the CQ's unused nominal, or within the
    cohort's unused quota and the CQ's unused nominal plus its borrowingLimit."""
    rng = random.Random(seed)
    nominal = {n: rng.randint(0, 10) for n in "abc"}
    limits = {n: rng.choice([None, 0, 1, 3]) for n in "abc"}
    total = sum(nominal.values())
    usage = {n: rng.randint(0, nominal[n] + 3) for n in "abc"}
    while sum(usage.values()) > total:  # never overadmitted
        usage[rng.choice("abc")] = 0
    t = tree(*(cq(n, (nominal[n], limits[n], None)) for n in "abc"), usage=usage)
    unused_total = total - sum(usage.values())
    for n in "abc":
        expected = unused_total
        limit = limits[n]
        if limit is not None:
            expected = min(expected, nominal[n] - usage[n] + limit)
        assert qt.available(t.queues[n], FR) == expected, (n, nominal, limits, usage)


# -- hierarchical cohorts with cohort-level quota ------------------------------------


def hierarchy(usage: Mapping[str, int] | None = None) -> qt.QuotaTree:
    """root (own 5) <- mid (own 4, lendingLimit 2) <- q1 (10, lendingLimit 3); q2 (6) in root."""
    return tree(
        cq("q1", (10, None, 3), cohort="mid"),
        cq("q2", 6, cohort="root"),
        cohorts=(
            cohort("root", quotas={F: {CPU: 5}}),
            cohort("mid", parent="root", quotas={F: {CPU: (4, None, 2)}}),
        ),
        usage=usage,
    )


def test_subtree_quota_of_hierarchical_cohorts() -> None:
    t = hierarchy()
    # local(q1) = 10 - 3 = 7: q1 lends at most 3.
    # subtree(mid) = 4 + (10 - 7) = 7; local(mid) = 7 - 2 = 5: mid lends at most 2.
    # subtree(root) = 5 + (7 - 5) + (6 - 0) = 13.
    expected = {"q1": (10, 7), "q2": (6, 0), "mid": (7, 5), "root": (13, 0)}
    got = {n: (node(t, n).subtree[FR], node(t, n).local(FR)) for n in expected}
    assert got == expected


def test_potential_in_hierarchical_cohorts() -> None:
    t = hierarchy()
    # q1 may hold everything: 10 + 4 + 5 + 6 = 25 = local 7 + (local(mid) 5 + subtree(root) 13).
    assert qt.potential(t.queues["q1"], FR) == 25
    # q2 sees root's 13 only: its own 6, root's 5 and the 2 that mid lends.
    assert qt.potential(t.queues["q2"], FR) == 13


# -- usage bubbling ------------------------------------------------------------------


def usages(t: qt.QuotaTree) -> dict[str, int]:
    return {n: node(t, n).usage.get(FR, 0) for n in ("q1", "q2", "mid", "root")}


def test_usage_bubbles_up_past_local_quota() -> None:
    t = hierarchy()
    t.add("q1", {F: {CPU: 9}})
    # q1 keeps 7 locally and stores 2 in mid, which fit in mid's local 5: root sees nothing.
    assert usages(t) == {"q1": 9, "q2": 0, "mid": 2, "root": 0}
    t.add("q1", {F: {CPU: 6}})
    # q1 at 15 stores 8 in mid; mid keeps 5 and stores 3 in root.
    assert usages(t) == {"q1": 15, "q2": 0, "mid": 8, "root": 3}
    # q2: everything (25) minus what q1 holds (15) = root's subtree 13 - 3.
    assert qt.available(t.queues["q2"], FR) == 10
    # q1: nothing local left; root has 10 more.
    assert qt.available(t.queues["q1"], FR) == 10


@pytest.mark.parametrize("removals", [[9, 6], [6, 9], [15], [1, 13, 1], [7, 1, 7]])
def test_removing_what_was_added_returns_every_node_to_zero(removals: list[int]) -> None:
    t = hierarchy()
    t.add("q1", {F: {CPU: 9}})
    t.add("q1", {F: {CPU: 6}})
    t.add("q2", {F: {CPU: 4}})
    for amount in removals:
        t.add("q1", {F: {CPU: amount}}, sign=-1)
    t.add("q2", {F: {CPU: 4}}, sign=-1)
    assert usages(t) == {"q1": 0, "q2": 0, "mid": 0, "root": 0}


@pytest.mark.parametrize("seed", range(10))
def test_bubbled_usage_never_depends_on_the_path(seed: int) -> None:
    """A cohort's usage is always sum(max(0, child.usage - child.local)): any sequence of
    charges and releases ends where a tree built from the net usage starts."""
    rng = random.Random(seed)
    t = hierarchy()
    held = {"q1": 0, "q2": 0}
    for _ in range(60):
        q = rng.choice(["q1", "q2"])
        if held[q] and rng.random() < 0.45:
            amount = rng.randint(1, held[q])
            t.add(q, {F: {CPU: amount}}, sign=-1)
            held[q] -= amount
        else:
            amount = rng.randint(1, 6)
            t.add(q, {F: {CPU: amount}})
            held[q] += amount
        fresh = hierarchy(usage=held)
        assert usages(t) == usages(fresh)
        u = usages(t)
        assert u["mid"] == max(0, u["q1"] - node(t, "q1").local(FR))
        assert u["root"] == max(0, u["mid"] - node(t, "mid").local(FR)) + u["q2"]


# -- potential vs available -------------------------------------------------------------


def test_potential_ignores_usage_available_does_not() -> None:
    # A (9) and B (12): B uses 7. available(A) = 21 - 7 = 14; potential(A) stays 21.
    t = tree(cq("a", 9), cq("b", 12), usage={"b": 7})
    assert (qt.available(t.queues["a"], FR), qt.potential(t.queues["a"], FR)) == (14, 21)


def test_available_goes_negative_when_overadmitted() -> None:
    # After a quota shrink usage can exceed quota: a lone queue of 4 holding 6 has -2 left;
    # in a cohort of 21 holding 24, A has 21 - 24 = -3. Potential is unaffected.
    t = tree(cq("lone", 4, cohort=None), usage={"lone": 6})
    assert qt.available(t.queues["lone"], FR) == -2
    assert qt.potential(t.queues["lone"], FR) == 4
    t = tree(cq("a", 9), cq("b", 12), usage={"a": 12, "b": 12})
    assert qt.available(t.queues["a"], FR) == -3


def test_a_queue_borrows_only_pairs_it_defines() -> None:
    # B defines flavor g; A does not: A can never get any of it (potential 0).
    t = qt.build({"a": cq("a", 9), "b": cq("b", {"g": {CPU: 12}})}, {}, {})
    assert qt.potential(t.queues["a"], ("g", CPU)) == 0
    assert qt.available(t.queues["a"], ("g", CPU)) == 0
    assert qt.potential(t.queues["b"], ("g", CPU)) == 12


# -- borrowing level ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("used", "qty", "level"),
    [
        (0, 9, 0),  # exactly A's nominal: no borrowing
        (0, 10, 1),  # one over: borrows from the cohort
        (5, 4, 0),
        (5, 5, 1),
        (9, 12, 1),  # cohort height is 1 however much is borrowed
    ],
)
def test_borrow_level_in_a_flat_cohort(used: int, qty: int, level: int) -> None:
    t = tree(cq("a", 9), cq("b", 12), usage={"a": used})
    assert qt.borrow_level(t.queues["a"], FR, qty) == level


def test_borrow_level_without_a_cohort_is_zero() -> None:
    t = tree(cq("lone", 4, cohort=None))
    assert qt.borrow_level(t.queues["lone"], FR, 100) == 0


@pytest.mark.parametrize(("qty", "level"), [(4, 0), (5, 1), (8, 1), (9, 2), (16, 2)])
def test_borrow_level_is_the_lowest_subtree_that_fits(qty: int, level: int) -> None:
    # root <- mid (own 4) <- q1 (4); q2 (8) in root. subtree(mid) = 8, subtree(root) = 16.
    # Heights: q1 0, mid 1 (only queues below), root 2.
    t = tree(
        cq("q1", 4, cohort="mid"),
        cq("q2", 8, cohort="root"),
        cohorts=(cohort("root"), cohort("mid", parent="root", quotas={F: {CPU: 4}})),
    )
    assert qt.borrow_level(t.queues["q1"], FR, qty) == level


def test_borrow_level_counts_only_what_reaches_each_cohort() -> None:
    # root <- mid (own 2) <- q1 (10, lendingLimit 3); q2 (10) in root.
    # local(q1) = 7, subtree(mid) = 2 + 3 = 5, subtree(root) = 5 + 10 = 15.
    # q1 asks for 11: 7 stay local, 4 reach mid, and 4 <= 5 fits in mid: level 1
    # (Kueue FindHeightOfLowestSubtreeThatFits: remaining = val - LocalAvailable(cq)).
    t = tree(
        cq("q1", (10, None, 3), cohort="mid"),
        cq("q2", 10, cohort="root"),
        cohorts=(cohort("root"), cohort("mid", parent="root", quotas={F: {CPU: 2}})),
    )
    assert qt.borrow_level(t.queues["q1"], FR, 11) == 1


def test_borrow_level_is_the_height_of_the_subtree_not_the_distance() -> None:
    # root <- mid <- q1 (8); q2 (4) directly in root. q2 borrowing from root borrows from a
    # subtree of height 2 (root -> mid -> q1), the same as q1 borrowing from root, and more
    # than q1 borrowing within mid (height 1); Kueue orders heads by this number.
    t = tree(
        cq("q1", 8, cohort="mid"),
        cq("q2", 4, cohort="root"),
        cohorts=(cohort("root"), cohort("mid", parent="root")),
    )
    assert qt.borrow_level(t.queues["q2"], FR, 5) == 2


# -- dominant resource share --------------------------------------------------------


def drs_tree(
    a_weight: float = 1.0, a_usage: Mapping[str, int] | None = None, b_lend: int | None = None
) -> qt.QuotaTree:
    """A: cpu 10, gpu 4; B: cpu 30 (lendingLimit ``b_lend``), gpu 4; one flavor."""
    a = cq("a", {F: {CPU: 10, GPU: 4}}, weight=a_weight)
    b = cq("b", {F: {CPU: (30, None, b_lend), GPU: 4}})
    usage = {"a": {F: dict(a_usage or {})}}
    return qt.build({"a": a, "b": b}, {}, usage)


def test_dominant_share_is_zero_when_not_borrowing() -> None:
    t = drs_tree(a_usage={CPU: 10, GPU: 4})  # exactly at nominal
    assert qt.dominant_share(t.queues["a"]) == (0.0, "")


def test_dominant_share_hand_example() -> None:
    # A uses cpu 16, gpu 6: borrows cpu 6, gpu 2. Lendable = potential(cohort) = cpu 40, gpu 8.
    # cpu 1000 * 6 / 40 = 150, gpu 1000 * 2 / 8 = 250: gpu dominates with 250 per mille.
    t = drs_tree(a_usage={CPU: 16, GPU: 6})
    assert qt.dominant_share(t.queues["a"]) == (250.0, GPU)


def test_dominant_share_counts_the_extra_request() -> None:
    # Plus 10 cpu: cpu borrowed 16 -> 1000 * 16 / 40 = 400 > gpu's 250.
    t = drs_tree(a_usage={CPU: 16, GPU: 6})
    assert qt.dominant_share(t.queues["a"], {(F, CPU): 10}) == (400.0, CPU)
    # Not borrowing yet, but the request would: cpu 10 + 5 -> 1000 * 5 / 40 = 125.
    t = drs_tree(a_usage={CPU: 10})
    assert qt.dominant_share(t.queues["a"], {(F, CPU): 5}) == (125.0, CPU)


def test_dominant_share_divides_by_weight() -> None:
    t = drs_tree(a_weight=2.0, a_usage={CPU: 16, GPU: 6})
    assert qt.dominant_share(t.queues["a"]) == (125.0, GPU)


def test_dominant_share_with_weight_zero() -> None:
    borrowing = drs_tree(a_weight=0.0, a_usage={CPU: 11})
    share, _ = qt.dominant_share(borrowing.queues["a"])
    assert math.isinf(share) and share > 0
    idle = drs_tree(a_weight=0.0, a_usage={CPU: 10})
    assert qt.dominant_share(idle.queues["a"])[0] == 0.0


def test_dominant_share_lendable_respects_lending_limits() -> None:
    # B lends at most 10 cpu: subtree(cohort) cpu = 10 + 10 = 20. A borrows 6: 1000*6/20 = 300.
    t = drs_tree(a_usage={CPU: 16}, b_lend=10)
    assert qt.dominant_share(t.queues["a"]) == (300.0, CPU)


def test_dominant_share_without_a_parent_is_zero() -> None:
    t = tree(cq("lone", 4, cohort=None), usage={"lone": 6})
    assert qt.dominant_share(t.queues["lone"]) == (0.0, "")


@pytest.mark.parametrize(
    "nested",
    [
        False,
        True,
    ],
)
def test_dominant_share_lendable_covers_every_flavor_of_the_cohort(nested: bool) -> None:
    # A defines f1 cpu 0 and uses 5 of it; B defines f1 cpu 10; C defines f2 cpu 10.
    # lendable cpu = potential(parent, f1) + potential(parent, f2) = 10 + 10 = 20, also when
    # C sits in another branch (root <- x <- A, B; root <- y <- C: x has no quota of its
    # own, so potential(x, f2) = potential(root, f2) = 10). share = 1000 * 5 / 20 = 250.
    parent = "x" if nested else "co"
    a = cq("a", {"f1": {CPU: 0}}, cohort=parent)
    b = cq("b", {"f1": {CPU: 10}}, cohort=parent)
    c = cq("c", {"f2": {CPU: 10}}, cohort="y" if nested else "co")
    cohorts = {"x": cohort("x", "root"), "y": cohort("y", "root")} if nested else {}
    t = qt.build({"a": a, "b": b, "c": c}, cohorts, {"a": {"f1": {CPU: 5}}})
    assert qt.dominant_share(t.queues["a"]) == (250.0, CPU)


def test_weighted_shares_as_kueues_status_shows_them() -> None:
    """Kueue's ClusterQueue status.fairSharing.weightedShare: an integer, 0 within nominal,
    MaxInt64 for a zero weight that borrows."""
    b = cq("b", {F: {CPU: 30, GPU: 4}})
    usage = {"a": {F: {CPU: 16, GPU: 6}}}
    a = cq("a", {F: {CPU: 10, GPU: 4}}, weight=2.0)
    assert qt.weighted_shares({"a": a, "b": b}, {}, usage) == {"a": 125, "b": 0}
    a0 = cq("a", {F: {CPU: 10, GPU: 4}}, weight=0.0)
    assert qt.weighted_shares({"a": a0, "b": b}, {}, usage)["a"] == qt.MAX_WEIGHTED_SHARE
