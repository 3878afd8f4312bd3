"""A gang never starts before it is complete (issue 17 item 4a): members of random gangs
arrive at random times (some gangs never complete, some get members beyond their
cardinality, some are cancelled), among other workloads, on clusters of random room.

peers.md §1.5, Armada gangCardinality, "the total count the scheduler waits for", and
all-or-nothing placement; §2.4, Volcano PodGroup minMember, "if there's not enough resources
to start all tasks, the scheduler will not start anyone". Every check reads the event log.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from muster.core import inputs
from muster.core.events import node as nev
from muster.core.events import workload as wev
from muster.core.model import parse
from muster.core.queueing.decider import QueueDecider
from muster.core.sim.harness import Harness, build
from muster.core.verify import verify_decisions
from tests.property.test_dws_properties import GPU, SETTINGS


@dataclass(frozen=True)
class Gang:
    name: str
    cardinality: int
    arrivals: tuple[float, ...]  # one per member submitted, in member order
    gpus: tuple[int, ...]  # per member
    cancel: tuple[int, float] | None  # (member index, time)

    @property
    def workload_id(self) -> str:
        return inputs.gang_workload_id("team", self.name)

    @property
    def inside(self) -> list[int]:
        """The members that make the gang: the first ``cardinality`` to arrive (members
        arriving together in member order); any later one is a workload of its own."""
        order = sorted(range(len(self.arrivals)), key=lambda i: self.arrivals[i])
        return order[: self.cardinality]

    def completes_at(self) -> float | None:
        """When its cardinality-th member arrives, unless one of its members was cancelled
        before (a cancel at the same instant comes after that instant's submissions)."""
        if len(self.arrivals) < self.cardinality:
            return None
        at = self.arrivals[self.inside[-1]]
        if self.cancel is not None and self.cancel[0] in self.inside and self.cancel[1] < at:
            return None
        return at


@dataclass(frozen=True)
class Scenario:
    nodes: int
    gpus_per_node: int
    nominal: int
    gangs: tuple[Gang, ...]
    others: tuple[tuple[float, int, int, float], ...]  # (at, pods, gpus, seconds)

    def harness(self) -> Harness:
        cluster: dict[str, Any] = {
            "name": "c",
            "zones": ["z"],
            "resourceFlavors": [{"name": "gpu"}],
            "nodes": [{"name": "n", "count": self.nodes, "allocatable": {GPU: self.gpus_per_node}}],
            "clusterQueues": [
                {
                    "name": "cq",
                    "resourceGroups": [
                        {
                            "coveredResources": [GPU],
                            "flavors": [
                                {
                                    "name": "gpu",
                                    "resources": [{"name": GPU, "nominalQuota": self.nominal}],
                                }
                            ],
                        }
                    ],
                }
            ],
            "localQueues": [{"namespace": "team", "name": "q", "clusterQueue": "cq"}],
        }
        subs = []
        cancels = []
        for g in self.gangs:
            for i, (at, gpus) in enumerate(zip(g.arrivals, g.gpus, strict=True)):
                doc = _doc(f"{g.name}-m{i}", gpus, 1, 30.0)
                doc["gang"] = {"name": g.name, "cardinality": g.cardinality}
                subs.append((at, f"{g.name}-m{i}", parse.workload(doc)))
            if g.cancel is not None:
                cancels.append((g.cancel[1], f"{g.name}-m{g.cancel[0]}"))
        for i, (at, pods, gpus, seconds) in enumerate(self.others):
            subs.append((at, f"other-{i}", parse.workload(_doc(f"other-{i}", gpus, pods, seconds))))
        return build(parse.cluster(cluster), subs, cancels)


def _doc(name: str, gpus: int, pods: int, seconds: float) -> dict[str, Any]:
    return {
        "name": name,
        "namespace": "team",
        "queueName": "q",
        "podSets": [{"name": "w", "count": pods, "requests": {GPU: gpus}}],
        "runtime": {"durationSeconds": seconds},
    }


@st.composite
def gangs(draw: st.DrawFn, name: str) -> Gang:
    cardinality = draw(st.integers(1, 5))
    members = draw(st.integers(0, cardinality + 2))
    arrivals = tuple(float(draw(st.integers(0, 200))) for _ in range(members))
    gpus = tuple(draw(st.integers(1, 2)) for _ in range(members))
    cancel = None
    if members and draw(st.integers(0, 3)) == 0:  # a quarter of the gangs: a member cancelled
        i = draw(st.integers(0, members - 1))
        cancel = (i, arrivals[i] + draw(st.integers(0, 100)))  # once it exists
    return Gang(name, cardinality, arrivals, gpus, cancel)


@st.composite
def scenarios(draw: st.DrawFn) -> Scenario:
    others = tuple(
        (
            float(draw(st.integers(0, 200))),
            draw(st.integers(1, 3)),
            draw(st.integers(1, 2)),
            float(draw(st.integers(1, 120))),
        )
        for _ in range(draw(st.integers(0, 4)))
    )
    return Scenario(
        nodes=draw(st.integers(1, 6)),
        gpus_per_node=draw(st.integers(1, 4)),
        nominal=draw(st.integers(1, 16)),
        gangs=tuple(draw(gangs(f"g{i}")) for i in range(draw(st.integers(1, 3)))),
        others=others,
    )


@given(scenarios())
@SETTINGS
def test_a_gang_never_starts_before_it_is_complete(s: Scenario) -> None:
    h = s.harness()
    h.run(until=5_000)
    log = h.log.envelopes
    formed = {
        e.event.workload_id: e.occurred_at
        for e in log
        if isinstance(e.event, wev.WorkloadSubmitted)
    }
    for g in s.gangs:
        complete = g.completes_at()
        assert formed.get(g.workload_id) == complete, (g, formed)
        starts: dict[int, list[float]] = {}
        for e in log:
            ev = e.event
            if isinstance(ev, nev.PodStarted) and ev.workload_id == g.workload_id:
                starts.setdefault(ev.attempt, []).append(e.occurred_at)
        if complete is None:
            assert starts == {}, g
            continue
        for attempt, times in starts.items():  # each member has one pod
            assert min(times) >= complete, (g, attempt, times)
            assert len(set(times)) == 1 and len(times) == g.cardinality, (g, attempt, times)
    # the members that make a gang never run as workloads of their own
    started = {e.event.workload_id for e in log if isinstance(e.event, nev.PodStarted)}
    assert not started & {f"{g.name}-m{i}" for g in s.gangs for i in g.inside}
    # members are inputs like any submission: replay makes the same decisions
    _, mismatches = verify_decisions(log, QueueDecider())
    assert mismatches == [], mismatches[:1]
