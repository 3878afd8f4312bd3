"""The demo's narration (``muster.cli.story``) told from the log of the demo's own inputs,
run by the simulator: the preemption, the pending reasons with their numbers and the
all-at-once provisioning are each one line naming the workloads by namespace/name."""

from __future__ import annotations

from pathlib import Path

import pytest

from muster.cli import commands
from muster.cli.story import Story

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.fixture(scope="module")
def story_lines() -> list[str]:
    spec = commands.load_cluster(EXAMPLES / "cluster.yaml")
    paths = [EXAMPLES / "workloads.yaml", EXAMPLES / "dws-demo.yaml"]
    loaded = commands.load_sim_inputs(spec, paths)
    harness = commands.build_harness(
        loaded.spec, loaded.workloads, requests=loaded.requests, deletions=loaded.deletions
    )
    harness.run()
    story = Story()
    return [line for env in harness.log.envelopes for line in story.tell(env)]


def of(lines: list[str], what: str) -> list[str]:
    return [line.split(None, 2)[2] for line in lines if line.split()[1] == what]


def test_the_preemption_names_preemptor_victim_and_kueues_reason(story_lines: list[str]) -> None:
    """kueue.md, preemption: reclaimWithinCohort evicts a borrower (reason
    InCohortReclamation); the urgent hotfix reclaims its queue's lent quota."""
    assert of(story_lines, "preempted") == [
        "oncall/hotfix-eval preempted team-b/job-03 (InCohortReclamation); "
        "team-b/job-03 goes back to its queue"
    ]


def test_pending_lines_give_the_reason_with_numbers(story_lines: list[str]) -> None:
    pending = of(story_lines, "pending")
    assert any(
        line.startswith("team-a/job-04: ")
        and "insufficient quota for nvidia.com/gpu in flavor a100, 24 more needed" in line
        for line in pending
    )
    assert any("preempting 1 workload(s)" in line for line in pending)
    # a workload that waited says when it got in and how long it waited
    admitted = of(story_lines, "admitted")
    assert any(
        line.startswith("oncall/hotfix-eval in ClusterQueue urgent after ") for line in admitted
    )


def test_provisioning_is_told_as_all_nodes_at_once(story_lines: list[str]) -> None:
    """peers.md, GKE DWS: every node of a request comes up at once in one zone, or none."""
    provision = of(story_lines, "provision")
    assert any(
        "waiting for capacity" in line and "(all 2 nodes in one zone, or none)" in line
        for line in provision
    )
    assert any(
        line.startswith("request ml/pi-request: all 2 nodes Ready at once in us-central1-")
        for line in provision
    )
    # a request of one node says nothing about "all at once"
    assert not any("all 1 nodes" in line for line in provision)


def test_a_quiet_log_tells_nothing(story_lines: list[str]) -> None:
    """Only what a person watching wants: no line per pod, timer or node."""
    assert story_lines
    assert {line.split()[1] for line in story_lines} <= {
        "pending",
        "admitted",
        "preempted",
        "evicted",
        "finished",
        "rejected",
        "provision",
    }


def test_the_recap_tells_the_story_in_three_lines() -> None:
    spec = commands.load_cluster(EXAMPLES / "cluster.yaml")
    loaded = commands.load_sim_inputs(spec, [EXAMPLES / "workloads.yaml"])
    harness = commands.build_harness(loaded.spec, loaded.workloads)
    harness.run()
    story = Story()
    for env in harness.log.envelopes:
        story.tell(env)
    preemption, pending, provisioning = story.recap()
    assert preemption == (
        "preemption: oncall/hotfix-eval preempted team-b/job-03 (InCohortReclamation)"
    )
    assert pending.startswith("pending: ") and "longest team-a/job-05" in pending
    assert provisioning.startswith("provisioning: ") and "each all at once in one zone" in (
        provisioning
    )
