"""waitForPodsReady over random clouds: quota is never held past the timeout by a workload
whose pods are not all running.

Kueue (reference/kueue.md §1.8, §1.10): without admission checks a workload is admitted at
its quota reservation, and one whose pods are not all ready within ``timeout`` of admission
is evicted (``PodsReadyTimeout``), requeued with backoff, and deactivated past
``backoffLimitCount``. Here the nodes come from muster's own provisioning (no admission
check): a cloud with little or no capacity, stockouts and slow boots, so that some
reservations wait for nodes that come late or never. Every check reads the event log.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from muster.core.events import Envelope
from muster.core.events import node as nev
from muster.core.events import queue as qev
from muster.core.model import parse
from muster.core.nodes.decider import NodeAgentDecider
from muster.core.provisioning.decider import ProvisionerDecider
from muster.core.queueing.decider import QueueDecider
from muster.core.sim.harness import Harness, build
from muster.core.verify import verify_decisions
from tests.property.test_dws_properties import GPU, SETTINGS

# What ends an attempt's hold on its quota.
RELEASES = (qev.WorkloadEvicted, qev.WorkloadFinished, qev.WorkloadCancelled, qev.WorkloadRejected)


@dataclass(frozen=True)
class Scenario:
    cluster: dict[str, Any]
    workloads: tuple[tuple[float, str, dict[str, Any]], ...]
    timeout: float

    def harness(self) -> Harness:
        subs = [(at, wid, parse.workload(doc)) for at, wid, doc in self.workloads]
        deciders = [QueueDecider(), ProvisionerDecider(), NodeAgentDecider()]
        return build(parse.cluster(self.cluster), subs, [], deciders)


@st.composite
def scenarios(draw: st.DrawFn) -> Scenario:
    zones = [f"z{i}" for i in range(draw(st.integers(1, 2)))]
    steps = [{"at": 0, "zones": {z: draw(st.integers(0, 4)) for z in zones}}]
    for _ in range(draw(st.integers(0, 2))):
        steps.append(
            {
                "at": draw(st.integers(1, 4000)),
                "zones": {draw(st.sampled_from(zones)): draw(st.integers(0, 8))},
            }
        )
    pool: dict[str, Any] = {
        "name": "pool",
        "machineType": "g2-standard-8",
        "allocatable": {"cpu": 8, GPU: 1},
        "provisioningDelaySeconds": draw(st.sampled_from([0, 30, 120, 900])),
        "capacity": steps,
    }
    if draw(st.booleans()):
        start = draw(st.integers(0, 3000))
        pool["failures"] = [{"at": start, "until": start + draw(st.integers(1, 900))}]
    timeout = float(draw(st.sampled_from([60, 300, 600])))
    requeuing: dict[str, Any] = {
        "backoffLimitCount": draw(st.integers(0, 2)),
        "backoffBaseSeconds": draw(st.sampled_from([10, 60])),
    }
    cluster: dict[str, Any] = {
        "name": "c",
        "region": "r",
        "zones": zones,
        "nodePools": [pool],
        "resourceFlavors": [{"name": "f"}],
        "clusterQueues": [
            {
                "name": "cq",
                "resourceGroups": [
                    {
                        "coveredResources": [GPU],
                        "flavors": [{"name": "f", "resources": [{"name": GPU, "nominalQuota": 8}]}],
                    }
                ],
            }
        ],
        "localQueues": [{"namespace": "ns", "name": "lq", "clusterQueue": "cq"}],
        "waitForPodsReady": {
            "enable": True,
            "timeout": f"{timeout:g}s",
            "blockAdmission": draw(st.booleans()),
            "requeuingStrategy": requeuing,
        },
    }
    workloads = []
    for i in range(draw(st.integers(1, 5))):
        workloads.append(
            (
                float(draw(st.integers(0, 3000))),
                f"w{i}",
                {
                    "name": f"w{i}",
                    "namespace": "ns",
                    "queueName": "lq",
                    "podSets": [{"count": draw(st.integers(1, 4)), "requests": {GPU: 1}}],
                    "runtime": {"durationSeconds": draw(st.integers(10, 3000))},
                },
            )
        )
    return Scenario(cluster, tuple(workloads), timeout)


def holds(log: list[Envelope], pods: dict[str, int]) -> list[tuple[str, float, float]]:
    """Each attempt's (workload, quota reserved at, held without ready pods until): until its
    pods were all running or its quota was released; infinity if neither happened."""
    out = []
    for i, env in enumerate(log):
        if not isinstance(env.event, qev.QuotaReserved):
            continue
        wid, attempt = env.event.workload_id, env.event.attempt
        started: set[str] = set()
        until = float("inf")
        for later in log[i + 1 :]:
            ev = later.event
            if getattr(ev, "workload_id", None) != wid:
                continue
            if isinstance(ev, nev.PodStarted) and ev.attempt == attempt:
                started.add(ev.pod)
                if len(started) >= pods[wid]:
                    until = later.occurred_at
                    break
            if isinstance(ev, RELEASES):
                until = later.occurred_at
                break
        out.append((wid, env.occurred_at, until))
    return out


@given(scenarios())
@SETTINGS
def test_no_quota_is_held_past_the_timeout_without_ready_pods(s: Scenario) -> None:
    h = s.harness()
    h.run()
    log = h.log.envelopes
    pods = {wid: doc["podSets"][0]["count"] for _, wid, doc in s.workloads}
    for wid, reserved_at, until in holds(log, pods):
        assert until <= reserved_at + s.timeout, (wid, reserved_at, until)
    # The run ends with nothing holding quota: every workload finished or was given up on.
    state = h.runners[0].state
    assert not [w.id for w in state.workloads.values() if w.holds_quota]


@given(scenarios())
@SETTINGS
def test_replay_rederives_every_decision(s: Scenario) -> None:
    h = s.harness()
    h.run()
    for decider in (QueueDecider(), ProvisionerDecider(), NodeAgentDecider()):
        _, mismatches = verify_decisions(h.log.envelopes, decider)
        assert mismatches == [], mismatches[:1]
