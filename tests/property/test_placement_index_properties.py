"""The placement engine's groups of nodes by state choose exactly as a scan of every node.

``fill`` over every ready node looks at one node per group of nodes in the same state
(``NodeBook.state_groups``), kept by the book across admission cycles and by each view
for the nodes it changed (issue 16: "Index nodes by free capacity ... so best-fit is a
lookup"). Kueue's LeastFreeCapacity and BestFit choose by room then order
(keps/2724-topology-aware-scheduling, "Selecting the algorithm"); kube-scheduler's
summary names the reasons: both must come out the same, node for node and word for
word. Random books (nodes with and without device lists, labels, taints, racks) and
random runs the way the queue uses the book: placements on the book, on a cycle's view
of it (folded into the book as ``QuotaReserved`` is, when the cycle ends), on trial
views of that view (thrown away), releases on the book or the view, nodes lost and
registered again between cycles.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from unittest import mock

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from muster.core.model import parse
from muster.core.model.workload import PlacementPolicy
from muster.core.placement import engine as placement_engine
from muster.core.placement.book import NodeBook, Placement
from muster.core.placement.engine import demands, place
from muster.core.placement.index import state_key
from muster.core.placement.view import BookView, view
from tests.property.test_placement_properties import _EveryNode  # the scan, unshortcut

GPU = "nvidia.com/gpu"
GPU_CORES = "nvidia.com/gpucores"
GPU_MEM = "nvidia.com/gpumem"
CPU = "cpu"
POOL = "example.com/pool"
BLOCK, RACK = "topology.example/block", "topology.example/rack"
Doc = dict[str, Any]

SETTINGS = settings(
    max_examples=200,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@dataclass(frozen=True)
class Run:
    cluster: Doc
    ops: tuple[tuple[Any, ...], ...]


@st.composite
def node_groups(draw: st.DrawFn, racks: bool) -> list[Doc]:
    groups = []
    for g in range(draw(st.integers(1, 4))):
        gpus = draw(st.integers(1, 4))
        group: Doc = {
            "name": f"n{g}",
            "count": draw(st.integers(1, 5)),
            "allocatable": {CPU: draw(st.sampled_from([4, 8, 16])), GPU: gpus},
            "labels": {POOL: draw(st.sampled_from(["a", "b"]))},
        }
        if draw(st.booleans()):  # devices listed: counted per device, shareable
            group["gpus"] = {
                "count": gpus,
                "model": draw(st.sampled_from(["A100", "H100"])),
                "memory": f"{draw(st.sampled_from([16, 80]))}Gi",
                "split": draw(st.integers(1, 4)),
            }
        if racks:
            group["labels"] |= {BLOCK: draw(st.sampled_from(["b1", "b2"])), RACK: f"r{g}"}
        if draw(st.integers(0, 4)) == 0:
            group["taints"] = [{"key": "gpu", "value": "yes"}]
        groups.append(group)
    return groups


def workload_doc(draw: st.DrawFn, name: str, racks: bool) -> Doc:
    pod_sets = []
    for p in range(draw(st.integers(1, 2))):
        requests: Doc = {CPU: draw(st.integers(1, 6))}
        kind = draw(st.sampled_from(["gpu", "gpu", "shared", "cpu"]))
        if kind == "gpu":
            requests[GPU] = draw(st.integers(1, 3))
        elif kind == "shared":
            requests |= {GPU: 1, GPU_CORES: draw(st.sampled_from([25, 50])), GPU_MEM: 4096}
        ps: Doc = {"name": f"ps{p}", "count": draw(st.integers(1, 4)), "requests": requests}
        if draw(st.integers(0, 3)) == 0:
            ps["nodeSelector"] = {POOL: draw(st.sampled_from(["a", "b"]))}
        if draw(st.integers(0, 2)) == 0:
            ps["tolerations"] = [{"key": "gpu", "operator": "Exists"}]
        if racks and draw(st.integers(0, 3)) == 0:
            ps["topology"] = {draw(st.sampled_from(["required", "preferred"])): RACK}
        if kind != "cpu" and draw(st.integers(0, 5)) == 0:
            ps["devices"] = {"useTypes": ["A100"]}  # a filter: the engine scans every node
        pod_sets.append(ps)
    doc: Doc = {"name": name, "queueName": "lq", "podSets": pod_sets}
    if draw(st.booleans()):
        doc["placement"] = {"node": draw(st.sampled_from(["binpack", "spread"]))}
    return doc


@st.composite
def runs(draw: st.DrawFn) -> Run:
    racks = draw(st.booleans())
    cluster: Doc = {"name": "c", "zones": ["z"], "nodes": draw(node_groups(racks))}
    if racks:
        cluster["topology"] = {"levels": [BLOCK, RACK, "kubernetes.io/hostname"]}
    ops: list[tuple[Any, ...]] = []
    for i in range(draw(st.integers(1, 40))):
        kind = draw(st.sampled_from(["place"] * 6 + ["end cycle", "release", "lose", "register"]))
        if kind == "place":
            on = draw(st.sampled_from(["book", "cycle", "cycle", "trial"]))
            ops.append((kind, workload_doc(draw, f"w{i}", racks), draw(st.booleans()), on))
        else:
            ops.append((kind, draw(st.integers(0, 1000))))
    return Run(cluster, tuple(ops))


def book_state(book: NodeBook) -> object:
    return sorted(
        (
            name,
            n.ready,
            sorted(n.free.items()),
            [(u.cores, u.memory_mib, u.pods, u.exclusive) for u in n.devices],
            sorted(n.workloads.items()),
        )
        for name, n in book.nodes.items()
    )


def play(run: Run) -> list[object]:
    """Every placement's outcome, in order, and the book at the end."""
    cluster = parse.cluster(run.cluster)
    names = [n.name for n in cluster.nodes]
    inventory = {n.name: n for n in cluster.nodes}
    book = NodeBook(cluster.topology)
    for inv in cluster.nodes:
        book.register(inv)
    cycle: BookView | None = None
    made: list[tuple[str, Placement, Any]] = []  # placed on the cycle's view

    def end_cycle() -> None:
        # The queue folds each QuotaReserved into its book; the view is dropped.
        nonlocal cycle
        for wid, placement, pods in made:
            book.hold(wid, placement, pods)
        made.clear()
        cycle = None

    out: list[object] = []
    for op in run.ops:
        kind = op[0]
        if kind == "place":
            _, doc, first_fit, on = op
            spec = parse.workload(doc)
            want = demands(spec)
            policy = spec.placement or PlacementPolicy()
            if on == "book":
                end_cycle()
                target: NodeBook = book
            else:
                cycle = cycle or view(book)
                target = cycle if on == "cycle" else view(cycle)
            got = place(target, spec.name, spec, want, policy, first_fit=first_fit)
            out.append(got)
            if on == "cycle" and isinstance(got, Placement):
                made.append((spec.name, got, {p.name: p for d in want for p in d.pods}))
        elif kind == "end cycle":
            end_cycle()
        elif kind == "release":
            holders = sorted(book.held) if cycle is None else sorted(cycle.held)
            if holders:
                wid = holders[op[1] % len(holders)]
                if cycle is not None:
                    cycle.release(wid)  # a victim's pods leave the view (preemption's trial)
                    made[:] = [m for m in made if m[0] != wid]
                else:
                    book.release(wid)
        else:
            end_cycle()
            name = names[op[1] % len(names)]
            if kind == "lose":
                book.lose(name)
            else:
                book.register(inventory[name])
    end_cycle()
    out.append(book_state(book))
    return out


@SETTINGS
@given(runs())
def test_one_look_per_state_group_places_as_scanning_every_node(run: Run) -> None:
    indexed = play(run)
    with (
        mock.patch.object(placement_engine, "by_state", lambda *_: False),
        mock.patch.object(placement_engine, "_EmptyByShape", _EveryNode),
    ):
        scanned = play(run)
    assert indexed == scanned


def test_the_groups_follow_the_book_and_its_views() -> None:
    """After placements on the book, a view and a view of it, each one's groups hold
    exactly its ready nodes, each in the group of its state there."""
    doc = {
        "name": "c",
        "zones": ["z"],
        "nodes": [{"name": "n", "count": 6, "allocatable": {CPU: 8, GPU: 4}}],
    }
    cluster = parse.cluster(doc)
    book = NodeBook(cluster.topology)
    for inv in cluster.nodes:
        book.register(inv)
    spec = parse.workload(
        {"name": "w", "queueName": "lq", "podSets": [{"count": 3, "requests": {GPU: 1}}]}
    )

    def grouped(b: NodeBook) -> dict[str, object]:
        out: dict[str, object] = {}
        for key, nodes in b.state_groups().items():
            assert [n.order for n in nodes] == sorted(n.order for n in nodes)
            for node in nodes:
                assert node.name not in out, f"{node.name} in two groups"
                out[node.name] = key
        return out

    def expected(b: NodeBook) -> dict[str, object]:
        return {n.name: state_key(b.state_of(n)) for n in b.ready_nodes()}

    assert isinstance(place(book, "a", spec, demands(spec), PlacementPolicy()), Placement)
    assert grouped(book) == expected(book)
    cycle = view(book)
    assert isinstance(place(cycle, "b", spec, demands(spec), PlacementPolicy()), Placement)
    trial = view(cycle)
    assert isinstance(place(trial, "c", spec, demands(spec), PlacementPolicy()), Placement)
    trial.release("a")
    for b in (book, cycle, trial):
        assert grouped(b) == expected(b)
    # 4 GPUs free (n-3..n-5), 3 (n-0 given back, n-2 with one of c), none (n-1)
    assert len(set(expected(trial).values())) == 3
