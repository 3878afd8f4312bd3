"""Run deciders to a fixed point over a MemoryLog, jumping the virtual clock between
inputs and deadlines. The services do the same thing over the store and Kafka."""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from muster.core import inputs
from muster.core.decider import Decider
from muster.core.events import NewEvent, StreamAppend
from muster.core.events import workload as wev
from muster.core.intake import gangs
from muster.core.intake import submissions as planning
from muster.core.model.cluster import ClusterSpec
from muster.core.model.workload import ProvisioningRequestSpec, WorkloadSpec
from muster.core.nodes.decider import NodeAgentDecider
from muster.core.provisioning.decider import ProvisionerDecider
from muster.core.queueing.decider import QueueDecider
from muster.core.runner import DeciderRunner
from muster.core.sim.log import MemoryLog

# Deciding rounds at one instant before the harness calls it a livelock: a burst of work
# settles in a few dozen (reserve, admit, start, finish ... each a round for every
# submission at once), so a thousand is reported in well under a second.
MAX_ROUNDS_PER_INSTANT = 1_000


class Livelock(RuntimeError):
    """Deciders kept deciding without time passing: a bug in some decider."""


@dataclass(order=True)
class _Input:
    at: float
    seq: int
    producer: str = field(compare=False)
    event: NewEvent = field(compare=False)


def default_deciders() -> list[Decider[Any]]:
    """The three deciders of a cluster with one node agent."""
    return [QueueDecider(), ProvisionerDecider(), NodeAgentDecider()]


class Harness:
    def __init__(self, deciders: Sequence[Decider[Any]], *, start: float = 0.0) -> None:
        self.log = MemoryLog()
        self.runners = [DeciderRunner(d) for d in deciders]
        self.clock = start
        self._inputs: list[_Input] = []
        self._seq = 0

    def schedule(self, new: NewEvent, *, producer: str) -> None:
        """An outside input (configuration, a submission) arriving at ``new.occurred_at``."""
        self._seq += 1
        heapq.heappush(self._inputs, _Input(new.occurred_at, self._seq, producer, new))

    def run(self, until: float | None = None) -> None:
        while True:
            self._settle()
            nxt = self._next_time()
            if nxt is None or (until is not None and nxt > until):
                break
            self.clock = max(self.clock, nxt)
            self._fire(self.clock)
        if until is not None:
            self.clock = max(self.clock, until)

    def _next_time(self) -> float | None:
        times = [r.next_deadline() for r in self.runners]
        if self._inputs:
            times.append(self._inputs[0].at)
        return min((t for t in times if t is not None), default=None)

    def _fire(self, now: float) -> None:
        while self._inputs and self._inputs[0].at <= now:
            item = heapq.heappop(self._inputs)
            self._append(item.producer, item.event)
        for runner in self.runners:
            deadline = runner.next_deadline()
            if deadline is not None and deadline <= now:
                self._append(runner.decider.name, runner.timer_event(deadline))

    def _settle(self) -> None:
        for _ in range(MAX_ROUNDS_PER_INSTANT):
            progress = False
            for runner in self.runners:
                runner.fold(self.log.after(runner.position))
                if runner.quiet:
                    continue  # nothing new reached it since it last had nothing to say
                news = runner.decide()
                if news:
                    self.log.append(
                        runner.appends(news), producer=runner.decider.name, recorded_at=self.clock
                    )
                    progress = True
            if not progress:
                return
        raise Livelock(f"no fixed point after {MAX_ROUNDS_PER_INSTANT} rounds at t={self.clock}")

    def _append(self, producer: str, new: NewEvent) -> None:
        self.log.append(
            [StreamAppend(new.stream_id, None, [new])], producer=producer, recorded_at=self.clock
        )


# (virtual submit time, workload id, spec)
Submission = tuple[float, str, WorkloadSpec]


def intake_inputs(
    subs: Iterable[Submission], cancels: Iterable[tuple[float, str]] = ()
) -> list[NewEvent]:
    """Submissions and cancellations as intake plans them, one at a time in time order:
    a gang's members join its stream, the last one submits the gang's workload, a member
    refused (as intake would refuse it) is left out, and cancelling a member cancels its
    gang (``core/intake/gangs.py``)."""
    timeline: list[tuple[float, int, int, str, WorkloadSpec | None]] = [
        (float(at), 0, n, wid, spec) for n, (at, wid, spec) in enumerate(subs)
    ]
    timeline += [(float(at), 1, n, wid, None) for n, (at, wid) in enumerate(cancels)]
    out: list[NewEvent] = []
    states: dict[str, gangs.GangState] = {}
    gang_of: dict[str, str] = {}  # member id -> its gang's workload id
    for at, _, _, wid, spec in sorted(timeline, key=lambda t: t[:3]):
        news: list[NewEvent] = []
        if spec is None:
            news = [inputs.cancellation(gang_of.get(wid, wid), at)]
        elif spec.gang is None:
            news = [inputs.submission(wid, spec, at)]
        else:
            plan = planning.plan([planning.Item(spec, None, wid, "")], {}, at, states)
            news = plan.append if isinstance(plan, planning.Plan) else []
        for new in news:
            if isinstance(new.event, wev.GangMemberSubmitted):
                gang_of[new.event.member_id] = new.event.workload_id
            if new.stream_id in states or isinstance(new.event, wev.GangMemberSubmitted):
                gangs.record(
                    states.setdefault(new.stream_id, gangs.GangState(new.stream_id)), new.event
                )
        out += news
    return out


def build(
    cluster: ClusterSpec,
    submissions: Iterable[Submission],
    cancels: Iterable[tuple[float, str]] = (),
    deciders: Sequence[Decider[Any]] | None = None,
    *,
    requests: Iterable[tuple[float, ProvisioningRequestSpec]] = (),
    deletions: Iterable[tuple[float, str]] = (),
    node_losses: Iterable[tuple[float, str]] = (),
    agent_restarts: Iterable[float] = (),
) -> Harness:
    """A harness with the cluster configured at time 0 and the inputs scheduled: workloads
    (submitted, cancelled), standalone ProvisioningRequests (created, deleted by id),
    existing nodes lost (as the heartbeat watch reports them) and node agent restarts
    (which register lost nodes again)."""
    harness = Harness(default_deciders() if deciders is None else deciders)
    for new in inputs.configuration(cluster, 0.0):
        harness.schedule(new, producer=inputs.ADMIN)
    for new in intake_inputs(submissions, cancels):
        harness.schedule(new, producer=inputs.INTAKE)
    for at, request in requests:
        harness.schedule(inputs.provisioning_request(request, float(at)), producer=inputs.INTAKE)
    for at, rid in deletions:
        harness.schedule(inputs.provisioning_deletion(rid, float(at)), producer=inputs.INTAKE)
    for at, node in node_losses:
        message = "no heartbeat within the grace period (simulated)"
        harness.schedule(inputs.node_lost(node, float(at), message), producer=inputs.MONITOR)
    for at in agent_restarts:
        harness.schedule(inputs.agent_started("node-agent", 0, float(at)), producer="node-agent")
    return harness
