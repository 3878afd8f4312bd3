"""GPU interconnect: the link matrix of a node's GPUs (declared, or read from NVML) and
the choice of GPUs by it (HAMi's topology-aware GPU policy, peers.md §3.4)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from muster.core import codec
from muster.core.events import node as nev
from muster.core.events import queue as qev
from muster.core.model import parse
from muster.core.model.fields import InvalidInput
from muster.core.model.inventory import NodeInventory
from muster.core.model.workload import PlacementPolicy
from muster.core.placement import links
from muster.core.placement.book import NodeBook, Placement
from muster.core.placement.engine import demands, place
from muster.core.queueing.decider import QueueDecider
from muster.core.sim.harness import build
from muster.core.verify import verify_decisions
from tests.unit.harness_inputs import gpu_job, gpu_node_cluster

GPU = "nvidia.com/gpu"

# A DGX-1-like node: two NVLink islands of four GPUs, {0,1,2,3} on one CPU and {4,5,6,7}
# on the other. Inside an island the pairs (0,1), (2,3) are bonded twice (NV2), the
# others once (NV1); between islands only PCIe across the CPUs (SYS).
ISLAND = ("X NV2 NV1 NV1", "NV2 X NV1 NV1", "NV1 NV1 X NV2", "NV1 NV1 NV2 X")


def dgx_rows() -> list[str]:
    rows = []
    for i in range(8):
        mine = ISLAND[i % 4].split()
        other = ["SYS"] * 4
        rows.append(" ".join(mine + other if i < 4 else other + mine))
    return rows


def dgx_node(name: str = "dgx", **extra: Any) -> dict[str, Any]:
    gpus = {"count": 8, "model": "NVIDIA-A100", "memory": "80Gi", "links": dgx_rows()}
    return {"name": name, "allocatable": {"cpu": 64, GPU: 8}, "gpus": gpus, **extra}


def book_of(*nodes: dict[str, Any]) -> NodeBook:
    spec = parse.cluster({"name": "c", "zones": ["z"], "nodes": list(nodes)})
    book = NodeBook(spec.topology)
    for node in spec.nodes:
        book.register(node)
    return book


def put(book: NodeBook, name: str, gpus: int) -> tuple[int, ...]:
    """Place one pod of ``gpus`` whole GPUs; the device indexes it got."""
    spec = parse.workload(
        {"name": name, "queueName": "q", "podSets": [{"count": 1, "requests": {GPU: gpus}}]}
    )
    got = place(book, name, spec, demands(spec), PlacementPolicy())
    assert isinstance(got, Placement)
    (shares,) = got.devices.values()
    return tuple(int(s.uuid.rsplit("-", 1)[1]) for s in shares)


def take(book: NodeBook, *indexes: int) -> None:
    """Hold single cards by hand (what earlier pods left in use)."""
    for i in indexes:
        spec = parse.workload(
            {
                "name": f"hold-{i}",
                "queueName": "q",
                "podSets": [
                    {"count": 1, "requests": {GPU: 1}, "devices": {"useUuids": [f"GPU-dgx-{i}"]}}
                ],
            }
        )
        assert isinstance(place(book, spec.name, spec, demands(spec), PlacementPolicy()), Placement)


# -- the declared matrix ---------------------------------------------------------------


def test_declared_matrix_is_kept_per_node() -> None:
    spec = parse.cluster({"name": "c", "zones": ["z"], "nodes": [dgx_node(count=2)]})
    assert [n.name for n in spec.nodes] == ["dgx-0", "dgx-1"]
    for node in spec.nodes:
        assert node.links[0] == ("X", "NV2", "NV1", "NV1", "SYS", "SYS", "SYS", "SYS")
        assert node.links[7][4:] == ("NV1", "NV1", "NV2", "X")
    as_lists = dgx_node()
    as_lists["gpus"]["links"] = [row.split() for row in dgx_rows()]
    same = parse.cluster({"name": "c", "zones": ["z"], "nodes": [as_lists]})
    assert same.nodes[0].links == spec.nodes[0].links


def refused(edit: Any) -> InvalidInput:
    node = copy.deepcopy(dgx_node())
    edit(node["gpus"])
    with pytest.raises(InvalidInput) as info:
        parse.cluster({"name": "c", "zones": ["z"], "nodes": [node]})
    return info.value


def test_bad_matrices_are_refused_naming_the_field() -> None:
    def row(i: int, cells: str) -> Any:
        return lambda g: g["links"].__setitem__(i, cells)

    at = "nodes[0].gpus.links"
    cases = [
        (lambda g: g["links"].pop(), at, "has 7 rows; one per device (8, the count)"),
        (row(2, "NV1 NV1 X"), f"{at}[2]", "must list 8 links, one per device (the count)"),
        (row(1, 42), f"{at}[1]", "must list 8 links, one per device (the count)"),
        (row(3, "NV1 NV1 NV2 NV4 SYS SYS SYS SYS"), f"{at}[3][3]", "must be X: the device itself"),
    ]
    for edit, path, problem in cases:
        err = refused(edit)
        assert (err.path, err.problem) == (path, problem)
    bad = refused(row(0, "X NV2 NV1 NV1 SYS SYS SYS QPI"))
    assert bad.path == f"{at}[0][7]"
    assert bad.problem.startswith("'QPI' is not a GPU link: one of SYS, NODE, PHB, PXB, PIX")
    assert refused(row(0, "X NV0 NV1 NV1 SYS SYS SYS SYS")).path == f"{at}[0][1]"
    one_way = refused(row(0, "X NV2 NV1 NV1 SYS SYS SYS PIX"))
    assert one_way.path == f"{at}[0][7]"
    assert one_way.problem == f"PIX but {at}[7][0] is SYS: a link is the same both ways"


def test_links_travel_in_node_registered_and_old_events_still_decode() -> None:
    inv = parse.cluster({"name": "c", "zones": ["z"], "nodes": [dgx_node()]}).nodes[0]
    event = nev.NodeRegistered.of(inv, "agent-0")
    back = codec.from_plain(nev.NodeRegistered, codec.to_plain(event))
    assert back.inventory().links == inv.links
    old = codec.to_plain(event)
    del old["links"]  # a log written before the field existed
    assert codec.from_plain(nev.NodeRegistered, old).inventory().links == ()


# -- the choice -------------------------------------------------------------------------


def test_scores_rank_nvlink_above_every_pcie_path() -> None:
    order = ["SYS", "NODE", "PHB", "PXB", "PIX", "NV1", "NV2", "NV12"]
    assert [links.score(x) for x in order] == sorted(links.score(x) for x in order)
    assert len({links.score(x) for x in order}) == len(order)
    assert links.score("X") == 0


def test_a_multi_gpu_pod_gets_one_nvlink_island() -> None:
    """peers.md §3.4: an N-GPU request takes the set with the best total pair score. With
    card 1 in use, four GPUs are the whole other island, not 0, 2, 3, 4 by device order."""
    book = book_of(dgx_node())
    assert put(book, "four", 4) == (0, 1, 2, 3)
    book.release("four")
    take(book, 1)
    assert put(book, "four", 4) == (4, 5, 6, 7)
    assert put(book, "three", 3) == (0, 2, 3)


def test_a_pair_takes_a_bonded_pair_from_a_broken_island() -> None:
    """Equally good sets: the one that leaves the other free cards best connected. With
    card 4 in use, a 2-GPU pod takes the NV2 pair (6, 7) of the broken island, not (0, 1)
    of the whole one."""
    book = book_of(dgx_node())
    take(book, 4)
    assert put(book, "pair", 2) == (6, 7)
    assert put(book, "four", 4) == (0, 1, 2, 3)


def test_a_one_gpu_pod_takes_the_least_connected_free_card() -> None:
    """peers.md §3.4: a 1-GPU request takes the card with the worst links to the other
    free cards, so the whole island stays whole for a 4-GPU pod."""
    book = book_of(dgx_node())
    take(book, 7)
    assert put(book, "one", 1) == (6,)  # NV1 to both 4 and 5; 4 and 5 share an NV2
    assert put(book, "four", 4) == (0, 1, 2, 3)


def test_without_a_matrix_devices_go_in_device_order() -> None:
    """No matrix: the choice is today's (the emptiest or fullest card, then device order)."""
    plain = dgx_node()
    del plain["gpus"]["links"]
    book = book_of(plain)
    spec = parse.workload(
        {
            "name": "hold",
            "queueName": "q",
            "podSets": [{"count": 1, "requests": {GPU: 1}, "devices": {"useUuids": ["GPU-dgx-7"]}}],
        }
    )
    assert isinstance(place(book, "hold", spec, demands(spec), PlacementPolicy()), Placement)
    assert put(book, "one", 1) == (0,)
    assert put(book, "pair", 2) == (1, 2)


def test_shared_gpus_keep_the_binpack_and_spread_policy() -> None:
    """Topology decides whole-GPU requests only; a share of a card goes by the queue's
    GPU policy as before (binpack: the fullest card that fits, then device order)."""
    book = book_of(dgx_node())
    take(book, 7)  # topology would now pick card 6
    share = {GPU: 1, "nvidia.com/gpucores": 30, "nvidia.com/gpumem": 1000}
    for name in ("s1", "s2"):
        spec = parse.workload(
            {"name": name, "queueName": "q", "podSets": [{"count": 1, "requests": share}]}
        )
        got = place(book, name, spec, demands(spec), PlacementPolicy(gpu="binpack"))
        assert isinstance(got, Placement)
        assert [s.uuid for s in got.devices["main-0"]] == ["GPU-dgx-0"]


def test_choose_is_deterministic_and_greedy_beyond_the_exhaustive_bound() -> None:
    """Many free cards (C(n, k) above MAX_SETS): the set grows greedily from each card;
    on two 16-card NV18 islands joined by SYS a 16-GPU pod still gets one island."""
    n = 32
    rows = tuple(
        tuple("X" if i == j else ("NV18" if i // 16 == j // 16 else "SYS") for j in range(n))
        for i in range(n)
    )
    free = list(range(1, n))  # card 0 in use: its island is broken
    got = links.choose(rows, free, 16)
    assert got == tuple(range(16, 32))
    assert links.choose(rows, free, 16) == got
    assert links.choose(rows, free, 31) == tuple(free)


# -- through the queue --------------------------------------------------------------------


def test_declared_links_reach_the_queue_and_replay() -> None:
    """A declared node's matrix travels in node.registered into the queue's book: the
    1-GPU job takes the lone card 7 (no NVLink), the 4-GPU job an island; replay
    reproduces every decision."""
    cluster = gpu_node_cluster("c", nodes=1, gpus=8, nominal=8)
    rows = dgx_rows()
    lone = ["SYS"] * 8
    lone[7] = "X"
    rows[7] = " ".join(lone)
    rows[:7] = [" ".join([*r.split()[:7], "SYS"]) for r in rows[:7]]
    gpus = {"count": 8, "model": "NVIDIA-A100", "memory": "80Gi", "links": rows}
    cluster["nodes"][0]["gpus"] = gpus
    h = build(
        parse.cluster(cluster),
        [gpu_job("one", 0.0, 1, 1, 100.0), gpu_job("four", 1.0, 1, 4, 100.0)],
    )
    h.run()
    log = [e.event for e in h.log.envelopes]
    (registered,) = [e for e in log if isinstance(e, nev.NodeRegistered)]
    assert registered.links[7] == tuple(lone)
    admitted = {e.workload_id: e for e in log if isinstance(e, qev.WorkloadAdmitted)}
    devices = {
        wid: sorted(s.uuid for shares in a.devices.values() for s in shares)
        for wid, a in admitted.items()
    }
    assert sorted(devices.values()) == [["GPU-n-0", "GPU-n-1", "GPU-n-2", "GPU-n-3"], ["GPU-n-7"]]
    checked, mismatches = verify_decisions(h.log.envelopes, QueueDecider())
    assert checked and not mismatches


def test_inventory_default_has_no_links() -> None:
    assert NodeInventory(name="n", allocatable={}).links == ()
