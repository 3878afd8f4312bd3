"""The victim search's shortcut (preemption.py ``_room_with_all``): a search none of whose
candidates, all gone at once, would make room returns "no victims" after one quota test and
one placement trial instead of trying every order. It must never change a decision: the
search with it and without it gives the same victims, and a whole run the same log.

Kueue's preemption (reference §1.6) returns no targets when removing every candidate still
does not make the workload fit ("the workload would not fit even after removing all
candidates", pkg/scheduler/preemption: it simulates removing them all before minimising);
Tiresias' gang placement (NSDI'19 §3.3) preempts lower-priority jobs only where that frees
a consolidated place.
"""

from __future__ import annotations

from typing import Any

import pytest

from muster.core.events import queue as qev
from muster.core.model import parse
from muster.core.queueing import admit
from muster.core.queueing import preemption as pre
from muster.core.sim.harness import Harness
from tests.unit.harness_inputs import GPU, gpu_job, gpu_node_cluster, run_verified
from tests.unit.test_queueing_preemption import holder, preemptor, quota_tree, spec

NODE_GPUS = 4


def _book(
    holders: list[pre.Holder], on: dict[str, int], need: int
) -> tuple[pre.Placeable, pre.NodesOf, list[int]]:
    """Nodes of ``NODE_GPUS`` GPUs, each holder on node ``on[id]``; the preemptor is one
    pod of ``need`` GPUs. The placement trials are counted in the list returned."""
    calls = [0]
    used: dict[int, int] = {}
    for h in holders:
        used[on[h.id]] = used.get(on[h.id], 0) + h.usage["f"][GPU]

    def placeable(gone: Any) -> bool:
        calls[0] += 1
        freed: dict[int, int] = {}
        for h in gone:
            freed[on[h.id]] = freed.get(on[h.id], 0) + h.usage["f"][GPU]
        return any(NODE_GPUS - used.get(n, 0) + freed.get(n, 0) >= need for n in set(on.values()))

    def nodes_of(h: pre.Holder) -> frozenset[str]:
        return frozenset({f"n{on[h.id]}"})

    return placeable, nodes_of, calls


def _search(
    holders: list[pre.Holder], on: dict[str, int], need: int, *, monotone: bool
) -> tuple[list[tuple[str, str]] | None, int]:
    queue = spec("a", 16, withinClusterQueue="LowerPriority")
    placeable, nodes_of, calls = _book(holders, on, need)
    got = pre.victims(
        quota_tree([queue], holders),
        preemptor(queue, need, priority=5),
        holders,
        placeable=placeable,
        nodes_of=nodes_of,
        monotone=monotone,
    )
    return (None if got is None else [(v.holder.id, v.reason) for v in got]), calls[0]


def test_no_place_even_with_every_candidate_gone_costs_one_trial() -> None:
    """Two nodes of 4 GPUs, each with a 2-GPU job of a lower rank and one of a higher rank:
    a 4-GPU pod has no place whichever lower-ranked job goes (2 GPUs free at most on a
    node). Without the shortcut every order is tried, a trial per victim; with it, one."""
    holders = [
        holder("low0", "a", 2, 0, 1),
        holder("high0", "a", 2, 9, 2),
        holder("low1", "a", 2, 0, 3),
        holder("high1", "a", 2, 9, 4),
    ]
    on = {"low0": 0, "high0": 0, "low1": 1, "high1": 1}
    without, asked = _search(holders, on, 4, monotone=False)
    with_it, asked_once = _search(holders, on, 4, monotone=True)
    assert without is None and with_it is None
    assert asked_once == 1
    assert asked > 1


def test_where_every_candidate_gone_makes_a_place_the_search_runs_as_before() -> None:
    """One lower-ranked job on each node, one of them a 4-GPU job: the search finds it."""
    holders = [
        holder("small", "a", 2, 0, 1),
        holder("high", "a", 2, 9, 2),
        holder("whole", "a", 4, 0, 3),
    ]
    on = {"small": 0, "high": 0, "whole": 1}
    with_it, _ = _search(holders, on, 4, monotone=True)
    assert with_it == _search(holders, on, 4, monotone=False)[0]
    assert with_it == [("whole", "InClusterQueue")]


def test_no_quota_even_with_every_candidate_gone_is_no_victims() -> None:
    """The quota half of the shortcut needs no placement: 8 of 8 used, only 4 may go, 6
    wanted (as test_queueing_preemption's case, now without a search)."""
    queue = spec("a", 8, withinClusterQueue="LowerPriority")
    holders = [holder("low", "a", 4, 0, 1), holder("high", "a", 4, 20, 2)]
    calls = [0]

    def placeable(gone: Any) -> bool:
        calls[0] += 1
        return True

    got = pre.victims(
        quota_tree([queue], holders),
        preemptor(queue, 6),
        holders,
        placeable=placeable,
        monotone=True,
    )
    assert got is None and calls[0] == 0


def _workload(**pod_set: Any) -> Any:
    return parse.workload(
        {
            "name": "w",
            "namespace": "team",
            "queueName": "q",
            "podSets": [{"name": "w", "count": 2, "requests": {GPU: 4}, **pod_set}],
        }
    )


@pytest.mark.parametrize(
    ("pod_set", "monotone"),
    [
        ({}, True),  # identical pods, counted room: more room never places fewer
        ({"topology": {"required": "rack"}}, False),
        ({"requests": {GPU: 1, "nvidia.com/gpumem": 1000}}, False),  # a share of a device
        ({"devices": {"useTypes": ["A100"]}}, False),
    ],
)
def test_only_counted_placement_takes_the_placement_shortcut(
    pod_set: dict[str, Any], monotone: bool
) -> None:
    wl = _workload(**pod_set)
    entry = type("E", (), {"spec": wl})()
    assert admit._places_monotonically(entry) is monotone


# -- a whole run decides the same with the shortcut and without it ------------------------


def _crowded() -> tuple[dict[str, Any], list[Any]]:
    """Three nodes of 4 GPUs fragmented by 1- and 3-GPU jobs of two tenants, and 4- and
    8-GPU gangs (whole nodes) that preempt for a place: searches with no answer abound."""
    doc = gpu_node_cluster(
        "frag",
        nodes=3,
        gpus=NODE_GPUS,
        nominal=12,
        namespaces=("a", "b"),
        attainedService={"levels": [100, 1000], "starvationFactor": 2, "preemptForPlacement": True},
        preemption={"withinClusterQueue": "LowerPriority", "minAdmitDuration": 30},
    )
    jobs = []
    for i in range(24):
        ns = "ab"[i % 2]
        gpus, pods = [(1, 1), (3, 1), (4, 1), (4, 2), (1, 1), (2, 1)][i % 6]
        jobs.append(gpu_job(f"j{i}", 7.0 * i, pods, gpus, 40.0 + 37 * (i % 5), namespace=ns))
    return doc, jobs


def _log(h: Harness) -> list[tuple[str, float, Any]]:
    return [(e.stream_id, e.occurred_at, e.event) for e in h.log.envelopes]


def test_a_crowded_run_decides_the_same_with_and_without_the_shortcut(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    doc, jobs = _crowded()
    calls = [0, 0]  # searches run, searches cut short
    room = pre._room_with_all

    def counted(*args: Any) -> bool:
        found = room(*args)
        calls[0 if found else 1] += 1
        return found

    monkeypatch.setattr(pre, "_room_with_all", counted)
    shortcut = run_verified(doc, jobs)
    assert calls[1] > 0, "no search was cut short: the case does not test the shortcut"
    monkeypatch.setattr(pre, "_room_with_all", lambda *args: True)  # every search runs
    full = run_verified(doc, jobs)
    assert _log(shortcut) == _log(full)
    assert any(isinstance(e.event, qev.WorkloadEvicted) for e in full.log.envelopes)


def test_a_crowded_run_decides_the_same_with_holders_built_afresh(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The holders kept from the last list (``admit._same_holder``) and re-ranked in place
    (``Holder.ranked``) are the ones a fresh build would give: the same log."""
    doc, jobs = _crowded()
    reused = [0]
    same = admit._same_holder

    def counted(h: Any, wl: Any) -> Any:
        found = same(h, wl)
        reused[0] += found is not None
        return found

    monkeypatch.setattr(admit, "_same_holder", counted)
    kept = run_verified(doc, jobs)
    assert reused[0] > 0, "no holder was reused: the case does not test it"
    monkeypatch.setattr(admit, "_same_holder", lambda h, wl: None)
    fresh = run_verified(doc, jobs)
    assert _log(kept) == _log(fresh)


def test_a_holder_ranked_anew_keeps_everything_but_its_priority() -> None:
    h = holder("x", "a", 3, 0, 7)
    r = h.ranked(5)
    assert (r.id, r.cluster_queue, r.order, r.reserved_seq, r.usage, r.shrink) == (
        h.id,
        h.cluster_queue,
        h.order,
        h.reserved_seq,
        h.usage,
        h.shrink,
    )
    assert r.priority == 5 and h.priority == 0
    assert r.frs() == h.frs() == frozenset({("f", GPU)})
