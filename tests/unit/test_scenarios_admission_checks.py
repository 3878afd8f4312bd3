"""Admission checks as a pipeline (Kueue's two-phase admission), in virtual time: a
ClusterQueue with muster's ProvisioningRequest check and an external check whose controller
reports through the API. Every run's decisions are re-derived from its log (``verify``).

References: shared/reference/kueue.md §1.8 (admission checks), §1.9 (ProvisioningRequest
check), peers.md §4.4 (how Kueue consumes a ProvisioningRequest).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TypeVar

import pytest

from muster.core import inputs
from muster.core.access.tokens import ANONYMOUS_ADMIN, Principal
from muster.core.events import Envelope, Event
from muster.core.events import node as nev
from muster.core.events import provisioning as pev
from muster.core.events import queue as qev
from muster.core.events import workload as wev
from muster.core.explain import ended_entry
from muster.core.intake import admission_checks as check_words
from muster.core.intake.refusal import Refusal
from muster.core.model import manifests, parse
from muster.core.model.fields import InvalidInput
from muster.core.model.queues import PodSetUpdate
from muster.core.provisioning import names
from muster.core.queueing import state as qs
from muster.core.sim.harness import Harness, build
from muster.core.verify import verify_decisions
from muster.core.views.workloads import admission_checks
from tests.unit.harness_inputs import envelope

GPU = "nvidia.com/gpu"
ZA = "us-central1-a"
APPROVAL = "approval"  # the external check
PROV = "dws-prov"  # muster's ProvisioningRequest check
E = TypeVar("E", bound=Event)


def cluster(
    checks: list[Any] | None = None, *, strategy: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    """A DWS pool with room for 2 one-GPU nodes in one zone, booting in 60 s; booking 600 s.
    ClusterQueue ``cq`` runs ``checks`` (default: the ProvisioningRequest check, then the
    external one)."""
    cq: dict[str, Any] = {
        "name": "cq",
        "resourceGroups": [
            {
                "coveredResources": ["cpu", GPU],
                "flavors": [
                    {
                        "name": "f",
                        "resources": [
                            {"name": "cpu", "nominalQuota": 100},
                            {"name": GPU, "nominalQuota": 8},
                        ],
                    }
                ],
            }
        ],
    }
    if strategy is not None:
        cq["admissionChecksStrategy"] = {"admissionChecks": strategy}
    else:
        cq["admissionChecks"] = [PROV, APPROVAL] if checks is None else checks
    return {
        "name": "c",
        "region": "us-central1",
        "zones": [ZA],
        "nodePools": [
            {
                "name": "dws-pool",
                "machineType": "g2-standard-8",
                "allocatable": {"cpu": 8, GPU: 1},
                "provisioningDelaySeconds": 60,
                "capacity": [{"at": 0, "zones": {ZA: 4}}],
            }
        ],
        "resourceFlavors": [{"name": "f"}],
        "clusterQueues": [cq],
        "localQueues": [{"namespace": "team", "name": "lq", "clusterQueue": "cq"}],
        "admissionChecks": [
            {"name": PROV, "parameters": {"name": "dws-config"}},
            {"name": APPROVAL, "controllerName": "example.com/approval"},
            {"name": "other-prov", "parameters": {"name": "dws-config"}},
        ],
        "provisioningRequestConfigs": [
            {
                "name": "dws-config",
                "provisioningClassName": "queued-provisioning.gke.io",
                "managedResources": [GPU],
            }
        ],
    }


def job(gpus: int = 1, seconds: float = 100.0) -> Any:
    requests = {GPU: gpus} if gpus else {"cpu": 1}
    return parse.workload(
        {
            "name": "train",
            "namespace": "team",
            "queueName": "lq",
            "podSets": [{"name": "workers", "count": 1, "requests": requests}],
            "runtime": {"durationSeconds": seconds},
        }
    )


def says(
    at: float, state: str, *, attempt: int = 0, message: str = "", **kw: Any
) -> tuple[float, wev.AdmissionCheckUpdated]:
    """What the external check's controller reports for ``train`` at ``at``."""
    event = wev.AdmissionCheckUpdated(
        workload_id="train",
        check=APPROVAL,
        state=state,  # type: ignore[arg-type]
        message=message or f"{state} by the approver",
        attempt=attempt,
        **kw,
    )
    return at, event


def run(
    doc: dict[str, Any],
    words: Sequence[tuple[float, wev.AdmissionCheckUpdated]] = (),
    *,
    gpus: int = 1,
    until: float | None = 5000.0,
) -> Harness:
    h = build(parse.cluster(doc), [(0.0, "train", job(gpus))])
    for at, event in words:
        h.schedule(inputs.admission_check_updated(event, at), producer=inputs.INTAKE)
    h.run(until=until)
    for runner in h.runners:
        _, mismatches = verify_decisions(h.log.envelopes, runner.decider)
        assert mismatches == [], mismatches[:1]
    return h


def of(h: Harness, cls: type[E]) -> list[tuple[Envelope, E]]:
    return [(env, env.event) for env in h.log.envelopes if isinstance(env.event, cls)]


def queue_entry(h: Harness) -> Any:
    """The workload's entry; once it ended, as explain rebuilds it from its own events
    (the queue's state keeps only how it ended)."""
    state = next(r for r in h.runners if r.decider.name == "queue").state
    if "train" in state.workloads:
        return state.workloads["train"]
    own = [env for env in h.log.envelopes if env.correlation_id == "train"]
    return ended_entry(state, "train", own)


# -- all Ready -------------------------------------------------------------------------


def test_admitted_only_once_quota_is_reserved_and_every_check_is_ready() -> None:
    """kueue.md §1.8: Admitted=True when all checks are Ready. The approver says Ready at
    10 s; the request is Provisioned at 60 s, and only then is the workload admitted."""
    h = run(cluster(), [says(10.0, "Ready")])
    ((renv, reserved),) = of(h, qev.QuotaReserved)
    assert (renv.occurred_at, reserved.checks, dict(reserved.checks_ready)) == (
        0.0,
        (PROV, APPROVAL),
        {},
    )
    ((aenv, admitted),) = of(h, qev.WorkloadAdmitted)
    assert aenv.occurred_at == 60.0
    assert (
        admitted.message == "Admitted by ClusterQueue cq; AdmissionChecks approval, dws-prov: Ready"
    )
    ((_, finished),) = of(h, qev.WorkloadFinished)
    assert finished.outcome == "Succeeded"


def test_provisioned_first_waits_for_the_external_check() -> None:
    """Provisioned at 60 s, the approver's Ready at 300 s: admitted at 300 s, within the
    booking window, on the same request (attempt 1)."""
    h = run(cluster(), [says(300.0, "Ready")])
    ((aenv, admitted),) = of(h, qev.WorkloadAdmitted)
    assert (aenv.occurred_at, admitted.attempt, admitted.request_id) == (300.0, 1, "train.1")
    assert of(h, pev.ProvisioningBookingExpired) == []


# -- BookingExpired before admission ----------------------------------------------------


def test_booking_expires_while_another_check_is_pending_then_a_new_attempt() -> None:
    """peers.md §4.4 / kueue.md §1.9: BookingExpired before admission is retried like
    Failed. Provisioned at 60 s, the approver still Pending at 660 s: the booking expires,
    the check goes Retry (evicted, requeued after 60 s) and attempt 2 makes a new request,
    named by Kueue's rule ``<workload>-<check>-2``; the approver's Ready for attempt 2 admits
    it once that request is Provisioned."""
    h = run(cluster(), [says(700.0, "Ready", attempt=1), says(800.0, "Ready", attempt=2)])
    ((xenv, expired),) = of(h, pev.ProvisioningBookingExpired)
    assert (xenv.occurred_at, expired.request_id) == (660.0, "train.1")
    ((eenv, evicted),) = of(h, qev.WorkloadEvicted)
    assert (eenv.occurred_at, evicted.reason, evicted.requeue_after_seconds) == (
        660.0,
        "AdmissionCheck",
        60.0,
    )
    assert "BookingExpired" in evicted.message and f"AdmissionCheck {PROV}" in evicted.message
    reservations = of(h, qev.QuotaReserved)
    assert [(env.occurred_at, r.attempt) for env, r in reservations] == [(0.0, 1), (720.0, 2)]
    # The word for attempt 1 came after it ended: ignored. Attempt 2: Provisioned at 780 s,
    # the approver's Ready at 800 s.
    ((aenv, admitted),) = of(h, qev.WorkloadAdmitted)
    assert (aenv.occurred_at, admitted.attempt, admitted.request_id) == (800.0, 2, "train.2")
    assert names.request_name("train", PROV, admitted.attempt) == "train-dws-prov-2"
    ready = admission_checks(queue_entry(h))
    assert {c["name"]: c["state"] for c in ready} == {APPROVAL: "Ready", PROV: "Ready"}
    (prov,) = [c for c in ready if c["name"] == PROV]
    assert prov["podSetUpdates"] == [
        {
            "name": "workers",
            "annotations": {
                names.CONSUME_ANNOTATION: "train-dws-prov-2",
                names.CLASS_ANNOTATION: "queued-provisioning.gke.io",
            },
        }
    ]


def test_booking_expired_after_admission_is_ignored() -> None:
    """peers.md §4.4: "if the workload is Admitted we don't want to retry on BookingExpired"
    (and binding its pods consumes the booking, so the simulated cloud does not expire it)."""
    h = run(cluster(), [says(10.0, "Ready")])
    assert of(h, pev.ProvisioningBookingExpired) == []
    assert of(h, qev.WorkloadEvicted) == []


# -- external Retry and Rejected --------------------------------------------------------


def test_external_retry_releases_quota_and_requeues_after_its_requeue_after_seconds() -> None:
    """kueue.md §1.8: Retry releases the quota and requeues; the check's requeueAfterSeconds
    (KEP-3258) sets the wait. Attempt 2's checks start Pending again."""
    h = run(
        cluster(),
        [says(30.0, "Retry", requeue_after_seconds=100.0), says(140.0, "Ready", attempt=2)],
    )
    ((eenv, evicted),) = of(h, qev.WorkloadEvicted)
    assert (eenv.occurred_at, evicted.reason, evicted.requeue_after_seconds) == (
        30.0,
        "AdmissionCheck",
        100.0,
    )
    assert evicted.message.startswith(f"AdmissionCheck {APPROVAL}: Retry: Retry by the approver")
    assert [pev.request_id("train", 1)] == [
        c.request_id for _, c in of(h, pev.ProvisioningCancelled)
    ]  # the first request is cancelled with the quota
    assert [(e.occurred_at, r.attempt) for e, r in of(h, qev.QuotaReserved)] == [
        (0.0, 1),
        (130.0, 2),
    ]
    ((aenv, admitted),) = of(h, qev.WorkloadAdmitted)
    assert (aenv.occurred_at, admitted.attempt) == (190.0, 2)


def test_external_retry_without_requeue_after_uses_the_default_backoff() -> None:
    """No requeueAfterSeconds: muster waits the default retry backoff (60 s, doubling), so
    a controller that keeps answering Retry cannot spin the queue."""
    h = run(cluster(), [says(30.0, "Retry"), says(100.0, "Retry", attempt=2)], until=400.0)
    evictions = [(e.occurred_at, ev.requeue_after_seconds) for e, ev in of(h, qev.WorkloadEvicted)]
    assert evictions == [(30.0, 60.0), (100.0, 120.0)]


def test_external_rejected_ends_the_workload() -> None:
    """kueue.md §1.8: Rejected deactivates the workload and releases its quota (muster
    rejects it: a deactivated workload is never requeued)."""
    h = run(cluster(), [says(30.0, "Rejected", message="budget exhausted")])
    ((renv, rejected),) = of(h, qev.WorkloadRejected)
    assert (renv.occurred_at, rejected.reason) == (30.0, "AdmissionCheckRejected")
    assert rejected.message == f"AdmissionCheck {APPROVAL} rejected the workload: budget exhausted"
    assert of(h, qev.WorkloadAdmitted) == []
    assert queue_entry(h).status == "Rejected"


def test_retry_after_admission_evicts_the_running_workload() -> None:
    """kueue.md §1.8: Retry releases quota, evicting the workload if it was admitted."""
    h = run(
        cluster(),
        [says(10.0, "Ready"), says(80.0, "Retry", requeue_after_seconds=0.0)],
        until=200.0,
    )
    ((aenv, _), *_) = of(h, qev.WorkloadAdmitted)
    assert aenv.occurred_at == 60.0
    ((eenv, evicted),) = of(h, qev.WorkloadEvicted)
    assert (eenv.occurred_at, evicted.reason) == (80.0, "AdmissionCheck")
    checks = admission_checks(queue_entry(h))
    # Attempt 2 holds quota again and waits for its checks, all Pending afresh.
    assert queue_entry(h).run.attempt == 2
    assert {c["name"]: c["state"] for c in checks}[APPROVAL] == "Pending"


def test_a_late_word_for_an_ended_attempt_changes_nothing() -> None:
    """A word naming attempt 1, after attempt 1 ended, does not touch attempt 2."""
    h = run(
        cluster(),
        [says(30.0, "Retry", requeue_after_seconds=10.0), says(50.0, "Rejected", attempt=1)],
        until=300.0,
    )
    assert of(h, qev.WorkloadRejected) == []
    assert [r.attempt for _, r in of(h, qev.QuotaReserved)] == [1, 2]
    assert queue_entry(h).status == "QuotaReserved"


# -- which checks run -------------------------------------------------------------------


def test_a_provisioning_check_not_needed_is_ready_at_once() -> None:
    """peers.md §4.4: a workload requesting none of the config's managedResources needs no
    request: the check is Ready ("the provisioning request is not needed"); the external
    check still gates admission."""
    h = run(cluster(), [says(200.0, "Ready")], gpus=0)
    ((_, reserved),) = of(h, qev.QuotaReserved)
    assert reserved.provisioning is None
    assert (reserved.checks, dict(reserved.checks_ready)) == (
        (APPROVAL,),
        {PROV: "the provisioning request is not needed"},
    )
    ((aenv, _),) = of(h, qev.WorkloadAdmitted)
    assert aenv.occurred_at == 200.0


def test_on_flavors_runs_a_check_only_for_its_flavors() -> None:
    """Kueue's admissionChecksStrategy: a check with onFlavors runs only for workloads
    assigned one of them."""
    h = run(
        cluster(strategy=[{"name": PROV}, {"name": APPROVAL, "onFlavors": ["other"]}]),
        [],
    )
    ((_, reserved),) = of(h, qev.QuotaReserved)
    assert reserved.checks == (PROV,)
    ((aenv, _),) = of(h, qev.WorkloadAdmitted)
    assert aenv.occurred_at == 60.0


def test_admission_checks_and_a_strategy_are_exclusive() -> None:
    doc = cluster(strategy=[{"name": PROV}])
    doc["clusterQueues"][0]["admissionChecks"] = [PROV]
    with pytest.raises(InvalidInput, match="mutually exclusive"):
        parse.cluster(doc)
    bad = cluster(strategy=[{"name": PROV, "onFlavor": ["f"]}])
    with pytest.raises(InvalidInput, match="onFlavor"):
        parse.cluster(bad)


def test_two_provisioning_checks_make_the_queue_inactive() -> None:
    h = run(cluster([PROV, "other-prov"]), [], until=100.0)
    ((_, pending),) = of(h, qev.WorkloadPending)
    assert pending.reason == "ClusterQueueInactive"
    assert "2 ProvisioningRequest admission checks (dws-prov, other-prov)" in pending.message


def test_an_external_check_takes_no_parameters() -> None:
    doc = cluster()
    doc["admissionChecks"][1]["parameters"] = {"name": "x"}
    with pytest.raises(InvalidInput, match=r"example\.com/approval"):
        parse.cluster(doc)


def test_pod_set_updates_of_an_external_check_are_shown() -> None:
    update = PodSetUpdate(name="workers", labels={"team": "ml"}, node_selector={"zone": "a"})
    h = run(cluster(), [says(10.0, "Ready", pod_set_updates=(update,))], until=30.0)
    checks = {c["name"]: c for c in admission_checks(queue_entry(h))}
    assert checks[APPROVAL] == {
        "name": APPROVAL,
        "state": "Ready",
        "message": "Ready by the approver",
        "lastTransitionTime": "1970-01-01T00:00:10Z",  # RFC 3339, as every time shown
        "podSetUpdates": [
            {"name": "workers", "labels": {"team": "ml"}, "nodeSelector": {"zone": "a"}}
        ],
    }
    assert checks[PROV]["state"] == "Pending"
    assert checks[PROV]["message"].startswith("request accepted")


def test_last_transition_time_moves_only_with_the_state() -> None:
    """Kueue's SetAdmissionCheckState: a new message in the same state keeps the time."""
    h = run(cluster(), [says(5.0, "Pending", message="looking")], until=7.0)
    (approval,) = [c for c in admission_checks(queue_entry(h)) if c["name"] == APPROVAL]
    assert (approval["state"], approval["message"], approval["lastTransitionTime"]) == (
        "Pending",
        "looking",
        "1970-01-01T00:00:00Z",
    )


# -- the log and intake -------------------------------------------------------------------


def _queue_after(*events: Event) -> Any:
    state = qs.QueueState()
    for i, ev in enumerate(events, start=1):
        qs.evolve(state, envelope(ev, i, at=float(i)))
    return state


def _reserved(**kw: Any) -> qev.QuotaReserved:
    return qev.QuotaReserved(
        workload_id="train",
        cluster_queue="cq",
        flavors={},
        usage={},
        node_selectors={},
        attempt=1,
        message="",
        **kw,
    )


def test_a_reservation_logged_before_several_checks_waits_for_its_provisioning_check() -> None:
    """A ``quota_reserved`` of an older log names no checks: its provisioning ask is the one
    check, Pending until the request is Provisioned (as muster decided then)."""
    ask = qev.ProvisioningAsk(check=PROV, provisioning_class="queued-provisioning.gke.io")
    submitted = wev.WorkloadSubmitted(workload_id="train", spec=job())
    state = _queue_after(submitted, _reserved(provisioning=ask))
    run_ = state.workloads["train"].run
    assert {n: c.state for n, c in run_.checks.items()} == {PROV: "Pending"}
    provisioned = pev.ProvisioningProvisioned(
        request_id="train.1", zone=ZA, assignments={"workers-0": "n0"}, message="ready"
    )
    qs.evolve(state, envelope(provisioned, 3, at=3.0))
    assert run_.checks[PROV].state == "Ready"
    assert run_.checks[PROV].pod_set_updates[0].annotations == {
        names.CONSUME_ANNOTATION: "train-dws-prov-1",
        names.CLASS_ANNOTATION: "queued-provisioning.gke.io",
    }


def test_intake_takes_an_external_checks_word_from_the_admin_only() -> None:
    state = _queue_after(
        qev.AdmissionCheckConfigured(spec=parse.admission_check(cluster()["admissionChecks"][0])),
        qev.AdmissionCheckConfigured(spec=parse.admission_check(cluster()["admissionChecks"][1])),
        wev.WorkloadSubmitted(workload_id="train", spec=job()),
        _reserved(checks=(PROV, APPROVAL)),
    )
    tenant = Principal("team", frozenset({"team"}))
    forbidden = check_words.update(tenant, "train", APPROVAL, {"state": "Ready"}, state, 5.0)
    assert isinstance(forbidden, Refusal) and forbidden.code == "Forbidden"
    ours = check_words.update(ANONYMOUS_ADMIN, "train", PROV, {"state": "Ready"}, state, 5.0)
    assert isinstance(ours, Refusal) and ours.code == "CheckNotApplicable"
    assert "ProvisioningRequest controller" in ours.message
    ok = check_words.update(
        ANONYMOUS_ADMIN,
        "train",
        APPROVAL,
        {"state": "Retry", "requeueAfterSeconds": 30},
        state,
        5.0,
    )
    assert not isinstance(ok, Refusal)
    assert ok.stream_id == wev.stream("train")
    assert ok.event == wev.AdmissionCheckUpdated(
        workload_id="train", check=APPROVAL, state="Retry", requeue_after_seconds=30.0
    )


def test_pods_ready_clock_starts_when_the_last_check_is_ready() -> None:
    """kueue.md §1.10 with §1.8: waitForPodsReady times the pods from admission, which
    Kueue gives once every check is Ready. With only an external check, Ready at 10 s, and
    nodes muster makes ready at 60 s, a 30 s timeout runs out at 40 s."""
    doc = cluster([APPROVAL])
    doc["waitForPodsReady"] = {"enable": True, "timeout": 30}
    h = run(doc, [says(10.0, "Ready")], until=50.0)
    ((eenv, evicted),) = of(h, qev.WorkloadEvicted)
    assert (eenv.occurred_at, evicted.reason) == (40.0, "PodsReadyTimeout")


def test_nodes_without_a_request_check_expire_while_a_check_is_pending_then_retry() -> None:
    """Without a ProvisioningRequest check muster still makes the nodes; if their booking
    passes while the external check is Pending, the workload is requeued (default backoff)
    for new nodes, not rejected: nothing failed for good."""
    h = run(cluster([APPROVAL]), [says(750.0, "Ready", attempt=2)])
    ((eenv, evicted),) = of(h, qev.WorkloadEvicted)
    assert (eenv.occurred_at, evicted.reason, evicted.requeue_after_seconds) == (
        660.0,
        "BookingExpired",
        60.0,
    )
    assert of(h, qev.WorkloadRejected) == []
    ((aenv, admitted),) = of(h, qev.WorkloadAdmitted)
    assert (aenv.occurred_at, admitted.attempt) == (780.0, 2)


def test_rejected_after_admission_stops_the_pods_and_deactivates() -> None:
    """kueue.md §1.8: Rejected deactivates and evicts: a running workload's pods stop."""
    h = run(cluster(), [says(10.0, "Ready"), says(80.0, "Rejected", message="over budget")])
    ((eenv, evicted),) = of(h, qev.WorkloadEvicted)
    assert (eenv.occurred_at, evicted.reason, evicted.deactivate) == (
        80.0,
        "AdmissionCheckRejected",
        True,
    )
    assert [s.workload_id for _, s in of(h, nev.PodStopped)] == ["train"]
    ((_, rejected),) = of(h, qev.WorkloadRejected)
    assert rejected.reason == "Deactivated" and "over budget" in rejected.message
    assert of(h, qev.WorkloadFinished) == []


def test_a_kueue_cluster_queue_manifest_with_an_admission_checks_strategy() -> None:
    raw = {
        "apiVersion": "kueue.x-k8s.io/v1beta1",
        "kind": "ClusterQueue",
        "metadata": {"name": "cq"},
        "spec": {
            "resourceGroups": cluster()["clusterQueues"][0]["resourceGroups"],
            "admissionChecksStrategy": {
                "admissionChecks": [{"name": PROV, "onFlavors": ["f"]}, {"name": APPROVAL}]
            },
        },
    }
    (cq,) = manifests.read([raw]).cluster_queues
    assert cq.admission_checks == (PROV, APPROVAL)
    assert dict(cq.check_flavors) == {PROV: ("f",)}


def test_an_external_check_that_never_answers_ends_after_the_default_retries() -> None:
    """No controller ever answers (as in ``muster sim``): nodes made without a request
    check expire, and the workload is retried 3 times (Kueue's default backoffLimitCount),
    then rejected, so a simulation ends."""
    h = run(cluster([APPROVAL]), [], until=None)
    evictions = [(e.occurred_at, ev.requeue_after_seconds) for e, ev in of(h, qev.WorkloadEvicted)]
    assert [d for _, d in evictions] == [60.0, 120.0, 240.0]
    ((_, rejected),) = of(h, qev.WorkloadRejected)
    assert rejected.reason == "ProvisioningFailed"
    assert rejected.message.startswith("CapacityReservationTimeExpired: ")
    assert rejected.message.endswith("(after 3 retries: an admission check stayed Pending)")
