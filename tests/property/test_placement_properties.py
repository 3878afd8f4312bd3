"""Properties of placement on existing nodes over random clusters, workloads and losses.

Random clusters of declared nodes (1-4 GPUs each, random split counts and memory;
TPU node pools), random workloads (whole GPUs, HAMi shares in percent and MiB, MetaX
shares in percent and GiB, minCount gangs, exclusive JobSet slices, loose pods),
random cancellations, node losses and node agent restarts, run through the
virtual-time harness. Every check folds the event log on its own, never the queue's
``NodeBook``:

1. a GPU's cores, memory and split count are never over-allocated, and a 100 % share
   is alone on its GPU (also on the engine directly: the book's ``DeviceUse`` always
   equals what its held placements add up to);
2. a gang is placed whole (every pod of its admitted count) and started at one instant;
3. a pool an exclusive slice holds has no pod of another workload, and two slices of
   one workload never share a pool;
4. a lost node's workloads are evicted (or failed by their maxRestarts) at that instant,
   and without a limit they all succeed once the nodes come back;
5. runs are deterministic.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any
from unittest import mock

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from muster.core.events import Envelope
from muster.core.events import node as nev
from muster.core.events import queue as qev
from muster.core.events import workload as wev
from muster.core.model import parse
from muster.core.model.inventory import Gpu
from muster.core.model.workload import PlacementPolicy, WorkloadSpec
from muster.core.placement import engine as placement_engine
from muster.core.placement.book import NodeBook, Placement
from muster.core.placement.devices import DeviceShare
from muster.core.placement.engine import NoPlacement, demands, place
from muster.core.sim.harness import Harness, build

GPU = "nvidia.com/gpu"
GPU_CORES = "nvidia.com/gpucores"  # percent of each GPU
GPU_MEM = "nvidia.com/gpumem"  # MiB of each GPU
SGPU = "metax-tech.com/sgpu"
VCORE = "metax-tech.com/vcore"  # percent
VMEMORY = "metax-tech.com/vmemory"  # GiB
TPU = "google.com/tpu"
CPU = "cpu"
POOL = "cloud.google.com/gke-nodepool"
RESOURCES = (CPU, GPU, GPU_CORES, GPU_MEM, SGPU, VCORE, VMEMORY, TPU)
# What gives a workload's placement back (its quota and its nodes).
RELEASE = (qev.WorkloadEvicted, qev.WorkloadFinished, qev.WorkloadCancelled, qev.WorkloadRejected)
Doc = dict[str, Any]

SETTINGS = settings(
    max_examples=150,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


# -- inputs -----------------------------------------------------------------------------


def cluster_doc(nodes: list[Doc]) -> Doc:
    """Declared nodes behind one ClusterQueue whose quota never binds: placement decides."""
    return {
        "name": "c",
        "zones": ["z"],
        "nodes": nodes,
        "resourceFlavors": [{"name": "f"}],
        "clusterQueues": [
            {
                "name": "cq",
                "resourceGroups": [
                    {
                        "coveredResources": list(RESOURCES),
                        "flavors": [
                            {
                                "name": "f",
                                "resources": [
                                    {"name": r, "nominalQuota": 10**8} for r in RESOURCES
                                ],
                            }
                        ],
                    }
                ],
            }
        ],
        "localQueues": [{"namespace": "default", "name": "lq", "clusterQueue": "cq"}],
    }


def node_names(groups: Iterable[Doc]) -> list[str]:
    """The nodes a cluster description's groups declare (``<name>-<i>``, or ``name``)."""
    out = []
    for g in groups:
        count = g.get("count", 1)
        out += [g["name"]] if count == 1 else [f"{g['name']}-{i}" for i in range(count)]
    return out


@dataclass(frozen=True)
class Scenario:
    cluster: Doc
    workloads: tuple[tuple[float, str, Doc], ...]  # (submit at, id, document)
    cancels: tuple[tuple[float, str], ...] = ()
    losses: tuple[tuple[float, str], ...] = ()  # (at, node)
    restarts: tuple[float, ...] = ()  # node agent restarts: lost nodes register again

    def harness(self) -> Harness:
        subs = [(at, wid, parse.workload(doc)) for at, wid, doc in self.workloads]
        return build(
            parse.cluster(self.cluster),
            subs,
            self.cancels,
            node_losses=self.losses,
            agent_restarts=self.restarts,
        )

    def run(self) -> Harness:
        h = self.harness()
        h.run()
        return h


@st.composite
def gpu_groups(draw: st.DrawFn) -> list[Doc]:
    groups = []
    for g in range(draw(st.integers(1, 3))):
        gpus = draw(st.integers(1, 4))
        split = draw(st.integers(1, 8))
        groups.append(
            {
                "name": f"n{g}",
                "count": draw(st.integers(1, 2)),
                "allocatable": {CPU: draw(st.sampled_from([4, 16, 64])), GPU: gpus},
                "gpus": {
                    "count": gpus,
                    "model": draw(st.sampled_from(["A100", "MXC500"])),
                    "memory": f"{draw(st.sampled_from([8, 16, 24, 40, 80]))}Gi",
                    "split": split,
                },
            }
        )
    return groups


def device_requests(draw: st.DrawFn) -> dict[str, int]:
    """Whole GPUs, a HAMi share (percent, MiB) or a MetaX share (percent, GiB)."""
    kind = draw(st.sampled_from(["whole", "hami", "metax"]))
    n = draw(st.integers(1, 2))
    cores = draw(st.sampled_from([0, 10, 25, 30, 50, 60, 75, 100]))
    if kind == "whole":
        req = {GPU: n}
    elif kind == "hami":
        req = {GPU: n, GPU_CORES: cores, GPU_MEM: draw(st.integers(256, 24_000))}
    else:
        req = {SGPU: n, VCORE: cores, VMEMORY: draw(st.integers(1, 24))}
    if not cores:  # quantities are positive: an unset core figure is HAMi's 0 %
        req.pop(GPU_CORES, None)
        req.pop(VCORE, None)
    if draw(st.booleans()):
        req[CPU] = draw(st.integers(1, 8))
    return req


def gpu_workload(draw: st.DrawFn, name: str) -> Doc:
    pod_sets = []
    for p in range(draw(st.integers(1, 2))):
        count = draw(st.integers(1, 3))
        ps: Doc = {"name": f"ps{p}", "count": count, "requests": device_requests(draw)}
        if p == 0 and count > 1 and draw(st.booleans()):
            ps["minCount"] = draw(st.integers(1, count - 1))
        pod_sets.append(ps)
    doc: Doc = {
        "name": name,
        "queueName": "lq",
        "podSets": pod_sets,
        "runtime": {"durationSeconds": draw(st.integers(1, 300))},
    }
    if draw(st.integers(0, 3)) == 0:
        doc["placement"] = {
            "node": draw(st.sampled_from(["binpack", "spread"])),
            "gpu": draw(st.sampled_from(["binpack", "spread"])),
        }
    return doc


@st.composite
def gpu_scenarios(draw: st.DrawFn) -> Scenario:
    groups = draw(gpu_groups())
    workloads, cancels = [], []
    for i in range(draw(st.integers(1, 8))):
        at = draw(st.integers(0, 200))
        wid = f"w{i}"
        workloads.append((float(at), wid, gpu_workload(draw, wid)))
        if draw(st.integers(0, 3)) == 0:
            cancels.append((float(at + draw(st.integers(0, 300))), wid))
    losses: list[tuple[float, str]] = []
    restarts: list[float] = []
    if draw(st.booleans()):
        names = node_names(groups)
        for _ in range(draw(st.integers(1, 3))):
            losses.append((float(draw(st.integers(0, 400))), draw(st.sampled_from(names))))
        restarts = [float(draw(st.integers(0, 500))) for _ in range(draw(st.integers(0, 2)))]
    return Scenario(
        cluster_doc(groups), tuple(workloads), tuple(cancels), tuple(losses), tuple(restarts)
    )


# -- 1. GPU sharing ---------------------------------------------------------------------


def expected_share(requests: Mapping[str, int], gpu: Gpu) -> tuple[int, int, int]:
    """(devices, cores %, memory MiB of each) a pod's requests ask of a GPU like this one,
    as HAMi reads them (an unset core figure is 0; whole GPUs are 100 % and all memory)."""
    if requests.get(SGPU):
        return requests[SGPU], min(requests.get(VCORE, 0), 100), requests[VMEMORY] * 1024
    if GPU_CORES in requests or GPU_MEM in requests:
        return requests[GPU], min(requests.get(GPU_CORES, 0), 100), requests[GPU_MEM]
    return requests[GPU], 100, gpu.memory_mib


def check_gpus(gpus: Mapping[str, Gpu], shares: Iterable[DeviceShare], where: str) -> None:
    """No GPU over-allocated: cores <= 100 %, memory <= its own, pods <= split, and a
    100 % share alone."""
    per: dict[str, list[DeviceShare]] = {}
    for s in shares:
        per.setdefault(s.uuid, []).append(s)
    for uuid, on in per.items():
        gpu = gpus[uuid]
        cores = sum(s.cores for s in on)
        memory = sum(s.memory_mib for s in on)
        assert cores <= 100, f"{where}: {uuid} cores {cores} > 100: {on}"
        assert memory <= gpu.memory_mib, f"{where}: {uuid} memory {memory} > {gpu.memory_mib}"
        assert len(on) <= gpu.split, f"{where}: {uuid} shared by {len(on)} > split {gpu.split}"
        assert len(on) == 1 or all(s.cores < 100 for s in on), f"{where}: {uuid} 100 % shared"


def check_shares(
    spec: WorkloadSpec,
    placement: Placement,
    node_gpus: Mapping[str, tuple[Gpu, ...]],
    where: str,
) -> None:
    """Each pod got the devices it asked for, of its own node, each a different one."""
    assert set(placement.devices) <= set(placement.nodes), where
    for pod, node in placement.nodes.items():
        ps = next(p for p in spec.pod_sets if p.name == pod.rsplit("-", 1)[0])
        shares = placement.devices.get(pod, ())
        on_node = {g.uuid: g for g in node_gpus[node]}
        assert len({s.uuid for s in shares}) == len(shares), f"{where}: {pod} twice on a GPU"
        assert shares, f"{where}: {pod} on {node} got no device"
        for s in shares:
            assert s.uuid in on_node, f"{where}: {pod} on {node} got {s.uuid} of another node"
            count, cores, memory = expected_share(ps.requests, on_node[s.uuid])
            assert (s.cores, s.memory_mib) == (cores, memory), f"{where}: {pod}: {s}"
        assert len(shares) == count, f"{where}: {pod} got {len(shares)} GPUs, asked {count}"


@SETTINGS
@given(gpu_scenarios())
def test_a_gpus_cores_memory_and_split_are_never_over_allocated(sc: Scenario) -> None:
    h = sc.run()
    specs: dict[str, WorkloadSpec] = {}
    gpus: dict[str, Gpu] = {}
    node_gpus: dict[str, tuple[Gpu, ...]] = {}
    held: dict[str, Placement] = {}
    for env in h.log.envelopes:
        ev = env.event
        where = f"t={env.occurred_at} #{env.position} {env.type}"
        if isinstance(ev, wev.WorkloadSubmitted):
            specs[ev.workload_id] = ev.spec
            continue
        if isinstance(ev, nev.NodeRegistered):
            node_gpus[ev.node] = ev.gpus
            gpus.update((g.uuid, g) for g in ev.gpus)
            continue
        if isinstance(ev, qev.QuotaReserved):
            assert ev.workload_id not in held, f"{where}: {ev.workload_id} reserved twice"
            if ev.placement is None:
                continue  # no empty node could hold it: the provisioner's (none here)
            check_shares(specs[ev.workload_id], ev.placement, node_gpus, where)
            held[ev.workload_id] = ev.placement
        elif isinstance(ev, RELEASE):
            held.pop(ev.workload_id, None)
        else:
            continue
        check_gpus(gpus, (s for p in held.values() for ss in p.devices.values() for s in ss), where)


# -- 1b. the engine and its book, without the queue ------------------------------------


@dataclass(frozen=True)
class BookRun:
    nodes: tuple[Doc, ...]
    ops: tuple[tuple[str, Any, bool], ...]  # ("place", workload, first fit) | (op, index, _)


@st.composite
def book_runs(draw: st.DrawFn) -> BookRun:
    groups = draw(gpu_groups())
    ops: list[tuple[str, Any, bool]] = []
    for i in range(draw(st.integers(1, 30))):
        kind = draw(st.sampled_from(["place", "place", "place", "release", "lose", "register"]))
        if kind == "place":
            ops.append((kind, gpu_workload(draw, f"w{i}"), draw(st.booleans())))
        else:
            ops.append((kind, draw(st.integers(0, 1000)), False))
    return BookRun(tuple(groups), tuple(ops))


def book_snapshot(book: NodeBook) -> object:
    return (
        sorted(
            (
                name,
                n.ready,
                sorted(n.free.items()),
                [(u.cores, u.memory_mib, u.pods, u.exclusive) for u in n.devices],
                n.pods,
                sorted(n.workloads.items()),
            )
            for name, n in book.nodes.items()
        ),
        sorted((w, h.placement.nodes, h.placement.devices) for w, h in book.held.items()),
        sorted(book.exclusive.items()),
    )


def check_book(book: NodeBook, specs: Mapping[str, WorkloadSpec], where: str) -> None:
    """The book's per-node and per-device figures are exactly its held placements' sums."""
    pods: Counter[str] = Counter()
    per_node: dict[str, Counter[str]] = {name: Counter() for name in book.nodes}
    cpu: Counter[str] = Counter()
    shares: dict[str, list[DeviceShare]] = {}
    for wid, held in book.held.items():
        spec = specs[wid]
        for pod, node in held.placement.nodes.items():
            ps = next(p for p in spec.pod_sets if p.name == pod.rsplit("-", 1)[0])
            pods[node] += 1
            per_node[node][wid] += 1
            cpu[node] += ps.requests.get(CPU, 0)
        for pod_shares in held.placement.devices.values():
            for s in pod_shares:
                shares.setdefault(s.uuid, []).append(s)
    gpus = {g.uuid: g for n in book.nodes.values() for g in n.inv.gpus}
    for name, n in book.nodes.items():
        at = f"{where}: node {name}"
        assert n.pods == pods[name], f"{at}: {n.pods} pods, held placements say {pods[name]}"
        assert dict(n.workloads) == dict(per_node[name]), f"{at}: {n.workloads}"
        assert n.free.get(CPU, 0) == n.inv.allocatable.get(CPU, 0) - cpu[name], at
        for gpu, use in zip(n.inv.gpus, n.devices, strict=True):
            on = shares.get(gpu.uuid, [])
            want = (
                sum(s.cores for s in on),
                sum(s.memory_mib for s in on),
                len(on),
                any(s.cores >= 100 for s in on),
            )
            got = (use.cores, use.memory_mib, use.pods, use.exclusive)
            assert got == want, f"{at}: {gpu.uuid} use {got}, held placements say {want}"
    check_gpus(gpus, (s for on in shares.values() for s in on), where)


@SETTINGS
@given(book_runs())
def test_the_book_never_over_allocates_and_matches_its_held_placements(run: BookRun) -> None:
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
            spec = parse.workload(arg)
            specs[spec.name] = spec
            before = book_snapshot(book)
            ready = {n for n, s in book.nodes.items() if s.ready}
            want = demands(spec)
            got = place(
                book,
                spec.name,
                spec,
                want,
                spec.placement or PlacementPolicy(),
                first_fit=first_fit,
            )
            if isinstance(got, NoPlacement):
                assert book_snapshot(book) == before, f"{where}: a failed search left charges"
            else:
                assert set(got.nodes) == {p.name for d in want for p in d.pods}, where
                assert set(got.nodes.values()) <= ready, f"{where}: placed on a node not ready"
                assert book.held[spec.name].placement == got, where
                check_shares(spec, got, node_gpus, where)
        elif kind == "release":
            if book.held:
                book.release(sorted(book.held)[arg % len(book.held)])
        elif kind == "lose":
            book.lose(names[arg % len(names)])
        else:
            book.register(inventory[names[arg % len(names)]])
        check_book(book, specs, where)
    for wid in sorted(book.held):
        book.release(wid)
    assert all(n.pods == 0 and not n.workloads for n in book.nodes.values())
    assert all(
        u.pods == u.cores == u.memory_mib == 0 for n in book.nodes.values() for u in n.devices
    )


# -- 2. gangs ---------------------------------------------------------------------------


def pods_of(spec: WorkloadSpec, counts: Mapping[str, int]) -> set[str]:
    out: set[str] = set()
    for ps in spec.pod_sets:
        n = counts.get(ps.name, ps.count)
        if ps.name in counts:
            assert ps.min_count is not None and ps.min_count <= n < ps.count, (ps, n)
        out |= {f"{ps.name}-{i}" for i in range(n)}
    return out


@SETTINGS
@given(gpu_scenarios())
def test_a_gang_is_never_split_or_partially_started(sc: Scenario) -> None:
    h = sc.run()
    specs: dict[str, WorkloadSpec] = {}
    current: dict[str, int] = {}  # workload -> attempt holding quota
    reserved: dict[tuple[str, int], Placement] = {}
    admitted: dict[tuple[str, int], float] = {}
    ended: dict[tuple[str, int], float] = {}
    started: dict[tuple[str, int], list[tuple[float, str, str]]] = {}
    for env in h.log.envelopes:
        ev, t = env.event, env.occurred_at
        where = f"t={t} #{env.position} {env.type}"
        if isinstance(ev, wev.WorkloadSubmitted):
            specs[ev.workload_id] = ev.spec
        elif isinstance(ev, qev.QuotaReserved):
            key = (ev.workload_id, ev.attempt)
            current[ev.workload_id] = ev.attempt
            if ev.placement is None:
                continue  # no empty node could hold it: never admitted (no node pools here)
            assert set(ev.placement.nodes) == pods_of(specs[ev.workload_id], ev.pod_counts), (
                f"{where}: placement {sorted(ev.placement.nodes)} counts {dict(ev.pod_counts)}"
            )
            reserved[key] = ev.placement
        elif isinstance(ev, qev.WorkloadAdmitted):
            key = (ev.workload_id, ev.attempt)
            assert current.get(ev.workload_id) == ev.attempt, f"{where}: {key} holds no quota"
            assert key in reserved, f"{where}: {key} admitted without a placement"
            placement = reserved[key]
            assert dict(ev.placements) == dict(placement.nodes), f"{where}: {key} pods changed"
            assert dict(ev.devices) == dict(placement.devices), f"{where}: {key} devices changed"
            admitted[key] = t
        elif isinstance(ev, RELEASE):
            attempt = current.pop(ev.workload_id, None)
            if attempt is not None:
                ended[(ev.workload_id, attempt)] = t
        elif isinstance(ev, nev.PodStarted):
            key = (ev.workload_id, ev.attempt)
            assert key in admitted, f"{where}: {ev.pod} of {key} started before admission"
            assert key not in ended, f"{where}: {ev.pod} of {key} started after it ended"
            assert ev.run == 0, where  # no pod fails here: nothing is replaced
            assert reserved[key].nodes.get(ev.pod) == ev.node, f"{where}: {ev.pod} elsewhere"
            started.setdefault(key, []).append((t, ev.pod, ev.node))
    for key, at in admitted.items():
        starts = started.get(key, [])
        pods = [p for _, p, _ in starts]
        times = {t for t, _, _ in starts}
        assert len(pods) == len(set(pods)), f"{key}: a pod started twice: {pods}"
        assert times <= {at}, f"{key} admitted at {at}, pods started at {sorted(times)}"
        if set(pods) != set(reserved[key].nodes):
            # only when the attempt was cut short (its node lost, cancelled) that instant
            assert ended.get(key) == at, (
                f"{key}: {sorted(pods)} of {sorted(reserved[key].nodes)} started, "
                f"ended {ended.get(key)}"
            )


# -- 3. exclusive pools -----------------------------------------------------------------


@st.composite
def pool_scenarios(draw: st.DrawFn) -> Scenario:
    groups: list[Doc] = [
        {
            "name": f"pool{p}",
            "count": draw(st.integers(1, 3)),
            "allocatable": {TPU: 4, CPU: 16},
            "labels": {POOL: f"pool{p}"},
        }
        for p in range(draw(st.integers(1, 4)))
    ]
    if draw(st.booleans()):
        groups.append({"name": "spare", "count": draw(st.integers(1, 2)), "allocatable": {TPU: 4}})
    workloads, cancels = [], []
    for i in range(draw(st.integers(1, 7))):
        at = draw(st.integers(0, 200))
        wid = f"w{i}"
        if draw(st.booleans()):
            size = draw(st.integers(1, 3))
            ps: Doc = {
                "name": "slice",
                "count": size * draw(st.integers(1, 3)),
                "requests": {TPU: draw(st.sampled_from([1, 2, 4]))},
                "topology": {"exclusive": POOL, "sliceSize": size},
            }
        else:
            count = draw(st.integers(1, 3))
            ps = {"name": "main", "count": count, "requests": {TPU: draw(st.integers(1, 4))}}
        doc = {
            "name": wid,
            "queueName": "lq",
            "podSets": [ps],
            "runtime": {"durationSeconds": draw(st.integers(1, 300))},
        }
        workloads.append((float(at), wid, doc))
        if draw(st.integers(0, 4)) == 0:
            cancels.append((float(at + draw(st.integers(0, 300))), wid))
    return Scenario(cluster_doc(groups), tuple(workloads), tuple(cancels))


def slice_pools(
    spec: WorkloadSpec, placement: Placement, pool_of: Mapping[str, str | None], where: str
) -> set[str]:
    """The pools of the workload's exclusive slices: each slice on one pool, one each."""
    pools: list[str] = []
    for ps in spec.pod_sets:
        topo = ps.topology
        if topo is None or topo.exclusive is None:
            continue
        size = topo.slice_size or ps.count
        slices: dict[int, set[str | None]] = {}
        for pod, node in placement.nodes.items():
            name, index = pod.rsplit("-", 1)
            if name == ps.name:
                slices.setdefault(int(index) // size, set()).add(pool_of[node])
        for i, on in sorted(slices.items()):
            assert len(on) == 1 and None not in on, f"{where}: slice {i} on pools {on}"
            pools.append(next(iter(on)))  # type: ignore[arg-type]
    assert len(pools) == len(set(pools)), f"{where}: two slices share a pool: {pools}"
    assert sorted(placement.exclusive) == sorted((POOL, p) for p in pools), (
        f"{where}: holds {placement.exclusive}, slices on {pools}"
    )
    return set(pools)


# One pool of two nodes. w0, a JobSet of one 1-pod slice, takes pool0 exclusively (on
# pool0-0); w1, a loose pod, is placed on pool0-1 while w0 holds the pool: the engine
# keeps a slice off pools with other workloads' pods, not other pods off a slice's pool.
LOOSE_ON_EXCLUSIVE = Scenario(
    cluster_doc(
        [{"name": "pool0", "count": 2, "allocatable": {TPU: 4}, "labels": {POOL: "pool0"}}]
    ),
    (
        (
            0.0,
            "w0",
            {
                "name": "w0",
                "queueName": "lq",
                "podSets": [
                    {
                        "name": "slice",
                        "count": 1,
                        "requests": {TPU: 4},
                        "topology": {"exclusive": POOL, "sliceSize": 1},
                    }
                ],
                "runtime": {"durationSeconds": 100},
            },
        ),
        (
            1.0,
            "w1",
            {
                "name": "w1",
                "queueName": "lq",
                "podSets": [{"name": "main", "count": 1, "requests": {TPU: 4}}],
                "runtime": {"durationSeconds": 100},
            },
        ),
    ),
)


@SETTINGS
@example(LOOSE_ON_EXCLUSIVE)
@given(pool_scenarios())
def test_an_exclusive_pool_is_never_shared(sc: Scenario) -> None:
    h = sc.run()
    specs: dict[str, WorkloadSpec] = {}
    pool_of: dict[str, str | None] = {}
    held: dict[str, tuple[Placement, set[str]]] = {}  # workload -> placement, its pools
    for env in h.log.envelopes:
        ev = env.event
        where = f"t={env.occurred_at} #{env.position} {env.type}"
        if isinstance(ev, wev.WorkloadSubmitted):
            specs[ev.workload_id] = ev.spec
            continue
        if isinstance(ev, nev.NodeRegistered):
            pool_of[ev.node] = ev.labels.get(POOL)
            continue
        if isinstance(ev, qev.QuotaReserved):
            assert ev.placement is not None, where  # every pod fits an empty node here
            pools = slice_pools(specs[ev.workload_id], ev.placement, pool_of, where)
            held[ev.workload_id] = (ev.placement, pools)
        elif isinstance(ev, RELEASE):
            held.pop(ev.workload_id, None)
        else:
            continue
        owner: dict[str, str] = {}
        for wid, (_, pools) in held.items():
            for pool in pools:
                assert owner.setdefault(pool, wid) == wid, f"{where}: {pool} held twice"
        for wid, (placement, _) in held.items():
            for pod, node in placement.nodes.items():
                on = pool_of[node]
                assert on is None or owner.get(on, wid) == wid, (
                    f"{where}: {wid}'s pod {pod} on {node}, in {on} that {owner[on]} "
                    "holds exclusively"
                )


# -- 4. lost nodes ----------------------------------------------------------------------


@st.composite
def loss_scenarios(draw: st.DrawFn) -> Scenario:
    """Identical nodes, every workload fits them all (pods of one size dividing a node's
    GPUs), losses before t=300 and an agent restart at t=400 that brings all back."""
    per_node = draw(st.sampled_from([2, 4]))
    count = draw(st.integers(2, 4))
    groups: list[Doc] = [
        {
            "name": "n",
            "count": count,
            "allocatable": {CPU: 64, GPU: per_node},
            "gpus": {"count": per_node, "model": "A100", "memory": "40Gi"},
        }
    ]
    workloads = []
    for i in range(draw(st.integers(1, 5))):
        wid = f"w{i}"
        size = draw(st.sampled_from([s for s in (1, 2, 4) if s <= per_node]))
        room = count * per_node // size
        first = draw(st.integers(1, min(room, 4)))
        pod_sets: list[Doc] = [{"name": "a", "count": first, "requests": {GPU: size}}]
        if first < room and draw(st.booleans()):
            second = draw(st.integers(1, min(room - first, 4)))
            pod_sets.append({"name": "b", "count": second, "requests": {GPU: size}})
        doc: Doc = {
            "name": wid,
            "queueName": "lq",
            "podSets": pod_sets,
            "runtime": {"durationSeconds": draw(st.integers(10, 200))},
        }
        if draw(st.booleans()):
            doc["failurePolicy"] = {"maxRestarts": draw(st.integers(0, 2))}
        workloads.append((float(draw(st.integers(0, 150))), wid, doc))
    names = node_names(groups)
    losses = tuple(
        (float(draw(st.integers(0, 300))), draw(st.sampled_from(names)))
        for _ in range(draw(st.integers(1, 4)))
    )
    restarts = tuple(float(draw(st.integers(0, 300))) for _ in range(draw(st.integers(0, 2))))
    return Scenario(cluster_doc(groups), tuple(workloads), (), losses, (*restarts, 400.0))


@SETTINGS
@given(loss_scenarios())
def test_a_lost_nodes_workloads_always_come_back_to_the_queue(sc: Scenario) -> None:
    h = sc.run()
    log = h.log.envelopes
    specs: dict[str, WorkloadSpec] = {}
    held: dict[str, tuple[int, Mapping[str, str]]] = {}  # workload -> attempt, pod -> node
    done: dict[str, set[str]] = {}  # pods of the holding attempt that succeeded
    lost: set[str] = set()
    owed: dict[str, str] = {}  # workload -> the lost node it must be released from
    restarts: Counter[str] = Counter()
    now = 0.0

    def end_of_instant() -> None:
        assert not owed, f"t={now}: still holding on a lost node: {owed}"
        for wid, (_, nodes) in held.items():
            on_lost = {p: n for p, n in nodes.items() if n in lost and p not in done[wid]}
            assert not on_lost, f"t={now}: {wid} holds pods on lost nodes {on_lost}"

    for env in log:
        ev = env.event
        if env.occurred_at != now:
            end_of_instant()
            now = env.occurred_at
        where = f"t={now} #{env.position} {env.type}"
        if isinstance(ev, wev.WorkloadSubmitted):
            specs[ev.workload_id] = ev.spec
        elif isinstance(ev, nev.NodeLost):
            lost.add(ev.node)
            for wid, (_, nodes) in held.items():
                if any(n == ev.node and p not in done[wid] for p, n in nodes.items()):
                    owed.setdefault(wid, ev.node)
        elif isinstance(ev, nev.NodeRegistered):
            lost.discard(ev.node)
        elif isinstance(ev, qev.QuotaReserved):
            assert ev.placement is not None, where  # every pod fits an empty node here
            on = set(ev.placement.nodes.values())
            assert not on & lost, f"{where}: {ev.workload_id} placed on lost {on & lost}"
            held[ev.workload_id] = (ev.attempt, ev.placement.nodes)
            done[ev.workload_id] = set()
        elif isinstance(ev, nev.PodSucceeded):
            if held.get(ev.workload_id, (None,))[0] == ev.attempt:
                done[ev.workload_id].add(ev.pod)
        elif isinstance(ev, RELEASE):
            wid = ev.workload_id
            held.pop(wid, None)
            if isinstance(ev, qev.WorkloadEvicted) and ev.restart:
                restarts[wid] += 1
            node = owed.pop(wid, None)
            if node is None:
                continue
            why = (type(ev).__name__, getattr(ev, "reason", None))
            policy = specs[wid].failure_policy
            if isinstance(ev, qev.WorkloadFinished):
                assert (ev.outcome, ev.reason) == ("Failed", "MaxRestartsReached"), (where, why)
                assert policy.max_restarts is not None, where
            else:
                assert why == ("WorkloadEvicted", "NodeLost"), f"{where}: {wid} {why} ({node})"
    end_of_instant()

    finished: dict[str, list[qev.WorkloadFinished]] = {}
    for env in log:
        if isinstance(env.event, qev.WorkloadFinished):
            finished.setdefault(env.event.workload_id, []).append(env.event)
    for _, wid, _ in sc.workloads:
        limit = specs[wid].failure_policy.max_restarts
        outcomes = [(e.outcome, e.reason) for e in finished.get(wid, [])]
        assert len(outcomes) == 1, f"{wid}: finished {outcomes}"
        if limit is None or outcomes[0][0] == "Succeeded":
            assert outcomes[0][0] == "Succeeded", f"{wid}: {outcomes}"
        else:
            assert outcomes == [("Failed", "MaxRestartsReached")], f"{wid}: {outcomes}"
            assert restarts[wid] == limit, f"{wid}: {restarts[wid]} restarts, limit {limit}"
        assert limit is None or restarts[wid] <= limit, f"{wid}: {restarts[wid]} > {limit}"


# -- 5. determinism ---------------------------------------------------------------------


def wire(log: Iterable[Envelope]) -> list[str]:
    return [json.dumps(env.to_wire(), sort_keys=True) for env in log]


@settings(SETTINGS, max_examples=30)
@given(st.one_of(gpu_scenarios(), pool_scenarios(), loss_scenarios()))
def test_the_same_scenario_gives_a_byte_identical_log(sc: Scenario) -> None:
    assert wire(sc.run().log.envelopes) == wire(sc.run().log.envelopes)


class _EveryNode:
    """The placement engine's search without its index of empty nodes: every candidate."""

    def __init__(self, book: NodeBook, candidates: Any) -> None:
        self.candidates = list(candidates)

    def worth_a_look(self) -> list[Any]:
        return self.candidates

    def taken(self, node: Any) -> None:
        pass


def _placements(run: BookRun) -> list[object]:
    cluster = parse.cluster(cluster_doc(list(run.nodes)))
    inventory = {n.name: n for n in cluster.nodes}
    names = sorted(inventory)
    book = NodeBook(cluster.topology)
    for inv in cluster.nodes:
        book.register(inv)
    out: list[object] = []
    for kind, arg, first_fit in run.ops:
        if kind == "place":
            spec = parse.workload(arg)
            policy = spec.placement or PlacementPolicy()
            out.append(place(book, spec.name, spec, demands(spec), policy, first_fit=first_fit))
        elif kind == "release" and book.held:
            book.release(sorted(book.held)[arg % len(book.held)])
        elif kind == "lose":
            book.lose(names[arg % len(names)])
        elif kind == "register":
            book.register(inventory[names[arg % len(names)]])
    return out


@given(book_runs())
def test_looking_at_one_empty_node_per_shape_places_as_looking_at_every_node(
    run: BookRun,
) -> None:
    indexed = _placements(run)
    with mock.patch.object(placement_engine, "_EmptyByShape", _EveryNode):
        assert _placements(run) == indexed
