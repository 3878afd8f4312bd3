"""Scenarios S1, S2, S2q, S2x, S2c and S2r (GKE Dynamic Workload Scheduler), applied as
the seed manifests, in virtual time; and Kueue's admission-check mapping around them.

The manifests are the seed documents verbatim (examples/scenarios/dws/); the clusters
they run on are written here. Expectations are checked on the decision log.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable
from pathlib import Path
from typing import Any, TypeVar

import yaml

from muster.core.events import Envelope, Event
from muster.core.events import node as nev
from muster.core.events import provisioning as pev
from muster.core.events import queue as qev
from muster.core.model import manifests, parse
from muster.core.model.cluster import ClusterSpec
from muster.core.nodes.decider import NodeAgentDecider
from muster.core.provisioning.decider import ProvisionerDecider
from muster.core.queueing.decider import QueueDecider
from muster.core.sim.harness import Harness, build
from tests.unit.harness_inputs import event_as

SCENARIOS = Path(__file__).resolve().parents[2] / "examples" / "scenarios" / "dws"
GPU = "nvidia.com/gpu"
ZA, ZB = "us-central1-a", "us-central1-b"
E = TypeVar("E", bound=Event)
RID = "default/pi-request"


def docs(*names: str) -> list[Any]:
    out: list[Any] = []
    for name in names:
        out += list(yaml.safe_load_all((SCENARIOS / name).read_text()))
    return out


def dws_cluster(
    *,
    capacity: list[dict[str, Any]],
    quota: int | None = None,
    delay: float = 60.0,
    failures: list[dict[str, Any]] | None = None,
    active_requests: int = 100,
) -> ClusterSpec:
    """A queued-provisioning pool ``dws-pool`` of 1-GPU nodes (GPU-tainted), zones a and b."""
    pool: dict[str, Any] = {
        "name": "dws-pool",
        "machineType": "g2-standard-8",
        "allocatable": {"cpu": 8, "memory": "32Gi", GPU: 1},
        "taints": [{"key": GPU, "value": "present", "effect": "NoSchedule"}],
        "accelerator": "nvidia-l4",
        "queuedProvisioning": True,
        "provisioningDelaySeconds": delay,
        "capacity": capacity,
    }
    if failures:
        pool["failures"] = failures
    doc: dict[str, Any] = {
        "name": "dws",
        "region": "us-central1",
        "zones": [ZA, ZB],
        "nodePools": [pool],
        "activeRequests": active_requests,
    }
    if quota is not None:
        doc["quotas"] = [{"name": "NVIDIA_L4_GPUS", "resource": GPU, "limit": quota}]
    return parse.cluster(doc)


def run(
    cluster: ClusterSpec,
    raw: list[Any],
    *,
    deletions: Iterable[tuple[float, str]] = (),
    cancels: Iterable[tuple[float, str]] = (),
    until: float | None = None,
) -> Harness:
    """Manifests merged into the cluster; workload ids are their names."""
    m = manifests.read(raw)
    cluster = manifests.merge(cluster, m)
    subs = [(at, wl.name, wl) for at, wl in m.submissions()]
    requests = [(at, r) for at, r, _ in m.provisioning_requests()]
    h = build(cluster, subs, cancels, requests=requests, deletions=deletions)
    h.run(until=until)
    return h


def of(h: Harness, cls: type[E], rid: str | None = None) -> list[tuple[Envelope, E]]:
    """The events of ``cls`` (node creations in either form: ``event_as``)."""
    return [
        (env, ev)
        for env in h.log.envelopes
        if isinstance(ev := event_as(env, cls), cls)
        and (rid is None or getattr(ev, "request_id", None) == rid)
    ]


def at(h: Harness, cls: type[Event], rid: str | None = None) -> list[float]:
    return [env.occurred_at for env, _ in of(h, cls, rid)]


def for_workload(h: Harness, wid: str) -> list[str]:
    return [env.type for env in h.log.envelopes if env.correlation_id == wid]


def provisioner(h: Harness) -> Any:
    return next(r for r in h.runners if r.decider.name == "provisioner").state


def queue(h: Harness) -> Any:
    return next(r for r in h.runners if r.decider.name == "queue").state


# -- S1: a Job through Kueue's ProvisioningRequest admission check ------------------------


def s1_cluster(nodes: int = 2) -> ClusterSpec:
    # 0 nodes at start; capacity for ``nodes`` nodes in zone a appears after 5 minutes.
    return dws_cluster(
        capacity=[{"at": 0, "zones": {ZA: 0, ZB: 0}}, {"at": "5m", "zones": {ZA: nodes}}]
    )


def test_s1_dws_job_is_admitted_only_once_provisioned_runs_and_its_node_goes() -> None:
    h = run(s1_cluster(), docs("queues.yaml", "job.yaml"))
    trail = for_workload(h, "sample-job")
    assert trail == [
        "workload.submitted",
        "admission.quota_reserved",
        "provisioning.accepted",
        "provisioning.waiting",
        "provisioning.nodes_creating",
        "provisioning.provisioned",
        "admission.admitted",
        "node.pod_started",
        "node.pod_succeeded",
        "admission.finished",
        "provisioning.nodes_deleted",
    ]
    ((_, reserved),) = of(h, qev.QuotaReserved)
    assert reserved.provisioning == qev.ProvisioningAsk(
        check="dws-prov",
        provisioning_class="queued-provisioning.gke.io",
        parameters={"maxRunDurationSeconds": "600"},  # the job annotation
    )
    ((_, accepted),) = of(h, pev.ProvisioningAccepted)
    assert (accepted.provisioning_class, accepted.max_run_seconds) == (
        "queued-provisioning.gke.io",
        600.0,
    )
    ((_, waiting),) = of(h, pev.ProvisioningWaiting)
    assert (waiting.reason, waiting.message) == (
        "NotProvisioned",
        "waiting for capacity: no single zone has room for 1 x dws-pool",
    )
    # Capacity at 300 s, boot 60 s: Provisioned and admitted at 360 s, then 120 s of work.
    assert at(h, pev.NodesCreating) == [300.0]
    assert at(h, pev.ProvisioningProvisioned) == [360.0]
    ((admitted_env, admitted),) = of(h, qev.WorkloadAdmitted)
    assert admitted_env.occurred_at == 360.0
    assert admitted.message == (
        "Admitted by ClusterQueue dws-cluster-queue; AdmissionCheck dws-prov: Ready"
    )
    ((fenv, finished),) = of(h, qev.WorkloadFinished)
    assert (fenv.occurred_at, finished.outcome) == (480.0, "Succeeded")
    ((denv, deleted),) = of(h, pev.NodesDeleted)
    assert (denv.occurred_at, deleted.reason) == (480.0, "Released")
    assert provisioner(h).in_use == {("dws-pool", ZA): 0}
    # It finished before maxRunDurationSeconds (600 s after Provisioned): nothing revoked.
    assert of(h, pev.ProvisioningCapacityRevoked) == []


def test_s1_job_running_past_max_run_duration_is_evicted_and_deactivated() -> None:
    """Kueue: CapacityRevoked deactivates the workload; the seed: nodes and pods preempted."""
    job = copy.deepcopy(docs("job.yaml")[0])
    job["spec"]["template"]["spec"]["containers"][0]["args"] = ["3600s"]
    h = run(s1_cluster(), [*docs("queues.yaml"), job])
    ((renv, _),) = of(h, pev.ProvisioningCapacityRevoked)
    assert renv.occurred_at == 360.0 + 600.0
    ((eenv, evicted),) = of(h, qev.WorkloadEvicted)
    assert (eenv.occurred_at, evicted.reason, evicted.deactivate) == (
        960.0,
        "CapacityRevoked",
        True,
    )
    assert len(of(h, nev.PodStopped)) == 1 and of(h, nev.PodSucceeded) == []
    ((_, rejected),) = of(h, qev.WorkloadRejected)
    assert rejected.reason == "Deactivated"
    assert queue(h).status_of("sample-job") == "Rejected"
    assert of(h, qev.QuotaReserved)[1:] == []  # never requeued
    assert provisioner(h).in_use == {("dws-pool", ZA): 0}


# -- S2: a standalone ProvisioningRequest ------------------------------------------------


def s2_cluster(**kw: Any) -> ClusterSpec:
    """Zone a has 3 free GPU nodes, zone b none; zone b gets 4 after 30 minutes."""
    return dws_cluster(
        capacity=[{"at": 0, "zones": {ZA: 3, ZB: 0}}, {"at": "30m", "zones": {ZB: 4}}], **kw
    )


def test_s2_request_waits_for_one_zone_then_all_four_nodes_come_up_together() -> None:
    h = run(s2_cluster(), docs("provisioning-request.yaml"), until=2000)
    ((_, accepted),) = of(h, pev.ProvisioningAccepted, RID)
    assert accepted.workload_id == "" and accepted.pod_sets[0].nodes == 4
    ((wenv, waiting),) = of(h, pev.ProvisioningWaiting, RID)
    assert (wenv.occurred_at, waiting.reason) == (0.0, "NotProvisioned")
    # Never 3 in a and 1 in b: one NodesCreating, all in zone b, after zone b has room.
    ((cenv, creating),) = of(h, pev.NodesCreating, RID)
    assert cenv.occurred_at == 1800.0
    assert {n.zone for n in creating.nodes} == {ZB} and len(creating.nodes) == 4
    ((penv, provisioned),) = of(h, pev.ProvisioningProvisioned, RID)
    assert (penv.occurred_at, provisioned.zone) == (1860.0, ZB)
    assert sorted(provisioned.assignments) == [f"pi-template-{i}" for i in range(4)]
    assert queue(h).requests[RID].status == "Provisioned"


def test_s2q_regional_gpu_quota_keeps_it_waiting_and_names_the_quota() -> None:
    h = run(s2_cluster(quota=2), docs("provisioning-request.yaml"), until=7200)
    ((_, waiting),) = of(h, pev.ProvisioningWaiting, RID)
    assert waiting.reason == "QuotaExceeded"
    assert waiting.message == "Quota 'NVIDIA_L4_GPUS' exceeded. Limit: 2.0 in region us-central1."
    assert of(h, pev.NodesCreating) == [] and of(h, pev.ProvisioningFailed) == []
    assert provisioner(h).requests[RID].status == "Accepted"


def test_s2x_nodes_nobody_uses_are_removed_ten_minutes_after_provisioned() -> None:
    h = run(s2_cluster(), docs("provisioning-request.yaml"))
    ((penv, _),) = of(h, pev.ProvisioningProvisioned, RID)
    ((xenv, expired),) = of(h, pev.ProvisioningBookingExpired, RID)
    assert xenv.occurred_at == penv.occurred_at + 600.0
    assert "within 600s" in expired.message
    ((denv, deleted),) = of(h, pev.NodesDeleted, RID)
    assert (denv.occurred_at, deleted.reason, len(deleted.nodes)) == (
        penv.occurred_at + 600.0,
        "BookingExpired",
        4,
    )
    # Never used, they go with their deletion (no node.removed of theirs: ``gone``).
    agent = next(r for r in h.runners if r.decider.name == "node-agent").state
    assert of(h, nev.NodeRemoved) == [] and sorted(agent.gone) == sorted(deleted.nodes)
    assert provisioner(h).in_use == {("dws-pool", ZB): 0}


def test_s2c_request_deleted_while_accepted_provisions_nothing() -> None:
    h = run(s2_cluster(), docs("provisioning-request.yaml"), deletions=[(600.0, RID)])
    ((cenv, cancelled),) = of(h, pev.ProvisioningCancelled, RID)
    assert cenv.occurred_at == 600.0
    assert "node creation stopped" in cancelled.message
    # Zone b's capacity arrives at 30 minutes: nothing is created for a deleted request.
    assert of(h, pev.NodesCreating) == [] and of(h, pev.ProvisioningProvisioned) == []
    assert provisioner(h).requests[RID].status == "Cancelled"
    assert queue(h).requests[RID].status == "Cancelled"
    assert provisioner(h).in_use == {}


def test_s2c_deleted_while_nodes_boot_they_appear_and_go_when_the_booking_expires() -> None:
    h = run(s2_cluster(), docs("provisioning-request.yaml"), deletions=[(1830.0, RID)])
    ((cenv, _),) = of(h, pev.ProvisioningCancelled, RID)
    assert cenv.occurred_at == 1830.0
    assert of(h, pev.ProvisioningProvisioned) == []
    ((denv, deleted),) = of(h, pev.NodesDeleted, RID)
    assert (denv.occurred_at, deleted.reason) == (1860.0 + 600.0, "BookingExpired")
    assert provisioner(h).requests[RID].status == "Cancelled"


CONSUMER = """
apiVersion: batch/v1
kind: Job
metadata:
  name: pi
  namespace: default
spec:
  parallelism: 4
  completions: 4
  template:
    metadata:
      annotations:
        cluster-autoscaler.kubernetes.io/consume-provisioning-request: pi-request
        cluster-autoscaler.kubernetes.io/provisioning-class-name: "queued-provisioning.gke.io"
    spec:
      tolerations:
      - {key: "nvidia.com/gpu", operator: "Exists", effect: "NoSchedule"}
      containers:
      - name: pi
        image: perl
        command: ["/bin/sh", "-c", "sleep 2h"]
        resources:
          requests: {cpu: 700m, nvidia.com/gpu: 1}
      restartPolicy: Never
"""


def test_s2r_at_max_run_duration_nodes_and_pods_are_preempted_and_the_workload_evicted() -> None:
    h = run(s2_cluster(), [*docs("provisioning-request.yaml"), yaml.safe_load(CONSUMER)])
    ((penv, _),) = of(h, pev.ProvisioningProvisioned, RID)
    # The consumer waited for the request, then bound to its 4 nodes at once.
    ((aenv, admitted),) = of(h, qev.WorkloadAdmitted)
    assert aenv.occurred_at == penv.occurred_at
    assert (admitted.request_id, admitted.cluster_queue) == (RID, "")
    assert sorted(set(admitted.placements.values())) == sorted(
        n.name for _, ev in of(h, pev.NodesCreating, RID) for n in ev.nodes
    )
    ((renv, revoked),) = of(h, pev.ProvisioningCapacityRevoked, RID)
    assert renv.occurred_at == penv.occurred_at + 3600.0
    assert "maxRunDurationSeconds 3600" in revoked.message
    ((denv, deleted),) = of(h, pev.NodesDeleted, RID)
    assert (denv.occurred_at, deleted.reason) == (renv.occurred_at, "CapacityRevoked")
    assert len(of(h, nev.PodStopped)) == 4
    ((eenv, evicted),) = of(h, qev.WorkloadEvicted)
    assert (eenv.occurred_at, evicted.reason) == (renv.occurred_at, "CapacityRevoked")
    assert of(h, nev.PodSucceeded) == []
    assert queue(h).status_of("pi") == "Rejected"
    assert of(h, pev.ProvisioningBookingExpired) == []  # consumed within the window


def test_a_consumer_without_its_request_stays_unschedulable() -> None:
    h = run(s2_cluster(), [yaml.safe_load(CONSUMER)], until=3600)
    ((_, pending),) = of(h, qev.WorkloadPending)
    assert pending.reason == "ProvisioningRequestNotFound"
    assert pending.message.startswith("ProvisioningRequest default/pi-request doesn't exist")
    assert queue(h).status_of("pi") == "Pending"


def test_standalone_nodes_are_removed_once_unneeded_after_their_pods_finish() -> None:
    short = yaml.safe_load(CONSUMER.replace("sleep 2h", "sleep 10m"))
    h = run(s2_cluster(), [*docs("provisioning-request.yaml"), short])
    ((penv, _),) = of(h, pev.ProvisioningProvisioned, RID)
    ((fenv, finished),) = of(h, qev.WorkloadFinished)
    assert (fenv.occurred_at, finished.outcome) == (penv.occurred_at + 600.0, "Succeeded")
    ((denv, deleted),) = of(h, pev.NodesDeleted, RID)
    assert (denv.occurred_at, deleted.reason) == (fenv.occurred_at + 600.0, "ScaleDown")
    assert of(h, pev.ProvisioningBookingExpired) == []


# -- Kueue's admission-check mapping -------------------------------------------------------


def kueue_docs(retry: dict[str, Any] | None = None, **config: Any) -> list[Any]:
    raw = docs("queues.yaml", "job.yaml")
    prc = next(d for d in raw if d["kind"] == "ProvisioningRequestConfig")
    if retry is not None:
        prc["spec"]["retryStrategy"] = retry
    prc["spec"].update(config)
    return raw


def test_failed_requests_are_retried_with_backoff_then_the_workload_is_rejected() -> None:
    cluster = dws_cluster(
        capacity=[{"at": 0, "zones": {ZA: 2}}],
        failures=[{"at": 0, "reason": "OutOfResources", "message": "zone out of L4 GPUs"}],
    )
    h = run(cluster, kueue_docs({"backoffLimitCount": 2, "backoffBaseSeconds": 10}))
    failed = [(env.occurred_at, ev.request_id) for env, ev in of(h, pev.ProvisioningFailed)]
    # Attempt n+1 is reserved after base * 2^(n-1): 10 s, then 20 s.
    assert failed == [(0.0, "sample-job.1"), (10.0, "sample-job.2"), (30.0, "sample-job.3")]
    evictions = [
        (env.occurred_at, ev.reason, ev.requeue_after_seconds)
        for env, ev in of(h, qev.WorkloadEvicted)
    ]
    assert evictions == [(0.0, "AdmissionCheck", 10.0), (10.0, "AdmissionCheck", 20.0)]
    ((_, rejected),) = of(h, qev.WorkloadRejected)
    assert rejected.reason == "AdmissionCheckRejected"
    assert rejected.message == (
        "AdmissionCheck dws-prov rejected the workload (after 2 retries): ProvisioningRequest "
        "sample-job.3 Failed: OutOfResources: zone out of L4 GPUs"
    )
    # Quota is released between attempts.
    usage = queue(h).usage["dws-cluster-queue"]
    assert all(q == 0 for res in usage.values() for q in res.values())


def test_a_retry_succeeds_once_the_stockout_ends() -> None:
    cluster = dws_cluster(
        capacity=[{"at": 0, "zones": {ZA: 2}}],
        failures=[{"at": 0, "until": 50, "reason": "OutOfResources"}],
    )
    h = run(cluster, kueue_docs({"backoffBaseSeconds": 60}))
    assert [ev.request_id for _, ev in of(h, pev.ProvisioningFailed)] == ["sample-job.1"]
    ((_, finished),) = of(h, qev.WorkloadFinished)
    assert finished.outcome == "Succeeded"
    ((penv, provisioned),) = of(h, pev.ProvisioningProvisioned)
    assert (penv.occurred_at, provisioned.request_id) == (120.0, "sample-job.2")


def test_waiting_for_backoff_is_the_reason_while_it_waits() -> None:
    cluster = dws_cluster(capacity=[{"at": 0, "zones": {ZA: 2}}], failures=[{"at": 0}])
    h = run(cluster, kueue_docs({"backoffLimitCount": 1}), until=30)
    reasons = [ev.reason for _, ev in of(h, qev.WorkloadPending)]
    assert reasons == ["WaitingForBackoff"]
    assert queue(h).workloads["sample-job"].requeue_at == 60.0


def test_several_pod_sets_without_a_merge_policy_are_refused_without_retries() -> None:
    raw = kueue_docs()
    job = next(d for d in raw if d["kind"] == "Job")
    jobset = {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": "two", "labels": job["metadata"]["labels"]},
        "spec": {
            "replicatedJobs": [
                {"name": "driver", "template": {"spec": job["spec"]}},
                {"name": "workers", "replicas": 2, "template": {"spec": job["spec"]}},
            ]
        },
    }
    h = run(s1_cluster(), [d for d in raw if d["kind"] != "Job"] + [jobset])
    ((_, failed),) = of(h, pev.ProvisioningFailed)
    assert (failed.reason, failed.retryable) == ("InvalidRequest", False)
    assert failed.message.startswith(
        "queued-provisioning.gke.io supports a single podSet per request; this one has 2"
    )
    ((_, rejected),) = of(h, qev.WorkloadRejected)
    assert rejected.reason == "AdmissionCheckRejected"
    assert "no retry can succeed" in rejected.message
    # With podSetMergePolicy the identical pod sets make one request, and it runs.
    h = run(
        s1_cluster(nodes=3),
        [d for d in kueue_docs(podSetMergePolicy="IdenticalPodTemplates") if d["kind"] != "Job"]
        + [jobset],
    )
    assert of(h, pev.ProvisioningFailed) == []
    ((_, finished),) = of(h, qev.WorkloadFinished)
    assert finished.outcome == "Succeeded"


def test_a_workload_not_requesting_a_managed_resource_needs_no_provisioning_request() -> None:
    raw = kueue_docs(managedResources=["google.com/tpu"])
    h = run(s1_cluster(), raw)
    ((_, reserved),) = of(h, qev.QuotaReserved)
    assert reserved.provisioning is None
    ((_, accepted),) = of(h, pev.ProvisioningAccepted)
    assert (accepted.provisioning_class, accepted.max_run_seconds) == ("", None)


def test_a_cluster_queue_whose_admission_check_is_missing_admits_nothing() -> None:
    raw = [d for d in kueue_docs() if d["kind"] != "AdmissionCheck"]
    h = run(s1_cluster(), raw, until=600)
    ((_, pending),) = of(h, qev.WorkloadPending)
    assert (pending.reason, pending.message) == (
        "ClusterQueueInactive",
        "ClusterQueue dws-cluster-queue is inactive: AdmissionCheck dws-prov doesn't exist",
    )
    assert of(h, qev.QuotaReserved) == []


class QueueDownFrom(QueueDecider):
    """The queue service down between two times: it decides nothing, then catches up."""

    def __init__(self, start: float, end: float) -> None:
        super().__init__()
        self.start, self.end = start, end

    def decide(self, state: Any) -> list[Any]:
        return [] if self.start <= state.now < self.end else super().decide(state)

    def next_deadline(self, state: Any) -> float | None:
        if state.now < self.end:
            return self.end
        return super().next_deadline(state)


def test_booking_expired_before_admission_is_retried_and_ignored_after() -> None:
    """Provisioned at 360 s while the queue is down until 1200 s: the booking expires at
    960 s, before admission, so Kueue retries (a fresh request); the retry is admitted."""
    m = manifests.read(kueue_docs())
    deciders = [QueueDownFrom(300.0, 1200.0), ProvisionerDecider(), NodeAgentDecider()]
    h = build(
        manifests.merge(s1_cluster(), m),
        [(t, wl.name, wl) for t, wl in m.submissions()],
        deciders=deciders,
    )
    h.run()
    ((xenv, _),) = of(h, pev.ProvisioningBookingExpired, "sample-job.1")
    assert xenv.occurred_at == 960.0
    ((eenv, evicted),) = of(h, qev.WorkloadEvicted)
    assert (eenv.occurred_at, evicted.reason, evicted.requeue_after_seconds) == (
        1200.0,
        "AdmissionCheck",
        60.0,
    )
    assert "BookingExpired" in evicted.message
    ((aenv, admitted),) = of(h, qev.WorkloadAdmitted)
    assert (aenv.occurred_at, admitted.request_id) == (1260.0 + 60.0, "sample-job.2")
    ((_, finished),) = of(h, qev.WorkloadFinished)
    assert finished.outcome == "Succeeded"


def test_provisioner_figures_follow_the_requests() -> None:
    from muster.core.provisioning.figures import figures

    h = run(s2_cluster(quota=8, active_requests=3), docs("provisioning-request.yaml"), until=2000)
    fams = {f.name: f for f in figures(provisioner(h))}
    assert dict(fams["muster_provisioning_requests"].samples) == {
        (("status", "Pending"),): 0.0,
        (("status", "Provisioned"),): 1.0,
    }
    assert fams["muster_active_provisioning_requests"].samples == [((), 0.0)]
    assert fams["muster_active_provisioning_requests_limit"].samples == [((), 3.0)]
    assert dict(fams["muster_provisioned_nodes"].samples) == {
        (("node_pool", "dws-pool"), ("zone", ZB)): 4.0
    }
    assert dict(fams["muster_cloud_quota_usage"].samples) == {
        (("quota", "NVIDIA_L4_GPUS"), ("kind", "used")): 4.0,
        (("quota", "NVIDIA_L4_GPUS"), ("kind", "limit")): 8.0,
    }
    ((_, buckets, total),) = fams["muster_provisioning_wait_seconds"].histograms
    assert total == 1860.0  # Accepted at 0, Provisioned at 1860 s
    assert dict(buckets)["900"] == 0 and dict(buckets)["3600"] == 1
