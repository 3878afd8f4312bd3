"""A queue split between two processes over one store, one per cohort tree: each decides
for its own tree; SIGKILL one, and the other takes its tree over; no decision is lost or
made twice, and every decision re-derives from its log prefix."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from muster.cli.http import call
from muster.core.events import Envelope
from muster.core.events import queue as qev
from muster.core.model import parse
from muster.runtime import admin
from muster.runtime.stack import Stack
from tests.e2e.test_node_loss import wait_log
from tests.unit.test_queueing_sharding import GPU, cluster_doc

CLAIM_SECONDS = 2.0


def submit(stack: Stack, tree: str, name: str) -> str:
    body = {
        "name": name,
        "namespace": tree,
        "queueName": "jobs",
        "podSets": [{"name": "w", "count": 1, "requests": {GPU: 1}}],
        "runtime": {"durationSeconds": 0.5},
    }
    return str(call("POST", f"{stack.url()}/v1/workloads", body)["id"])


def finished(ids: set[str]) -> Callable[[list[Envelope]], list[Envelope] | None]:
    """The log, once every one of ``ids`` has finished."""

    def check(log: list[Envelope]) -> list[Envelope] | None:
        done = {e.event.workload_id for e in log if isinstance(e.event, qev.WorkloadFinished)}
        return log if ids <= done else None

    return check


def decisions(log: list[Envelope], wid: str) -> list[tuple[str, str]]:
    kinds = (qev.QuotaReserved, qev.WorkloadAdmitted, qev.WorkloadFinished, qev.WorkloadEvicted)
    return [
        (e.type, e.producer)
        for e in log
        if isinstance(e.event, kinds) and e.event.workload_id == wid
    ]


def test_a_killed_deciders_tree_is_taken_over_with_nothing_lost_or_doubled(
    tmp_path: Path,
) -> None:
    env = {"MUSTER_QUEUE_CLAIM_SECONDS": str(CLAIM_SECONDS), "MUSTER_SUBMIT_RATE": "0"}
    shards = {"queue-a": "alpha", "queue-b": "beta"}
    with Stack(tmp_path, poll_seconds=0.3, extra_env=env, queue_shards=shards) as stack:
        spec = parse.cluster(cluster_doc())
        asyncio.run(admin.configure(stack.store_url, spec, stack.broker.bootstrap))
        trees = ("alpha", "beta")
        first = {tree: {submit(stack, tree, f"{tree}-{i}") for i in range(3)} for tree in trees}
        log = wait_log(stack, finished(first["alpha"] | first["beta"]), "the first workloads")
        for tree, owner in (("alpha", "queue-a"), ("beta", "queue-b")):
            for wid in first[tree]:
                assert decisions(log, wid) == [
                    ("admission.quota_reserved", owner),
                    ("admission.admitted", owner),
                    ("admission.finished", owner),
                ]

        stack.kill_service("queue-b")  # SIGKILL: its claim on beta is never renewed
        late = {submit(stack, "beta", f"beta-late-{i}") for i in range(3)}
        late_alpha = submit(stack, "alpha", "alpha-late")
        log = wait_log(stack, finished(late | {late_alpha}), "beta taken over", timeout=90)
        for wid in late | {late_alpha}:
            assert decisions(log, wid) == [
                ("admission.quota_reserved", "queue-a"),
                ("admission.admitted", "queue-a"),
                ("admission.finished", "queue-a"),
            ]
        beta_claims = [
            e.event.owner
            for e in log
            if isinstance(e.event, qev.GroupClaimed) and e.event.group == "cohort/beta"
        ]
        assert beta_claims[0] == "queue-b" and beta_claims[-1] == "queue-a"
        # Every decision of both deciders (the killed one's too) re-derives from its prefix.
        replay = subprocess.run(
            [sys.executable, "-m", "muster.cli.main", "replay", "--store-url", stack.store_url,
             "--decisions"],
            capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        assert replay.returncode == 0, replay.stdout + replay.stderr
        said = dict(
            line.removeprefix("decisions of ").split(": ", 1)
            for line in replay.stdout.splitlines()
            if line.startswith("decisions of ")
        )
        for name in ("queue-a", "queue-b", "provisioner", "node-agent"):
            checked, _, different = said[name].partition(" re-derived, ")
            assert int(checked) > 0 and different == "0 different", said
