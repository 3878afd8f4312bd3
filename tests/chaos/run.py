"""The chaos run: the embedded stack under faults, checked by an independent checker.

Clients submit workloads over HTTP with idempotency keys and retry every failure with
the same key; meanwhile each service is SIGKILLed at random moments (the stack starts
it again), the broker is killed and restarted, and, on PostgreSQL, the database is cut
away as a restart does (a TCP proxy drops and refuses every connection for a while).
Once the faults stop, the run waits for quiescence (every accepted workload ended, every
node removed), then ``checker.py`` (which imports nothing of muster) checks the store,
and every decision is re-derived from the log (``verify_decisions``).

    python -m tests.chaos.run [--workloads 1000] [--kills 6] [--broker-kills 3]
        [--db-restarts 2] [--seed 1] [--postgres URL]        (make chaos)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import signal
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from muster.cli.commands import deciders
from muster.core.verify import verify_decisions
from muster.runtime import admin
from muster.runtime.stack import Stack
from tests.chaos.checker import Report, check, read_rows

# The end-to-end cluster: one queue of 10 GPUs (ROOM), so workloads wait for each other.
from tests.e2e.test_stack import CLUSTER, _log, body


@dataclass(frozen=True)
class Plan:
    workloads: int = 1000
    kills: int = 6  # SIGKILLs per service
    broker_kills: int = 3
    db_restarts: int = 2  # PostgreSQL only
    clients: int = 4
    seed: int = 1
    rate: float = 40.0  # submissions per second, all clients together
    quiesce_timeout: float = 600.0


@dataclass
class Figures:
    accepted: dict[str, str] = field(default_factory=dict)  # key -> workload id
    client_errors: Counter[str] = field(default_factory=Counter)  # what clients saw, retried
    faults: Counter[str] = field(default_factory=Counter)  # target -> times
    last_fault_at: float = 0.0
    quiescent_after: float = 0.0  # seconds from the last fault
    restarts: dict[str, int] = field(default_factory=dict)
    report: Report | None = None
    mismatches: dict[str, int] = field(default_factory=dict)  # decider -> decisions differing
    checked: dict[str, int] = field(default_factory=dict)


def run(plan: Plan, data_dir: Path, postgres: str | None = None, *, quiet: bool = False) -> Figures:
    say: Callable[[str], None] = (lambda _: None) if quiet else (lambda m: print(m, flush=True))
    figures = Figures()
    rng = random.Random(plan.seed)
    with ExitStack() as stack_of:
        store_url, proxy = (
            stack_of.enter_context(_behind_proxy(postgres)) if postgres else (None, None)
        )
        env = {"MUSTER_HEARTBEAT_SECONDS": "0.2"}
        stack = stack_of.enter_context(
            Stack(data_dir, store_url=store_url, poll_seconds=0.3, extra_env=env)
        )
        asyncio.run(admin.configure(stack.store_url, CLUSTER, stack.broker.bootstrap))
        say(f"stack up ({stack.store_url.split('@')[-1]}); {plan.workloads} workloads")
        started = time.monotonic()
        done = threading.Event()
        clients = [
            threading.Thread(target=_client, args=(stack, plan, c, figures, done), daemon=True)
            for c in range(plan.clients)
        ]
        for t in clients:
            t.start()
        window = plan.workloads / plan.rate
        _faults(stack, proxy, plan, rng, window, figures, say)
        for t in clients:
            t.join()
        done.set()
        figures.last_fault_at = max(figures.last_fault_at, time.monotonic())
        say(f"submitted {len(figures.accepted)} in {time.monotonic() - started:.1f}s; waiting")
        report = _quiesce(stack.store_url, figures, plan.quiesce_timeout)
        figures.quiescent_after = time.monotonic() - figures.last_fault_at
        figures.report = report
        figures.restarts = dict(stack.restarts)
        log = asyncio.run(_log(stack.store_url))
        for decider in deciders().values():
            checked, mismatches = verify_decisions(log, decider)
            figures.checked[decider.name] = checked
            figures.mismatches[decider.name] = len(mismatches)
    return figures


@contextmanager
def _behind_proxy(url: str) -> Iterator[tuple[str, Any]]:
    from sqlalchemy.engine import make_url

    from tests.e2e.tcp_proxy import TcpProxy

    real = make_url(url)
    with TcpProxy(real.host or "127.0.0.1", real.port or 5432) as proxy:
        yield real.set(host="127.0.0.1", port=proxy.port).render_as_string(False), proxy


def _client(stack: Stack, plan: Plan, n: int, figures: Figures, done: threading.Event) -> None:
    """Submit every ``clients``-th workload at the plan's rate; retry each until accepted."""
    pace = plan.clients / plan.rate
    for i in range(n, plan.workloads, plan.clients):
        key = f"chaos-{plan.seed}-{i}"
        while True:
            status, answer = _post(f"{stack.url()}/v1/workloads", body(i), key)
            if status in (200, 201):
                figures.accepted[key] = answer["id"]
                break
            figures.client_errors[str(status) if status else answer] += 1
            if 400 <= status < 500 and status != 429:
                raise RuntimeError(f"refused: {status} {answer}")
            time.sleep(0.2)
        time.sleep(pace)


def _post(url: str, doc: dict[str, Any], key: str) -> tuple[int, Any]:
    req = urllib.request.Request(
        url,
        data=json.dumps(doc).encode(),
        method="POST",
        headers={"Content-Type": "application/json", "Idempotency-Key": key},
    )
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode(errors="replace")
    except OSError as exc:  # refused, reset, timed out: the service is restarting
        return 0, type(exc).__name__


def _faults(
    stack: Stack,
    proxy: Any,
    plan: Plan,
    rng: random.Random,
    window: float,
    figures: Figures,
    say: Callable[[str], None],
) -> None:
    """Every fault of the plan, at random moments spread over the submission window."""
    targets = [s for s in stack.services for _ in range(plan.kills)]
    targets += ["broker"] * plan.broker_kills
    targets += ["database"] * (plan.db_restarts if proxy is not None else 0)
    rng.shuffle(targets)
    moments = sorted(rng.uniform(0.0, window) for _ in targets)
    started = time.monotonic()
    for target, at in zip(targets, moments, strict=True):
        time.sleep(max(0.0, started + at - time.monotonic()))
        if target == "broker":
            stack.broker.stop(kill=True)
            time.sleep(rng.uniform(0.5, 1.5))
            stack.broker.start()
        elif target == "database":
            proxy.cut()
            time.sleep(rng.uniform(1.0, 3.0))
            proxy.restore()
        elif not _kill(stack, target):
            continue  # it did not come back in time: not counted as a kill
        figures.faults[target] += 1
        figures.last_fault_at = time.monotonic()
    say(f"faults done: {dict(figures.faults)}")


def _kill(stack: Stack, service: str, wait: float = 10.0) -> bool:
    """SIGKILL the service once it runs (a previous kill may still be restarting it)."""
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        proc = stack.processes.get(service)
        if proc is not None and proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()  # dead before the next fault: each kill ends one process
            return True
        time.sleep(0.05)
    return False


def _quiesce(store_url: str, figures: Figures, timeout: float) -> Report:
    """Check the store until every accepted workload ended and every node went (or time
    is up: then the report says what is left)."""
    deadline = time.monotonic() + timeout
    while True:
        report = check(read_rows(store_url), figures.accepted.values())
        if (not report.unfinished and not report.nodes_left) or time.monotonic() > deadline:
            return report
        time.sleep(0.5)


def print_figures(plan: Plan, f: Figures) -> None:
    r = f.report
    assert r is not None
    rows = [
        ("workloads accepted / stored", f"{len(f.accepted)} / {r.stored} (of {plan.workloads})"),
        ("faults", ", ".join(f"{k} {v}" for k, v in sorted(f.faults.items()))),
        (
            "service restarts by the stack",
            ", ".join(f"{k} {v}" for k, v in sorted(f.restarts.items())) or "none",
        ),
        (
            "client-visible errors (retried)",
            ", ".join(f"{k} {v}" for k, v in f.client_errors.most_common()) or "none",
        ),
        ("lost", str(len(r.lost))),
        ("duplicated", str(len(r.duplicated))),
        ("stored but never accepted", str(len(r.unexpected))),
        ("double admissions", str(len(r.double_admissions))),
        ("quota violations", str(len(r.quota_violations))),
        ("unfinished", str(len(r.unfinished))),
        ("nodes left", str(len(r.nodes_left))),
        (
            "decisions re-derived (mismatches)",
            ", ".join(f"{k} {f.checked[k]} ({v})" for k, v in f.mismatches.items()),
        ),
        ("quiescent after the last fault", f"{f.quiescent_after:.1f}s"),
    ]
    print_rows(rows)


def print_rows(rows: list[tuple[str, str]]) -> None:
    """A two-column table of figures, the names aligned."""
    width = max(len(k) for k, _ in rows)
    for k, v in rows:
        print(f"  {k:<{width}}  {v}")


def failures(f: Figures) -> list[str]:
    assert f.report is not None
    out = [f"{k}: {v[:3]}" for k, v in f.report.problems().items()]
    out += [f"{k}: {n} decisions differ on replay" for k, n in f.mismatches.items() if n]
    return out


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(
        prog="python -m tests.chaos.run",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--workloads", type=int, default=Plan.workloads)
    p.add_argument("--kills", type=int, default=Plan.kills, help="SIGKILLs per service")
    p.add_argument("--broker-kills", type=int, default=Plan.broker_kills)
    p.add_argument("--db-restarts", type=int, default=Plan.db_restarts)
    p.add_argument("--seed", type=int, default=Plan.seed)
    p.add_argument(
        "--postgres",
        default=os.environ.get("MUSTER_TEST_POSTGRES_URL"),
        help="a PostgreSQL server to run on (a fresh database is made); default SQLite",
    )
    args = p.parse_args(argv)
    plan = Plan(args.workloads, args.kills, args.broker_kills, args.db_restarts, seed=args.seed)
    with tempfile.TemporaryDirectory(prefix="muster-chaos-") as tmp:
        if args.postgres:
            from tests.postgres import drop_postgres, fresh_postgres

            url, name = asyncio.run(fresh_postgres(args.postgres))
            try:
                figures = run(plan, Path(tmp), url)
            finally:
                asyncio.run(drop_postgres(name, args.postgres))
        else:
            figures = run(plan, Path(tmp))
    print_figures(plan, figures)
    wrong = failures(figures)
    if wrong:
        print("FAILED: " + "; ".join(wrong), file=sys.stderr)
        raise SystemExit(1)
    print("chaos: every promise held")


if __name__ == "__main__":
    main()
