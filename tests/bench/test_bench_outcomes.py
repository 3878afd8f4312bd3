"""The benchmarks' outcome checks can fail: given work that did not run as intended
(rejected, unfinished, over a limit, a livelock) they report it, and the run exits with a
``FAILED:`` message instead of printing figures over it."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from bench import busy_trace as bt
from bench import check_outcome, replay, run_bounded
from bench import cycle_scale as cs
from bench import dws_provisioning as dws
from bench import kueue_baseline as kb
from muster.cli.commands import EXAMPLES
from muster.core.decider import advance
from muster.core.events import Envelope, NewEvent
from muster.core.events import queue as qev
from muster.core.events import timer as tev
from muster.core.model import parse
from muster.core.queueing.state import QueueState
from muster.core.sim.harness import Harness, build


def test_check_outcome_exits_loudly() -> None:
    with pytest.raises(SystemExit, match=r"^FAILED: 3 rejected .* not valid\)$"):
        check_outcome(["3 rejected"])
    check_outcome([])  # nothing went wrong: no exit


def test_kueue_baseline_reports_rejected_workloads() -> None:
    # The reported regression: a cloud that admits few requests at once rejects most of
    # the workloads; the run must not print admissions/s over what is left.
    doc = kb.cluster_doc("2s")
    doc["activeRequests"] = 5
    plan = kb.arrivals(0.01)
    problems = kb.virtual(parse.cluster(doc), plan, 0.01)
    assert any("rejected" in p for p in problems), problems
    assert any(f"of {len(plan)} never finished" in p for p in problems), problems


def test_replay_reports_rejected_workloads(tmp_path: Path) -> None:
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text((EXAMPLES / "cluster.yaml").read_text() + "activeRequests: 1\n")
    envs = replay.simulate(cluster, 400, seed=7, gap=1.5)
    assert any("rejected or cancelled" in p for p in replay.log_outcome(envs))


def test_replay_reports_unfinished_workloads() -> None:
    envs = replay.simulate(EXAMPLES / "cluster.yaml", 400, seed=7, gap=1.5)
    assert replay.log_outcome(envs) == []
    cut = drop_last(envs, qev.WorkloadFinished)
    assert any("never finished" in p for p in replay.log_outcome(cut))


def drop_last(envs: list[Envelope], kind: type) -> list[Envelope]:
    last = max(i for i, e in enumerate(envs) if isinstance(e.event, kind))
    return envs[:last] + envs[last + 1 :]


def test_replay_fails_on_a_log_without_fixed_point(monkeypatch: pytest.MonkeyPatch) -> None:
    # A bound below what the run needs stands in for a livelock: loud, not a hang.
    monkeypatch.setattr(replay, "RUNAWAY_FACTOR", 0)
    with pytest.raises(SystemExit, match=r"^FAILED: livelock"):
        replay.simulate(EXAMPLES / "cluster.yaml", 2000, seed=7, gap=1.5)


@dataclass
class Clock:
    now: float = 0.0


class Ticker:
    """Wants a timer a second after every event it folds: time moves, nothing settles."""

    name = "ticker"
    categories = frozenset({"timer"})
    snapshot_format = "ticker-v1"

    def initial(self) -> Clock:
        return Clock()

    def evolve(self, state: Clock, envelope: Envelope) -> Clock:
        advance(state, envelope)
        return state

    def decide(self, state: Clock) -> list[NewEvent]:
        return []

    def next_deadline(self, state: Clock) -> float | None:
        return state.now + 1.0

    def summary(self, state: Clock) -> dict[str, Any]:
        return {}


class Chatter(Ticker):
    """Decides something at every turn, at one instant: the harness's own Livelock."""

    name = "chatter"

    def decide(self, state: Clock) -> list[NewEvent]:
        fired = tev.TimerFired(owner=self.name, deadline=state.now)
        return [NewEvent(stream_id=tev.stream(self.name), event=fired, occurred_at=state.now)]

    def next_deadline(self, state: Clock) -> float | None:
        return None


@pytest.mark.parametrize(
    ("decider", "found"),
    [(Ticker(), "more than 2,000 events"), (Chatter(), "no fixed point after 1000 rounds")],
    ids=["clock-moves", "one-instant"],
)
def test_run_bounded_reports_a_livelock(decider: Ticker, found: str) -> None:
    problem = run_bounded(Harness([decider]), 2000)
    assert problem is not None and problem.startswith("livelock") and found in problem


def test_dws_outcome() -> None:
    r = dws.Replay(3, provisioned={"a": 1.0, "b": 2.0}, failed={"c": "QuotaExceeded"})
    assert dws.outcome(r, active_requests=2) == []  # the one over the limit failed
    assert any("1 of 3 failed" in p for p in dws.outcome(r, active_requests=3))
    r.failed = {}
    assert any("1 still waiting" in p for p in dws.outcome(r))
    r.zone_violations.append("c: nodes in two zones")
    assert any("two zones" in p for p in dws.outcome(r))


def test_cycle_outcome() -> None:
    state = QueueState(pending={"a", "b"}, active={"x"})

    def new(event: Any) -> NewEvent:
        return NewEvent(stream_id=qev.ADMISSION_STREAM, event=event, occurred_at=0.0)

    pending = qev.WorkloadPending(workload_id="a", reason="WaitingForQuota", message="")
    ok = [new(pending), new(qev.WorkloadPending(workload_id="b", reason="r", message=""))]
    assert cs.cycle_outcome(state, ok) == []
    evict = new(qev.WorkloadEvicted(workload_id="y", reason="Preempted", message=""))
    problems = cs.cycle_outcome(state, [new(pending), new(pending), evict])
    assert len(problems) == 3, problems  # b without verdict, a twice, y not holding quota


def test_busy_trace_reports_a_job_admitted_twice_or_unfinished() -> None:
    # The harness's log of a small trace passes; the same log with one job's finish dropped,
    # or with one admission doubled, fails by name.
    jobs = bt.trace(40, 0.92, 1.0, seed=3)
    subs = [(j.at, j.key, parse.workload(j.body())) for j in jobs]
    harness = build(parse.cluster(bt.cluster_doc()), subs)
    assert run_bounded(harness, 100_000) is None
    envs, ids = harness.log.envelopes, {j.key for j in jobs}
    at = bt.timeline(envs, ids, lambda e: e.occurred_at)
    assert bt.outcome("sim", at, ids) == []
    unfinished = bt.timeline(drop_last(envs, qev.WorkloadFinished), ids, lambda e: e.occurred_at)
    assert bt.outcome("sim", unfinished, ids) == ["sim: 1 jobs not finished exactly once"]
    admitted = next(e for e in envs if isinstance(e.event, qev.WorkloadAdmitted))
    doubled = bt.timeline([*envs, admitted], ids, lambda e: e.occurred_at)
    assert bt.outcome("sim", doubled, ids) == ["sim: 1 jobs not admitted exactly once"]


def test_busy_trace_offers_the_load_asked() -> None:
    # The arrival rate is computed for the load: GPU-seconds offered over the arrival window
    # are the asked share of 512 GPUs, within the sampling error of 2,000 jobs.
    jobs = bt.trace(2000, 0.92, 5.0, seed=2)
    offered = sum(j.gpus * j.duration for j in jobs) / (512 * jobs[-1].at)
    assert 0.85 < offered < 1.0
    assert {j.gpus for j in jobs} == {1, 2, 4, 8, 16}
    assert bt.trace(2000, 0.92, 5.0, seed=2) == jobs  # seeded
