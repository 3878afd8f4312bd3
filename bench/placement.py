"""Gang placement on existing nodes: the pure placement engine at cluster scale.

The shape (the project's issue: "Placing 1,000 gangs of 8 pods x 8 GPUs on 10,000 nodes
in a 3-level topology: time per placement and fragmentation (free whole nodes and groups
afterwards) against a first-fit baseline in the same run"):

* the cluster: 10,000 x ``--scale`` nodes of 8 GPUs (``nvidia.com/gpu: 8``, 8 declared devices,
  192 cpu) in a 3-level topology ``topology.example/zone`` > ``block`` > ``rack`` (the
  hostname level is implied). A rack has 16 nodes, but 15 % of racks are short (8, 10,
  12 or 14 nodes), so best fit has something to choose; 8 racks make a block and the
  blocks are split evenly over 4 zones. Nodes register in topology order;
* the background, before the gangs: small workloads until they have asked for 50 % of the
  GPUs. 70 % are single pods of 1-4 GPUs, 30 % gangs of 2-4 pods of 1, 2, 4 or 8 GPUs,
  all with ``preferred: rack``. 30 % of them are released again (churn), half while the
  background fills and half at its end, leaving about 35 % of the GPUs in use, in holes;
* the gangs: 1,000 x ``--scale`` gangs of 8 pods x 8 GPUs (8 whole nodes), 75 % with
  ``preferred: rack`` (then block, zone, anywhere) and 25 % with ``required: block``.
  60 % of the gangs are released again 5-50 % of the run later. Before each gang the
  background churns: a new small workload (running for 2-40 % of the run) arrives, and
  with probability 0.5 one of the original background workloads is released.

Everything is drawn from ``--seed`` before anything is placed, and releases are
scheduled by position in that sequence, so both runs perform the same operations (a
release of something that was not placed is a no-op). The scenario runs twice, in one
process, on a fresh ``NodeBook`` each time: with the engine's default policy (binpack:
the fullest node, the domain with the least room that fits) and with ``first_fit=True``
(the first domain and node in registration order that fits), the baseline of the ratios.

Reported per run: gangs placed and failed; ms per gang placement (``time.perf_counter``
around ``place``: mean, p50, p99, max, and the mean of the placed and of the failed
ones; also its CPU time, ``time.process_time``, which a busy machine disturbs less);
whether each placed gang landed in one rack, one block, one zone or wider; fragmentation
before the gangs and at the end (``NodeBook.fragmentation``: whole free nodes, racks,
blocks, zones; plus racks and blocks with room for one more gang, nodes partly used and
the GPUs free on them); and the headroom at the end: how many more gangs fit, first each
in one block (``required: block``) until one fails, then anywhere (``preferred: rack``)
until one fails. Checked at the end of each run (``FAILED:`` and exit 1 if not): every
background, churn and gang placement of the scenario was placed (it is sized so that all
fit: a failed one would make the times and fragmentation those of another scenario); no
GPU is held twice and each node's device use equals what the held placements say; every
held gang has 8 pods on 8 different nodes with 8 GPUs each, a ``required: block`` one
inside one block; and releasing everything leaves every node empty.

The default is 0.3 of the issue's size (3,000 nodes, 300 gangs; ~15 s on 2 cores);
``--full`` runs the issue's size (~2 min, most of it placing the background twice).
``--scale`` sets nodes and gangs together. ``--profile N`` runs the binpack scenario a
third time with cProfile over its gang phase and prints the top N entries (the timed runs
are never profiled).

    python -m bench.placement [--full | --scale 0.3] [--seed 1] [--profile N]
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import io
import pstats
import random
import time
from collections import Counter
from dataclasses import dataclass, field

from bench import check_outcome, machine, ratio
from muster.core.model.inventory import Gpu, NodeInventory, TopologySpec
from muster.core.model.workload import PlacementPolicy, PodSet, PodSetTopology, WorkloadSpec
from muster.core.placement.book import NodeBook, Placement
from muster.core.placement.engine import NoPlacement, demands, place
from muster.core.sim.summary import percentile

GPU = "nvidia.com/gpu"
ZONE, BLOCK, RACK = (f"topology.example/{lv}" for lv in ("zone", "block", "rack"))
LEVELS = (ZONE, BLOCK, RACK)
GPUS_PER_NODE = 8
CPU_PER_NODE = 192
CPU_PER_GPU = 12
RACK_NODES = 16
SHORT_RACKS = (8, 10, 12, 14)
SHORT_SHARE = 0.15
RACKS_PER_BLOCK = 8
ZONES = 4
GANG_PODS = 8
DEFAULT_SCALE = 0.3
GANG_RELEASE_SHARE = 0.6  # of the gangs, released 5-50 % of the run later


# -- the scenario -------------------------------------------------------------------------


def cluster(nodes: int, seed: int) -> list[NodeInventory]:
    """The nodes in registration (topology) order."""
    rng = random.Random(seed)
    racks: list[int] = []
    while sum(racks) < nodes:
        racks.append(rng.choice(SHORT_RACKS) if rng.random() < SHORT_SHARE else RACK_NODES)
    racks[-1] -= sum(racks) - nodes
    blocks = (len(racks) + RACKS_PER_BLOCK - 1) // RACKS_PER_BLOCK
    out: list[NodeInventory] = []
    for r, size in enumerate(racks):
        b = r // RACKS_PER_BLOCK
        z = b * ZONES // blocks
        labels = {ZONE: f"z{z}", BLOCK: f"b{b:03d}", RACK: f"r{r:04d}"}
        for _ in range(size):
            k = len(out)
            out.append(
                NodeInventory(
                    name=f"node-{k:05d}",
                    allocatable={GPU: GPUS_PER_NODE, "cpu": CPU_PER_NODE},
                    labels=labels,
                    gpus=tuple(
                        Gpu(uuid=f"GPU-{k:05d}-{g}", model="NVIDIA-H100", memory_mib=81920, index=g)
                        for g in range(GPUS_PER_NODE)
                    ),
                )
            )
    return out


def spec(name: str, pods: int, gpus: int, topology: PodSetTopology) -> WorkloadSpec:
    return WorkloadSpec(
        name=name,
        namespace="bench",
        queue_name="q",
        pod_sets=(
            PodSet(
                name="worker",
                count=pods,
                requests={GPU: gpus, "cpu": CPU_PER_GPU * gpus},
                topology=topology,
            ),
        ),
    )


@dataclass(frozen=True, slots=True)
class Op:
    kind: str  # "background" | "gang" | "release"
    name: str
    spec: WorkloadSpec | None = None


@dataclass(slots=True)
class Scenario:
    nodes: list[NodeInventory]
    background: list[Op]  # the fill before the gangs
    gangs: list[Op]  # the gang phase, with its churn
    background_gpus: int  # asked for by the fill


def small(rng: random.Random, name: str) -> WorkloadSpec:
    rack = PodSetTopology(preferred=RACK)
    if rng.random() < 0.7:
        return spec(name, 1, rng.choice((1, 1, 1, 2, 2, 3, 4, 4)), rack)
    return spec(name, rng.randint(2, 4), rng.choice((1, 2, 4, 8)), rack)


def gpus_of(s: WorkloadSpec) -> int:
    return sum(ps.count * ps.requests[GPU] for ps in s.pod_sets)


def scenario(nodes: int, gangs: int, seed: int) -> Scenario:
    """Every operation of a run, drawn before anything is placed."""
    rng = random.Random(seed)
    inventory = cluster(nodes, seed)
    target = nodes * GPUS_PER_NODE // 2
    specs: list[WorkloadSpec] = []
    asked = 0
    while asked < target:
        specs.append(small(rng, f"bg-{len(specs):06d}"))
        asked += gpus_of(specs[-1])
    # Churn: 15 % released while the fill goes on, 15 % at its end; the rest stay,
    # some of them until the gang phase releases them.
    later: dict[int, list[str]] = {}
    at_end: list[str] = []
    staying: list[str] = []
    for i, s in enumerate(specs):
        draw = rng.random()
        if draw < 0.15:
            later.setdefault(i + rng.randint(1, max(1, len(specs) // 10)), []).append(s.name)
        elif draw < 0.30:
            at_end.append(s.name)
        else:
            staying.append(s.name)
    background: list[Op] = []
    for i, s in enumerate(specs):
        background.extend(Op("release", name) for name in later.pop(i, ()))
        background.append(Op("background", s.name, s))
    for names in later.values():
        background.extend(Op("release", name) for name in names)
    background.extend(Op("release", name) for name in at_end)

    rng.shuffle(staying)
    releases: dict[int, list[str]] = {}
    phase: list[Op] = []
    for i in range(gangs):
        if staying and rng.random() < 0.5:
            phase.append(Op("release", staying.pop()))
        churn = small(rng, f"churn-{i:05d}")
        phase.append(Op("background", churn.name, churn))
        ends = i + rng.randint(max(1, gangs // 50), max(1, gangs * 2 // 5))
        releases.setdefault(ends, []).append(churn.name)
        phase.extend(Op("release", name) for name in releases.pop(i, ()))
        name = f"gang-{i:05d}"
        topo = (
            PodSetTopology(required=BLOCK)
            if rng.random() < 0.25
            else PodSetTopology(preferred=RACK)
        )
        phase.append(Op("gang", name, spec(name, GANG_PODS, GPUS_PER_NODE, topo)))
        if rng.random() < GANG_RELEASE_SHARE:
            ends = i + rng.randint(max(1, gangs // 20), max(1, gangs // 2))
            releases.setdefault(ends, []).append(name)
    return Scenario(inventory, background, phase, asked)


# -- one run ------------------------------------------------------------------------------


@dataclass(slots=True)
class Frag:
    free_nodes: int
    free_racks: int
    free_blocks: int
    free_zones: int
    racks: int
    blocks: int
    gang_racks: int  # racks with >= 8 whole free nodes: room for one more gang
    gang_blocks: int
    partial_nodes: int  # nodes partly used
    stranded_gpus: int  # free GPUs on partly used nodes


def fragmentation(book: NodeBook) -> Frag:
    f = book.fragmentation()

    def gang_room(level: str) -> int:
        return sum(
            1
            for members in book.domains(level).values()
            if sum(1 for n in members if n.empty()) >= GANG_PODS
        )

    partial = [n for n in book.nodes.values() if n.ready and 0 < n.free_devices() < len(n.devices)]
    return Frag(
        free_nodes=f["free_nodes"],
        free_racks=f[f"free_{RACK}"],
        free_blocks=f[f"free_{BLOCK}"],
        free_zones=f[f"free_{ZONE}"],
        racks=f[f"all_{RACK}"],
        blocks=f[f"all_{BLOCK}"],
        gang_racks=gang_room(RACK),
        gang_blocks=gang_room(BLOCK),
        partial_nodes=len(partial),
        stranded_gpus=sum(n.free_devices() for n in partial),
    )


SPANS = ("rack", "block", "zone", "wider")


@dataclass(slots=True)
class Run:
    label: str
    first_fit: bool
    gang_ms: list[float] = field(default_factory=list)
    gang_cpu_ms: list[float] = field(default_factory=list)
    placed_ms: list[float] = field(default_factory=list)
    failed_ms: list[float] = field(default_factory=list)
    fill_ms: list[float] = field(default_factory=list)
    fill_failed: int = 0
    churn_ms: list[float] = field(default_factory=list)
    churn_failed: int = 0
    failures: Counter[str] = field(default_factory=Counter)
    span_ms: dict[str, list[float]] = field(default_factory=lambda: {s: [] for s in SPANS})
    required_placed: int = 0
    required_failed: int = 0
    setup_s: float = 0.0
    gang_phase_s: float = 0.0
    before: Frag | None = None
    after: Frag | None = None
    violations: list[str] = field(default_factory=list)
    # Headroom at the end: more gangs, required block until one fails, then preferred rack.
    more_in_block: int = 0
    more_anywhere: int = 0
    more_in_rack: int = 0  # of ``more_anywhere``
    probe_fail_ms: list[float] = field(default_factory=list)

    @property
    def placed(self) -> int:
        return len(self.placed_ms)

    @property
    def failed(self) -> int:
        return len(self.failed_ms)

    def landed(self, span: str) -> int:
        return len(self.span_ms[span])


def run(sc: Scenario, label: str, first_fit: bool, profiler: cProfile.Profile | None = None) -> Run:
    """The scenario on a fresh book; ``profiler`` (if given) runs over the gang phase."""
    out = Run(label, first_fit)
    policy = PlacementPolicy()
    gc.collect()
    started = time.perf_counter()
    book = NodeBook(TopologySpec(name="bench", levels=LEVELS))
    for inv in sc.nodes:
        book.register(inv)
    path = {n.name: (n.labels[ZONE], n.labels[BLOCK], n.labels[RACK]) for n in sc.nodes}
    required: set[str] = set()
    gang_phase = False

    def execute(op: Op) -> None:
        if op.kind == "release":
            book.release(op.name)
            return
        assert op.spec is not None
        want = demands(op.spec)
        t0, c0 = time.perf_counter(), time.process_time()
        got = place(book, op.name, op.spec, want, policy, first_fit=first_fit)
        ms = (time.perf_counter() - t0) * 1000
        cpu_ms = (time.process_time() - c0) * 1000
        if op.kind == "background":
            (out.churn_ms if gang_phase else out.fill_ms).append(ms)
            if isinstance(got, NoPlacement):
                if gang_phase:
                    out.churn_failed += 1
                else:
                    out.fill_failed += 1
            return
        out.gang_ms.append(ms)
        out.gang_cpu_ms.append(cpu_ms)
        topology = op.spec.pod_sets[0].topology
        is_required = topology is not None and topology.required is not None
        if isinstance(got, NoPlacement):
            out.failed_ms.append(ms)
            out.failures[got.reason] += 1
            out.required_failed += is_required
            return
        out.placed_ms.append(ms)
        out.required_placed += is_required
        if is_required:
            required.add(op.name)
        paths = {path[n] for n in got.nodes.values()}
        for depth, span in ((3, "rack"), (2, "block"), (1, "zone"), (0, "wider")):
            if len({p[:depth] for p in paths}) == 1:
                out.span_ms[span].append(ms)
                break

    for op in sc.background:
        execute(op)
    out.setup_s = time.perf_counter() - started
    out.before = fragmentation(book)

    gang_phase = True
    started = time.perf_counter()
    if profiler is not None:
        profiler.enable()
    for op in sc.gangs:
        execute(op)
    if profiler is not None:
        profiler.disable()
    out.gang_phase_s = time.perf_counter() - started
    out.after = fragmentation(book)
    headroom(book, out, policy, path, required)
    out.violations = check(book, required, {n: p[1] for n, p in path.items()})
    return out


def headroom(
    book: NodeBook,
    out: Run,
    policy: PlacementPolicy,
    path: dict[str, tuple[str, str, str]],
    required: set[str],
) -> None:
    """Fragmentation as capacity: how many more gangs fit at the end, first each in one
    block (``required: block``) until one fails, then anywhere (``preferred: rack``)."""
    for topo in (PodSetTopology(required=BLOCK), PodSetTopology(preferred=RACK)):
        while True:
            name = f"gang-probe-{len(book.held):06d}"
            s = spec(name, GANG_PODS, GPUS_PER_NODE, topo)
            t0 = time.perf_counter()
            got = place(book, name, s, demands(s), policy, first_fit=out.first_fit)
            if isinstance(got, NoPlacement):
                out.probe_fail_ms.append((time.perf_counter() - t0) * 1000)
                break
            if topo.required:
                out.more_in_block += 1
                required.add(name)
            else:
                out.more_anywhere += 1
                out.more_in_rack += len({path[n] for n in got.nodes.values()}) == 1


def check(book: NodeBook, required: set[str], block_of: dict[str, str]) -> list[str]:
    """The invariants; the problems found (empty: all hold)."""
    bad: list[str] = []
    held_uuids: Counter[str] = Counter()
    for name, held in book.held.items():
        p: Placement = held.placement
        for shares in p.devices.values():
            held_uuids.update(s.uuid for s in shares)
        if name.startswith("gang-"):
            nodes = list(p.nodes.values())
            if len(nodes) != GANG_PODS or len(set(nodes)) != GANG_PODS:
                bad.append(f"{name}: {len(nodes)} pods on {len(set(nodes))} nodes")
            if any(len(p.devices.get(pod, ())) != GPUS_PER_NODE for pod in p.nodes):
                bad.append(f"{name}: a pod without {GPUS_PER_NODE} GPUs")
            if name in required and len({block_of[n] for n in nodes}) != 1:
                bad.append(f"{name}: required block, spans several")
    twice = [u for u, c in held_uuids.items() if c > 1]
    if twice:
        bad.append(f"{len(twice)} GPU(s) held twice, e.g. {twice[0]}")
    for node in book.nodes.values():
        used = sum(u.pods for u in node.devices)
        if used > len(node.inv.gpus) or any(u.pods > 1 for u in node.devices):
            bad.append(f"{node.name}: {used} device uses on {len(node.inv.gpus)} GPUs")
        mine = sum(1 for g in node.inv.gpus if held_uuids[g.uuid])
        if mine != used:
            bad.append(f"{node.name}: book says {used} GPUs in use, placements {mine}")
    for name in list(book.held):
        book.release(name)
    left = [
        n.name
        for n in book.nodes.values()
        if n.pods
        or n.workloads
        or n.free_devices() != len(n.devices)
        or n.free.get("cpu") != n.inv.allocatable["cpu"]
    ]
    if left:
        bad.append(f"{len(left)} node(s) not empty after releasing everything, e.g. {left[0]}")
    return bad


# -- output -------------------------------------------------------------------------------


def ms(values: list[float], p: float | None = None) -> float:
    if not values:
        return 0.0
    return percentile(values, p) if p is not None else sum(values) / len(values)


def frag_line(f: Frag) -> str:
    return (
        f"{f.free_nodes:,} free nodes, {f.free_racks}/{f.racks} free racks, "
        f"{f.free_blocks}/{f.blocks} free blocks, {f.free_zones} free zones; room for a gang "
        f"in {f.gang_racks} racks / {f.gang_blocks} blocks; {f.partial_nodes:,} nodes partly "
        f"used ({f.stranded_gpus:,} GPUs free on them)"
    )


def describe(r: Run, gangs: int) -> None:
    assert r.before is not None and r.after is not None
    print(f"{r.label}:")
    print(
        f"  background fill: {len(r.fill_ms):,} placements ({r.fill_failed} failed), "
        f"{ms(r.fill_ms):.2f} ms mean, {ms(r.fill_ms, 99):.2f} ms p99; {r.setup_s:.1f}s with "
        f"registration and releases"
    )
    print(f"  before the gangs: {frag_line(r.before)}")
    print(
        f"  gangs: {r.placed:,} placed, {r.failed:,} failed {dict(r.failures)} of {gangs:,} "
        f"(required block: {r.required_placed} placed, {r.required_failed} failed)"
    )
    print(
        "  placed gangs landed in: "
        + ", ".join(
            (f"one {s}" if s != "wider" else "several zones")
            + f" {r.landed(s):,}"
            + (f" ({ms(r.span_ms[s]):.2f} ms mean)" if r.span_ms[s] else "")
            for s in SPANS
        )
    )
    print(
        f"  time per gang placement: mean {ms(r.gang_ms):.2f} ms, p50 {ms(r.gang_ms, 50):.2f}, "
        f"p99 {ms(r.gang_ms, 99):.2f}, max {max(r.gang_ms, default=0):.2f} (CPU: mean "
        f"{ms(r.gang_cpu_ms):.2f}, p99 {ms(r.gang_cpu_ms, 99):.2f}); placed "
        f"{ms(r.placed_ms):.2f} ms mean, failed "
        f"{f'{ms(r.failed_ms):.2f} ms mean' if r.failed_ms else '-'}; "
        f"{sum(r.gang_ms) / 1000:.2f}s in place() for the gangs"
    )
    print(
        f"  churn between gangs: {len(r.churn_ms):,} small placements ({r.churn_failed} failed), "
        f"{ms(r.churn_ms):.2f} ms mean; gang phase {r.gang_phase_s:.2f}s in all"
    )
    print(f"  at the end: {frag_line(r.after)}")
    print(
        f"  headroom at the end: {r.more_in_block} more gangs each in one block, then "
        f"{r.more_anywhere} more anywhere ({r.more_in_rack} of them in one rack); the "
        f"failing attempts took {' and '.join(f'{t:.0f}' for t in r.probe_fail_ms)} ms"
    )
    if r.violations:
        print(f"  INVARIANTS VIOLATED ({len(r.violations)}):")
        for v in r.violations[:10]:
            print(f"    {v}")
    else:
        print(
            "  invariants hold: no GPU held twice, device use matches the placements, "
            "every gang 8 pods on 8 nodes, required blocks kept, all empty after release"
        )


def outcome(r: Run, gangs: int) -> list[str]:
    """What went other than the scenario intends: every placement placed (the scenario is
    sized so that all fit), every gang attempted once, the invariants held."""
    problems = []
    if r.placed != gangs or r.failed:
        problems.append(f"{r.placed} of {gangs} gangs placed, {r.failed} failed {dict(r.failures)}")
    if r.fill_failed or r.churn_failed:
        problems.append(f"{r.fill_failed} background and {r.churn_failed} churn placements failed")
    if r.violations:
        problems.append(f"{len(r.violations)} invariant(s) violated, e.g. {r.violations[0]}")
    return [f"{r.label}: {p}" for p in problems]


def table(ours: Run, base: Run) -> None:
    assert ours.after is not None and base.after is not None
    rows: list[tuple[str, float, float, str]] = [
        ("gangs placed", ours.placed, base.placed, "d"),
        ("gangs failed", ours.failed, base.failed, "d"),
        ("placed in one rack", ours.landed("rack"), base.landed("rack"), "d"),
        ("ms per placement, mean", ms(ours.gang_ms), ms(base.gang_ms), ".2f"),
        ("ms per placement, p50", ms(ours.gang_ms, 50), ms(base.gang_ms, 50), ".2f"),
        ("ms per placement, p99", ms(ours.gang_ms, 99), ms(base.gang_ms, 99), ".2f"),
        ("ms per placement, max", max(ours.gang_ms), max(base.gang_ms), ".2f"),
        ("CPU ms per placement, mean", ms(ours.gang_cpu_ms), ms(base.gang_cpu_ms), ".2f"),
        ("s in place() for all gangs", sum(ours.gang_ms) / 1000, sum(base.gang_ms) / 1000, ".2f"),
        ("free whole nodes (end)", ours.after.free_nodes, base.after.free_nodes, "d"),
        ("free whole racks (end)", ours.after.free_racks, base.after.free_racks, "d"),
        ("free whole blocks (end)", ours.after.free_blocks, base.after.free_blocks, "d"),
        ("racks with room for a gang", ours.after.gang_racks, base.after.gang_racks, "d"),
        ("blocks with room for a gang", ours.after.gang_blocks, base.after.gang_blocks, "d"),
        ("more gangs that fit, each in one block", ours.more_in_block, base.more_in_block, "d"),
        (
            "then more anywhere",
            ours.more_anywhere,
            base.more_anywhere,
            "d",
        ),
        ("nodes partly used (end)", ours.after.partial_nodes, base.after.partial_nodes, "d"),
        ("GPUs free on them (end)", ours.after.stranded_gpus, base.after.stranded_gpus, "d"),
    ]
    print()
    print(f"| figure | {ours.label} | {base.label} | ratio |")
    print("|---|---|---|---|")
    for name, a, b, fmt in rows:
        va, vb = (f"{int(a):,}", f"{int(b):,}") if fmt == "d" else (f"{a:{fmt}}", f"{b:{fmt}}")
        print(f"| {name} | {va} | {vb} | {ratio(a, b)} |")


# -- main ---------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    scale = 1.0 if args.full else args.scale
    nodes = max(RACK_NODES * RACKS_PER_BLOCK, round(10_000 * scale))
    gangs = max(1, round(1_000 * scale))
    print(f"bench.placement ({machine()}): {gangs:,} gangs of 8 pods x 8 GPUs on {nodes:,} nodes")
    started = time.perf_counter()
    sc = scenario(nodes, gangs, args.seed)
    f = {lv: len({n.labels[lv] for n in sc.nodes}) for lv in LEVELS}
    short = sum(1 for c in Counter(n.labels[RACK] for n in sc.nodes).values() if c < RACK_NODES)
    print(
        f"  topology: {f[ZONE]} zones, {f[BLOCK]} blocks, {f[RACK]} racks ({short} short); "
        f"background asks {sc.background_gpus:,} of {nodes * GPUS_PER_NODE:,} GPUs in "
        f"{sum(op.kind == 'background' for op in sc.background):,} workloads, then "
        f"{sum(op.kind == 'release' for op in sc.background):,} releases; gang phase "
        f"{len(sc.gangs):,} operations"
    )
    ours = run(sc, "binpack (default)", first_fit=False)
    describe(ours, gangs)
    base = run(sc, "first fit (baseline)", first_fit=True)
    describe(base, gangs)
    assert ours.after is not None and base.after is not None
    print(
        f"ratios binpack / first fit: time per gang placement mean "
        f"{ratio(ms(ours.gang_ms), ms(base.gang_ms))}, p50 "
        f"{ratio(ms(ours.gang_ms, 50), ms(base.gang_ms, 50))}, p99 "
        f"{ratio(ms(ours.gang_ms, 99), ms(base.gang_ms, 99))}, CPU mean "
        f"{ratio(ms(ours.gang_cpu_ms), ms(base.gang_cpu_ms))}; gangs placed "
        f"{ratio(ours.placed, base.placed)}; free whole nodes "
        f"{ratio(ours.after.free_nodes, base.after.free_nodes)}, racks "
        f"{ratio(ours.after.free_racks, base.after.free_racks)}, blocks "
        f"{ratio(ours.after.free_blocks, base.after.free_blocks)}; racks with room for a "
        f"gang {ratio(ours.after.gang_racks, base.after.gang_racks)}"
    )
    table(ours, base)
    if args.profile:
        profiler = cProfile.Profile()
        run(sc, "profiled", first_fit=False, profiler=profiler)
        text = io.StringIO()
        stats = pstats.Stats(profiler, stream=text)
        stats.sort_stats("tottime").print_stats(args.profile)
        stats.sort_stats("cumulative").print_stats(args.profile)
        print(
            f"\ncProfile of the binpack gang phase, run again (top {args.profile} by own "
            "time, then by cumulative time):"
        )
        print(text.getvalue())
    print(f"whole run {time.perf_counter() - started:.0f}s")
    check_outcome(outcome(ours, gangs) + outcome(base, gangs))


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m bench.placement",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--scale",
        type=float,
        default=DEFAULT_SCALE,
        help=f"nodes = 10000 x scale, gangs = 1000 x scale (default {DEFAULT_SCALE})",
    )
    p.add_argument(
        "--full", action="store_true", help="the issue's size: 10,000 nodes, 1,000 gangs"
    )
    p.add_argument("--seed", type=int, default=1, help="scenario seed (default 1)")
    p.add_argument(
        "--profile",
        type=int,
        default=0,
        metavar="N",
        help="run the binpack scenario a third time with cProfile over its gang phase and "
        "print the top N entries (by own time, then cumulative)",
    )
    return p.parse_args(argv)


if __name__ == "__main__":
    main()
