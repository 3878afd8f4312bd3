"""A stopped pod is stopped gracefully, as Kubernetes does (terminationGracePeriodSeconds,
default 30 s): SIGTERM first, SIGKILL once the grace period is over, so a trainer can write
its checkpoint before it goes (issue 19: preemption with a checkpoint cost)."""

from __future__ import annotations

import asyncio
import signal
import sys
from pathlib import Path

import pytest

from muster.core.events import node as nev
from muster.core.model import parse
from muster.core.sim.harness import build
from muster.core.verify import verify_decisions
from muster.runtime.graceful import stop
from tests.unit.harness_inputs import gpu_node_cluster, run_verified, submissions

# A trainer: on SIGTERM it writes its checkpoint and exits 0; it says "ready" once its
# handler is installed (the test waits for that line, not for time).
TRAINER = """
import signal, sys, time
def checkpoint(*_):
    open(sys.argv[1], "w").write("step 42")
    sys.exit(0)
signal.signal(signal.SIGTERM, checkpoint)
print("ready", flush=True)
while True:
    time.sleep(1)
"""
# A process that ignores SIGTERM: only SIGKILL ends it.
STUBBORN = """
import signal, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
print("ready", flush=True)
while True:
    time.sleep(1)
"""


async def _started(code: str, *args: str) -> asyncio.subprocess.Process:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", code, *args, stdout=asyncio.subprocess.PIPE
    )
    assert proc.stdout is not None
    assert (await proc.stdout.readline()).strip() == b"ready"
    return proc


def test_a_trainer_checkpoints_on_sigterm_within_its_grace_period(tmp_path: Path) -> None:
    saved = tmp_path / "checkpoint"

    async def go() -> tuple[str, int | None]:
        proc = await _started(TRAINER, str(saved))
        return await stop(proc, grace_seconds=30), proc.returncode

    how, code = asyncio.run(go())
    assert (how, code) == ("terminated", 0)
    assert saved.read_text() == "step 42"


def test_a_process_ignoring_sigterm_is_killed_after_the_grace_period() -> None:
    async def go() -> tuple[str, int | None]:
        proc = await _started(STUBBORN)
        return await stop(proc, grace_seconds=0.2), proc.returncode

    how, code = asyncio.run(go())
    assert (how, code) == ("killed", -signal.SIGKILL)


def test_a_process_that_ended_is_left_alone() -> None:
    async def go() -> str:
        proc = await asyncio.create_subprocess_exec(sys.executable, "-c", "pass")
        await proc.wait()
        return await stop(proc, grace_seconds=1)

    assert asyncio.run(go()) == "exited"


@pytest.mark.parametrize(
    ("given", "grace"), [({}, 30.0), ({"terminationGracePeriodSeconds": 90}, 90.0)]
)
def test_an_evicted_pod_is_stopped_with_its_workloads_grace_period(
    given: dict[str, object], grace: float
) -> None:
    gpu = "nvidia.com/gpu"
    long = {"name": "long", "namespace": "team", "queueName": "q", **given}
    long["podSets"] = [{"name": "w", "count": 1, "requests": {gpu: 4}}]
    long["runtime"] = {"durationSeconds": 1000}
    urgent = {"name": "urgent", "namespace": "team", "queueName": "q", "priority": 9}
    urgent["podSets"] = [{"name": "w", "count": 1, "requests": {gpu: 4}}]
    cluster = gpu_node_cluster(
        "g", nodes=1, gpus=4, nominal=4, preemption={"withinClusterQueue": "LowerPriority"}
    )
    h = run_verified(cluster, submissions([(0, long), (10, urgent)]))
    stopped = [e.event for e in h.log.envelopes if isinstance(e.event, nev.PodStopped)]
    assert [(e.workload_id, e.grace_seconds) for e in stopped] == [("long", grace)]


def test_a_cancelled_pod_is_stopped_with_its_workloads_grace_period() -> None:
    """Kubernetes' terminationGracePeriodSeconds holds for every stop, not only an
    eviction's: a running workload cancelled (or finished with pods left) stops its pods
    with its own grace period; the agent forgets the workload once they are gone."""
    gpu = "nvidia.com/gpu"
    long = {"name": "long", "namespace": "team", "queueName": "q"}
    long |= {"terminationGracePeriodSeconds": 90, "runtime": {"durationSeconds": 1000}}
    long["podSets"] = [{"name": "w", "count": 2, "requests": {gpu: 2}}]
    cluster = parse.cluster(gpu_node_cluster("g", nodes=1, gpus=4, nominal=4))
    h = build(cluster, submissions([(0, long)]), cancels=[(10, "long")])
    h.run()
    stopped = [e.event for e in h.log.envelopes if isinstance(e.event, nev.PodStopped)]
    assert sorted((e.pod, e.grace_seconds) for e in stopped) == [("w-0", 90.0), ("w-1", 90.0)]
    agent = next(r for r in h.runners if r.decider.name == "node-agent").state
    assert "long" not in agent.graces and "long" not in agent.runtimes and not agent.pods
    for runner in h.runners:
        assert verify_decisions(h.log.envelopes, runner.decider)[1] == []
