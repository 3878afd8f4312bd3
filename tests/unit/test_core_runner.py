"""DeciderRunner folding and snapshots, the MemoryLog's version guard, and re-deriving
logged decisions with verify_decisions."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec
import pytest

from muster.core import inputs
from muster.core.decider import Decider, clock_only, clock_only_when
from muster.core.events import BareEnvelope, Envelope, NewEvent, StreamAppend, encode_payload
from muster.core.events import queue as qev
from muster.core.events import workload as wev
from muster.core.model import parse
from muster.core.nodes.decider import NodeAgentDecider
from muster.core.provisioning.decider import ProvisionerDecider
from muster.core.queueing.decider import QueueDecider
from muster.core.runner import DeciderRunner
from muster.core.sim.harness import Harness, build, default_deciders
from muster.core.sim.log import MemoryLog, VersionConflict
from muster.core.verify import verify_decisions

ROOT = Path(__file__).resolve().parents[2]
GPU = "nvidia.com/gpu"

CLUSTER: dict[str, Any] = {
    "name": "test",
    "region": "us-central1",
    "zones": ["us-central1-a", "us-central1-b"],
    "nodePools": [
        {
            "name": "gpu",
            "machineType": "m",
            "allocatable": {GPU: 8},
            "provisioningDelaySeconds": 3,
            "capacity": [
                {"at": 0, "zones": {"us-central1-a": 3, "us-central1-b": 1}},
                {"at": 40, "zones": {"us-central1-b": 4}},
            ],
        }
    ],
    "quotas": [{"name": "GPUS", "resource": GPU, "limit": 40}],
    "resourceFlavors": [{"name": "gpu"}],
    "clusterQueues": [
        {
            "name": "cq",
            "resourceGroups": [
                {
                    "coveredResources": [GPU],
                    "flavors": [{"name": "gpu", "resources": [{"name": GPU, "nominalQuota": 64}]}],
                }
            ],
        }
    ],
    "localQueues": [{"namespace": "default", "name": "lq", "clusterQueue": "cq"}],
}


def deciders() -> list[Decider[Any]]:
    return default_deciders()


def scenario() -> Harness:
    """Waiting for quota and capacity, a failure, a cancellation, a rejection."""
    h = build(parse.cluster(CLUSTER), [])
    jobs = [
        (0, "a", 3, 50, 0),
        (2, "b", 4, 20, 0),
        (4, "c", 1, 10, 1),
        (6, "d", 2, 30, 0),
        (8, "e", 1, 15, 0),
        (9, "f", 2, 25, 0),
        (30, "g", 1, 5, 0),
    ]
    for at, name, count, duration, code in jobs:
        doc = {
            "name": name,
            "queueName": "lq",
            "podSets": [{"name": "w", "count": count, "requests": {GPU: 8}}],
            "runtime": {"durationSeconds": duration, "exitCode": code},
        }
        h.schedule(inputs.submission(name, parse.workload(doc), float(at)), producer="intake")
    wide = {
        "name": "wide",
        "queueName": "lq",
        "podSets": [{"name": "w", "count": 1, "requests": {GPU: 16}}],
    }
    h.schedule(inputs.submission("wide", parse.workload(wide), 12.0), producer="intake")
    h.schedule(inputs.cancellation("f", 35.0), producer="intake")
    h.run()
    return h


@pytest.fixture(scope="module")
def log() -> list[Envelope]:
    return list(scenario().log.envelopes)


def test_scenario_exercises_what_the_checks_rely_on(log: list[Envelope]) -> None:
    types = {env.type for env in log}
    for wanted in (
        "admission.pending",
        "provisioning.waiting",
        "admission.finished",
        "admission.cancelled",
        "admission.rejected",
        "timer.fired",
    ):
        assert wanted in types
    outcomes = {
        getattr(env.event, "workload_id", None): env.type
        for env in log
        if env.type in ("admission.finished", "admission.cancelled", "admission.rejected")
    }
    assert len(outcomes) == 8  # every workload ended


# -- fold --------------------------------------------------------------------------------


@pytest.mark.parametrize("decider", deciders(), ids=lambda d: d.name)
def test_fold_is_idempotent(log: list[Envelope], decider: Decider[Any]) -> None:
    runner: DeciderRunner[Any] = DeciderRunner(decider)
    applied = runner.fold(log)
    assert 0 < applied < len(log) or decider.categories >= {e.category for e in log}
    assert runner.position == log[-1].position
    before = (runner.snapshot(), decider.summary(runner.state), runner.decide())
    assert runner.fold(log) == 0
    assert runner.fold(log[: len(log) // 2]) == 0
    after = (runner.snapshot(), decider.summary(runner.state), runner.decide())
    assert after == before


@pytest.mark.parametrize("decider", deciders(), ids=lambda d: d.name)
def test_overlapping_chunks_fold_like_one_pass(log: list[Envelope], decider: Decider[Any]) -> None:
    whole: DeciderRunner[Any] = DeciderRunner(decider)
    whole.fold(log)
    pieces: DeciderRunner[Any] = DeciderRunner(decider)
    n = len(log)
    total = 0
    for lo, hi in ((0, n // 3), (n // 4, n // 2), (0, 2 * n // 3), (n // 2, n)):
        total += pieces.fold(log[lo:hi])
    assert total == sum(1 for e in log if e.category in decider.categories)
    assert pieces.position == whole.position
    assert pieces.versions == whole.versions
    assert pieces.last_event_id == whole.last_event_id
    assert decider.summary(pieces.state) == decider.summary(whole.state)


def test_the_queue_folds_bare_only_what_it_only_moves_its_clock_on() -> None:
    """Derived from its dispatch: a type with a handler of its own, or naming a workload
    (evolve touches it), is never left unread."""
    bare = clock_only(QueueDecider())
    assert {"timer.fired", "provisioning.nodes_creating"} <= bare
    for kept in ("node.pod_stopped", "workload.gang_member_submitted", "admission.admitted"):
        assert kept not in bare


def test_the_node_agent_and_provisioner_fold_bare_only_types_without_a_handler() -> None:
    """Derived from their dispatch (``unhandled_types``): what they act on is read whole."""
    agent, provisioner = clock_only(NodeAgentDecider()), clock_only(ProvisionerDecider())
    assert {"timer.fired", "admission.quota_reserved"} <= agent
    for kept in ("admission.admitted", "node.pod_started", "provisioning.nodes_creating"):
        assert kept not in agent
    assert {"timer.fired", "node.pod_started"} <= provisioner
    for kept in ("admission.quota_reserved", "workload.submitted", "provisioning.requested"):
        assert kept not in provisioner


@pytest.mark.parametrize("cut", [0.25, 0.5, 1.0])
@pytest.mark.parametrize("make", [QueueDecider, NodeAgentDecider, ProvisionerDecider])
def test_a_fold_with_the_clock_only_types_bare_equals_the_full_fold(
    log: list[Envelope], cut: float, make: Callable[[], Decider[Any]]
) -> None:
    """What admin.rebuild and a service's catch-up read (store.read_folding): a decider's
    clock-only events (and, for the queue, a provisioning request's node.registered,
    ``clock_only_when``) as their rows alone; the state, clock, versions and next decisions
    are the same."""
    decider = make()
    bare = clock_only(decider)
    prefix = log[: int(len(log) * cut)]
    assert any(e.type in bare for e in prefix)
    thin = [BareEnvelope.of(e) if e.type in bare or _bare_when(decider, e) else e for e in prefix]
    if isinstance(decider, QueueDecider):  # a request's node.registered
        assert any(_bare_when(decider, e) for e in prefix)
    whole: DeciderRunner[Any] = DeciderRunner(decider)
    applied = whole.fold(prefix)
    light: DeciderRunner[Any] = DeciderRunner(decider)
    assert light.fold(thin) == applied and light.position == whole.position
    assert light.snapshot() == whole.snapshot()
    assert light.decide() == whole.decide()


def _bare_when(decider: Decider[Any], env: Envelope) -> bool:
    """Whether a replay reads ``env`` bare by its ``clock_only_when`` field."""
    name = clock_only_when(decider).get(env.type)
    return name is not None and bool(getattr(env.event, name))


def test_a_fold_that_raises_keeps_what_it_folded_before(log: list[Envelope]) -> None:
    """The runner's bookkeeping (position, versions, causation) stops at the last event
    evolve took: the loop retries from there."""

    runner: DeciderRunner[Any] = DeciderRunner(_failing_at(log[9].position))
    with pytest.raises(RuntimeError):
        runner.fold(log[:20])
    assert runner.position == log[8].position
    assert runner.last_event_id == log[8].event_id
    assert runner.versions == DeciderRunner(QueueDecider()).versions | {
        e.stream_id: e.stream_version for e in log[:9]
    }
    assert runner.state.now == max(e.occurred_at for e in log[:9])


def test_a_reads_fold_keeps_the_loops_bookkeeping(log: list[Envelope]) -> None:
    """``fold(ours=True)`` of a list (a store read: the decider's categories, in position
    order; ``admin.rebuild``) takes position, versions and last event id per batch: the
    same as the event-by-event loop, over overlapping reads and when ``evolve`` raises."""
    decider = QueueDecider()
    ours = [e for e in log if e.category in decider.categories]
    n = len(ours)
    whole: DeciderRunner[Any] = DeciderRunner(decider)
    whole.fold(ours)
    reads: DeciderRunner[Any] = DeciderRunner(decider)
    cuts = ((0, n // 3), (n // 4, n // 2), (n // 2, n // 2), (0, 2 * n // 3), (n // 2, n))
    total = sum(reads.fold(ours[lo:hi], ours=True) for lo, hi in cuts)
    assert total == n
    assert (reads.position, reads.versions, reads.last_event_id) == (
        whole.position,
        whole.versions,
        whole.last_event_id,
    )
    assert reads.snapshot() == whole.snapshot()

    failing: DeciderRunner[Any] = DeciderRunner(_failing_at(ours[9].position))
    with pytest.raises(RuntimeError):
        failing.fold(ours[:20], ours=True)
    assert (failing.position, failing.last_event_id) == (ours[8].position, ours[8].event_id)
    assert failing.versions == {e.stream_id: e.stream_version for e in ours[:9]}
    poisoned: DeciderRunner[Any] = DeciderRunner(_failing_at(ours[9].position))
    with pytest.raises(RuntimeError):
        poisoned.fold(ours[9:20], ours=True)  # the first one raises: nothing is taken
    assert (poisoned.position, poisoned.versions, poisoned.last_event_id) == (0, {}, None)


def test_fold_skips_other_categories_but_moves_the_position(log: list[Envelope]) -> None:
    runner: DeciderRunner[Any] = DeciderRunner(ProvisionerDecider())
    node_events = [e for e in log if e.category == "node"]
    assert node_events
    assert runner.fold(node_events) == 0  # the provisioner does not fold node streams
    assert runner.position == node_events[-1].position
    assert runner.versions == {} and runner.last_event_id is None


def test_decisions_carry_the_last_folded_event_as_causation(log: list[Envelope]) -> None:
    runner: DeciderRunner[Any] = DeciderRunner(QueueDecider())
    submitted = next(i for i, e in enumerate(log) if e.type == "workload.submitted")
    runner.fold(log[: submitted + 1])
    news = runner.decide()
    assert news and all(n.causation_id == log[submitted].event_id for n in news)
    (append,) = runner.appends(news)
    # A stream of its categories it holds no version of: as of its position (new: none).
    assert append.stream_id == qev.ADMISSION_STREAM
    assert (append.expected_version, append.folded_to) == (None, runner.position)


# -- snapshots ------------------------------------------------------------------------


@pytest.mark.parametrize("decider", deciders(), ids=lambda d: d.name)
@pytest.mark.parametrize("cut", [0.0, 0.3, 0.6, 0.9])
def test_snapshot_restore_gives_the_same_later_decisions(
    log: list[Envelope], decider: Decider[Any], cut: float
) -> None:
    original: DeciderRunner[Any] = DeciderRunner(decider)
    k = int(len(log) * cut)
    original.fold(log[:k])
    restored: DeciderRunner[Any] = DeciderRunner(decider)
    restored.restore(original.snapshot())
    assert restored.position == original.position
    assert restored.decide() == original.decide()
    compared = 0
    for env in log[k:]:
        original.fold([env])
        restored.fold([env])
        assert restored.decide() == original.decide(), env.position
        assert restored.next_deadline() == original.next_deadline()
        compared += 1
    assert decider.summary(restored.state) == decider.summary(original.state)
    assert compared == len(log) - k


def test_restored_state_is_independent_of_the_original(log: list[Envelope]) -> None:
    original: DeciderRunner[Any] = DeciderRunner(QueueDecider())
    original.fold(log[: len(log) // 2])
    snap = original.snapshot()
    restored: DeciderRunner[Any] = DeciderRunner(QueueDecider())
    restored.restore(snap)
    original.fold(log)  # must not reach into the restored copy
    reference: DeciderRunner[Any] = DeciderRunner(QueueDecider())
    reference.fold(log[: len(log) // 2])
    assert restored.position == reference.position == log[len(log) // 2 - 1].position
    assert QueueDecider().summary(restored.state) == QueueDecider().summary(reference.state)
    assert QueueDecider().summary(original.state) != QueueDecider().summary(reference.state)
    assert restored.decide() == reference.decide()


# -- the memory log -----------------------------------------------------------------------


def _new(stream: str, wid: str = "x") -> NewEvent:
    return NewEvent(
        stream_id=stream, event=wev.WorkloadCancelRequested(workload_id=wid), occurred_at=1.0
    )


def test_memory_log_positions_and_versions() -> None:
    mlog = MemoryLog()
    out = mlog.append(
        [
            StreamAppend("workload-a", 0, [_new("workload-a"), _new("workload-a")]),
            StreamAppend("workload-b", None, [_new("workload-b")]),
        ],
        producer="p",
        recorded_at=5.0,
    )
    assert [(e.position, e.stream_id, e.stream_version) for e in out] == [
        (1, "workload-a", 1),
        (2, "workload-a", 2),
        (3, "workload-b", 1),
    ]
    assert mlog.head == 3 and mlog.after(2) == out[2:]
    assert all(e.producer == "p" and e.recorded_at == 5.0 for e in out)


def test_memory_log_raises_on_a_version_conflict_and_appends_nothing() -> None:
    mlog = MemoryLog()
    mlog.append(
        [StreamAppend("workload-a", 0, [_new("workload-a")])], producer="p", recorded_at=0.0
    )
    with pytest.raises(VersionConflict, match="workload-a: expected 0, at 1"):
        mlog.append(
            [StreamAppend("workload-a", 0, [_new("workload-a")])], producer="p", recorded_at=0.0
        )
    # A batch is all or nothing: the good first item is not appended either.
    with pytest.raises(VersionConflict, match="workload-a: expected 2, at 1"):
        mlog.append(
            [
                StreamAppend("workload-b", 0, [_new("workload-b")]),
                StreamAppend("workload-a", 2, [_new("workload-a")]),
            ],
            producer="p",
            recorded_at=0.0,
        )
    assert mlog.head == 1 and mlog.versions == {"workload-a": 1}
    # The right version, or no guard at all, succeeds.
    mlog.append(
        [StreamAppend("workload-a", 1, [_new("workload-a")])], producer="p", recorded_at=0.0
    )
    mlog.append(
        [StreamAppend("workload-a", None, [_new("workload-a")])], producer="p", recorded_at=0.0
    )
    assert mlog.versions == {"workload-a": 3}


def test_memory_log_refuses_an_append_as_of_a_position_the_stream_moved_past() -> None:
    mlog = MemoryLog()
    for stream in ("workload-a", "workload-b", "workload-a"):
        mlog.append([StreamAppend(stream, None, [_new(stream)])], producer="p", recorded_at=0.0)
    with pytest.raises(VersionConflict, match="workload-a: moved at 3, past 2"):
        mlog.append(
            [
                StreamAppend("workload-b", None, [_new("workload-b")], folded_to=2),
                StreamAppend("workload-a", None, [_new("workload-a")], folded_to=2),
            ],
            producer="p",
            recorded_at=0.0,
        )
    assert mlog.head == 3
    mlog.append(
        [
            StreamAppend("workload-a", None, [_new("workload-a")], folded_to=3),
            StreamAppend("workload-c", None, [_new("workload-c")], folded_to=0),  # new
        ],
        producer="p",
        recorded_at=0.0,
    )
    assert mlog.versions == {"workload-a": 3, "workload-b": 1, "workload-c": 1}


@pytest.mark.parametrize("decider", deciders(), ids=lambda d: d.name)
def test_a_runner_keeps_the_latest_versions_and_appends_as_of_its_position_to_the_others(
    log: list[Envelope], decider: Decider[Any]
) -> None:
    """A runner lets go of the versions of the streams first folded longest ago, beyond
    ``versions_kept``: those it keeps are those it folded; an append to one it let go of
    (or never folded) of its categories is as of its position, which the log refuses once
    the stream moved past it; one of a category it does not fold is to a new stream."""
    whole: DeciderRunner[Any] = DeciderRunner(decider)
    whole.fold(log)
    kept: DeciderRunner[Any] = DeciderRunner(decider)
    kept.versions_kept = 2
    for env in log:  # one at a time (a live service) as a batch (a replay): both bounded
        kept.fold([env])
        assert len(kept.versions) <= 4
    read: DeciderRunner[Any] = DeciderRunner(decider)
    read.versions_kept = 2
    read.fold([e for e in log if e.category in decider.categories], ours=True)
    assert len(read.versions) <= 4 and read.position == kept.position == whole.position
    # Which it keeps depends on when it let go (every fold's end); what it keeps is right.
    assert kept.versions.items() <= whole.versions.items() >= read.versions.items()
    let_go = next(s for s in whole.versions if s not in kept.versions)
    (item,) = kept.appends([_new(let_go)])
    assert (item.expected_version, item.folded_to) == (None, kept.position)
    (other,) = kept.appends([_new("intake-x")])  # a category no decider folds
    assert (other.expected_version, other.folded_to) == (0, None)
    mlog = MemoryLog()
    mlog.envelopes, mlog.ends = list(log), {e.stream_id: e.position for e in log}
    mlog.versions = {e.stream_id: e.stream_version for e in log}
    mlog.append([item], producer="p", recorded_at=0.0)  # nothing came since its position
    with pytest.raises(VersionConflict):
        mlog.append([item], producer="p", recorded_at=0.0)  # the stream moved past it


def test_two_runners_deciding_on_the_same_version_conflict(log: list[Envelope]) -> None:
    """The admission stream's version is the single-writer guard between queue replicas."""
    mlog = MemoryLog()
    setup = [e for e in log if e.category in ("config", "cloud")]
    first_submit = next(e for e in log if e.type == "workload.submitted")
    for env in [*setup, first_submit]:
        mlog.append(
            [
                StreamAppend(
                    env.stream_id,
                    None,
                    [
                        NewEvent(
                            stream_id=env.stream_id, event=env.event, occurred_at=env.occurred_at
                        )
                    ],
                )
            ],
            producer=env.producer,
            recorded_at=0.0,
        )
    a: DeciderRunner[Any] = DeciderRunner(QueueDecider())
    b: DeciderRunner[Any] = DeciderRunner(QueueDecider())
    a.fold(mlog.after(0))
    b.fold(mlog.after(0))
    mlog.append(a.appends(a.decide()), producer="queue", recorded_at=0.0)
    with pytest.raises(VersionConflict):
        mlog.append(b.appends(b.decide()), producer="queue", recorded_at=0.0)


# -- verify_decisions -------------------------------------------------------------------


@pytest.mark.parametrize("decider", deciders(), ids=lambda d: d.name)
def test_verify_decisions_on_a_harness_log(log: list[Envelope], decider: Decider[Any]) -> None:
    checked, mismatches = verify_decisions(log, decider)
    assert mismatches == []
    decided = [e for e in log if e.producer == decider.name and e.causation_id is not None]
    assert 0 < checked <= len(decided)


def _tampered(log: list[Envelope], index: int, **changes: Any) -> list[Envelope]:
    env = log[index]
    copy = list(log)
    copy[index] = msgspec.structs.replace(env, event=dataclasses.replace(env.event, **changes))
    return copy


def test_verify_reports_a_tampered_decision(log: list[Envelope]) -> None:
    i = next(i for i, e in enumerate(log) if isinstance(e.event, qev.QuotaReserved))
    forged = _tampered(log, i, message="Quota reserved by a forger")
    _, mismatches = verify_decisions(forged, QueueDecider())
    assert mismatches
    first = mismatches[0]
    assert first.decider == "queue" and first.position == log[i].position
    assert any("forger" in line for line in first.logged)
    assert not any("forger" in line for line in first.derived)
    # The other deciders did not make that decision and still verify.
    assert verify_decisions(forged, ProvisionerDecider())[1] == []


def test_verify_reports_tampered_usage(log: list[Envelope]) -> None:
    i = next(i for i, e in enumerate(log) if isinstance(e.event, qev.QuotaReserved))
    ev = log[i].event
    assert isinstance(ev, qev.QuotaReserved)
    cheaper = {f: {r: q - 1 for r, q in res.items()} for f, res in ev.usage.items()}
    _, mismatches = verify_decisions(_tampered(log, i, usage=cheaper), QueueDecider())
    assert [m.position for m in mismatches][:1] == [log[i].position]


def test_verify_reports_a_tampered_time(log: list[Envelope]) -> None:
    i = next(i for i, e in enumerate(log) if e.type == "node.pod_started")
    forged = list(log)
    forged[i] = msgspec.structs.replace(log[i], occurred_at=log[i].occurred_at + 1)
    _, mismatches = verify_decisions(forged, NodeAgentDecider())
    assert [m.position for m in mismatches] == [log[i].position]


def test_verify_reports_a_dropped_decision(log: list[Envelope]) -> None:
    i = next(i for i, e in enumerate(log) if isinstance(e.event, qev.WorkloadFinished))
    dropped = [*log[:i], *log[i + 1 :]]
    _, mismatches = verify_decisions(dropped, QueueDecider())
    assert mismatches


def test_verify_unknown_causation(log: list[Envelope]) -> None:
    i = next(i for i, e in enumerate(log) if e.producer == "queue" and e.causation_id)
    forged = list(log)
    forged[i] = msgspec.structs.replace(log[i], causation_id="nowhere")
    _, mismatches = verify_decisions(forged, QueueDecider())
    assert any(
        m.logged == ["unknown causation"] and m.position == log[i].position for m in mismatches
    )


def _single_workload_log(
    count: int, gpus_per_pod: int, gpus_per_node: int, cancel_at: float | None
) -> list[Envelope]:
    cluster = {
        **CLUSTER,
        "quotas": [],
        "nodePools": [{"name": "gpu", "machineType": "m", "allocatable": {GPU: gpus_per_node}}],
    }
    h = Harness(deciders())
    for new in inputs.configuration(parse.cluster(cluster), 0.0):
        h.schedule(new, producer="admin")
    doc = {
        "name": "j",
        "queueName": "lq",
        "podSets": [{"name": "w", "count": count, "requests": {GPU: gpus_per_pod}}],
        "runtime": {"durationSeconds": 100},
    }
    h.schedule(inputs.submission("j", parse.workload(doc), 0.0), producer="intake")
    if cancel_at is not None:
        h.schedule(inputs.cancellation("j", cancel_at), producer="intake")
    h.run()
    return list(h.log.envelopes)


@pytest.mark.parametrize(
    ("count", "per_pod", "per_node", "cancel_at"),
    [(2, 8, 8, 50.0), (12, 2, 6, None)],
    ids=["cancel-running-two-nodes", "twelve-pods-three-a-node"],
)
def test_verify_accepts_batches_spanning_several_node_streams(
    count: int, per_pod: int, per_node: int, cancel_at: float | None
) -> None:
    log = _single_workload_log(count, per_pod, per_node, cancel_at)
    assert any(e.type == ("node.pod_stopped" if cancel_at else "node.pod_succeeded") for e in log)
    _, mismatches = verify_decisions(log, NodeAgentDecider())
    assert mismatches == []


def test_verify_still_checks_every_event_of_a_multi_stream_batch() -> None:
    """Comparing in stored (per-stream) order must not make verify lenient."""
    log = _single_workload_log(2, 8, 8, 50.0)
    stop = next(i for i, e in enumerate(log) if e.type == "node.pod_stopped")
    batch = [
        e for e in log if e.causation_id == log[stop].causation_id and e.producer == "node-agent"
    ]
    assert len({e.stream_id for e in batch}) == 2  # two nodes: an interleaving batch
    removed = next(i for i, e in enumerate(log) if e.type == "node.removed")
    assert log[removed] in batch
    for index, changes in ((stop, {"reason": "forged"}), (removed, {"reason": "forged"})):
        forged = list(log)
        forged[index] = msgspec.structs.replace(
            log[index], event=dataclasses.replace(log[index].event, **changes)
        )
        _, mismatches = verify_decisions(forged, NodeAgentDecider())
        assert [m.position for m in mismatches] == [batch[0].position]
    # Reordering the stored batch (swapping its two streams' runs) is a mismatch too.
    first = batch[0].position - 1
    runs: dict[str, list[Envelope]] = {}
    for e in batch:
        runs.setdefault(e.stream_id, []).append(e)
    a, b = runs.values()
    swapped = [*log[:first], *b, *a, *log[first + len(batch) :]]
    _, mismatches = verify_decisions(swapped, NodeAgentDecider())
    assert mismatches


# -- determinism beyond one process -------------------------------------------------------


SCRIPT = textwrap.dedent("""
    import hashlib, json, sys
    sys.path.insert(0, sys.argv[1])
    from tests.unit.test_core_runner import scenario
    from muster.core.events import encode_payload
    rows = [[e.stream_id, e.type, encode_payload(e.event), e.occurred_at]
            for e in scenario().log.envelopes]
    print(hashlib.sha256(json.dumps(rows, sort_keys=True).encode()).hexdigest(), len(rows))
""")


def test_log_is_identical_across_hash_seeds(log: list[Envelope]) -> None:
    """Sets of strings iterate in a per-process order: no decision may depend on it."""
    digests = set()
    for seed in ("0", "1", "12345"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        out = subprocess.run(
            [sys.executable, "-c", SCRIPT, str(ROOT)],
            env=env,
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=120,
            check=True,
        )
        digests.add(out.stdout.strip())
    assert len(digests) == 1
    rows = [[e.stream_id, e.type, encode_payload(e.event), e.occurred_at] for e in log]
    assert digests.pop().endswith(f" {len(rows)}")
    assert json.dumps(rows, sort_keys=True)  # the in-process log is serialisable too


def _failing_at(position: int) -> QueueDecider:
    """A queue decider whose ``evolve`` raises at ``position``: a poisoned event."""

    class Failing(QueueDecider):
        def evolve(self, state: Any, envelope: Any) -> Any:  # type: ignore[override]
            if envelope.position == position:
                raise RuntimeError("poisoned")
            return super().evolve(state, envelope)

    return Failing()
