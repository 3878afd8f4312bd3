"""The hostile-input run: the embedded stack with auth on, attacked on every surface
while a healthy tenant keeps submitting.

The attacker (one request at a time) sends, as the admin, a tenant, nobody and a
forged token: the large inputs (a 1 MiB apply, YAML nested 10,000 deep, a billion
laughs, JSON nested 100,000 deep, a body over the limit, a 100 KB token, an oversized
batch), then hypothesis over every HTTP operation of the OpenAPI document, every
manifest kind of the seeds, every gRPC method and the Kafka submissions topic
(``tests/api/hostile.py``). Meanwhile a healthy tenant, in its own process so the
attacker's CPU is not on its clock, submits one workload every 50 ms: first alone (the
baseline), then through the attack.

Checked: no server error on any transport (HTTP 5xx, gRPC INTERNAL/UNKNOWN/...,
ingest replies >= 500), every refusal in the error shape, no event appended by intake
for a refused request (read from the store after each one; the healthy tenant's own
submissions are told apart by their namespace), and every healthy submission accepted.
Printed: requests and statuses per transport, those counts, and the healthy tenant's
latency alone and during the attack.

    python -m tests.chaos.hostile [--examples 20] [--baseline 5]     (make chaos)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import os
import sys
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import orjson
import requests
import yaml
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from hypothesis import given

from muster.core.model import parse
from muster.core.sim.summary import percentile
from muster.runtime import admin
from muster.runtime.stack import Stack
from tests.api import hostile
from tests.api.conftest import CLUSTER, TOKEN_FILE, TOKENS, bearer, workload
from tests.api.test_hostile_manifests import SEEDS
from tests.chaos.checker import Row, head, read_rows
from tests.chaos.run import print_rows

HEALTHY = "team-b"  # the healthy tenant's token name and namespace
ATTACKERS: tuple[str | None, ...] = ("admin", "team-a", None)
INGEST_TOPIC = "muster-ingest"
EVERY = 0.05  # the healthy tenant's pace (seconds)


@dataclass(frozen=True)
class HostilePlan:
    examples: int = 20  # per HTTP operation and mode, per gRPC method; x5 manifests, ingest
    baseline: float = 5.0  # seconds the healthy tenant runs alone first


@dataclass
class HostileFigures:
    requests: Counter[str] = field(default_factory=Counter)  # transport -> requests
    statuses: dict[str, Counter[str]] = field(default_factory=dict)  # transport -> status
    server_errors: list[str] = field(default_factory=list)
    out_of_shape: list[str] = field(default_factory=list)
    stray: list[str] = field(default_factory=list)  # refusals that left events
    alone: list[float] = field(default_factory=list)  # healthy latencies, seconds
    during: list[float] = field(default_factory=list)
    healthy_statuses: Counter[int] = field(default_factory=Counter)
    attack_seconds: float = 0.0


def run(plan: HostilePlan, data_dir: Path, *, quiet: bool = False) -> HostileFigures:
    say: Callable[[str], None] = (lambda _: None) if quiet else (lambda m: print(m, flush=True))
    figures = HostileFigures()
    tokens = data_dir / "tokens.yaml"
    tokens.write_text(yaml.safe_dump(TOKEN_FILE))
    env = {"MUSTER_AUTH_TOKEN_FILE": str(tokens), "MUSTER_INGEST_TOPIC": INGEST_TOPIC}
    with Stack(data_dir, poll_seconds=0.3, extra_env=env) as stack:
        asyncio.run(admin.configure(stack.store_url, parse.cluster(CLUSTER), None))
        say(f"stack up with auth on; healthy tenant alone for {plan.baseline:g}s")
        ctx = mp.get_context("spawn")
        ready, stop, (receive, send) = ctx.Event(), ctx.Event(), ctx.Pipe(duplex=False)
        args = (stack.url(), ready, stop, send)
        healthy = ctx.Process(target=_healthy, args=args, daemon=True)
        healthy.start()
        if not ready.wait(120):
            raise RuntimeError("the healthy tenant never submitted")
        time.sleep(plan.baseline)
        started = time.time()
        try:
            _attack(stack, plan, StrayJudge(stack.store_url, figures), say)
        finally:
            figures.attack_seconds = time.time() - started
            stop.set()
        samples: list[tuple[float, float, int]] = receive.recv()
        healthy.join()
        for at, took, status in samples:
            (figures.alone if at < started else figures.during).append(took)
            figures.healthy_statuses[status] += 1
    return figures


def _attack(stack: Stack, plan: HostilePlan, judge: StrayJudge, say: Callable[[str], None]) -> None:
    base = stack.url()
    for label, send in _large(base):
        judge("large", label, send)
    say(f"large inputs: {judge.figures.statuses['large']}")
    document = requests.get(f"{base}/openapi.json", timeout=30).json()
    hostile.http_operations(base, document, plan.examples, (*ATTACKERS, "forged"), judge, _auth)
    say(f"HTTP operations: {sum(judge.figures.statuses['http'].values())} requests")
    hostile.manifests(base, SEEDS, plan.examples * 5, ("admin", "team-a"), judge)
    hostile.grpc_methods(stack.grpc_target, plan.examples, ATTACKERS, judge)
    say(f"gRPC methods: {judge.figures.requests['grpc']} requests")
    with IngestClient(stack.broker.bootstrap) as ingest:
        _ingest(ingest, plan.examples * 5, judge)
    say(f"ingest: {judge.figures.requests['ingest']} messages")


def _auth(who: str | None) -> dict[str, str]:
    return {"Authorization": "Bearer forged-token"} if who == "forged" else bearer(who)


def _token(value: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {value}"}


def _large(base: str) -> list[tuple[str, hostile.Send]]:
    """The inputs that cost the server most to refuse, each as a tenant."""
    pods = "---\n".join(
        f"apiVersion: v1\nkind: Pod\nmetadata: {{name: p{i}, namespace: team-a, labels: "
        "{kueue.x-k8s.io/queue-name: nope}}\nspec: {containers: [{name: c, resources: "
        "{requests: {cpu: '1'}}}]}\n"
        for i in range(5000)
    )
    laughs = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{c}: &{c} [{', '.join(['*' + p] * 9)}]\n"
        for p, c in zip("abcdefgh", "bcdefghi", strict=True)
    )
    batch = {"items": [workload(f"w{i}") for i in range(10_000)]}
    cases: list[tuple[str, str, bytes, dict[str, str]]] = [
        ("apply 1 MiB of Pods", "/v1/apply", pods.encode(), bearer("team-a")),
        ("apply YAML nested 10,000 deep", "/v1/apply", b"a: " + b"[" * 10_000, bearer("team-a")),
        ("apply a billion laughs", "/v1/apply", laughs.encode(), bearer("team-a")),
        ("JSON nested 100,000 deep", "/v1/workloads", b"[" * 100_000, bearer("team-a")),
        ("a 2 MiB body", "/v1/workloads", b" " * 2**21, bearer("team-a")),
        ("an 8,000-character token", "/v1/workloads", b"{}", _token("x" * 8000)),
        ("a batch of 10,000", "/v1/workloads:batch", orjson.dumps(batch), bearer("team-a")),
    ]
    session = requests.Session()

    def sender(path: str, body: bytes, headers: dict[str, str], label: str) -> hostile.Send:
        def send() -> hostile.Answer:
            resp = session.post(f"{base}{path}", data=body, headers=headers, timeout=60)
            return hostile.http_answer(f"{label}: {resp.status_code}", resp)

        return send

    def parser_refuses() -> hostile.Answer:
        """A header over the HTTP parser's 8 KiB: aiohttp answers 400 in plain text before
        muster sees the request (the one refusal not in muster's error shape)."""
        resp = session.post(f"{base}/v1/workloads", data=b"{}", headers=_token("x" * 100_000))
        refused = 400 <= resp.status_code < 500
        problem = None if refused else f"a 100 KB token: {resp.status_code} {resp.text[:200]}"
        return hostile.Answer(str(resp.status_code), refused, problem)

    sends = [(label, sender(path, body, h, label)) for label, path, body, h in cases]
    return [*sends, ("a 100 KB token", parser_refuses)]


# -- judging ----------------------------------------------------------------------------


@dataclass
class StrayJudge:
    """Counts every answer; a refusal must leave no event of intake's in the store but
    the healthy tenant's (read straight from the store, by the checker's reader)."""

    store_url: str
    figures: HostileFigures

    def __call__(self, transport: str, label: str, send: hostile.Send) -> None:
        before = head(self.store_url)
        answer = send()
        f = self.figures
        f.requests[transport] += 1
        f.statuses.setdefault(transport, Counter())[answer.status] += 1
        if answer.problem is not None:
            server = answer.status.startswith("5") or answer.status in hostile.GRPC_SERVER_ERRORS
            (f.server_errors if server else f.out_of_shape).append(answer.problem)
        elif answer.refused:
            left = [r for r in read_rows(self.store_url, before) if _not_healthy(r)]
            if left:
                f.stray.append(f"{label}: {answer.status}, yet {left[0].type} was appended")


def _not_healthy(row: Row) -> bool:
    if row.producer != "intake":
        return False  # the other services' decisions
    spec = row.payload.get("spec") if isinstance(row.payload, dict) else None
    return not (isinstance(spec, dict) and spec.get("namespace") == HEALTHY)


# -- the healthy tenant -----------------------------------------------------------------


def _healthy(url: str, ready: Any, stop: Any, out: Connection) -> None:
    """Submit one small workload every 50 ms until ``stop`` (``ready`` after the first);
    send back (when, seconds, status) for each."""
    samples: list[tuple[float, float, int]] = []
    headers = {**bearer(HEALTHY), "Content-Type": "application/json"}
    i = 0
    while not stop.is_set():
        body = json.dumps(workload(f"healthy-{i}", HEALTHY)).encode()
        req = urllib.request.Request(f"{url}/v1/workloads", body, headers, method="POST")
        at = time.time()
        started = time.monotonic()
        try:
            with urllib.request.urlopen(req, timeout=30) as resp:
                status = resp.status
        except urllib.error.HTTPError as exc:
            status = exc.code
        except OSError:  # the stack went away: counted, so the run says so
            status = 0
        took = time.monotonic() - started
        samples.append((at, took, status))
        ready.set()
        i += 1
        time.sleep(max(0.0, EVERY - took))
    out.send(samples)


# -- the Kafka submissions topic ------------------------------------------------------------


class IngestClient:
    """Sends one message at a time and waits for its reply (its own event loop, so the
    synchronous hypothesis run can drive it)."""

    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap
        self.loop = asyncio.new_event_loop()

    def __enter__(self) -> IngestClient:
        self.loop.run_until_complete(self._start())
        return self

    def __exit__(self, *exc: object) -> None:
        self.loop.run_until_complete(self._stop())
        self.loop.close()

    async def _start(self) -> None:
        from muster.bus.kafka import ensure_topics
        from services.intake.ingest import replies_topic

        await ensure_topics(
            self.bootstrap, "muster", extra=(INGEST_TOPIC, replies_topic(INGEST_TOPIC))
        )
        self.producer = AIOKafkaProducer(bootstrap_servers=self.bootstrap, enable_idempotence=False)
        self.consumer = AIOKafkaConsumer(
            replies_topic(INGEST_TOPIC),
            bootstrap_servers=self.bootstrap,
            group_id=None,
            auto_offset_reset="latest",
        )
        await self.producer.start()
        await self.consumer.start()
        await self.consumer.seek_to_end()

    async def _stop(self) -> None:
        await self.producer.stop()
        await self.consumer.stop()

    def send(self, value: bytes, who: str | None) -> dict[str, Any]:
        return self.loop.run_until_complete(self._send(value, who))

    async def _send(self, value: bytes, who: str | None) -> dict[str, Any]:
        key = uuid.uuid4().hex.encode()
        headers = [("authorization", f"Bearer {TOKENS[who]}".encode())] if who else []
        await self.producer.send_and_wait(INGEST_TOPIC, value, key=key, headers=headers)
        async with asyncio.timeout(60):
            while True:
                for records in (await self.consumer.getmany(timeout_ms=200)).values():
                    for r in records:
                        if r.key == key:
                            return dict(orjson.loads(r.value or b"{}"))


def _ingest(client: IngestClient, examples: int, judge: StrayJudge) -> None:
    @hostile.bounded(examples)
    @given(value=hostile.ingest_value())
    def check(value: bytes) -> None:
        for who in ATTACKERS:
            label = f"ingest as {who}"

            def send(who: str | None = who, label: str = label) -> hostile.Answer:
                reply = client.send(value, who)
                status = int(reply.get("status", 0))
                problem = None
                if status >= 500 or (status >= 400 and set(reply) != {"status", "error", "source"}):
                    problem = f"{label}: {reply}"
                return hostile.Answer(str(status), status >= 400, problem)

            judge("ingest", label, send)

    check()


# -- figures ----------------------------------------------------------------------------


def print_figures(f: HostileFigures) -> None:
    def lat(v: list[float]) -> str:
        if not v:
            return "none"
        ms = [x * 1000 for x in v]
        p50, p99 = percentile(ms, 50), percentile(ms, 99)
        return f"n={len(v)} p50 {p50:.1f} ms, p99 {p99:.1f} ms, max {max(ms):.1f} ms"

    rows = [
        (
            "requests",
            ", ".join(f"{k} {v}" for k, v in f.requests.items()) + f" (in {f.attack_seconds:.0f}s)",
        ),
        *(
            (f"statuses ({t})", ", ".join(f"{s} {n}" for s, n in sorted(c.items())))
            for t, c in f.statuses.items()
        ),
        ("server errors (5xx, INTERNAL, ...)", str(len(f.server_errors))),
        ("refusals out of the error shape", str(len(f.out_of_shape))),
        ("refusals that appended events", str(len(f.stray))),
        ("healthy tenant alone", lat(f.alone)),
        ("healthy tenant during the attack", lat(f.during)),
        ("healthy statuses", ", ".join(f"{k} {v}" for k, v in sorted(f.healthy_statuses.items()))),
    ]
    print_rows(rows)


def failures(f: HostileFigures) -> list[str]:
    out = [*f.server_errors[:3], *f.out_of_shape[:3], *f.stray[:3]]
    if set(f.healthy_statuses) != {201}:
        out.append(f"healthy submissions not all accepted: {dict(f.healthy_statuses)}")
    if not f.during:
        out.append("the healthy tenant made no submission during the attack")
    return out


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(
        prog="python -m tests.chaos.hostile",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--examples", type=int, default=HostilePlan.examples)
    p.add_argument("--baseline", type=float, default=HostilePlan.baseline)
    args = p.parse_args(argv)
    print(f"hostile run: load average {os.getloadavg()[0]:.2f}")
    with tempfile.TemporaryDirectory(prefix="muster-hostile-") as tmp:
        figures = run(HostilePlan(args.examples, args.baseline), Path(tmp))
    print_figures(figures)
    wrong = failures(figures)
    if wrong:
        print("FAILED: " + "; ".join(wrong), file=sys.stderr)
        raise SystemExit(1)
    print("hostile: no server error, no trace of a refusal, every healthy submission accepted")


if __name__ == "__main__":
    main()
