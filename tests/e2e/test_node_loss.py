"""Node loss across processes: kill the node agent running part of a gang.

Its heartbeats stop; the queue's watch declares its nodes lost after the grace period;
the gang is evicted as a whole, requeued and placed on the nodes the other agent runs,
where it finishes. Restarted, the agent registers its nodes again.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from muster.cli.http import call
from muster.core.events import Envelope
from muster.core.events import node as nev
from muster.core.events import queue as qev
from muster.core.model import parse
from muster.core.nodes.decider import NodeAgentDecider
from muster.core.nodes.state import owns
from muster.core.provisioning.decider import ProvisionerDecider
from muster.core.queueing.decider import QueueDecider
from muster.core.verify import verify_decisions
from muster.runtime import admin
from muster.runtime.stack import Stack
from muster.store import SqlEventStore

pytestmark = pytest.mark.e2e
GPU = "nvidia.com/gpu"


def names_per_shard(per_shard: int) -> dict[int, list[str]]:
    out: dict[int, list[str]] = {0: [], 1: []}
    i = 0
    while min(len(v) for v in out.values()) < per_shard:
        name = f"gpu-{i}"
        shard = 0 if owns(name, 0, 2) else 1
        if len(out[shard]) < per_shard:
            out[shard].append(name)
        i += 1
    return out


def cluster(nodes: list[str]) -> Any:
    return parse.cluster(
        {
            "name": "loss",
            "zones": ["z"],
            "nodes": [
                {
                    "name": n,
                    "allocatable": {GPU: 2},
                    "gpus": {"count": 2, "model": "A100", "memory": "40Gi"},
                }
                for n in nodes
            ],
            "resourceFlavors": [{"name": "gpu"}],
            "clusterQueues": [
                {
                    "name": "cq",
                    "resourceGroups": [
                        {
                            "coveredResources": [GPU],
                            "flavors": [
                                {"name": "gpu", "resources": [{"name": GPU, "nominalQuota": 12}]}
                            ],
                        }
                    ],
                }
            ],
            "localQueues": [{"namespace": "team", "name": "lq", "clusterQueue": "cq"}],
        }
    )


async def _read(url: str) -> list[Envelope]:
    store = SqlEventStore(url)
    try:
        return await store.read_all(0)
    finally:
        await store.close()


def wait_log(
    stack: Stack, found: Callable[[list[Envelope]], Any], what: str, timeout: float = 60.0
) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        log = asyncio.run(_read(stack.store_url))
        hit = found(log)
        if hit:
            return hit
        if time.monotonic() > deadline:
            tail = "\n".join(f"{e.position} {e.stream_id} {e.event}" for e in log[-25:])
            raise TimeoutError(f"no {what} after {timeout}s; the log ends with:\n{tail}")
        time.sleep(0.2)


def events(log: list[Envelope], kind: type) -> list[Any]:
    return [e.event for e in log if isinstance(e.event, kind)]


def test_killing_a_node_agent_requeues_its_gangs_on_the_other_nodes(tmp_path: Path) -> None:
    shards = names_per_shard(3)
    env = {"MUSTER_HEARTBEAT_SECONDS": "0.3", "MUSTER_NODE_GRACE_SECONDS": "2"}
    with Stack(tmp_path, poll_seconds=0.3, extra_env=env, node_agents=2) as stack:
        spec = cluster(shards[0] + shards[1])
        asyncio.run(admin.configure(stack.store_url, spec, stack.broker.bootstrap))
        wait_log(
            stack,
            lambda log: len(events(log, nev.NodeRegistered)) == 6,
            "registration of all 6 nodes",
        )
        # A gang of 3 whole nodes; the agent running its first pod is killed, and the
        # other agent's 3 nodes can hold it all.
        body = {
            "name": "gang",
            "namespace": "team",
            "queueName": "lq",
            "podSets": [{"count": 3, "requests": {GPU: 2}}],
            "runtime": {"durationSeconds": 6},
        }
        wid = call("POST", f"{stack.url()}/v1/workloads", body)["id"]
        first = wait_log(
            stack,
            lambda log: [e for e in events(log, qev.WorkloadAdmitted) if e.workload_id == wid],
            "admission",
        )[0]
        victim = 0 if first.placements["main-0"] in shards[0] else 1
        survivor = 1 - victim
        on_victim = sorted(set(first.placements.values()) & set(shards[victim]))
        stack.kill_service(f"node-agent-{victim}")

        lost = wait_log(
            stack,
            lambda log: events(log, nev.NodeLost),
            "node lost",
            timeout=30,
        )
        assert {n.node for n in lost} <= set(shards[victim])
        assert "no heartbeat for" in lost[0].message
        evicted = wait_log(
            stack,
            lambda log: [e for e in events(log, qev.WorkloadEvicted) if e.workload_id == wid],
            "eviction",
        )
        assert evicted[0].reason == "NodeLost" and evicted[0].restart
        # requeued as a whole and placed on the other agent's three nodes
        again = wait_log(
            stack,
            lambda log: [e for e in events(log, qev.WorkloadAdmitted) if e.workload_id == wid][1:],
            "second admission",
        )[0]
        assert set(again.placements.values()) == set(shards[survivor])
        assert again.attempt == first.attempt + 1
        done = wait_log(
            stack,
            lambda log: [e for e in events(log, qev.WorkloadFinished) if e.workload_id == wid],
            "finish",
        )
        assert done[0].outcome == "Succeeded"
        status = call("GET", f"{stack.url()}/v1/workloads/{wid}")
        assert status["status"] == "Succeeded"

        # Back, the agent registers its lost nodes again.
        stack.start_service(f"node-agent-{victim}")
        stack.wait_healthy([f"node-agent-{victim}"])
        back = wait_log(
            stack,
            lambda log: [
                e.event
                for e in log
                if isinstance(e.event, nev.NodeRegistered)
                and e.event.node in on_victim
                and e.position > max(x.position for x in log if isinstance(x.event, nev.NodeLost))
            ],
            "re-registration",
        )
        assert {b.node for b in back} >= set(on_victim)
        log = asyncio.run(_read(stack.store_url))
    # Every logged decision is reproduced from the log alone (heartbeats are not needed).
    for decider in (QueueDecider(), NodeAgentDecider(0, 2), NodeAgentDecider(1, 2)):
        checked, mismatches = verify_decisions(log, decider)
        assert checked > 0 and mismatches == [], decider.name
    assert verify_decisions(log, ProvisionerDecider()) == (0, [])  # nothing to provision
