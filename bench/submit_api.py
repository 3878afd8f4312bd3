"""Durable submissions per second through intake's APIs, and their latency.

For each store (SQLite; PostgreSQL too when MUSTER_TEST_POSTGRES_URL is set) it starts
the Tansu broker and the intake service as a process, then submits one-pod workloads:

* HTTP: ``POST /v1/workloads``, C concurrent keep-alive clients (default 64);
* gRPC unary: ``Submissions/Submit``, C concurrent calls on one channel;
* gRPC batch: ``Submissions/SubmitBatch`` of 100, 8 concurrent calls.

An answer means the ``workload.submitted`` events are committed, so every rate is of
durable submissions; latency is per request (per batch for the batch). Per-tenant rate
limiting is off (MUSTER_SUBMIT_RATE=0) so the figures are of the path, not the limit.

Baseline, in this process: the same appends straight into a fresh store of the same kind
from C concurrent tasks (no HTTP, no gRPC, no service), so the API's cost shows as a ratio.

Outcome (fails loudly otherwise): on every store and transport each of the N submissions
was answered as created (HTTP 201, gRPC ``created``), and the store then holds exactly one
``workload.submitted`` event per submission made (warm-up included): a rate over refused
or lost submissions is not a rate.

    python -m bench.submit_api [--workloads 3000] [--clients 64]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import grpc
import orjson
from google.protobuf import json_format

from bench import (
    check_outcome,
    machine,
    per_second,
    postgres_url,
    ratio,
    scratch_postgres,
    workload_body,
)
from bench.e2e_submit import cluster_doc, cpu_seconds, direct_appends
from muster.api.v1 import muster_pb2 as pb
from muster.api.v1 import muster_pb2_grpc as rpc
from muster.bus.broker import EmbeddedBroker, free_port
from muster.core.events import workload as wev
from muster.core.model import parse
from muster.core.sim.summary import percentile
from muster.runtime import admin
from muster.store import SqlEventStore
from muster.store.migrate import upgrade_async

BATCH = 100
BATCH_CLIENTS = 8
WARM_UP = 50  # HTTP submissions before the measured ones


def latency(values: list[float]) -> str:
    if not values:
        return "n/a"
    return f"p50 {percentile(values, 50) * 1000:.1f} ms, p99 {percentile(values, 99) * 1000:.1f} ms"


@contextlib.asynccontextmanager
async def intake(
    store_url: str, broker: EmbeddedBroker, logs: Path
) -> AsyncIterator[tuple[str, str, int]]:
    """The intake service as a process: (HTTP base URL, gRPC target, pid)."""
    http_port, grpc_port = free_port(), free_port()
    env = {
        **os.environ,
        "MUSTER_STORE_URL": store_url,
        "MUSTER_KAFKA_BOOTSTRAP": broker.bootstrap,
        "MUSTER_HTTP_HOST": "127.0.0.1",
        "MUSTER_HTTP_PORT": str(http_port),
        "MUSTER_GRPC_PORT": str(grpc_port),
        "MUSTER_SUBMIT_RATE": "0",
        "MUSTER_MIGRATE": "false",
        "MUSTER_LOG_LEVEL": "warning",
    }
    with open(logs / f"intake-{http_port}.log", "ab") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "services.intake"], env=env, stdout=log, stderr=log
        )
    base = f"http://127.0.0.1:{http_port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"{base}/healthz", timeout=2):
                    break
            except OSError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise RuntimeError(f"intake did not start; see {logs}") from None
                await asyncio.sleep(0.2)
        yield base, f"127.0.0.1:{grpc_port}", proc.pid
    finally:
        proc.terminate()
        proc.wait(timeout=30)


async def timed(
    n: int, clients: int, one: Callable[[int], Awaitable[int]]
) -> tuple[float, list[float], int]:
    """Run ``one(i)`` for i < n from ``clients`` workers: (seconds, latencies, submitted)."""
    todo = iter(range(n))
    latencies: list[float] = []
    done = 0

    async def worker() -> None:
        nonlocal done
        for i in todo:
            sent = time.perf_counter()
            created = await one(i)  # not `done += await ...`: that reads done before awaiting
            latencies.append(time.perf_counter() - sent)
            done += created

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(clients)))
    return time.perf_counter() - started, latencies, done


async def over_http(base: str, n: int, clients: int, run: str) -> tuple[float, list[float], int]:
    bodies = [orjson.dumps(workload_body(i)) for i in range(n)]
    connector = aiohttp.TCPConnector(limit=clients)  # keep-alive: connections are reused
    async with aiohttp.ClientSession(connector=connector) as session:

        async def one(i: int) -> int:
            headers = {"Content-Type": "application/json", "Idempotency-Key": f"h-{run}-{i}"}
            async with session.post(f"{base}/v1/workloads", data=bodies[i], headers=headers) as r:
                await r.read()
                return 1 if r.status == 201 else 0

        return await timed(n, clients, one)


def spec(i: int) -> pb.WorkloadSpec:
    body = workload_body(i)
    body["podSets"][0]["requests"] = {k: str(v) for k, v in body["podSets"][0]["requests"].items()}
    return json_format.ParseDict(body, pb.WorkloadSpec())


async def over_grpc(target: str, n: int, clients: int, run: str) -> dict[str, Any]:
    specs = [spec(i) for i in range(n)]
    async with grpc.aio.insecure_channel(target) as channel:
        stub = rpc.SubmissionsStub(channel)

        async def unary(i: int) -> int:
            reply = await stub.Submit(
                pb.SubmitRequest(workload=specs[i], idempotency_key=f"u-{run}-{i}")
            )
            return 1 if reply.created else 0

        async def batch(b: int) -> int:
            items = [
                pb.SubmitRequest(workload=specs[i], idempotency_key=f"b-{run}-{i}")
                for i in range(b * BATCH, min(n, (b + 1) * BATCH))
            ]
            reply = await stub.SubmitBatch(pb.SubmitBatchRequest(items=items))
            return sum(1 for item in reply.items if item.created)

        return {
            "unary": await timed(n, clients, unary),
            "batch": await timed((n + BATCH - 1) // BATCH, BATCH_CLIENTS, batch),
        }


async def submitted(url: str) -> int:
    """``workload.submitted`` events in the store."""
    store = SqlEventStore(url)
    try:
        count = position = 0
        while batch := await store.read_all(position, categories={"workload"}, limit=10_000):
            count += sum(isinstance(e.event, wev.WorkloadSubmitted) for e in batch)
            position = batch[-1].position
        return count
    finally:
        await store.close()


async def one_store(
    kind: str, url: str, broker: EmbeddedBroker, args: argparse.Namespace, logs: Path
) -> list[str]:
    """One store's transports, printed; what went other than intended, labelled."""
    await upgrade_async(url)
    store = SqlEventStore(url)
    try:
        await admin.apply_cluster(store, parse.cluster(cluster_doc()))
    finally:
        await store.close()
    run = f"{time.time():.0f}"
    n, c = args.workloads, args.clients
    cpu: dict[str, float] = {}  # intake's CPU seconds in each transport's run
    async with intake(url, broker, logs) as (base, target, pid):
        await over_http(base, WARM_UP, 8, f"warm-{run}")  # warm-up: connections, the fold
        before, client_before = cpu_seconds({"intake": pid})["intake"], time.process_time()
        http = await over_http(base, n, c, run)
        cpu["http"] = cpu_seconds({"intake": pid})["intake"] - before
        cpu["client"] = time.process_time() - client_before
        grpc_results = await over_grpc(target, n, c, run)
    print(f"\n{kind}: {n} one-pod workloads per transport")
    rows = [
        (f"HTTP, {c} keep-alive clients", http),
        (f"gRPC unary, {c} concurrent", grpc_results["unary"]),
        (f"gRPC batch of {BATCH}, {BATCH_CLIENTS} concurrent", grpc_results["batch"]),
    ]
    rates = {}
    problems = [f"{label}: {done} of {n} created" for label, (_, _, done) in rows if done != n]
    stored = await submitted(url)
    if stored != WARM_UP + 3 * n:
        problems.append(
            f"the store holds {stored} submissions, {WARM_UP + 3 * n} were made (warm-up included)"
        )
    for label, (seconds, lat, done) in rows:
        rate = per_second(done, seconds)
        rates[label] = rate
        unit = "per batch" if "batch" in label else "per request"
        print(
            f"  {label:<36} {rate:8.0f} submissions/s  ({done}/{n} created)  {latency(lat)} {unit}"
        )
    print(
        f"  CPU over HTTP: intake {cpu['http'] / n * 1000:.3f} ms a submission, "
        f"this client {cpu['client'] / n * 1000:.3f} ms"
    )
    if kind == "SQLite":
        with tempfile.TemporaryDirectory() as tmp:
            base_url = f"sqlite:///{Path(tmp) / 'baseline.db'}"
            baseline = await direct_appends(base_url, n, c, 0.5)
    else:
        async with scratch_postgres(url) as scratch:
            baseline = await direct_appends(scratch, n, c, 0.5)
    print(f"  baseline: direct store appends, {c} tasks {baseline['concurrent']:8.0f} appends/s")
    for label, rate in rates.items():
        print(f"    {label:<36} {ratio(rate, baseline['concurrent'])} of the baseline")
    return [f"{kind}: {p}" for p in problems]


async def main_async(args: argparse.Namespace) -> list[str]:
    print(f"bench.submit_api on {machine()}")
    with tempfile.TemporaryDirectory() as tmp, EmbeddedBroker() as broker:
        logs = Path(tmp)
        problems = await one_store("SQLite", f"sqlite:///{logs / 'muster.db'}", broker, args, logs)
        pg = postgres_url()
        if pg:
            async with scratch_postgres(pg) as url:
                problems += await one_store("PostgreSQL", url, broker, args, logs)
        else:
            print("\nPostgreSQL: skipped (set MUSTER_TEST_POSTGRES_URL)")
    return problems


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(
        prog="python -m bench.submit_api",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--workloads", type=int, default=3000)
    p.add_argument("--clients", type=int, default=64)
    check_outcome(asyncio.run(main_async(p.parse_args(argv))))


if __name__ == "__main__":
    main()
