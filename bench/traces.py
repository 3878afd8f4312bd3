"""Real GPU-cluster traces replayed through ``muster sim``'s harness, in virtual time.

The Philly week (../shared/traces/philly_1wk_2017-10-02.csv, 11,386 jobs) on 64 nodes x 8
GPUs, each VC a namespace with its own LocalQueue; a job of up to 8 GPUs is one pod, a
bigger one a gang of whole-node pods. The trace files are read where they are (never
copied); durations go to the simulated pods only, the scheduler is never told them.

Configurations (``--configs``, all by default):

* ``strict``: one ClusterQueue of 512 GPUs, StrictFIFO;
* ``fair``: one ClusterQueue, BestEffortFIFO, tenant (LocalQueue) fair sharing with
  weights = the VCs' sizes in the Helios VC table;
* ``cohort``: a ClusterQueue per VC in one cohort, nominal quota = its share of 512 by
  the VC table, fair sharing on and ``reclaimWithinCohort: Any``;
* ``las``: ``fair`` plus attained-service priority (Tiresias' 2D-LAS levels, starvation
  guard), preemption of higher levels (``withinClusterQueue: LowerPriority``, a minimum
  run ``minAdmitDuration``) and a cluster default checkpoint interval.

Each run checks its own outcome and fails loudly otherwise: the harness reached its fixed
point (no livelock), every job was admitted and finished successfully (none rejected,
cancelled or left waiting), no workload was evicted twice for one preemptor. Printed per
configuration: the harness's wall time (what ``muster sim`` spends deciding), events, JCT
and queueing-delay percentiles, utilisation over the week, Jain's index of the VCs'
slowdowns, evictions. ``--baseline REV`` replays the same inputs with the engine of a git
revision (in a scratch worktree, a subprocess) in the same run, for a before/after figure.

    python -m bench.traces [--configs strict,fair,cohort] [--jobs N] [--baseline REV]
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
from pathlib import Path
from typing import Any

from bench import check_outcome, machine, run_bounded
from muster.cli.commands import build_harness
from muster.core.model import parse
from muster.core.sim.figures import figures
from muster.core.sim.summary import summarize

ROOT = Path(__file__).resolve().parents[1]
TRACES = Path(os.environ.get("MUSTER_TRACES", ROOT.parent / "shared" / "traces"))
PHILLY = "philly_1wk_2017-10-02.csv"
VC_TABLE = "philly_helios_vc_config.csv"
NODES, GPUS_PER_NODE = 64, 8
GPU = "nvidia.com/gpu"
CONFIGS = ("strict", "fair", "cohort", "las")
# ``las``: Tiresias' discretised 2D-LAS thresholds (GPU-seconds), its starvation factor,
# the minimum run before a workload may be preempted (again), and the cluster's default
# checkpoint interval (Helios' restore overheads).
LAS_LEVELS = (3_600.0, 36_000.0)
LAS_STARVATION = 2.0
LAS_MIN_RUN = 600.0
LAS_CHECKPOINT = 600.0
TARGETS = {"strict": 20.0, "fair": 15.0}  # seconds of harness wall the engine issue asks
# A log this many events per job has no fixed point (under ten are usual): a livelock.
RUNAWAY_EVENTS_PER_JOB = 500


def main(argv: list[str] | None = None) -> int:
    args = _args(argv)
    jobs = _jobs(args.jobs)
    sizes = _vc_sizes()
    print(f"# {machine()}; load {_load()}; {len(jobs):,} jobs of {TRACES / PHILLY}")
    problems: list[str] = []
    for name in args.configs.split(","):
        cluster = cluster_doc(name, sorted({j["vc"] for j in _jobs(None)}), sizes)
        result = run(cluster, jobs)
        problems += [f"{name}: {p}" for p in outcome(result)]
        if result["livelock"]:
            break  # its figures describe a run cut short
        _print(name, result, len(jobs))
        if args.baseline:
            before = _baseline(args.baseline, cluster, jobs)
            print(
                f"  baseline {args.baseline}: {before['wall']:.1f}s harness wall, "
                f"{before['events']:,} events, mean wait {before['wait']:.0f}s "
                f"(now {result['wall']:.1f}s: {before['wall'] / result['wall']:.1f}x faster)"
            )
    print(f"# load after: {_load()}")
    check_outcome(problems)
    return 0


def _args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--configs", default=",".join(CONFIGS))
    p.add_argument("--jobs", type=int, help="only the first N jobs of the trace")
    p.add_argument("--baseline", metavar="REV", help="also replay with this git revision")
    return p.parse_args(argv)


def _jobs(limit: int | None) -> list[dict[str, Any]]:
    with (TRACES / PHILLY).open() as f:
        rows = list(csv.DictReader(f))
    return rows[:limit] if limit else rows


def _vc_sizes() -> dict[str, int]:
    with (TRACES / VC_TABLE).open() as f:
        return {r["vc"]: int(r["gpus"]) for r in csv.DictReader(f)}


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


def cluster_doc(config: str, vcs: list[str], sizes: dict[str, int]) -> dict[str, Any]:
    """The cluster description of one configuration (see the module's docstring)."""
    total = NODES * GPUS_PER_NODE
    doc: dict[str, Any] = {
        "name": "philly",
        "zones": ["z"],
        "resourceFlavors": [{"name": "gpu"}],
        "nodes": [{"name": "n", "count": NODES, "allocatable": {GPU: GPUS_PER_NODE}}],
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
    if config == "strict":
        doc["clusterQueues"] = [_queue("all", total, queueingStrategy="StrictFIFO")]
        doc["localQueues"] = [{"namespace": v, "name": "q", "clusterQueue": "all"} for v in vcs]
        return doc
    fair = {"admissionMode": "UsageBasedAdmissionFairSharing"}
    las: dict[str, Any] = {}
    if config == "las":
        las = {
            "attainedService": {"levels": list(LAS_LEVELS), "starvationFactor": LAS_STARVATION},
            "preemption": {"withinClusterQueue": "LowerPriority", "minAdmitDuration": LAS_MIN_RUN},
        }
        doc["checkpointing"] = {"intervalSeconds": LAS_CHECKPOINT}
    doc["clusterQueues"] = [_queue("all", total, admissionScope=fair, **las)]
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


def run(cluster: dict[str, Any], jobs: list[dict[str, Any]]) -> dict[str, Any]:
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
        **figures(envs),
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


def _print(name: str, r: dict[str, Any], jobs: int) -> None:
    target = TARGETS.get(name)
    goal = f" (target <= {target:g}s)" if target is not None and jobs >= 11_000 else ""
    jct, wait = r["jct_seconds"], r["wait_seconds"]
    print(
        f"{name}: {r['wall']:.1f}s harness wall{goal}, {r['events']:,} events; JCT mean "
        f"{jct['mean']:,.0f}s p50 {jct['p50']:,.0f} p99 {jct['p99']:,.0f}; wait mean "
        f"{wait['mean']:,.0f}s p50 {wait['p50']:,.0f} p99 {wait['p99']:,.0f}; utilisation "
        f"{r['utilisation']:.1%}; Jain {r['jain_slowdown']}; evictions {r['evictions']} "
        f"(max {r['max_evictions_per_victim_per_preemptor']} per victim per preemptor, "
        f"{r['preemption_lost_gpu_seconds']:,.0f} GPU-s lost)"
    )


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
