"""End to end: submissions per second over HTTP, and submit -> admitted latency.

Starts the embedded stack (Tansu broker, SQLite store, intake, queue, provisioner,
node-agent as processes) in a temp dir, applies a cluster with far more capacity
and quota than the run needs (so nothing waits for capacity), then submits N
one-pod, one-GPU workloads (runtime 0.5 s) to intake with C concurrent keep-alive
clients. A 201 means the WorkloadSubmitted event is committed, so the rate is of
durable submissions. Once every workload is admitted (or given up on), the log
gives each one's submit -> admitted latency:

* logical: WorkloadAdmitted.occurred_at - WorkloadSubmitted.occurred_at. The
  deciders' clock is carried by the events (it moves with later submissions and
  timers), so this is the latency the log itself records;
* wall:    WorkloadAdmitted.recorded_at - WorkloadSubmitted.occurred_at (the
  admission's commit time by the queue service's clock): what a client would see.

Baseline, in the same process before the stack starts: the same N submission
appends straight into a fresh SQLite store (no HTTP, no services), one after
another and from C concurrent tasks, so the HTTP + service overhead shows as a ratio.

    python -m bench.e2e_submit [--workloads 1000] [--clients 32]
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp
import orjson

from bench import machine, per_second, ratio, workload_body, workload_spec
from muster.core import inputs
from muster.core.events import StreamAppend
from muster.core.events import queue as qev
from muster.core.events import workload as wev
from muster.core.model import parse
from muster.core.sim.summary import percentile
from muster.runtime import admin
from muster.runtime.stack import Stack
from muster.store import SqlEventStore
from muster.store.migrate import upgrade_async

GPU = "nvidia.com/gpu"
GAVE_UP = (qev.WorkloadRejected, qev.WorkloadCancelled)


def cluster_doc() -> dict[str, Any]:
    """Idle capacity: 2 x 2000 one-GPU nodes, no capacity steps, 100000 GPUs of quota and
    as many requests at once."""
    labels = {"cloud.google.com/gke-accelerator": "nvidia-tesla-a100"}
    return {
        "name": "bench", "region": "us-central1", "zones": ["us-central1-a", "us-central1-b"],
        "nodePools": [{
            "name": "a100-1g", "machineType": "a2-highgpu-1g", "accelerator": "nvidia-tesla-a100",
            "allocatable": {GPU: 1, "cpu": 12, "memory": "85Gi"}, "labels": labels,
            "maxNodes": 2000, "provisioningDelaySeconds": 0,
        }],
        "quotas": [{"name": "NVIDIA_A100_GPUS", "resource": GPU, "limit": 100000}],
        # GKE's default of 100 requests Accepted at once would fail most of a burst.
        "activeRequests": 100000,
        "resourceFlavors": [{"name": "a100", "nodeLabels": labels}],
        "clusterQueues": [{
            "name": "bench", "queueingStrategy": "BestEffortFIFO",
            "resourceGroups": [{
                "coveredResources": [GPU, "cpu", "memory"],
                "flavors": [{"name": "a100", "resources": [
                    {"name": GPU, "nominalQuota": 100000},
                    {"name": "cpu", "nominalQuota": 1200000},
                    {"name": "memory", "nominalQuota": "8500Ti"},
                ]}],
            }],
        }],
        "localQueues": [{"namespace": "team-a", "name": "training", "clusterQueue": "bench"}],
    }


def summary(values: list[float], unit: str = "ms", scale: float = 1000.0) -> str:
    if not values:
        return "n/a"
    return (f"p50 {percentile(values, 50) * scale:.0f} {unit}, "
            f"p99 {percentile(values, 99) * scale:.0f} {unit}, "
            f"max {max(values) * scale:.0f} {unit}")


# -- the baseline: the same appends, in process ------------------------------------------


async def direct_appends(url: str, n: int, clients: int, duration: float) -> dict[str, float]:
    await upgrade_async(url)
    store = SqlEventStore(url)
    spec = workload_spec(0, duration=duration)
    try:
        async def one(key: str) -> None:
            new = inputs.submission(inputs.workload_id("team-a", key), spec, time.time(), key)
            await store.append([StreamAppend(new.stream_id, 0, [new])], producer="intake",
                               recorded_at=time.time())

        for i in range(20):  # warm-up
            await one(f"warm-{i}")
        started = time.perf_counter()
        for i in range(n):
            await one(f"seq-{i}")
        sequential = time.perf_counter() - started

        keys = iter(range(n))

        async def worker() -> None:
            for i in keys:
                await one(f"conc-{i}")

        started = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(clients)))
        concurrent = time.perf_counter() - started
    finally:
        await store.close()
    return {"sequential": per_second(n, sequential), "concurrent": per_second(n, concurrent)}


# -- over HTTP, through the stack --------------------------------------------------------


async def submit_all(base: str, n: int, clients: int, duration: float
                     ) -> tuple[list[str], list[float], dict[int, int], float]:
    """POST every workload; (ids, per-request seconds, statuses, wall seconds)."""
    ids: list[str] = []
    latencies: list[float] = []
    statuses: dict[int, int] = {}
    bodies = [orjson.dumps(workload_body(i, duration=duration)) for i in range(n)]
    run = f"{time.time():.0f}"
    todo = iter(range(n))
    connector = aiohttp.TCPConnector(limit=clients)  # keep-alive: connections are reused
    async with aiohttp.ClientSession(connector=connector) as session:

        async def client() -> None:
            for i in todo:
                headers = {"Content-Type": "application/json",
                           "Idempotency-Key": f"bench-{run}-{i}"}
                sent = time.perf_counter()
                async with session.post(f"{base}/v1/workloads", data=bodies[i],
                                        headers=headers) as resp:
                    payload = await resp.read()
                latencies.append(time.perf_counter() - sent)
                statuses[resp.status] = statuses.get(resp.status, 0) + 1
                if resp.status in (200, 201):
                    ids.append(orjson.loads(payload)["id"])

        started = time.perf_counter()
        await asyncio.gather(*(client() for _ in range(clients)))
        took = time.perf_counter() - started
    return ids, latencies, statuses, took


async def wait_admitted(store: SqlEventStore, ids: set[str], timeout: float
                        ) -> tuple[dict[str, Any], dict[str, Any], set[str], float]:
    """Follow the log until each workload is admitted or given up on (or the timeout)."""
    submitted: dict[str, Any] = {}
    admitted: dict[str, Any] = {}
    gave_up: set[str] = set()
    position = 0
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        envs = await store.read_all(position, categories={"workload", "admission"})
        for env in envs:
            ev = env.event
            wid = getattr(ev, "workload_id", None)
            if wid not in ids:
                continue
            if isinstance(ev, wev.WorkloadSubmitted):
                submitted.setdefault(wid, env)
            elif isinstance(ev, qev.WorkloadAdmitted):
                admitted.setdefault(wid, env)
            elif isinstance(ev, GAVE_UP):
                gave_up.add(wid)
        if envs:
            position = envs[-1].position
        if len(set(admitted) | gave_up) >= len(ids):
            break
        await asyncio.sleep(0.2)
    return submitted, admitted, gave_up, time.monotonic() - started


async def through_stack(stack: Stack, args: argparse.Namespace) -> dict[str, Any]:
    await admin.configure(stack.store_url, parse.cluster(cluster_doc()), stack.broker.bootstrap)
    store = SqlEventStore(stack.store_url)
    try:
        ids, latencies, statuses, took = await submit_all(
            stack.url(), args.workloads, args.clients, args.duration)
        submitted, admitted, gave_up, waited = await wait_admitted(store, set(ids), args.timeout)
        head = await store.head()
    finally:
        await store.close()
    logical = [admitted[w].occurred_at - submitted[w].occurred_at for w in admitted]
    wall = [admitted[w].recorded_at - submitted[w].occurred_at for w in admitted]
    first = min((e.occurred_at for e in submitted.values()), default=0.0)
    last = max((e.recorded_at for e in admitted.values()), default=first)
    return {"ids": ids, "latencies": latencies, "statuses": statuses, "took": took,
            "admitted": len(admitted), "gave_up": len(gave_up), "waited": waited,
            "logical": logical, "wall": wall, "span": last - first, "head": head}


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    n, clients = args.workloads, args.clients
    print(f"bench.e2e_submit ({machine()}): {n} workloads, {clients} clients")
    with tempfile.TemporaryDirectory(prefix="muster-bench-") as tmp:
        base = asyncio.run(direct_appends(f"sqlite:///{Path(tmp) / 'baseline.db'}", n, clients,
                                          args.duration))
        started = time.perf_counter()
        with Stack(Path(tmp) / "stack") as stack:
            print(f"stack up in {time.perf_counter() - started:.1f}s "
                  f"(intake {stack.url()}, broker {stack.broker.bootstrap})")
            r = asyncio.run(through_stack(stack, args))
    http_rate = per_second(len(r["ids"]), r["took"])
    print(f"HTTP submit: {len(r['ids'])} accepted in {r['took']:.2f}s = {http_rate:,.0f} "
          f"submissions/s; statuses {dict(sorted(r['statuses'].items()))}")
    print(f"  request latency: {summary(r['latencies'])}")
    print(f"direct appends (same process, no HTTP): sequential {base['sequential']:,.0f}/s, "
          f"{clients} tasks {base['concurrent']:,.0f}/s")
    print(f"  HTTP/direct: {ratio(http_rate, base['sequential'])} of sequential, "
          f"{ratio(http_rate, base['concurrent'])} of concurrent")
    print(f"admitted {r['admitted']}/{len(r['ids'])} (gave up {r['gave_up']}) "
          f"{r['waited']:.1f}s after the last submit; first submit -> last admission "
          f"{r['span']:.1f}s = {per_second(r['admitted'], r['span']):,.0f} admissions/s; "
          f"{r['head']} events in the log by then")
    print(f"  submit -> admitted, logical (occurred_at): {summary(r['logical'])}")
    print(f"  submit -> admitted, wall (recorded_at):    {summary(r['wall'])}")
    problems = outcome(n, r)
    if problems:
        raise SystemExit("FAILED: " + "; ".join(problems) + " (the rates above are not valid)")


def outcome(n: int, r: dict[str, Any]) -> list[str]:
    """What went other than intended: every workload accepted once and admitted, none
    refused, rejected or cancelled. A rate over work that did not run is not a rate."""
    problems = []
    if len(r["ids"]) != n or set(r["statuses"]) != {201}:
        problems.append(f"{n - len(r['ids'])} of {n} not accepted: {r['statuses']}")
    if r["gave_up"]:
        problems.append(f"{r['gave_up']} rejected or cancelled")
    if r["admitted"] != len(r["ids"]):
        problems.append(f"{len(r['ids']) - r['admitted']} never admitted")
    return problems


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.e2e_submit", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--workloads", type=int, default=1000, help="workloads to submit (default 1000)")
    p.add_argument("--clients", type=int, default=32,
                   help="concurrent HTTP clients, keep-alive (default 32)")
    p.add_argument("--duration", type=float, default=0.5,
                   help="each workload's runtime.durationSeconds (default 0.5)")
    p.add_argument("--timeout", type=float, default=60.0,
                   help="seconds to wait for every admission after the last submit (default 60)")
    return p.parse_args(argv)


if __name__ == "__main__":
    main()
