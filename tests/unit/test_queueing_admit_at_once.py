"""Reserved and admitted in one decision: kueue.md §1.8 ("Admitted=True when all
AdmissionChecks are Ready") and §2 scheduler step 5 ("patch QuotaReserved (and Admitted if
no ACs)"): a workload placed on existing nodes with no admission check Pending gets its
QuotaReserved and its WorkloadAdmitted in the same batch; one that waits for a check or
for its nodes is still admitted later, by settle. Logs where the admission came one step
after the reservation (the queue before this change) still re-derive."""

from __future__ import annotations

import msgspec

from muster.core.events import Envelope
from muster.core.events import queue as qev
from muster.core.model import parse
from muster.core.sim.harness import Harness, build
from muster.core.verify import verify_decisions
from tests.unit.harness_inputs import gpu_job, gpu_node_cluster, run_verified
from tests.unit.test_scenarios_admission_checks import APPROVAL, cluster, run, says


def _queue_decider(h: Harness) -> object:
    return next(r for r in h.runners if r.decider.name == "queue").decider


def _batch_of(h: Harness, env: Envelope) -> list[Envelope]:
    """The queue's batch ``env`` was appended in (same causation, consecutive positions)."""
    log = h.log.envelopes
    i = log.index(env)
    start, end = i, i
    while start > 0 and log[start - 1].causation_id == env.causation_id:
        start -= 1
    while end + 1 < len(log) and log[end + 1].causation_id == env.causation_id:
        end += 1
    return [e for e in log[start : end + 1] if e.producer == "queue"]


def test_placed_without_checks_is_reserved_and_admitted_in_one_batch() -> None:
    """kueue.md §2 step 5: QuotaReserved and Admitted in one update when no check waits."""
    h = run_verified(
        gpu_node_cluster("once", nodes=2, gpus=4, nominal=8), [gpu_job("a", 0, 2, 2, 50)]
    )
    ((renv,),) = [[e for e in h.log.envelopes if isinstance(e.event, qev.QuotaReserved)]]
    ((aenv,),) = [[e for e in h.log.envelopes if isinstance(e.event, qev.WorkloadAdmitted)]]
    assert aenv.causation_id == renv.causation_id and aenv.position == renv.position + 1
    assert aenv.occurred_at == renv.occurred_at == 0.0
    reserved, admitted = renv.event, aenv.event
    assert isinstance(reserved, qev.QuotaReserved) and reserved.placement is not None
    assert isinstance(admitted, qev.WorkloadAdmitted)
    assert admitted == qev.WorkloadAdmitted(
        workload_id="a",
        cluster_queue="cq",
        attempt=1,
        placements=dict(reserved.placement.nodes),
        message="Admitted by ClusterQueue cq",
        request_id="",
        devices=dict(reserved.placement.devices),
    )


def test_one_cycle_reserves_all_then_admits_all_in_submission_order() -> None:
    """The admissions follow the cycle's reservations in submission order, as settle's
    next look would have made them."""
    jobs = [gpu_job(name, 0, 1, 1, 50) for name in ("c", "a", "b")]
    h = run_verified(gpu_node_cluster("order", nodes=1, gpus=4, nominal=4), jobs)
    first = next(e for e in h.log.envelopes if isinstance(e.event, qev.QuotaReserved))
    batch = [(e.type, getattr(e.event, "workload_id", "")) for e in _batch_of(h, first)]
    assert batch == [
        (qev.QuotaReserved.TYPE, "c"),
        (qev.QuotaReserved.TYPE, "a"),
        (qev.QuotaReserved.TYPE, "b"),
        (qev.WorkloadAdmitted.TYPE, "c"),
        (qev.WorkloadAdmitted.TYPE, "a"),
        (qev.WorkloadAdmitted.TYPE, "b"),
    ]


def test_a_pending_check_still_admits_later() -> None:
    """kueue.md §1.8: with an external check Pending (Ready at 30 s) and its nodes made for
    it (Ready at 60 s) the workload waits in QuotaReserved; settle admits it then."""
    h = run(cluster([APPROVAL]), [says(30.0, "Ready")], gpus=0)
    ((renv,),) = [[e for e in h.log.envelopes if isinstance(e.event, qev.QuotaReserved)]]
    ((aenv,),) = [[e for e in h.log.envelopes if isinstance(e.event, qev.WorkloadAdmitted)]]
    assert renv.occurred_at == 0.0 and aenv.occurred_at == 60.0
    assert aenv.causation_id != renv.causation_id


def _as_split(log: list[Envelope]) -> list[Envelope]:
    """The log as the queue wrote it before: each admission at once moved to the next
    batch, caused by the reservation batch's last event (what the queue had folded)."""
    out = list(log)
    for i, env in enumerate(out):
        if env.producer != "queue" or not isinstance(env.event, qev.WorkloadAdmitted):
            continue
        before = out[i - 1]
        if (
            before.producer == "queue"
            and before.causation_id == env.causation_id
            and isinstance(before.event, qev.QuotaReserved)
        ):
            # the first admission of the tail: it and the rest follow the reservations
            j = i
            while j < len(out) and isinstance(out[j].event, qev.WorkloadAdmitted):
                out[j] = msgspec.structs.replace(out[j], causation_id=before.event_id)
                j += 1
    return out


def test_a_log_with_the_admission_one_step_later_still_verifies() -> None:
    """Logs written by the queue before this change (the admission in the batch after its
    reservation) re-derive at 0 mismatches; a log that lost an admission does not."""
    jobs = [gpu_job(f"j{i}", 10 * i, 1 + i % 2, 1, 30) for i in range(6)]
    h = build(parse.cluster(gpu_node_cluster("split", nodes=2, gpus=4, nominal=8)), jobs)
    h.run()
    decider = _queue_decider(h)
    old = _as_split(h.log.envelopes)
    assert old != h.log.envelopes
    checked, mismatches = verify_decisions(old, decider)  # type: ignore[arg-type]
    assert checked > 0 and mismatches == [], mismatches[:1]
    lost = [
        e
        for e in old
        if not (isinstance(e.event, qev.WorkloadAdmitted) and e.event.workload_id == "j0")
    ]
    _, mismatches = verify_decisions(lost, decider)  # type: ignore[arg-type]
    assert mismatches
