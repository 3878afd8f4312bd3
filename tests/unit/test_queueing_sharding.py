"""A queue split between two deciders, one per cohort tree, in the harness: each decides
for its own trees, a decider that stops is taken over after a claim's length, nothing is
decided twice, and every decision re-derives from its log prefix."""

from __future__ import annotations

from typing import Any

from muster.core.events import Envelope, NewEvent
from muster.core.events import queue as qev
from muster.core.model import parse
from muster.core.nodes.decider import NodeAgentDecider
from muster.core.provisioning.decider import ProvisionerDecider
from muster.core.queueing import sharding
from muster.core.queueing.decider import QueueDecider
from muster.core.sim.harness import build
from muster.core.verify import verify_decisions

GPU = "nvidia.com/gpu"
TTL = 10.0


def cluster_doc() -> dict[str, Any]:
    """Two cohort trees that share nothing: their own flavor, their own node pool."""
    pools, flavors, queues, locals_ = [], [], [], []
    for tree in ("alpha", "beta"):
        labels = {"pool": tree}
        pools.append({
            "name": f"{tree}-pool", "machineType": "a2-highgpu-1g",
            "accelerator": "nvidia-tesla-a100", "allocatable": {GPU: 1, "cpu": 8, "memory": "32Gi"},
            "labels": labels, "maxNodes": 50, "provisioningDelaySeconds": 1,
        })  # fmt: skip
        flavors.append({"name": tree, "nodeLabels": labels})
        queues.append({
            "name": f"cq-{tree}", "cohort": tree,
            "resourceGroups": [{"coveredResources": [GPU], "flavors": [
                {"name": tree, "resources": [{"name": GPU, "nominalQuota": 4}]}]}],
        })  # fmt: skip
        locals_.append({"namespace": tree, "name": "jobs", "clusterQueue": f"cq-{tree}"})
    return {
        "name": "split", "region": "us-central1", "zones": ["us-central1-a"],
        "nodePools": pools, "quotas": [{"name": "GPUS", "resource": GPU, "limit": 1000}],
        "activeRequests": 1000, "resourceFlavors": flavors, "clusterQueues": queues,
        "localQueues": locals_,
    }  # fmt: skip


def workload(tree: str, i: int) -> Any:
    return parse.workload({
        "name": f"{tree}-{i}", "namespace": tree, "queueName": "jobs",
        "podSets": [{"name": "w", "count": 1, "requests": {GPU: 1}}],
        "runtime": {"durationSeconds": 5},
    })  # fmt: skip


class StopsAt(QueueDecider):
    """A split decider whose process dies at ``at``: it decides nothing from then on."""

    def __init__(self, name: str, at: float) -> None:
        super().__init__(name)
        self.at = at

    def decide(self, state: Any) -> list[NewEvent]:
        return [] if state.now >= self.at else super().decide(state)

    def next_deadline(self, state: Any) -> float | None:
        return None if state.now >= self.at else super().next_deadline(state)


def started(owner: str, prefers: str) -> NewEvent:
    return NewEvent(
        stream_id=qev.shard_stream(owner),
        event=qev.QueueShardStarted(owner=owner, prefers=(prefers,), claim_seconds=TTL),
        occurred_at=0.0,
    )


def split_run(submissions: list[Any], queue_b: QueueDecider) -> list[Envelope]:
    """The harness's log: queue-a prefers alpha, ``queue_b`` (named queue-b) beta."""
    h = build(
        parse.cluster(cluster_doc()),
        submissions,
        deciders=[QueueDecider("queue-a"), queue_b, ProvisionerDecider(), NodeAgentDecider()],
    )
    for owner, tree in (("queue-a", "alpha"), ("queue-b", "beta")):
        h.schedule(started(owner, tree), producer=owner)
    h.run(until=400.0)
    return h.log.after(0)


def test_each_tree_has_one_decider_and_a_stopped_ones_trees_are_taken_over() -> None:
    before = [(1.0 + i, f"{tree}-{i}", workload(tree, i)) for tree in ("alpha", "beta")
              for i in range(3)]  # fmt: skip
    after = [(200.0 + i, f"beta-late-{i}", workload("beta", 10 + i)) for i in range(3)]
    log = split_run(before + after, StopsAt("queue-b", 100.0))

    decided: dict[str, list[tuple[str, str]]] = {}
    for env in log:
        if isinstance(env.event, qev.QuotaReserved | qev.WorkloadAdmitted):
            decided.setdefault(env.event.workload_id, []).append((env.type, env.producer))
    finished = {e.event.workload_id for e in log if isinstance(e.event, qev.WorkloadFinished)}
    assert finished == {wid for _, wid, _ in before + after}
    for wid, decisions in decided.items():
        owner = "queue-a" if wid.startswith("alpha") or "late" in wid else "queue-b"
        assert decisions == [("admission.quota_reserved", owner), ("admission.admitted", owner)]

    claims = [(e.occurred_at, e.event.group, e.event.owner) for e in log
              if isinstance(e.event, qev.GroupClaimed)]  # fmt: skip
    first = {group: owner for _, group, owner in sorted(claims, reverse=True)}
    assert first == {"cohort/alpha": "queue-a", "cohort/beta": "queue-b"}
    taken = [(at, owner) for at, group, owner in claims if group == "cohort/beta" and at > 100]
    # queue-b's last claim ran to at most 100 + TTL; queue-a takes beta a claim's length on.
    assert taken and taken[0][1] == "queue-a" and 100.0 + TTL <= taken[0][0] <= 100.0 + 2 * TTL
    streams = {e.stream_id for e in log if e.category == "admission"}
    assert streams == {"admission-cohort.alpha", "admission-cohort.beta",
                       "admission-shard.queue-a", "admission-shard.queue-b"}  # fmt: skip

    for name in ("queue-a", "queue-b"):
        checked, mismatches = verify_decisions(log, QueueDecider(name))
        assert checked and not mismatches, mismatches[:1]


def test_the_unsplit_queue_decides_on_the_cluster_stream_as_before() -> None:
    h = build(parse.cluster(cluster_doc()), [(1.0, "alpha-0", workload("alpha", 0))])
    h.run(until=50.0)
    streams = {e.stream_id for e in h.log.after(0) if e.category == "admission"}
    assert streams == {qev.ADMISSION_STREAM}


class PausedBetween(QueueDecider):
    """A split decider whose process stalls (a long pause, a partition) and comes back."""

    def __init__(self, name: str, start: float, end: float) -> None:
        super().__init__(name)
        self.start, self.end = start, end

    def decide(self, state: Any) -> list[NewEvent]:
        return [] if self.start <= state.now < self.end else super().decide(state)

    def next_deadline(self, state: Any) -> float | None:
        if self.start <= state.now < self.end:
            return self.end
        return super().next_deadline(state)


def test_a_decider_back_from_a_pause_leaves_the_tree_it_lost() -> None:
    late = [(200.0 + i, f"beta-late-{i}", workload("beta", 10 + i)) for i in range(3)]
    log = split_run(
        [(1.0, "beta-0", workload("beta", 0)), *late], PausedBetween("queue-b", 50, 150)
    )
    beta = [
        e for e in log if isinstance(e.event, qev.GroupClaimed) and e.event.group == "cohort/beta"
    ]
    owners = [e.event.owner for e in beta]
    taken = owners.index("queue-a")
    assert set(owners[:taken]) == {"queue-b"} and set(owners[taken:]) == {"queue-a"}
    for i in range(3):
        reserved = [e.producer for e in log if isinstance(e.event, qev.QuotaReserved)
                    and e.event.workload_id == f"beta-late-{i}"]  # fmt: skip
        assert reserved == ["queue-a"]
    for name in ("queue-a", "queue-b"):
        assert not verify_decisions(log, QueueDecider(name))[1]


def test_trees_that_could_compete_are_decided_together() -> None:
    doc = cluster_doc()
    # beta's queue takes alpha's flavor too: the trees compete for alpha's nodes.
    doc["clusterQueues"][1]["resourceGroups"][0]["flavors"].append(
        {"name": "alpha", "resources": [{"name": GPU, "nominalQuota": 2}]}
    )
    subs = [(1.0 + i, f"{t}-{i}", workload(t, i)) for t in ("alpha", "beta") for i in range(2)]
    deciders = [QueueDecider("queue-a"), QueueDecider("queue-b")]
    h = build(
        parse.cluster(doc), subs, deciders=[*deciders, ProvisionerDecider(), NodeAgentDecider()]
    )
    for owner, tree in (("queue-a", "alpha"), ("queue-b", "beta")):
        h.schedule(started(owner, tree), producer=owner)
    h.run(until=100.0)
    log = h.log.after(0)
    assert {e.event.group for e in log if isinstance(e.event, qev.GroupClaimed)} == {"cohort/alpha"}
    reserved = {e.producer for e in log if isinstance(e.event, qev.QuotaReserved)}
    assert reserved == {"queue-a"} and len(
        [e for e in log if isinstance(e.event, qev.WorkloadFinished)]
    ) == len(subs)


def test_groups_follow_flavors_labels_and_namespace_quotas() -> None:
    def grouped(doc: dict[str, Any]) -> dict[str, str]:
        h = build(parse.cluster(doc), [], deciders=[QueueDecider("queue-a")])
        h.run(until=1.0)
        return sharding.tree_groups(h.runners[0].state)

    apart = {"cohort/alpha": "cohort/alpha", "cohort/beta": "cohort/beta"}
    assert grouped(cluster_doc()) == apart
    unlabelled = cluster_doc()
    unlabelled["resourceFlavors"][1]["nodeLabels"] = {}  # selects any node, alpha's too
    assert set(grouped(unlabelled).values()) == {"cohort/alpha"}
    other_key = cluster_doc()
    other_key["resourceFlavors"][1]["nodeLabels"] = {"zone": "b"}  # could meet on one node
    assert set(grouped(other_key).values()) == {"cohort/alpha"}
    shared_namespace = cluster_doc()
    shared_namespace["localQueues"].append(
        {"namespace": "alpha", "name": "spill", "clusterQueue": "cq-beta"}
    )
    assert grouped(shared_namespace) == apart  # one namespace, but no quota over it
    shared_namespace["namespaceQuotas"] = [{"namespace": "alpha", "name": "q", "hard": {GPU: 4}}]
    assert set(grouped(shared_namespace).values()) == {"cohort/alpha"}
    blocking = cluster_doc()
    blocking["waitForPodsReady"] = {"enable": True, "blockAdmission": True}
    assert set(grouped(blocking).values()) == {"cohort/alpha"}
