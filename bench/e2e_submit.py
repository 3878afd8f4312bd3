"""End to end: submit -> admitted latency idle, the idle stack's CPU, then submissions
and admissions per second in a burst and the CPU each workload costs.

Starts the embedded stack (Tansu broker, SQLite store, intake, queue, provisioner,
node-agent as processes) in a temp dir, applies a cluster with far more capacity
and quota than the run needs (so nothing waits for capacity). First it submits
--idle workloads one at a time, each once the previous one is admitted (send ->
admission committed), then measures each process's CPU while nothing happens. Then it
submits N one-pod, one-GPU workloads (runtime 0.5 s) to intake with C concurrent
keep-alive clients, one workload a request (or, with --batch B, B a request through
``POST /v1/workloads:batch``, all of a batch committed together; ``bench.http_load``: each
request encoded before the clock starts, each answer parsed by httptools, so the client
takes little of the cores the stack runs on; its CPU a request is printed). A 201 means the
WorkloadSubmitted events are committed, so the rate is of durable submissions. Once
every workload has finished (or was given up on), the log gives each one's submit ->
admitted latency:

* logical: WorkloadAdmitted.occurred_at - WorkloadSubmitted.occurred_at. The
  deciders' clock is carried by the events (it moves with later submissions and
  timers), so this is the latency the log itself records;
* wall:    WorkloadAdmitted.recorded_at - WorkloadSubmitted.occurred_at (the
  admission's commit time by the queue service's clock): what a client would see.

Baseline, in the same process before the stack starts: the same N submission
appends straight into a fresh SQLite store (no HTTP, no services), one after
another and from C concurrent tasks, so the HTTP + service overhead shows as a ratio.

With ``--postgres`` the store (and the baseline's) is a scratch database on the
PostgreSQL server of ``$MUSTER_TEST_POSTGRES_URL``, dropped after the run: the services
then wake through ``LISTEN/NOTIFY``, as past one machine. The server's CPU is counted
with the stack's when it runs on this machine (``postgres``: every ``postgres``
process's, and what ended backends used).

The CPU a workload is every process's CPU from the first submission to the last finish;
then, over ``--settle`` seconds (2), what the processes do after it above their idle rate
(the last events folded, published and decided on: work the burst caused), printed apart
and added in ("with it ... in all").

The run fails (FAILED, non-zero exit) unless every workload was accepted once, admitted
and finished Succeeded.

    python -m bench.e2e_submit [--workloads 1000] [--clients 32] [--idle 50] [--batch 100]
                               [--existing-nodes 256] [--postgres]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import aiohttp
import orjson

from bench import (
    POSTGRES_ENV,
    machine,
    per_second,
    postgres_url,
    ratio,
    redact,
    scratch_postgres_sync,
    workload_body,
    workload_spec,
)
from bench.http_load import Answer, Request, post_all
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


def cluster_doc(existing_nodes: int = 0) -> dict[str, Any]:
    """Idle capacity: 2 x 2000 one-GPU nodes, no capacity steps, 100000 GPUs of quota and
    as many requests at once. ``existing_nodes``: instead of a node pool, that many
    declared 8-GPU nodes, so every workload is placed on existing nodes (no provisioning)."""
    labels = {"cloud.google.com/gke-accelerator": "nvidia-tesla-a100"}
    doc = _provisioned(labels)
    if existing_nodes:
        doc["nodePools"] = []
        doc["nodes"] = [{
            "name": "gpu", "count": existing_nodes, "labels": labels,
            "allocatable": {GPU: 8, "cpu": 96, "memory": "680Gi"},
        }]
    return doc


def _provisioned(labels: dict[str, str]) -> dict[str, Any]:
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


async def submit_all(base: str, n: int, clients: int, duration: float, batch: int = 0
                     ) -> tuple[list[str], list[float], dict[int, int], float, float]:
    """POST every workload; (ids, per-request seconds, statuses, wall seconds, the client's
    CPU seconds). ``batch``: that many workloads a request through
    ``POST /v1/workloads:batch`` (each item with its own idempotency key), not one a
    request. Every request is encoded before the clock starts (``bench.http_load``)."""
    run = f"{time.time():.0f}"
    if batch:
        requests = [
            Request("/v1/workloads:batch", orjson.dumps({"items": [
                {**workload_body(i, duration=duration), "idempotencyKey": f"bench-{run}-{i}"}
                for i in range(start, min(n, start + batch))
            ]}))
            for start in range(0, n, batch)
        ]
    else:
        requests = [
            Request("/v1/workloads", orjson.dumps(workload_body(i, duration=duration)),
                    (("Idempotency-Key", f"bench-{run}-{i}"),))
            for i in range(n)
        ]
    cpu = time.process_time()
    answers, took = await post_all(base, requests, clients)
    read = _read_batch if batch else _read_one
    ids: list[str] = []
    statuses: dict[int, int] = {}
    for request, answer in zip(requests, answers, strict=True):
        read(request, answer, ids, statuses)
    return ids, [a.seconds for a in answers], statuses, took, time.process_time() - cpu


def _read_one(request: Request, answer: Answer, ids: list[str], statuses: dict[int, int]
              ) -> None:
    statuses[answer.status] = statuses.get(answer.status, 0) + 1
    if answer.status in (200, 201):
        ids.append(orjson.loads(answer.body)["id"])


def _read_batch(request: Request, answer: Answer, ids: list[str], statuses: dict[int, int]
                ) -> None:
    """Batched submission (Armada-style): statuses count workloads, not requests (a batch
    is all or nothing), so the outcome check reads alike; an item answered
    ``created: false`` (a repeat) counts as 200."""
    if answer.status not in (200, 201):
        items = len(orjson.loads(request.body)["items"])
        statuses[answer.status] = statuses.get(answer.status, 0) + items
        return
    for item in orjson.loads(answer.body)["items"]:
        status = 201 if item["created"] else 200
        statuses[status] = statuses.get(status, 0) + 1
        ids.append(item["workload"]["id"])


async def wait_done(store: SqlEventStore, ids: set[str], timeout: float) -> dict[str, Any]:
    """Follow the log until each workload has finished or was given up on (or the timeout):
    its submission, admission and finish, and which were given up on."""
    seen: dict[str, dict[str, Any]] = {"submitted": {}, "admitted": {}, "finished": {}}
    gave_up: set[str] = set()
    kinds = {wev.WorkloadSubmitted: "submitted", qev.WorkloadAdmitted: "admitted",
             qev.WorkloadFinished: "finished"}
    position = 0
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        envs = await store.read_all(position, categories={"workload", "admission"})
        for env in envs:
            wid = getattr(env.event, "workload_id", None)
            if wid not in ids:
                continue
            if isinstance(env.event, GAVE_UP):
                gave_up.add(wid)
            elif (kind := kinds.get(type(env.event))) is not None:
                seen[kind].setdefault(wid, env)
        if envs:
            position = envs[-1].position
        if len(set(seen["finished"]) | gave_up) >= len(ids):
            break
        await asyncio.sleep(0.2)
    return {**seen, "gave_up": gave_up, "waited": time.monotonic() - started}


# -- idle: one at a time, then nothing -------------------------------------------------------


async def one_at_a_time(base: str, store: SqlEventStore, n: int, duration: float, timeout: float
                        ) -> tuple[list[float], list[str], set[str]]:
    """Submit n workloads, each after the previous one is admitted: (send -> admission
    commit seconds, problems, ids). The admission's commit time is the queue's ``recorded_at``,
    so how often this client looks does not change the figure."""
    wall: list[float] = []
    problems: list[str] = []
    ids: set[str] = set()
    run = f"{time.time():.0f}"
    async with aiohttp.ClientSession() as session:
        for i in range(n):
            headers = {"Content-Type": "application/json", "Idempotency-Key": f"idle-{run}-{i}"}
            body = orjson.dumps(workload_body(100_000 + i, duration=duration))
            position = await store.head()
            sent = time.time()
            async with session.post(f"{base}/v1/workloads", data=body, headers=headers) as resp:
                if resp.status != 201:
                    problems.append(f"idle submit {i}: HTTP {resp.status}")
                    continue
                wid = orjson.loads(await resp.read())["id"]
            ids.add(wid)
            found = await _admission(store, wid, position, timeout)
            if found is None:
                problems.append(f"idle workload {wid} not admitted within {timeout:.0f}s")
                continue
            wall.append(found.recorded_at - sent)
    return wall, problems, ids


async def _admission(store: SqlEventStore, wid: str, after: int, timeout: float) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for env in await store.read_all(after, categories={"admission"}):
            after = env.position
            if isinstance(env.event, GAVE_UP) and env.event.workload_id == wid:
                return None
            if isinstance(env.event, qev.WorkloadAdmitted) and env.event.workload_id == wid:
                return env
        await asyncio.sleep(0.01)
    return None


def cpu_seconds(pids: dict[str, int]) -> dict[str, float]:
    """User + system CPU seconds of each process so far (/proc/<pid>/stat)."""
    tick = os.sysconf("SC_CLK_TCK")
    found = {}
    for name, pid in pids.items():
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        found[name] = (int(fields[11]) + int(fields[12])) / tick
    return found


def postgres_cpu() -> float | None:
    """CPU seconds this machine's PostgreSQL server has used so far (None: no server here):
    every ``postgres`` process's own, and the postmaster's ended children's (a backend that
    exited is counted in its parent once reaped)."""
    procs: dict[int, tuple[int, int, int]] = {}  # pid -> (parent, own ticks, ended children's)
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:  # ended while we looked
            continue
        if text[text.index("(") + 1:text.rindex(")")] != "postgres":
            continue
        fields = text.rsplit(")", 1)[1].split()
        procs[int(stat.parent.name)] = (
            int(fields[1]), int(fields[11]) + int(fields[12]), int(fields[13]) + int(fields[14]))
    if not procs:
        return None
    ticks = sum(own + (ended if parent not in procs else 0)
                for parent, own, ended in procs.values())
    return ticks / os.sysconf("SC_CLK_TCK")


def stack_pids(stack: Stack) -> dict[str, int]:
    pids = {name: proc.pid for name, proc in stack.processes.items()}
    if stack.broker.process is not None:
        pids["broker"] = stack.broker.process.pid
    return pids


def stack_cpu(stack: Stack) -> dict[str, float]:
    """CPU seconds so far of each of the stack's processes, and of the PostgreSQL server
    when the store is on one on this machine."""
    used = cpu_seconds(stack_pids(stack))
    server = postgres_cpu() if stack.store_url.startswith("postgresql") else None
    if server is not None:
        used["postgres"] = server
    return used


async def idle_cpu(stack: Stack, seconds: float) -> dict[str, float]:
    """Each process's share of one core while nothing is submitted."""
    before = stack_cpu(stack)
    await asyncio.sleep(seconds)
    after = stack_cpu(stack)
    return {name: (after[name] - before[name]) / seconds for name in before}


async def through_stack(stack: Stack, args: argparse.Namespace) -> dict[str, Any]:
    doc = cluster_doc(args.existing_nodes)
    await admin.configure(stack.store_url, parse.cluster(doc), stack.broker.bootstrap)
    store = SqlEventStore(stack.store_url)
    try:
        idle, idle_problems, idle_ids = await one_at_a_time(
            stack.url(), store, args.idle, args.duration, args.timeout)
        # Idle means idle: the one-at-a-time workloads have finished and their nodes gone.
        await wait_done(store, idle_ids, args.timeout)
        cpu = await idle_cpu(stack, args.idle_seconds)
        cpu_before = stack_cpu(stack)
        ids, latencies, statuses, took, client_cpu = await submit_all(
            stack.url(), args.workloads, args.clients, args.duration, args.batch)
        done = await wait_done(store, set(ids), args.timeout)
        cpu_after = stack_cpu(stack)
        head = await store.head()
        # What the services did after the last finish (work left for when they are idle,
        # e.g. intake's copy of the queue state), above their idle rate.
        await asyncio.sleep(args.settle)
        cpu_settled = stack_cpu(stack)
        after = {name: cpu_settled[name] - cpu_after[name] - cpu[name] * args.settle
                 for name in cpu_before}
    finally:
        await store.close()
    submitted, admitted, finished = done["submitted"], done["admitted"], done["finished"]
    failed = sum(1 for env in finished.values() if env.event.outcome != "Succeeded")
    logical = [admitted[w].occurred_at - submitted[w].occurred_at for w in admitted]
    wall = [admitted[w].recorded_at - submitted[w].occurred_at for w in admitted]
    first = min((e.occurred_at for e in submitted.values()), default=0.0)
    last = max((e.recorded_at for e in admitted.values()), default=first)
    burst_cpu = {name: cpu_after[name] - cpu_before[name] for name in cpu_before}
    return {"burst_cpu": burst_cpu, "after_cpu": after, "idle": idle,
            "idle_problems": idle_problems, "idle_cpu": cpu,
            "ids": ids, "latencies": latencies, "statuses": statuses, "took": took,
            "client_cpu": client_cpu,
            "admitted": len(admitted), "gave_up": len(done["gave_up"]),
            "finished": len(finished), "failed": failed, "waited": done["waited"],
            "logical": logical, "wall": wall, "span": last - first, "head": head}


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    n, clients = args.workloads, args.clients
    per_request = f"batches of {args.batch}" if args.batch else "one a request"
    print(f"bench.e2e_submit ({machine()}): {n} workloads, {clients} clients, {per_request}")
    with tempfile.TemporaryDirectory(prefix="muster-bench-") as tmp, ExitStack() as scratch:
        if args.server:  # two databases of their own, dropped after the run
            base_url, store_url = (scratch.enter_context(scratch_postgres_sync(args.server))
                                   for _ in range(2))
            print(f"store: PostgreSQL, scratch databases on {redact(args.server)}")
        else:
            base_url, store_url = f"sqlite:///{Path(tmp) / 'baseline.db'}", None
        base = asyncio.run(direct_appends(base_url, n, clients, args.duration))
        started = time.perf_counter()
        # No per-tenant rate limit: the benchmark is one tenant submitting as fast as it can.
        with Stack(Path(tmp) / "stack", store_url=store_url,
                   extra_env={"MUSTER_SUBMIT_RATE": "0"}) as stack:
            print(f"stack up in {time.perf_counter() - started:.1f}s "
                  f"(intake {stack.url()}, broker {stack.broker.bootstrap})")
            r = asyncio.run(through_stack(stack, args))
    print(f"idle, one at a time ({len(r['idle'])}/{args.idle} admitted): "
          f"send -> admission committed {summary(r['idle'])}")
    cpu = r["idle_cpu"]
    print(f"idle CPU over {args.idle_seconds:.0f}s: {sum(cpu.values()):.1%} of a core ("
          + ", ".join(f"{k} {v:.1%}" for k, v in cpu.items()) + ")")
    http_rate = per_second(len(r["ids"]), r["took"])
    print(f"HTTP submit: {len(r['ids'])} accepted in {r['took']:.2f}s = {http_rate:,.0f} "
          f"submissions/s; statuses {dict(sorted(r['statuses'].items()))}")
    print(f"  request latency ({'per batch' if args.batch else 'per request'}): "
          f"{summary(r['latencies'])}")
    print(f"  the benchmark's client (bench.http_load), on the same cores: "
          f"{r['client_cpu'] / max(1, len(r['latencies'])) * 1000:.3f} ms of CPU a request")
    print(f"direct appends (same process, no HTTP, a store of the same kind): sequential "
          f"{base['sequential']:,.0f}/s, {clients} tasks {base['concurrent']:,.0f}/s")
    print(f"  HTTP/direct: {ratio(http_rate, base['sequential'])} of sequential, "
          f"{ratio(http_rate, base['concurrent'])} of concurrent")
    print(f"admitted {r['admitted']}/{len(r['ids'])}, finished {r['finished']} "
          f"({r['failed']} failed, gave up {r['gave_up']}) by {r['waited']:.1f}s after the "
          "last submit; first submit -> last admission "
          f"{r['span']:.1f}s = {per_second(r['admitted'], r['span']):,.0f} admissions/s; "
          f"{r['head']} events in the log by then")
    burst = r["burst_cpu"]
    per = sum(burst.values()) / max(1, r["admitted"])
    print(f"  CPU per admitted workload, submit to finish, every process: {per * 1000:.2f} ms ("
          + ", ".join(f"{k} {v / max(1, r['admitted']) * 1000:.2f}" for k, v in burst.items())
          + "); the benchmark's client is not counted")
    if args.settle:
        after = r["after_cpu"]
        later = sum(after.values()) / max(1, r["admitted"])
        print(f"  then over {args.settle:.1f}s after it, above the idle rate: "
              f"{later * 1000:.3f} ms a workload ("
              + ", ".join(f"{k} {v / max(1, r['admitted']) * 1000:.3f}" for k, v in after.items())
              + f"); with it {(per + later) * 1000:.2f} ms a workload in all")
    print(f"  submit -> admitted, logical (occurred_at): {summary(r['logical'])}")
    print(f"  submit -> admitted, wall (recorded_at):    {summary(r['wall'])}")
    problems = outcome(n, r)
    if problems:
        raise SystemExit("FAILED: " + "; ".join(problems) + " (the rates above are not valid)")


def outcome(n: int, r: dict[str, Any]) -> list[str]:
    """What went other than intended: every workload accepted once and admitted, none
    refused, rejected or cancelled. A rate over work that did not run is not a rate."""
    problems = list(r["idle_problems"])
    if len(r["ids"]) != n or set(r["statuses"]) != {201}:
        problems.append(f"{n - len(r['ids'])} of {n} not accepted: {r['statuses']}")
    if r["gave_up"]:
        problems.append(f"{r['gave_up']} rejected or cancelled")
    if r["admitted"] != len(r["ids"]):
        problems.append(f"{len(r['ids']) - r['admitted']} never admitted")
    if r["finished"] != len(r["ids"]) or r["failed"]:
        problems.append(f"{len(r['ids']) - r['finished']} never finished, {r['failed']} failed")
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
                   help="seconds to wait for every finish after the last submit (default 60)")
    p.add_argument("--existing-nodes", type=int, default=0,
                   help="place on this many declared 8-GPU nodes instead of provisioning")
    p.add_argument("--batch", type=int, default=0, metavar="N",
                   help="submit N workloads a request through POST /v1/workloads:batch "
                        "(default 0: one workload a request)")
    p.add_argument("--idle", type=int, default=50,
                   help="workloads submitted one at a time on the idle stack first (default 50)")
    p.add_argument("--idle-seconds", type=float, default=10.0,
                   help="seconds the idle stack's CPU is measured over (default 10)")
    p.add_argument("--settle", type=float, default=2.0,
                   help="then measure each process's CPU over this many seconds more, above "
                        "its idle rate: work the burst left for later, e.g. folding the "
                        "last events (default 2; 0: not measured)")
    p.add_argument("--postgres", action="store_true",
                   help=f"run the store on PostgreSQL: scratch databases on the server of "
                        f"${POSTGRES_ENV}, dropped after the run (default: a SQLite file)")
    args = p.parse_args(argv)
    if args.batch < 0:
        p.error("--batch must be 0 (one a request) or more")
    args.server = postgres_url() if args.postgres else None
    if args.postgres and args.server is None:
        p.error(f"--postgres needs ${POSTGRES_ENV}, a PostgreSQL server's URL")
    return args


if __name__ == "__main__":
    main()
