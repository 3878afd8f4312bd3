"""Real GPU-cluster traces replayed through ``muster sim``'s harness, in virtual time,
beside reference replays of the same jobs (bench/oracle.py) computed in the same run.

Traces (``--trace``, both by default), read where they are (``MUSTER_TRACES``, by default
../shared/traces; never copied); durations go to the simulated pods only, the scheduler is
never told them:

* ``philly``: the Philly week (philly_1wk_2017-10-02.csv, 11,386 jobs) on 64 nodes x 8
  GPUs, each VC a tenant (a namespace with its own LocalQueue), weights = the VCs' sizes
  in the Helios VC table; utilisation over the week (0 .. 7 days);
* ``itp``: ITP cluster 6 (itp_cluster06.csv, 2,396 jobs, gang-heavy, up to 64 GPUs) on
  16 nodes x 8 GPUs; it names no tenant, so every job is one tenant's (``itp``);
  utilisation over 60 days (its arrivals span 59.8).

A job of up to 8 GPUs is one pod, a bigger one a gang of whole-node 8-GPU pods. A job the
cluster can never hold (more GPUs than the cluster, or over 8 and not whole nodes) is
refused: left out of every replay, and counted in the output (none in either trace at
these sizes).

Configurations (``--configs``, all by default):

* ``strict``: one ClusterQueue of all the GPUs, StrictFIFO (muster's FIFO: each tenant's
  waits are compared with this one's);
* ``besteffort``: one ClusterQueue, BestEffortFIFO (ITP's target compares with it);
* ``fair``: one ClusterQueue, BestEffortFIFO, tenant (LocalQueue) fair sharing with
  weights = the VCs' sizes;
* ``cohort``: a ClusterQueue per VC in one cohort, nominal quota = its share of the GPUs
  by the VC table, fair sharing on and ``reclaimWithinCohort: Any``;
* ``las``: ``fair`` plus attained-service priority (Tiresias' 2D-LAS levels, starvation
  guard; each trace's cluster its own, ``Trace.las``: ITP three levels, factor 50),
  preemption of higher levels (``withinClusterQueue: LowerPriority``, a minimum run
  ``minAdmitDuration``; for a place too, ``preemptForPlacement``, so whole-node
  gangs are not starved by 1-GPU work) and a cluster default checkpoint interval; on
  Philly's shared cluster (eleven VCs) the per-tenant guard too: a workload of 8 GPUs or
  more is preempted for its level at most 4 times (``maxPreemptions: 4``,
  ``maxPreemptionsMinDevices: 8``); ITP's cluster (one tenant) has no tenant to guard;
* ``las-unbounded``: ``las`` without a guard (on ITP the same as ``las``; on Philly what
  ``las`` was before the guard);
* ``las-cap1h``, ``las-cap2h``, ``las-max2``, ``las-max3``, ``las-max4``, ``las-cap2h-max2``,
  ``las-cap1h-max2``: ``las`` with the per-tenant bound's opt-in guards
  (``attainedService.starvationLimitSeconds`` 1 or 2 h, ``maxPreemptions`` 2-4, or both;
  bench/README.md, "The per-tenant bound, continued");
* ``las-xt2``, ``las-xt3``, ``las-xt2-max4``, ``las-xt3-max6``: ``las`` with
  ``maxCrossTenantPreemptions`` 2 or 3 (only other tenants' preemptions count, and bind),
  alone or with ``maxPreemptions`` (bench/README.md, "The per-tenant bound, continued
  (wip-tb)");
* ``las-max2-8gpu``, ``las-max3-8gpu``, ``las-max4-8gpu``: ``las`` with ``maxPreemptions``
  2-4 binding only workloads of 8 GPUs or more (``maxPreemptionsMinDevices: 8``);
  ``las-xt2-max5``, ``las-xt2-max4-8gpu``: combinations of the two;
* ``backfill`` / ``strict-backfill``: ``fair`` / ``strict`` with reservations and backfill
  (``backfill: {reserveAfterSeconds: 0}``, or ``$MUSTER_BENCH_RESERVE_AFTER`` seconds; the
  trace declares no durations, so reserved nodes are held as they free and backfill goes
  only around them).

Reference rows: ``oracle-fifo`` (non-preemptive strict FIFO) and ``oracle-sjf``
(non-preemptive SJF knowing every duration), consolidate placement (bench/oracle.py).

Each run checks its own outcome and fails loudly otherwise: the harness reached its fixed
point (no livelock), every job was admitted and finished successfully (none rejected,
cancelled or left waiting), no workload was evicted twice for one preemptor. Printed per
trace, a row per configuration: avg JCT (and its ratio to oracle SJF's), avg / p99 wait,
utilisation over the fixed horizon, Jain's index of the tenants' mean slowdowns,
evictions and the GPU-time they lost (% of all GPU-time held), the worst tenant's avg
wait over its ``strict`` figure, harness wall and events; then per tenant, its avg wait
(x its ``strict`` wait; > 2x flagged) and mean slowdown in each configuration.
``--check`` then says which of the issue's targets are met (trace_report.py); a missed
target is reported, not an outcome failure. ``--baseline REV`` replays the same inputs
with the engine of a git revision (in a scratch worktree, a subprocess) in the same run.

    python -m bench.traces [--trace philly,itp] [--configs strict,besteffort,fair,cohort]
                           [--jobs N] [--check] [--json FILE] [--baseline REV]
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench import check_outcome, machine, oracle, run_bounded
from bench import trace_report as report
from muster.cli.commands import build_harness
from muster.core.model import parse
from muster.core.sim.figures import Job, figures, job_figures
from muster.core.sim.summary import summarize

ROOT = Path(__file__).resolve().parents[1]
TRACES = Path(os.environ.get("MUSTER_TRACES", ROOT.parent / "shared" / "traces"))
PHILLY = "philly_1wk_2017-10-02.csv"
ITP = "itp_cluster06.csv"
VC_TABLE = "philly_helios_vc_config.csv"
NODES, GPUS_PER_NODE = 64, 8
GPU = "nvidia.com/gpu"
# ``las`` variants with the opt-in guards of the per-tenant bound (bench/README.md, "The
# per-tenant bound, continued"): a cap on the starvation guard's wait, a bound on the
# preemptions a workload takes for its level, or both.
LAS_VARIANTS: dict[str, dict[str, Any]] = {
    "las-unbounded": {},
    "las-cap1h": {"starvationLimitSeconds": 3_600},
    "las-cap2h": {"starvationLimitSeconds": 7_200},
    "las-max2": {"maxPreemptions": 2},
    "las-max3": {"maxPreemptions": 3},
    "las-max4": {"maxPreemptions": 4},
    "las-cap2h-max2": {"starvationLimitSeconds": 7_200, "maxPreemptions": 2},
    "las-cap1h-max2": {"starvationLimitSeconds": 3_600, "maxPreemptions": 2},
    # Bounds on the preemptions by *other* tenants' workloads only (wip-tb): within its
    # tenant a long job stays preemptible by attained service; the ``-maxN`` ones also
    # bound every preemption at N (its own tenant's included).
    "las-xt2": {"maxCrossTenantPreemptions": 2},
    "las-xt3": {"maxCrossTenantPreemptions": 3},
    "las-xt2-max4": {"maxCrossTenantPreemptions": 2, "maxPreemptions": 4},
    "las-xt3-max6": {"maxCrossTenantPreemptions": 3, "maxPreemptions": 6},
    # ``maxPreemptions`` for whole-node (8-GPU and larger) workloads only: smaller long
    # jobs stay preemptible by level (wip-tb).
    "las-max2-8gpu": {"maxPreemptions": 2, "maxPreemptionsMinDevices": 8},
    "las-max3-8gpu": {"maxPreemptions": 3, "maxPreemptionsMinDevices": 8},
    "las-max4-8gpu": {"maxPreemptions": 4, "maxPreemptionsMinDevices": 8},
    "las-xt2-max5": {"maxCrossTenantPreemptions": 2, "maxPreemptions": 5},
    "las-xt2-max4-8gpu": {
        "maxCrossTenantPreemptions": 2,
        "maxPreemptions": 4,
        "maxPreemptionsMinDevices": 8,
    },
}
CONFIGS = (
    "strict",
    "besteffort",
    "fair",
    "cohort",
    "las",
    "backfill",
    "strict-backfill",
    *LAS_VARIANTS,
)
ORACLES = ("oracle-fifo", "oracle-sjf")
# ``las``: Tiresias' discretised 2D-LAS thresholds (GPU-seconds), its starvation factor,
# the minimum run before a workload may be preempted (again), and the cluster's default
# checkpoint interval (Helios' restore overheads). A trace's cluster may set its own
# thresholds and factor (``Trace.las``), as Tiresias sets them from a cluster's history.
LAS_LEVELS = (3_600.0, 36_000.0)
# levels, starvation factor, preempt for a place, the per-tenant guard's fields
LasSpec = tuple[tuple[float, ...], float, bool, tuple[tuple[str, int], ...]]
LAS_STARVATION = 2.0
LAS: LasSpec = LAS_LEVELS, LAS_STARVATION, True, ()  # a cluster that sets nothing of its own
# ITP cluster 6: half its jobs pass 36,000 GPU-s (median 24,808, 90th percentile 391,112;
# Philly's median is 2,375, 5 % of its jobs past 36,000), and with two thresholds they
# share the last level in FIFO order; a third a decade higher (Tiresias' multi-queue
# setting) puts the week-long ones behind the day-long ones. One tenant, JCT its only
# target: a looser starvation guard (50); Philly's 2 re-admits ITP's long jobs after every
# few of their runs (a run of it did not finish), and 10 costs 5 % of avg JCT
# (bench/README.md's figures for each setting).
# Philly's whole-node gangs (VC 2869ce) starve behind 1-GPU work without
# ``preemptForPlacement``; on ITP it is on too: measured with it, 34,132 s (0.78x
# besteffort's; without it 34,250 s), p99 wait 599 s (1,197 s), 0.71 % lost (bench/README.md,
# "The per-tenant bound").
ITP_LAS: LasSpec = (3_600.0, 36_000.0, 360_000.0), 50.0, True, ()
# Philly's eleven VCs share one queue, and a VC of long jobs (2869ce) waits 4.14x its FIFO
# figure when its jobs may be preempted for their level without end: bounding whole-node
# workloads (8 GPUs and more) at 4 preemptions meets every Philly target (12,974 s avg JCT,
# Jain 0.974, 0.87 % lost, worst VC 1.75x). Any bound costs ITP's one tenant JCT (0.84x
# besteffort's with this one), so its cluster sets none (bench/README.md, "The per-tenant
# bound, continued (wip-tb)").
PHILLY_GUARD = (("maxPreemptions", 4), ("maxPreemptionsMinDevices", 8))
PHILLY_LAS: LasSpec = LAS_LEVELS, LAS_STARVATION, True, PHILLY_GUARD
LAS_MIN_RUN = 600.0
LAS_CHECKPOINT = 600.0
BACKFILL = {"reserveAfterSeconds": int(os.environ.get("MUSTER_BENCH_RESERVE_AFTER", "0"))}
TARGETS = {"strict": 20.0, "fair": 15.0}  # seconds of harness wall the engine issue asks
# A log this many events per job has no fixed point (under ten are usual): a livelock.
RUNAWAY_EVENTS_PER_JOB = 500
DAY = 86_400.0


@dataclass(frozen=True)
class Trace:
    """A trace file and the cluster it is replayed on."""

    name: str
    file: str
    nodes: int
    horizon: float  # utilisation is measured over 0 .. horizon (seconds of the trace)
    columns: tuple[str, str, str, str]  # the file's job id, submit time, duration, GPUs
    tenant: str | None  # the file's tenant column; None: one tenant, named as the trace
    # ``las``'s thresholds (GPU-seconds), starvation factor and preemptForPlacement on this
    # trace's cluster
    las: LasSpec = LAS


TRACE_SET = {
    "philly": Trace(
        "philly",
        PHILLY,
        NODES,
        7 * DAY,
        ("job_id", "submit_time", "duration", "num_gpus"),
        "vc",
        las=PHILLY_LAS,
    ),
    "itp": Trace(
        "itp",
        ITP,
        16,
        60 * DAY,
        ("job_id", "submission_time", "duration", "num_gpu"),
        None,
        las=ITP_LAS,
    ),
}


def main(argv: list[str] | None = None) -> int:
    args = _args(argv)
    configs = args.configs.split(",")
    if args.check:  # the targets are relative to these two
        configs = [c for c in ("strict", "besteffort") if c not in configs] + configs
    print(f"# {machine()}; load {_load()}")
    problems: list[str] = []
    results: dict[str, dict[str, dict[str, Any]]] = {}
    for trace in (TRACE_SET[t] for t in args.trace.split(",")):
        jobs, refused = read(trace, args.jobs)
        tenants = sorted({j["vc"] for j in jobs})
        sizes = _vc_sizes() if trace.tenant else {trace.name: trace.nodes * GPUS_PER_NODE}
        print(
            f"\n## {trace.name}: {len(jobs):,} jobs of {TRACES / trace.file}, {trace.nodes} x "
            f"{GPUS_PER_NODE} GPUs, {len(tenants)} tenant(s); refused (never fit): {refused}"
        )
        rows = results[trace.name] = {}
        for name in ORACLES:
            rows[name] = reference(trace, jobs, name.removeprefix("oracle-"))
        for name in configs:
            cluster = cluster_doc(name, tenants, sizes, trace.nodes, trace.las)
            result = run(cluster, jobs, trace.horizon)
            problems += [f"{trace.name} {name}: {p}" for p in outcome(result)]
            if result["livelock"]:
                print(f"{name}: {result['livelock']} (no figures)")
                continue  # its figures describe a run cut short
            rows[name] = result
            print(f"{name}: ran, {result['wall']:.1f}s harness wall", flush=True)
            if args.baseline:
                before = _baseline(args.baseline, cluster, jobs)
                print(
                    f"  {name} baseline {args.baseline}: {before['wall']:.1f}s harness wall, "
                    f"{before['events']:,} events, mean wait {before['wait']:.0f}s "
                    f"(now {result['wall']:.1f}s: {before['wall'] / result['wall']:.1f}x faster)"
                )
        full = args.jobs is None and trace.name == "philly"
        print(report.table(rows, walls=TARGETS if full else {}))
        print(report.tenant_table(rows))
    if args.check:
        print()
        for line in report.check(results):
            print(line)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1, default=str))
    print(f"\n# load after: {_load()}")
    check_outcome(problems)
    return 0


def _args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--trace", default=",".join(TRACE_SET), help="philly, itp or both")
    p.add_argument("--configs", default=",".join(CONFIGS))
    p.add_argument("--jobs", type=int, help="only the first N jobs of each trace")
    p.add_argument("--check", action="store_true", help="say which of issue 19's targets are met")
    p.add_argument("--json", metavar="FILE", help="also write every figure to FILE")
    p.add_argument("--baseline", metavar="REV", help="also replay with this git revision")
    args = p.parse_args(argv)
    for field, given, known in (
        ("--trace", args.trace, TRACE_SET),
        ("--configs", args.configs, CONFIGS),
    ):
        if unknown := [x for x in given.split(",") if x not in known]:
            p.error(f"{field}: {', '.join(unknown)} not one of {', '.join(known)}")
    return args


def read(trace: Trace, limit: int | None) -> tuple[list[dict[str, Any]], int]:
    """The first ``limit`` jobs of the trace (all by default) as rows of the Philly file's
    columns, and how many of them were refused: more GPUs than the cluster, or a gang
    that is not whole nodes (see the module's docstring)."""
    with (TRACES / trace.file).open() as f:
        rows = list(csv.DictReader(f))
    rows = rows[:limit] if limit else rows
    job_id, submit, duration, gpus = trace.columns
    jobs = [
        {
            "job_id": r[job_id],
            "submit_time": r[submit],
            "duration": r[duration],
            "num_gpus": r[gpus],
            "vc": r[trace.tenant] if trace.tenant else trace.name,
        }
        for r in rows
    ]
    fits = [j for j in jobs if _fits(int(j["num_gpus"]), trace.nodes)]
    return fits, len(jobs) - len(fits)


def _fits(gpus: int, nodes: int) -> bool:
    return gpus <= nodes * GPUS_PER_NODE and (gpus <= GPUS_PER_NODE or gpus % GPUS_PER_NODE == 0)


def _vc_sizes() -> dict[str, int]:
    with (TRACES / VC_TABLE).open() as f:
        return {r["vc"]: int(r["gpus"]) for r in csv.DictReader(f)}


def reference(trace: Trace, jobs: list[dict[str, Any]], policy: str) -> dict[str, Any]:
    """The figures of bench/oracle.py's replay of ``jobs`` under ``policy``."""
    started = time.perf_counter()
    ran = oracle.replay(
        [
            oracle.Job(j["job_id"], float(j["submit_time"]), float(j["duration"]),
                       int(j["num_gpus"]), j["vc"])
            for j in jobs
        ],
        nodes=trace.nodes,
        gpus_per_node=GPUS_PER_NODE,
        policy=policy,
    )
    wall = time.perf_counter() - started
    found = job_figures(
        [Job(r.job.tenant, r.job.submit, r.start, r.end, r.job.duration) for r in ran],
        [(r.start, r.end, r.job.gpus) for r in ran],
        trace.nodes * GPUS_PER_NODE,
        (0.0, trace.horizon),
    )
    return {
        "wall": wall, "events": None, "evictions": 0, "preemption_lost_share": 0.0, **found
    }


def _queue(name: str, nominal: int, **extra: Any) -> dict[str, Any]:
    return {
        "name": name,
        "resourceGroups": [
            {
                "coveredResources": [GPU],
                "flavors": [{"name": "gpu", "resources": [{"name": GPU, "nominalQuota": nominal}]}],
            }
        ],
        **extra,
    }


def cluster_doc(
    config: str,
    vcs: list[str],
    sizes: dict[str, int],
    nodes: int = NODES,
    las_spec: LasSpec = LAS,
) -> dict[str, Any]:
    """The cluster description of one configuration (see the module's docstring) on
    ``nodes`` nodes of 8 GPUs; ``las`` with these thresholds and starvation factor."""
    total = nodes * GPUS_PER_NODE
    doc: dict[str, Any] = {
        "name": "philly",
        "zones": ["z"],
        "resourceFlavors": [{"name": "gpu"}],
        "nodes": [{"name": "n", "count": nodes, "allocatable": {GPU: GPUS_PER_NODE}}],
    }
    if config == "cohort":
        weight = sum(sizes[v] for v in vcs)
        doc["clusterQueues"] = [
            _queue(
                v,
                max(1, total * sizes[v] // weight),
                cohort="philly",
                preemption={"reclaimWithinCohort": "Any"},
            )
            for v in vcs
        ]
        doc["localQueues"] = [{"namespace": v, "name": "q", "clusterQueue": v} for v in vcs]
        doc["fairSharing"] = {"enable": True}
        return doc
    backfill = {"backfill": BACKFILL} if config.endswith("backfill") else {}
    if config.startswith("strict"):
        doc["clusterQueues"] = [_queue("all", total, queueingStrategy="StrictFIFO", **backfill)]
        doc["localQueues"] = [{"namespace": v, "name": "q", "clusterQueue": "all"} for v in vcs]
        return doc
    if config == "besteffort":
        doc["clusterQueues"] = [_queue("all", total)]  # BestEffortFIFO is the default
        doc["localQueues"] = [{"namespace": v, "name": "q", "clusterQueue": "all"} for v in vcs]
        return doc
    fair = {"admissionMode": "UsageBasedAdmissionFairSharing"}
    las: dict[str, Any] = {}
    if config == "las" or config in LAS_VARIANTS:
        levels, starvation, place, guard = las_spec
        las = {
            "attainedService": {
                "levels": list(levels),
                "starvationFactor": starvation,
                "preemptForPlacement": place,
                # a variant's guard replaces the cluster's
                **(LAS_VARIANTS[config] if config in LAS_VARIANTS else dict(guard)),
            },
            "preemption": {"withinClusterQueue": "LowerPriority", "minAdmitDuration": LAS_MIN_RUN},
        }
        doc["checkpointing"] = {"intervalSeconds": LAS_CHECKPOINT}
    doc["clusterQueues"] = [_queue("all", total, admissionScope=fair, **las, **backfill)]
    doc["localQueues"] = [
        {"namespace": v, "name": "q", "clusterQueue": "all", "fairSharing": {"weight": sizes[v]}}
        for v in vcs
    ]
    return doc


def workloads_doc(jobs: list[dict[str, Any]]) -> dict[str, Any]:
    return {"workloads": list(_workloads(jobs))}


def _workloads(jobs: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    for job in jobs:
        gpus = int(job["num_gpus"])
        pods, each = (1, gpus) if gpus <= GPUS_PER_NODE else (gpus // GPUS_PER_NODE, GPUS_PER_NODE)
        yield {
            "at": float(job["submit_time"]),
            "workload": {
                "name": f"j{job['job_id']}",
                "namespace": job["vc"],
                "queueName": "q",
                "podSets": [{"name": "w", "count": pods, "requests": {GPU: each}}],
                "runtime": {"durationSeconds": float(job["duration"])},
            },
        }


def run(
    cluster: dict[str, Any], jobs: list[dict[str, Any]], horizon: float | None = None
) -> dict[str, Any]:
    """``jobs`` through the harness on ``cluster``: the figures, utilisation over 0 ..
    ``horizon`` (by default the arrival window), and what the outcome check needs."""
    spec = parse.cluster(cluster)
    workloads = parse.workload_list(workloads_doc(jobs))
    harness = build_harness(spec, workloads)
    started = time.perf_counter()
    livelock = run_bounded(harness, RUNAWAY_EVENTS_PER_JOB * len(jobs) + 10_000)
    wall = time.perf_counter() - started
    envs = harness.log.envelopes
    return {
        "wall": wall,
        "events": len(envs),
        "livelock": livelock,
        "expected": len(jobs),
        "outcomes": summarize(envs)["outcomes"],
        **figures(envs, None if horizon is None else (0.0, horizon)),
    }


def outcome(r: dict[str, Any]) -> list[str]:
    """What went other than intended: every job of the trace submitted, admitted and
    finished successfully (the figures count rejected and cancelled ones as finished), none
    evicted twice for one preemptor, no livelock."""
    problems = [r["livelock"]] if r["livelock"] else []
    if r["outcomes"] != {"Succeeded": r["expected"]}:
        problems.append(f"of {r['expected']} jobs: {r['outcomes']}, expected all Succeeded")
    if r["max_evictions_per_victim_per_preemptor"] > 1:
        problems.append(
            f"a workload evicted {r['max_evictions_per_victim_per_preemptor']} times for one "
            "preemptor"
        )
    return problems


def _baseline(rev: str, cluster: dict[str, Any], jobs: list[dict[str, Any]]) -> dict[str, Any]:
    """The same inputs through ``muster sim`` of revision ``rev`` (a scratch worktree)."""
    with tempfile.TemporaryDirectory() as tmp:
        tree = Path(tmp) / "tree"
        subprocess.run(
            ["git", "-C", str(ROOT), "worktree", "add", "--detach", "-q", str(tree), rev],
            check=True,
        )
        try:
            (Path(tmp) / "cluster.json").write_text(json.dumps(cluster))
            (Path(tmp) / "workloads.json").write_text(json.dumps(workloads_doc(jobs)))
            env = {**os.environ, "PYTHONPATH": f"{tree / 'libs'}:{tree}"}
            started = time.perf_counter()
            out = subprocess.run(
                [
                    *(sys.executable, "-m", "muster.cli.main", "sim", "--json"),
                    *("--cluster", f"{tmp}/cluster.json", "--workloads", f"{tmp}/workloads.json"),
                ],
                env=env,
                cwd=tree,
                capture_output=True,
                text=True,
                check=True,
            ).stdout.splitlines()[-1]
            took = time.perf_counter() - started
        finally:
            subprocess.run(
                ["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tree)], check=True
            )
    summary = json.loads(out)["summary"]
    wall = summary.get("wall_seconds", took)
    return {"wall": wall, "events": summary["events"], "wait": summary["wait_seconds"]["mean"]}


def _load() -> str:
    one, five, _ = os.getloadavg()
    return f"{one:.2f} (1 min), {five:.2f} (5 min)"


if __name__ == "__main__":
    raise SystemExit(main())
