"""Does one tenant's 1 MiB manifest slow another tenant's submissions? (issue 15)

Starts the embedded stack and has a healthy client submit one small workload every
20 ms, first alone (the baseline), then while another client POSTs, back to back, a
~1 MiB multi-document YAML to ``/v1/apply`` (5,000 Pods naming a LocalQueue that does
not exist: read in full, then refused with 422). Printed: the healthy client's latency
(p50, p99, max) in both phases, the hostile applies' count, statuses and time each.
It fails (``FAILED:``, exit 1) unless each phase made healthy submissions and every one
was accepted (201), at least one hostile apply ran and every one was read and refused
with 422 (a refusal before reading, 413 say, is not the load this scenario measures),
and the store holds exactly the healthy submissions.

    python -m bench.hostile_apply [--seconds 5]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import tempfile
import time
from collections import Counter
from pathlib import Path

import aiohttp

from bench import check_outcome, machine, ratio, workload_body
from bench.e2e_submit import cluster_doc
from muster.core.events import workload as wev
from muster.core.model import parse
from muster.core.sim.summary import percentile
from muster.runtime import admin
from muster.runtime.stack import Stack
from muster.store import SqlEventStore

PODS = 5000
POD = """apiVersion: v1
kind: Pod
metadata: {{name: hostile-{i}, namespace: team-a, labels: {{kueue.x-k8s.io/queue-name: nope}}}}
spec: {{containers: [{{name: c, image: busybox, resources: {{requests: {{cpu: "1"}}}}}}]}}
"""


def hostile_yaml() -> bytes:
    return "---\n".join(POD.format(i=i) for i in range(PODS)).encode()


async def healthy(
    session: aiohttp.ClientSession, base: str, seconds: float, first: int
) -> tuple[list[float], Counter[int]]:
    """One submission every 20 ms for ``seconds``: (latencies, statuses)."""
    latencies: list[float] = []
    statuses: Counter[int] = Counter()
    deadline = time.monotonic() + seconds
    i = first
    while time.monotonic() < deadline:
        started = time.monotonic()
        async with session.post(f"{base}/v1/workloads", json=workload_body(i)) as resp:
            await resp.read()
            statuses[resp.status] += 1
        latencies.append(time.monotonic() - started)
        i += 1
        await asyncio.sleep(max(0.0, 0.02 - (time.monotonic() - started)))
    return latencies, statuses


async def hostile(
    session: aiohttp.ClientSession, base: str, stop: asyncio.Event
) -> tuple[list[float], Counter[int]]:
    body = hostile_yaml()
    took: list[float] = []
    statuses: Counter[int] = Counter()
    while not stop.is_set():
        started = time.monotonic()
        async with session.post(
            f"{base}/v1/apply", data=body, headers={"Content-Type": "application/yaml"}
        ) as resp:
            await resp.read()
            statuses[resp.status] += 1
        took.append(time.monotonic() - started)
    return took, statuses


async def measure(base: str, seconds: float) -> tuple[int, list[str]]:
    """Both phases, printed: (healthy submissions accepted, what went other than intended)."""
    async with aiohttp.ClientSession() as alone, aiohttp.ClientSession() as other:
        base_lat, base_status = await healthy(alone, base, seconds, 0)
        stop = asyncio.Event()
        attack = asyncio.create_task(hostile(other, base, stop))
        await asyncio.sleep(0.5)  # the first apply is being read
        lat, status = await healthy(alone, base, seconds, len(base_lat))
        stop.set()
        took, hostile_status = await attack
    if not base_lat or not lat or not took:
        return 0, [
            f"a phase made no request: {len(base_lat)} alone, {len(lat)} during, "
            f"{len(took)} hostile applies"
        ]
    size = len(hostile_yaml()) / 2**20
    print(f"healthy tenant, one submission every 20 ms for {seconds:g}s (seconds):")
    for label, v in (("alone", base_lat), (f"during {size:.2f} MiB applies", lat)):
        print(
            f"  {label:<24} n={len(v):<4} p50 {percentile(v, 50):.4f}  p99 "
            f"{percentile(v, 99):.4f}  max {max(v):.4f}"
        )
    print(
        f"  max latency during / alone: {ratio(max(lat), max(base_lat))}; p99: "
        f"{ratio(percentile(lat, 99), percentile(base_lat, 99))}"
    )
    print(
        f"hostile tenant: {len(took)} applies of {PODS} Pods, statuses {dict(hostile_status)}, "
        f"each {percentile(took, 50):.2f}s (p50), {max(took):.2f}s (max)"
    )
    problems = []
    if set(base_status) | set(status) != {201}:
        problems.append(f"healthy submissions not all accepted: {base_status} {status}")
    if set(hostile_status) != {422}:
        problems.append(f"hostile applies not all read and refused with 422: {hostile_status}")
    return base_status[201] + status[201], problems


async def stored(url: str) -> int:
    store = SqlEventStore(url)
    try:
        envs = await store.read_all(0, categories={"workload"})
    finally:
        await store.close()
    return sum(isinstance(e.event, wev.WorkloadSubmitted) for e in envs)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m bench.hostile_apply", description=__doc__)
    p.add_argument("--seconds", type=float, default=5.0, help="each phase's length")
    args = p.parse_args(argv)
    print(f"bench.hostile_apply ({machine()}), load average {os.getloadavg()[0]:.2f}")
    with tempfile.TemporaryDirectory(prefix="muster-hostile-") as tmp, Stack(Path(tmp)) as stack:
        asyncio.run(admin.configure(stack.store_url, parse.cluster(cluster_doc()), None))
        accepted, problems = asyncio.run(measure(stack.url(), args.seconds))
        count = asyncio.run(stored(stack.store_url))
    if count != accepted:
        problems.append(f"the store holds {count} submissions, {accepted} were accepted")
    else:
        print(f"the store holds exactly the {count} healthy submissions")
    check_outcome(problems)


if __name__ == "__main__":
    main()
