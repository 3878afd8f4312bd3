"""The queue's Kueue-named metrics that move as workloads are admitted (kueue.md §1.15:
``kueue_admission_wait_time_seconds``, ``kueue_admitted_active_workloads``,
``kueue_cluster_queue_status``, ``kueue_admission_attempts_total``), under ``muster_``."""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, generate_latest

from muster.core.events import NewEvent
from muster.core.model import parse
from muster.core.nodes.decider import NodeAgentDecider
from muster.core.provisioning.decider import ProvisionerDecider
from muster.core.queueing import state as qs
from muster.core.queueing.decider import QueueDecider
from muster.core.queueing.figures import Family, figures
from muster.core.sim.harness import build
from muster.core.verify import verify_decisions
from muster.runtime.figures import FiguresCollector
from muster.runtime.metrics import ServiceMetrics
from tests.unit.harness_inputs import gpu_job, gpu_node_cluster

CQ = (("cluster_queue", "cq"),)


class RecordingQueue(QueueDecider):
    """The queue decider, noting what each decide call was as an admission attempt (the
    service's loop does the same for ``muster_admission_attempts_total``)."""

    def __init__(self) -> None:
        super().__init__()
        self.attempts: list[tuple[float, str]] = []

    def decide(self, state: qs.QueueState) -> list[NewEvent]:
        news = super().decide(state)
        result = self.admission_attempt(state, news)
        if result is not None:
            self.attempts.append((state.now, result))
        return news


def _two_jobs_one_slot(**queue: Any) -> tuple[Any, RecordingQueue]:
    """One node of 2 GPUs and a ClusterQueue of 2: ``a`` (2 GPUs, 10 s) runs at once,
    ``b`` (2 GPUs, 10 s) waits for it until t=10."""
    queue_decider = RecordingQueue()
    h = build(
        parse.cluster(gpu_node_cluster("one", nodes=1, gpus=2, nominal=2, **queue)),
        [gpu_job("a", 0, 1, 2, 10), gpu_job("b", 0, 1, 2, 10)],
        deciders=[queue_decider, ProvisionerDecider(), NodeAgentDecider()],
    )
    return h, queue_decider


def _families(state: qs.QueueState) -> dict[str, Family]:
    return {f.name: f for f in figures(state)}


def _histogram(fam: Family, labels: tuple[tuple[str, str], ...]) -> tuple[int, float]:
    """(observations, sum) of one histogram series."""
    for found, buckets, total in fam.histograms:
        if found == labels:
            return buckets[-1][1], total
    return 0, 0.0


def test_admission_wait_and_admitted_active_move_as_workloads_are_admitted() -> None:
    """kueue.md §1.15: kueue_admission_wait_time_seconds (created or requeued -> admitted)
    and kueue_admitted_active_workloads (admitted, not finished), per ClusterQueue."""
    h, _ = _two_jobs_one_slot()
    h.run(until=5)
    fams = _families(h.runners[0].state)
    assert _histogram(fams["muster_admission_wait_time_seconds"], CQ) == (1, 0.0)
    assert dict(fams["muster_admitted_active_workloads"].samples) == {CQ: 1.0}

    h.run(until=15)  # a finished at 10, b admitted then after waiting 10 s
    fams = _families(h.runners[0].state)
    count, total = _histogram(fams["muster_admission_wait_time_seconds"], CQ)
    assert (count, total) == (2, 10.0)
    buckets = dict(next(b for lb, b, _ in fams["muster_admission_wait_time_seconds"].histograms))
    assert (buckets["1.0"], buckets["15.0"]) == (1, 2)  # cumulative: 0 s and 10 s
    assert dict(fams["muster_admitted_active_workloads"].samples) == {CQ: 1.0}

    h.run()
    fams = _families(h.runners[0].state)
    assert dict(fams["muster_admitted_active_workloads"].samples) == {CQ: 0.0}
    # Folded from the log: a replay decides the same (and counts the same).
    _, mismatches = verify_decisions(h.log.envelopes, QueueDecider())
    assert mismatches == []


def test_admission_attempts_count_cycles_that_judged_pending_workloads() -> None:
    """kueue.md §1.15, kueue_admission_attempts_total{result}: success when the cycle
    admitted at least one workload, inadmissible when it admitted none."""
    h, queue = _two_jobs_one_slot()
    h.run()
    results = [r for _, r in queue.attempts]
    # t=0: a reserved (success); b judged and told why it waits (inadmissible, unless
    # the same cycle did both); t=10: b reserved (success).
    assert results.count("success") == 2
    assert set(results) <= {"success", "inadmissible"}
    assert [t for t, r in queue.attempts if r == "success"] == [0.0, 10.0]
    assert "inadmissible" in results


def test_admission_attempts_reach_the_service_metrics() -> None:
    """The loop's counter, labelled by service and result, as Prometheus scrapes it."""
    metrics = ServiceMetrics()
    metrics.admission_attempts.labels("queue", "success").inc()
    text = generate_latest(metrics.registry).decode()
    assert 'muster_admission_attempts_total{result="success",service="queue"} 1.0' in text


def test_cluster_queue_status_is_pending_while_stopped() -> None:
    """kueue.md §1.15, kueue_cluster_queue_status{status}: 1 for the current status of
    pending / active / terminating; a stopped ClusterQueue (stopPolicy Hold) is pending."""
    running, _ = _two_jobs_one_slot()
    running.run(until=1)
    status = dict(_families(running.runners[0].state)["muster_cluster_queue_status"].samples)
    assert status == {
        (*CQ, ("status", "pending")): 0.0,
        (*CQ, ("status", "active")): 1.0,
        (*CQ, ("status", "terminating")): 0.0,
    }
    stopped, _ = _two_jobs_one_slot(stopPolicy="Hold")
    stopped.run(until=1)
    fams = _families(stopped.runners[0].state)
    status = dict(fams["muster_cluster_queue_status"].samples)
    assert status[(*CQ, ("status", "pending"))] == 1.0
    assert status[(*CQ, ("status", "active"))] == 0.0
    assert dict(fams["muster_admitted_active_workloads"].samples) == {CQ: 0.0}


def test_cluster_queue_status_is_pending_with_a_missing_admission_check() -> None:
    """Kueue marks a ClusterQueue naming an AdmissionCheck that does not exist inactive."""
    h, _ = _two_jobs_one_slot(admissionChecks=["nowhere"])
    h.run(until=1)
    status = dict(_families(h.runners[0].state)["muster_cluster_queue_status"].samples)
    assert status[(*CQ, ("status", "pending"))] == 1.0


def test_the_collector_exposes_the_new_families() -> None:
    """Scraped through FiguresCollector: the names Prometheus sees (a counter loses
    nothing, a histogram gets _bucket/_count/_sum)."""
    h, _ = _two_jobs_one_slot()
    h.run(until=5)
    registry = CollectorRegistry()
    registry.register(FiguresCollector(lambda: figures(h.runners[0].state)))
    text = generate_latest(registry).decode()
    assert 'muster_admission_wait_time_seconds_count{cluster_queue="cq"} 1.0' in text
    assert 'muster_admitted_active_workloads{cluster_queue="cq"} 1.0' in text
    assert 'muster_cluster_queue_status{cluster_queue="cq",status="active"} 1.0' in text
