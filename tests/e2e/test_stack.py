"""The broker and the four services as processes over one SQLite store.

50 workloads go to a queue with room for 10 at a time; all must finish, an
independent checker reading the log must never see quota exceeded, replay must
reproduce the live state and every logged decision, and the same must hold with
the queue service SIGKILLed mid-run or the broker killed and restarted.
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import grpc
import pytest

from muster.cli.commands import deciders
from muster.cli.http import call
from muster.core import inputs
from muster.core.events import Envelope
from muster.core.events import queue as qev
from muster.core.events import workload as wev
from muster.core.model import parse
from muster.core.queueing.decider import QueueDecider
from muster.core.sim.harness import Harness
from muster.core.verify import verify_decisions
from muster.runtime import admin
from muster.runtime.stack import Stack
from muster.store import SqlEventStore
from tests.unit.harness_inputs import creations_apart

pytestmark = pytest.mark.e2e

ROOM = 10
WORKLOADS = 50
CLUSTER = parse.cluster(
    {
        "name": "e2e",
        "region": "local",
        "zones": ["z1", "z2"],
        "nodePools": [
            {
                "name": "gpu",
                "machineType": "g1",
                "allocatable": {"nvidia.com/gpu": 1},
                "maxNodes": 100,
            }
        ],
        "resourceFlavors": [{"name": "gpu"}],
        "clusterQueues": [
            {
                "name": "cq",
                "resourceGroups": [
                    {
                        "coveredResources": ["nvidia.com/gpu"],
                        "flavors": [
                            {
                                "name": "gpu",
                                "resources": [{"name": "nvidia.com/gpu", "nominalQuota": ROOM}],
                            }
                        ],
                    }
                ],
            }
        ],
        "localQueues": [{"namespace": "team", "name": "lq", "clusterQueue": "cq"}],
    }
)


def body(i: int) -> dict[str, Any]:
    return {
        "name": f"job-{i}",
        "namespace": "team",
        "queueName": "lq",
        "podSets": [{"count": 1, "requests": {"nvidia.com/gpu": 1}}],
        "runtime": {"durationSeconds": 0.2 + (i % 4) * 0.1},
    }


async def _log(url: str) -> list[Envelope]:
    store = SqlEventStore(url)
    try:
        return await store.read_all(0)
    finally:
        await store.close()


def _submit(stack: Stack, indices: range) -> list[str]:
    return [
        call("POST", f"{stack.url()}/v1/workloads", body(i), {"Idempotency-Key": f"k{i}"})["id"]
        for i in indices
    ]


def _submit_grpc(stack: Stack, indices: range) -> list[str]:
    """The same submissions as one gRPC batch, to the intake process's gRPC server."""
    from google.protobuf import json_format

    from muster.api.v1 import muster_pb2 as pb
    from muster.api.v1 import muster_pb2_grpc as rpc

    def spec(i: int) -> pb.WorkloadSpec:
        b = body(i)
        for ps in b["podSets"]:  # quantities are strings in the .proto ("1", "700m")
            ps["requests"] = {k: str(v) for k, v in ps["requests"].items()}
        return json_format.ParseDict(b, pb.WorkloadSpec())

    items = [pb.SubmitRequest(workload=spec(i), idempotency_key=f"k{i}") for i in indices]

    async def send() -> list[str]:
        async with grpc.aio.insecure_channel(stack.grpc_target) as channel:
            reply = await rpc.SubmissionsStub(channel).SubmitBatch(
                pb.SubmitBatchRequest(items=items), timeout=30
            )
        assert all(item.created for item in reply.items)
        return [item.workload.id for item in reply.items]

    return asyncio.run(send())


def _finished(stack: Stack) -> int:
    items = call("GET", f"{stack.url()}/v1/workloads?limit=1000")["items"]
    return sum(1 for w in items if w["status"] in ("Succeeded", "Failed", "Cancelled", "Rejected"))


def _wait_finished(stack: Stack, count: int, timeout: float = 180.0) -> None:
    deadline = time.monotonic() + timeout
    while _finished(stack) < count:
        if time.monotonic() > deadline:
            raise TimeoutError(f"only {_finished(stack)}/{count} finished in {timeout}s")
        time.sleep(0.2)


def _wait_nodes_released(stack: Stack, timeout: float = 60.0) -> None:
    """Every node is removed once its workload finished."""
    deadline = time.monotonic() + timeout
    while True:
        state = call("GET", f"{stack.url('provisioner')}/state?fresh=1")["summary"]
        if not state["nodes_in_use"] and set(state["requests"]) == {"Deleted"}:
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"provisioner still holds {state}")
        time.sleep(0.2)


def quota_violations(log: list[Envelope], nominal: int) -> list[str]:
    """An independent check: usage per ClusterQueue never above nominal, after every event."""
    held: dict[str, int] = {}
    used = 0
    problems = []
    for env in log:
        ev = env.event
        if isinstance(ev, qev.QuotaReserved):
            held[ev.workload_id] = sum(q for res in ev.usage.values() for q in res.values())
            used += held[ev.workload_id]
        elif isinstance(
            ev,
            qev.WorkloadFinished
            | qev.WorkloadCancelled
            | qev.WorkloadRejected
            | qev.WorkloadEvicted,
        ):
            used -= held.pop(ev.workload_id, 0)
        if used > nominal:
            problems.append(f"position {env.position}: {used} > {nominal}")
    return problems


def _metric(stack: Stack, service: str, prefix: str) -> float:
    """The sum of a metric's samples whose line starts with ``prefix``."""
    import urllib.request

    with urllib.request.urlopen(f"{stack.url(service)}/metrics", timeout=5) as resp:
        text = resp.read().decode()
    return sum(
        float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(prefix)
    )


def _every_log_line_is_json(folder: Path, fault: str) -> None:
    """What the services wrote to stderr (and stdout): one JSON object a line, the
    libraries' lines too (aiokafka's, when the broker was killed)."""
    loggers: set[str] = set()
    for name in ("intake", "queue", "provisioner", "node-agent"):
        for line in (folder / f"{name}.log").read_text().splitlines():
            if not line.strip():
                continue
            try:
                doc = json.loads(line)
            except json.JSONDecodeError:
                raise AssertionError(f"{name}.log: not JSON: {line!r}") from None
            assert doc["service"] == name and doc["event"], line
            loggers.add(str(doc.get("logger", "")).split(".")[0])
    if fault == "kill-broker":
        assert "aiokafka" in loggers, sorted(loggers)


def _run(tmp_path: Path, fault: str) -> tuple[Stack, list[Envelope], dict[str, Any]]:
    env = {"MUSTER_HEARTBEAT_SECONDS": "0.1"}
    with Stack(tmp_path, poll_seconds=0.3, extra_env=env) as stack:
        asyncio.run(admin.configure(stack.store_url, CLUSTER, stack.broker.bootstrap))
        ids = _submit(stack, range(WORKLOADS // 2))
        _wait_finished(stack, 5)
        if fault == "kill-queue":
            stack.kill_service("queue")
            ids += _submit(stack, range(WORKLOADS // 2, WORKLOADS))
            stack.start_service("queue")
            stack.wait_healthy(["queue"])
        elif fault == "kill-broker":
            stack.broker.stop(kill=True)
            ids += _submit(stack, range(WORKLOADS // 2, WORKLOADS))
            time.sleep(1.0)  # the broker is away for a while: nothing may depend on it
            stack.broker.start()
        else:  # the second half over gRPC: the service's own gRPC server, end to end
            ids += _submit_grpc(stack, range(WORKLOADS // 2, WORKLOADS))
        # A retried submission returns the original and appends nothing.
        assert _submit(stack, range(3)) == ids[:3]
        _wait_finished(stack, WORKLOADS)
        _wait_nodes_released(stack)
        live = call("GET", f"{stack.url('queue')}/state?fresh=1")
        live["heartbeats"] = _metric(stack, "node-agent", "muster_node_heartbeats_total{")
        live["metrics"] = {
            name: _metric(stack, "queue", f"{name}{{")
            for name in (
                "muster_admitted_workloads_total",
                "muster_quota_reserved_workloads_total",
                "muster_finished_workloads_total",
                "muster_pending_workloads",
                "muster_quota_reserved_wait_time_seconds_count",
                "muster_admission_wait_time_seconds_count",
                "muster_admitted_active_workloads",
            )
        }
        live["attempts"] = _metric(
            stack, "queue", 'muster_admission_attempts_total{result="success"'
        )
        log = asyncio.run(_log(stack.store_url))
    return stack, log, live


@pytest.mark.parametrize("fault", ["none", "kill-queue", "kill-broker"])
def test_fifty_workloads_through_the_services(tmp_path: Path, fault: str) -> None:
    stack, log, live = _run(tmp_path, fault)
    submitted = [e.event.workload_id for e in log if isinstance(e.event, wev.WorkloadSubmitted)]
    assert len(submitted) == WORKLOADS
    outcomes = {
        e.event.workload_id: e.event.outcome
        for e in log
        if isinstance(e.event, qev.WorkloadFinished)
    }
    assert outcomes == dict.fromkeys(submitted, "Succeeded")
    assert quota_violations(log, ROOM) == []
    # Nothing admitted twice: one reservation and one admission per workload.
    reserved = [e.event.workload_id for e in log if isinstance(e.event, qev.QuotaReserved)]
    admitted = [e.event.workload_id for e in log if isinstance(e.event, qev.WorkloadAdmitted)]
    assert sorted(reserved) == sorted(submitted) == sorted(admitted)
    # The queue really was full at times: the limit was exercised, not just respected.
    assert any("insufficient quota" in getattr(e.event, "message", "") for e in log)
    # Replay from the store reproduces the live state and every decision.
    # The node agent beat for the nodes it ran (a restarted agent would start from zero).
    assert live["heartbeats"] > 0
    # The queue's Kueue-style counters are folded from the log: they survive the restart.
    assert live["metrics"] == {
        "muster_admitted_workloads_total": WORKLOADS,
        "muster_quota_reserved_workloads_total": WORKLOADS,
        "muster_finished_workloads_total": WORKLOADS,
        "muster_pending_workloads": 0,
        "muster_quota_reserved_wait_time_seconds_count": WORKLOADS,
        "muster_admission_wait_time_seconds_count": WORKLOADS,
        "muster_admitted_active_workloads": 0,
    }
    # Counted by the process (not folded): at least the admissions since its last start.
    assert live["attempts"] >= 1
    _every_log_line_is_json(tmp_path, fault)
    rebuilt = asyncio.run(_rebuild(stack.store_url, live["position"]))
    assert rebuilt == live["summary"]
    for decider in deciders().values():
        checked, mismatches = verify_decisions(log, decider)
        assert checked > 0 and mismatches == [], decider.name


async def _rebuild(url: str, position: int) -> dict[str, Any]:
    import json

    store = SqlEventStore(url)
    try:
        runner = await admin.rebuild(store, QueueDecider(), until_position=position)
    finally:
        await store.close()
    return json.loads(json.dumps(QueueDecider().summary(runner.state)))


def test_services_and_harness_decide_the_same(tmp_path: Path) -> None:
    """The inputs the services saw, replayed through the in-process harness in virtual time."""
    _, log, _ = _run(tmp_path, "none")
    harness = Harness(list(deciders().values()))
    for env in log:
        if env.producer in (admin.ADMIN, "intake"):
            harness.schedule(
                inputs.submission(env.event.workload_id, env.event.spec, env.occurred_at)
                if isinstance(env.event, wev.WorkloadSubmitted)
                else _new(env),
                producer=env.producer,
            )
    harness.run()

    def decisions(entries: list[Envelope]) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {}
        for e in entries:
            # Waiting reasons depend on how submissions interleaved with finishes in real
            # time; the decisions themselves must not.
            if (
                e.category in ("admission", "provisioning")
                and e.correlation_id
                and not isinstance(e.event, qev.WorkloadPending)
            ):
                out.setdefault(e.correlation_id, []).append(_shape(e))
        return out

    # Whether a request's acceptance and Provisioned are one event depends on whether the
    # provisioner's step also freed capacity (real-time interleaving again): compared as
    # the events they stand for.
    assert decisions(creations_apart(harness.log.envelopes)) == decisions(creations_apart(log))
    order = [e.event.workload_id for e in log if isinstance(e.event, qev.QuotaReserved)]
    sim_order = [
        e.event.workload_id for e in harness.log.envelopes if isinstance(e.event, qev.QuotaReserved)
    ]
    assert sim_order == order


def _new(env: Envelope) -> Any:
    from muster.core.events import NewEvent

    return NewEvent(
        stream_id=env.stream_id,
        event=env.event,
        occurred_at=env.occurred_at,
        correlation_id=env.correlation_id,
    )


def _shape(env: Envelope) -> str:
    """What was decided, without the times and node names the two runs need not share."""
    ev = env.event
    detail = getattr(ev, "zone", None) or getattr(ev, "outcome", None) or getattr(ev, "reason", "")
    return f"{env.type}:{detail}"
