"""The placement engine on small clusters: gangs, topology, exclusivity, GPU sharing."""

from __future__ import annotations

import pickle
from collections import Counter
from typing import Any
from unittest import mock

from muster.core.events import NewEvent
from muster.core.events import node as nev
from muster.core.events import queue as qev
from muster.core.model import parse
from muster.core.model.inventory import Gpu, TopologySpec
from muster.core.model.workload import DeviceFilter, PlacementPolicy, WorkloadSpec
from muster.core.placement import book as book_module
from muster.core.placement import devices as dev
from muster.core.placement import engine
from muster.core.placement.book import NodeBook, Placement
from muster.core.placement.engine import NoPlacement, _best_fit, demands, place
from muster.core.placement.view import view
from muster.core.sim.harness import build
from tests.unit.harness_inputs import submissions

GPU = "nvidia.com/gpu"
MX = "metax-tech.com/gpu"


def book_of(cluster: dict[str, Any]) -> NodeBook:
    spec = parse.cluster({"name": "c", "zones": ["z"], **cluster})
    book = NodeBook(spec.topology)
    for node in spec.nodes:
        book.register(node)
    return book


def workload(name: str = "w", **fields: Any) -> WorkloadSpec:
    return parse.workload({"name": name, "queueName": "q", **fields})


def try_place(
    book: NodeBook, spec: WorkloadSpec, policy: PlacementPolicy | None = None, **kw: Any
) -> Placement | NoPlacement:
    return place(book, spec.name, spec, demands(spec), policy or PlacementPolicy(), **kw)


def gpu_nodes(name: str, count: int, gpus: int, **extra: Any) -> dict[str, Any]:
    return {
        "name": name,
        "count": count,
        "allocatable": {"cpu": 64, GPU: gpus},
        "gpus": {"count": gpus, "model": "NVIDIA-A100", "memory": "80Gi"},
        **extra,
    }


def test_a_gang_is_placed_whole_or_not_at_all() -> None:
    book = book_of({"nodes": [gpu_nodes("n", 2, 8)]})
    big = workload("big", podSets=[{"count": 3, "requests": {GPU: 8}}])
    out = try_place(book, big)
    assert isinstance(out, NoPlacement)
    assert out.message.endswith("0/2 nodes are available: 2 Insufficient nvidia.com/gpu")
    # nothing of the failed gang stays charged
    assert all(n.pods == 0 and n.free_devices() == 8 for n in book.nodes.values())
    fits = workload("fits", podSets=[{"count": 2, "requests": {GPU: 8}}])
    got = try_place(book, fits)
    assert isinstance(got, Placement)
    assert sorted(got.nodes.values()) == ["n-0", "n-1"]
    assert all(len(s) == 8 for s in got.devices.values())


def test_binpack_keeps_whole_nodes_free_and_spread_does_not() -> None:
    for policy, expect_free in (("binpack", 1), ("spread", 0)):
        book = book_of({"nodes": [gpu_nodes("n", 2, 8)]})
        for i in range(4):
            spec = workload(f"w{i}", podSets=[{"count": 1, "requests": {GPU: 2}}])
            assert isinstance(
                try_place(book, spec, PlacementPolicy(node=policy)),  # type: ignore[arg-type]
                Placement,
            )
        assert book.fragmentation()["free_nodes"] == expect_free, policy


def test_release_gives_everything_back() -> None:
    book = book_of({"nodes": [gpu_nodes("n", 1, 8)]})
    spec = workload(podSets=[{"count": 2, "requests": {GPU: 4}}])
    assert isinstance(try_place(book, spec), Placement)
    assert book.nodes["n"].free_devices() == 0
    book.release("w")
    assert book.nodes["n"].free_devices() == 8 and book.nodes["n"].pods == 0


def test_node_selector_on_gpu_model_is_a_hard_constraint() -> None:
    """S8: the pod only ever lands on a Tesla-V100 node."""
    label = "feature.node.kubernetes.io/gpu-model.nvidia.com"
    book = book_of(
        {
            "nodes": [
                gpu_nodes("a100", 2, 4, labels={label: "A100"}),
                gpu_nodes("v100", 1, 1, labels={label: "Tesla-V100"}),
            ]
        }
    )
    pod = workload(
        podSets=[{"count": 1, "requests": {GPU: 1}, "nodeSelector": {label: "Tesla-V100"}}]
    )
    got = try_place(book, pod)
    assert isinstance(got, Placement) and got.nodes == {"main-0": "v100"}
    again = try_place(book, workload("w2", podSets=pod_sets_of(pod)))
    assert isinstance(again, NoPlacement)
    assert "2 node(s) didn't match Pod's node affinity/selector" in again.message
    assert "1 Insufficient nvidia.com/gpu" in again.message


def pod_sets_of(spec: WorkloadSpec) -> list[dict[str, Any]]:
    return [
        {
            "name": ps.name,
            "count": ps.count,
            "requests": dict(ps.requests),
            "nodeSelector": dict(ps.node_selector),
        }
        for ps in spec.pod_sets
    ]


def sgpu_book() -> NodeBook:
    return book_of(
        {
            "nodes": [
                {
                    "name": "sgpu-node",
                    "allocatable": {"metax-tech.com/sgpu": 16},
                    "gpus": {"count": 1, "model": "MXC500", "memory": "64Gi", "split": 16},
                }
            ]
        }
    )


def shared(name: str, vcore: int, vmemory: int) -> WorkloadSpec:
    return workload(
        name,
        podSets=[
            {
                "count": 1,
                "requests": {
                    "metax-tech.com/sgpu": 1,
                    "metax-tech.com/vcore": vcore,
                    "metax-tech.com/vmemory": vmemory,
                },
            }
        ],
    )


def test_s7_two_60_percent_pods_cannot_share_but_60_and_40_can() -> None:
    book = sgpu_book()
    assert isinstance(try_place(book, shared("a", 60, 4)), Placement)
    second = try_place(book, shared("b", 60, 4))
    assert isinstance(second, NoPlacement) and "CardInsufficientCore" in second.message
    third = try_place(book, shared("c", 40, 4))
    assert isinstance(third, Placement)
    (share,) = third.devices["main-0"]
    assert share.cores == 40 and share.memory_mib == 4096
    use = book.nodes["sgpu-node"].devices[0]
    assert use.cores == 100 and use.pods == 2


def test_s7_vmemory_never_exceeds_the_device() -> None:
    book = sgpu_book()
    assert isinstance(try_place(book, shared("a", 10, 40)), Placement)
    out = try_place(book, shared("b", 10, 30))
    assert isinstance(out, NoPlacement) and "CardInsufficientMemory" in out.message
    assert isinstance(try_place(book, shared("c", 10, 24)), Placement)


def test_split_count_bounds_the_pods_on_one_device() -> None:
    book = book_of(
        {
            "nodes": [
                {
                    "name": "n",
                    "allocatable": {GPU: 1},
                    "gpus": {"count": 1, "model": "A10", "memory": "24Gi", "split": 2},
                }
            ]
        }
    )
    ask = {GPU: 1, "nvidia.com/gpucores": 10, "nvidia.com/gpumem": 1000}
    for i in range(2):
        assert isinstance(
            try_place(book, workload(f"w{i}", podSets=[{"count": 1, "requests": ask}])), Placement
        )
    out = try_place(book, workload("w3", podSets=[{"count": 1, "requests": ask}]))
    assert isinstance(out, NoPlacement) and "CardTimeSlicingExhausted" in out.message


def test_100_percent_cores_is_exclusive() -> None:
    book = sgpu_book()
    assert isinstance(try_place(book, shared("a", 10, 1)), Placement)
    out = try_place(book, shared("b", 100, 1))
    assert isinstance(out, NoPlacement) and "ExclusiveDeviceAllocateConflict" in out.message


def test_device_type_and_uuid_lists() -> None:
    book = book_of(
        {
            "nodes": [
                gpu_nodes("a", 1, 2),
                {
                    "name": "v",
                    "allocatable": {GPU: 2},
                    "gpus": {"count": 2, "model": "NVIDIA-Tesla V100-PCIE-32GB", "memory": "32Gi"},
                },
            ]
        }
    )
    only_v100 = workload(
        podSets=[{"count": 1, "requests": {GPU: 1}, "devices": {"useTypes": ["v100"]}}]
    )
    got = try_place(book, only_v100)
    assert isinstance(got, Placement) and got.nodes["main-0"] == "v"
    not_uuid = workload(
        "w2",
        podSets=[
            {
                "count": 1,
                "requests": {GPU: 1},
                "devices": {"avoidUuids": ["GPU-a-0", "GPU-a-1"], "avoidTypes": ["V100"]},
            }
        ],
    )
    out = try_place(book, not_uuid)
    assert isinstance(out, NoPlacement)


def test_taints_need_tolerations() -> None:
    book = book_of({"nodes": [gpu_nodes("t", 1, 1, taints=[{"key": "gpu", "value": "yes"}])]})
    out = try_place(book, workload(podSets=[{"count": 1, "requests": {GPU: 1}}]))
    assert isinstance(out, NoPlacement) and "untolerated taint {gpu: yes}" in out.message
    ok = workload(
        "w2",
        podSets=[
            {
                "count": 1,
                "requests": {GPU: 1},
                "tolerations": [{"key": "gpu", "operator": "Exists"}],
            }
        ],
    )
    assert isinstance(try_place(book, ok), Placement)


def tpu_pools() -> NodeBook:
    pool = "cloud.google.com/gke-nodepool"
    return book_of(
        {
            "nodes": [
                {
                    "name": f"pool{p}",
                    "count": 2,
                    "allocatable": {"google.com/tpu": 4},
                    "labels": {pool: f"pool{p}"},
                }
                for p in range(3)
            ]
        }
    )


def slices(name: str, replicas: int) -> WorkloadSpec:
    return workload(
        name,
        podSets=[
            {
                "name": "slice",
                "count": 2 * replicas,
                "requests": {"google.com/tpu": 4},
                "topology": {"exclusive": "cloud.google.com/gke-nodepool", "sliceSize": 2},
            }
        ],
    )


def test_s3_each_slice_owns_a_whole_pool_shared_with_no_other_job() -> None:
    book = tpu_pools()
    one = try_place(book, slices("one", 1))
    assert isinstance(one, Placement)
    pools_of_one = {n.split("-")[0] for n in one.nodes.values()}
    assert len(pools_of_one) == 1
    two = try_place(book, slices("two", 2))
    assert isinstance(two, Placement)
    pools_of_two = {n.split("-")[0] for n in two.nodes.values()}
    assert len(pools_of_two) == 2 and not pools_of_two & pools_of_one
    three = try_place(book, slices("three", 1))
    assert isinstance(three, NoPlacement) and three.reason == "TopologyPlacementFailed"
    book.release("one")
    assert isinstance(try_place(book, slices("three", 1)), Placement)


def test_an_exclusive_pool_is_not_taken_when_another_job_has_pods_on_it() -> None:
    book = tpu_pools()
    loose = workload("loose", podSets=[{"count": 1, "requests": {"google.com/tpu": 1}}])
    assert isinstance(try_place(book, loose), Placement)
    got = try_place(book, slices("three", 3))
    assert isinstance(got, NoPlacement)
    got = try_place(book, slices("two", 2))
    assert isinstance(got, Placement)
    loose_pool = book.held["loose"].placement.nodes["main-0"].split("-")[0]
    assert loose_pool not in {n.split("-")[0] for n in got.nodes.values()}


def supernodes() -> NodeBook:
    """sb1/df1 holds 8 nodes x 8 GPUs (64); sb2 holds two dragonflies of 4 nodes (32 each)."""
    nodes = [gpu_nodes("a", 8, 8), gpu_nodes("b", 8, 8)]

    def df(name: str, members: list[str]) -> dict[str, Any]:
        return {
            "name": name,
            "kind": "dragonfly",
            "child": [{"name": m, "kind": "node"} for m in members],
        }

    tree = [
        {"name": "sb1", "kind": "switchbox", "child": [df("df1", [f"a-{i}" for i in range(8)])]},
        {
            "name": "sb2",
            "kind": "switchbox",
            "child": [
                df("df2", [f"b-{i}" for i in range(4)]),
                df("df3", [f"b-{i}" for i in range(4, 8)]),
            ],
        },
    ]
    return book_of({"nodes": nodes, "topology": {"hyperNodes": tree}})


def gang64(name: str) -> WorkloadSpec:
    return workload(
        name,
        gpuGroupSize=64,
        podSets=[
            {"name": "master", "count": 1, "requests": {GPU: 8}},
            {"name": "worker", "count": 7, "requests": {GPU: 8}},
        ],
    )


def test_s5_a_64_gpu_group_goes_in_one_dragonfly_that_holds_64_or_waits() -> None:
    book = supernodes()
    got = try_place(book, gang64("first"))
    assert isinstance(got, Placement)
    assert {n[0] for n in got.nodes.values()} == {"a"}  # df1, the only dragonfly of 64
    second = try_place(book, gang64("second"))
    # sb2 has 64 GPUs free, but in two dragonflies of 32: never split across groups
    assert isinstance(second, NoPlacement) and "dragonfly" in second.message
    assert all(n.pods == 0 for name, n in book.nodes.items() if name.startswith("b"))


def test_required_level_keeps_a_pod_set_in_one_domain() -> None:
    book = supernodes()
    pod_sets = [
        {
            "count": 6,
            "requests": {GPU: 8},
            "topology": {"required": "topology.muster.dev/dragonfly"},
        }
    ]
    got = try_place(book, workload(podSets=pod_sets))
    assert isinstance(got, Placement)
    # best fit: the tightest dragonfly that holds 6 nodes is df1 (df2/df3 hold 4)
    assert {n[0] for n in got.nodes.values()} == {"a"}
    again = try_place(book, workload("w2", podSets=pod_sets))
    assert isinstance(again, NoPlacement)


def test_preferred_level_climbs_then_spreads() -> None:
    book = supernodes()
    spec = workload(
        podSets=[
            {
                "count": 8,
                "requests": {GPU: 8},
                "topology": {"preferred": "topology.muster.dev/dragonfly"},
            }
        ]
    )
    assert isinstance(try_place(book, spec), Placement)  # df1 whole
    spec2 = workload(
        "w2",
        podSets=[
            {
                "count": 8,
                "requests": {GPU: 8},
                "topology": {"preferred": "topology.muster.dev/dragonfly"},
            }
        ],
    )
    got = try_place(book, spec2)
    assert isinstance(got, Placement)  # climbs to sb2, both dragonflies
    assert {n[0] for n in got.nodes.values()} == {"b"}


def test_best_fit_picks_the_tightest_domain_and_first_fit_the_first() -> None:
    # df1 (64 GPUs) registered first, df2/df3 (32 each) after: a 4-node gang fits both.
    spec = workload(
        podSets=[
            {
                "count": 4,
                "requests": {GPU: 8},
                "topology": {"required": "topology.muster.dev/dragonfly"},
            }
        ]
    )
    best = try_place(supernodes(), spec)
    first = try_place(supernodes(), spec, first_fit=True)
    assert isinstance(best, Placement) and isinstance(first, Placement)
    assert {n[0] for n in best.nodes.values()} == {"b"}
    assert {n[0] for n in first.nodes.values()} == {"a"}


def test_volcano_tiers_map_to_levels() -> None:
    topo = TopologySpec(levels=("sb", "df"))
    assert topo.tier(1) == "df" and topo.tier(2) == "sb" and topo.tier(3) is None


# -- Kueue TAS BestFit (keps/2724-topology-aware-scheduling, "Selecting the algorithm":
# domains with the most free capacity first, the last one the smallest that still holds
# the remainder; "rack nodes with free 3,3,2,1 and 7 pods => BestFit picks 3,3,1") ---------

BLOCK, RACK = "topology.example/block", "topology.example/rack"
TAS_TOPOLOGY = {"levels": [BLOCK, RACK, "kubernetes.io/hostname"]}


def in_rack(name: str, count: int, gpus: int, rack: str) -> dict[str, Any]:
    return gpu_nodes(name, count, gpus, labels={BLOCK: "b1", RACK: rack})


def one_gpu_pods(count: int, **topology: str) -> WorkloadSpec:
    return workload(podSets=[{"count": count, "requests": {GPU: 1}, "topology": topology}])


def test_best_fit_over_nodes_uses_the_fewest() -> None:
    # One rack; nodes with room for 3, 3, 2 and 1 pods, the smallest registered first.
    nodes = [in_rack("n1", 1, 1, "r1"), in_rack("n2", 1, 2, "r1")]
    nodes += [in_rack("n3a", 1, 3, "r1"), in_rack("n3b", 1, 3, "r1")]
    book = book_of({"nodes": nodes, "topology": TAS_TOPOLOGY})
    got = try_place(book, one_gpu_pods(7, required=RACK))
    assert isinstance(got, Placement)
    per_node = sorted(Counter(got.nodes.values()).items())
    assert per_node == [("n1", 1), ("n3a", 3), ("n3b", 3)]  # n2 (room 2) stays whole


def test_best_fit_over_racks_uses_the_fewest() -> None:
    # One block of four racks with room for 3, 3, 2 and 1 eight-GPU pods; the racks with
    # the least room registered first, so registration order alone would take all four.
    nodes = [in_rack("d", 1, 8, "r4"), in_rack("c", 2, 8, "r3")]
    nodes += [in_rack("a", 3, 8, "r1"), in_rack("b", 3, 8, "r2")]
    book = book_of({"nodes": nodes, "topology": TAS_TOPOLOGY})
    spec = workload(podSets=[{"count": 7, "requests": {GPU: 8}, "topology": {"preferred": RACK}}])
    got = try_place(book, spec)
    assert isinstance(got, Placement)
    racks = Counter(book.nodes[n].inv.labels[RACK] for n in got.nodes.values())
    assert racks == {"r1": 3, "r2": 3, "r4": 1}  # r3 (room 2) stays whole


def test_spread_stays_a_choice() -> None:
    nodes = [in_rack("n1", 1, 1, "r1"), in_rack("n2", 1, 2, "r1")]
    nodes += [in_rack("n3a", 1, 3, "r1"), in_rack("n3b", 1, 3, "r1")]
    book = book_of({"nodes": nodes, "topology": TAS_TOPOLOGY})
    got = try_place(book, one_gpu_pods(7, required=RACK), PlacementPolicy(node="spread"))
    assert isinstance(got, Placement)
    assert len(set(got.nodes.values())) == 4  # the emptiest node for each pod


def test_best_fit_rule() -> None:
    assert _best_fit([(3, 0), (3, 1), (2, 2), (1, 3)], 7) == [(0, 3), (1, 3), (3, 1)]
    assert _best_fit([(8, 0), (1, 1)], 1) == [(1, 1)]  # one part holds it: the tightest
    assert _best_fit([(2, 1), (2, 0)], 2) == [(1, 2)]  # a tie: the earliest registered


# -- HAMi's device reasons and pinned devices (reference/peers.md §3.4, §3.5) --------------


def test_device_reasons_as_hami_names_them() -> None:
    """HAMi's Fit (pkg/device/nvidia/device.go) counts, per card: ExclusiveDeviceAllocateConflict
    (100 % cores on a used card), CardTimeSlicingExhausted (split count reached),
    CardInsufficientCore (cores over 100 %), CardComputeUnitsExhausted (a core-less share on
    a card whose cores are all taken), CardInsufficientMemory, CardUUIDMismatch and
    CardTypeMismatch (its lists rule the card out)."""
    gpu = Gpu(uuid="GPU-0", model="NVIDIA-A100", memory_mib=1000, split=3)

    def used(cores: int, memory: int, pods: int, exclusive: bool = False) -> dev.DeviceUse:
        return dev.DeviceUse(cores=cores, memory_mib=memory, pods=pods, exclusive=exclusive)

    share = dev.DeviceAsk(count=1, cores=50, memory_mib=100)
    memory_only = dev.DeviceAsk(count=1, cores=0, memory_mib=100)
    whole = dev.DeviceAsk(count=1, cores=100, memory_mib=100)
    assert dev.why_not(gpu, used(10, 100, 1), whole) == "ExclusiveDeviceAllocateConflict"
    assert dev.why_not(gpu, used(10, 100, 3), share) == "CardTimeSlicingExhausted"
    assert dev.why_not(gpu, used(60, 100, 1), share) == "CardInsufficientCore"
    assert dev.why_not(gpu, used(100, 100, 2), memory_only) == "CardComputeUnitsExhausted"
    assert dev.why_not(gpu, used(10, 950, 1), share) == "CardInsufficientMemory"
    pinned = dev.DeviceAsk(count=1, cores=50, memory_mib=100, filter=DeviceFilter(use_uuids=("X",)))
    assert dev.why_not(gpu, used(0, 0, 0), pinned) == "CardUUIDMismatch"
    typed = dev.DeviceAsk(
        count=1, cores=50, memory_mib=100, filter=DeviceFilter(use_types=("H100",))
    )
    assert dev.why_not(gpu, used(0, 0, 0), typed) == "CardTypeMismatch"
    assert dev.why_not(gpu, used(40, 100, 1), share) is None


def test_a_pod_pinned_to_a_gpu_no_node_has_yet_waits_for_it() -> None:
    """HAMi's nvidia.com/use-gpuuuid: a pod pinned to a card no node has stays pending
    (Unschedulable, CardUUIDMismatch); it is not sent to the provisioner (no new node has
    that card) nor rejected, and runs once a node with the card registers."""
    cluster = {
        "name": "c",
        "zones": ["z"],
        "nodes": [gpu_nodes("n", 1, 2)],
        "resourceFlavors": [{"name": "f"}],
        "clusterQueues": [
            {
                "name": "a",
                "resourceGroups": [
                    {
                        "coveredResources": [GPU],
                        "flavors": [{"name": "f", "resources": [{"name": GPU, "nominalQuota": 8}]}],
                    }
                ],
            }
        ],
        "localQueues": [{"namespace": "default", "name": "a", "clusterQueue": "a"}],
    }
    pod_set = {"count": 1, "requests": {GPU: 1}, "devices": {"useUuids": ["GPU-later-0"]}}
    job = {"name": "pinned", "queueName": "a", "podSets": [pod_set]}
    job["runtime"] = {"durationSeconds": 10}
    h = build(parse.cluster(cluster), submissions([(0.0, job)]))
    card = Gpu(uuid="GPU-later-0", model="NVIDIA-A100", memory_mib=81920)
    later = nev.NodeRegistered(node="later", allocatable={"cpu": 64, GPU: 1}, gpus=(card,))
    h.schedule(
        NewEvent(stream_id=nev.stream("later"), event=later, occurred_at=500), producer="node-agent"
    )
    h.run(until=400)
    log = [e.event for e in h.log.envelopes]
    pending = [e for e in log if isinstance(e, qev.WorkloadPending)]
    assert pending[-1].reason == "Unschedulable"
    assert pending[-1].message.endswith("0/1 nodes are available: 1 CardUUIDMismatch")
    assert not [e for e in log if isinstance(e, qev.WorkloadRejected | qev.QuotaReserved)]
    h.run()
    (admitted,) = [e.event for e in h.log.envelopes if isinstance(e.event, qev.WorkloadAdmitted)]
    assert admitted.placements == {"main-0": "later"}


def test_a_pod_on_a_large_cluster_of_lookalike_nodes_is_a_few_looks_not_a_scan() -> None:
    """issue 16: "Index nodes by free capacity ... so best-fit is a lookup". 256 nodes of
    one shape, a cycle's 100 one-GPU pods on a view: each pod looks at one node per group
    of nodes in the same state (here at most three: empty, partly used, full), and the
    choice is binpack's, the fullest node that fits (Kueue's LeastFreeCapacity)."""
    book = book_of({"nodes": [{"name": "n", "count": 256, "allocatable": {"cpu": 96, GPU: 8}}]})
    cycle = view(book)
    looks = 0
    counted = book_module.fit_count

    def fit_count(node: Any, pod: Any) -> int:
        nonlocal looks
        looks += 1
        return counted(node, pod)

    spec = workload(podSets=[{"count": 1, "requests": {GPU: 1, "cpu": 1}}])
    with (
        mock.patch.object(engine, "fit_count", fit_count),
        mock.patch.object(book_module, "fit_count", fit_count),
    ):
        for i in range(100):
            got = place(cycle, f"w{i}", spec, demands(spec), PlacementPolicy())
            assert isinstance(got, Placement)
            assert got.nodes == {"main-0": f"n-{i // 8}"}
    assert looks <= 100 * 3  # a scan of the nodes in use alone would be ~600
    assert sum(n.pods for n in book.nodes.values()) == 0  # the view held them, not the book


def test_a_restored_book_rebuilds_its_groups_and_places_alike() -> None:
    """The groups by state are not in the queue's snapshot: a book restored from one
    places the next pods where the book it was taken from does."""
    book = book_of({"nodes": [gpu_nodes("n", 4, 8)]})
    spec = workload(podSets=[{"count": 3, "requests": {GPU: 3}}])
    assert isinstance(try_place(book, spec), Placement)  # the groups are built and kept
    restored = pickle.loads(pickle.dumps(book))
    assert restored._by_state is None
    for b in (book, restored):
        got = try_place(b, workload("next", podSets=[{"count": 2, "requests": {GPU: 2}}]))
        assert isinstance(got, Placement)
        assert sorted(got.nodes.values()) == ["n-0", "n-1"]  # the fullest that fit
