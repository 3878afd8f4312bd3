"""waitForPodsReady: timeout after admission, eviction, requeue with backoff, limit, blocking.

The decider is stepped by hand (QueueSim): admissions and pod starts are fed as the
provisioner and node agent would append them, and time moves by timer events.
"""

from __future__ import annotations

from typing import Any

from muster.core.events import Event, NewEvent
from muster.core.events import node as nev
from muster.core.events import queue as qev
from muster.core.events import timer as tev
from muster.core.model import parse
from muster.core.nodes.decider import NodeAgentDecider
from muster.core.provisioning.decider import ProvisionerDecider
from muster.core.queueing.decider import QueueDecider
from muster.core.sim.harness import build
from tests.unit.test_queueing_admission import GPU, QueueSim, cluster, cq

TIMEOUT = 60.0


def sim(**requeuing: Any) -> QueueSim:
    wfpr: dict[str, Any] = {"enable": True, "timeout": f"{TIMEOUT:g}s"}
    if "block" in requeuing:
        wfpr["blockAdmission"] = requeuing.pop("block")
    if requeuing:
        wfpr["requeuingStrategy"] = requeuing
    return QueueSim(cluster(cq("a", 8, cohort=None), waitForPodsReady=wfpr))


def at(s: QueueSim, t: float) -> None:
    """Move the clock, as a timer would."""
    s.feed(
        [
            NewEvent(
                stream_id=tev.stream("queue"),
                event=tev.TimerFired(owner="queue", deadline=t),
                occurred_at=t,
            )
        ]
    )


def admit(s: QueueSim, name: str, pods_started: int = 0) -> None:
    """The provisioning check passes (the queue admits) and some pods start."""
    wl = s.state.workloads[name]
    assert wl.status == "QuotaReserved", wl.status
    s.feed(
        [
            NewEvent(
                stream_id=qev.ADMISSION_STREAM,
                event=qev.WorkloadAdmitted(
                    workload_id=name,
                    cluster_queue="a",
                    attempt=wl.run.attempt,
                    placements={},
                    message="admitted",
                ),
                occurred_at=s.state.now,
            )
        ]
    )
    start(s, name, range(pods_started))


def start(s: QueueSim, name: str, pods: range) -> None:
    wl = s.state.workloads[name]
    s.feed(
        [
            NewEvent(
                stream_id="node-x",
                event=nev.PodStarted(
                    node="x",
                    workload_id=name,
                    attempt=wl.run.attempt,
                    pod=f"{name}-{i}",
                    finishes_at=1e9,
                ),
                occurred_at=s.state.now,
            )
            for i in pods
        ]
    )


def of(events: list[Event], kind: type) -> list[Any]:
    return [e for e in events if isinstance(e, kind)]


def test_pods_not_ready_in_time_are_evicted_and_requeued_after_backoff() -> None:
    s = sim()
    s.submit("job", 2)
    assert of(s.settle(), qev.QuotaReserved)
    admit(s, "job", pods_started=1)
    assert s.decider.next_deadline(s.state) == TIMEOUT
    at(s, TIMEOUT - 1)
    assert s.settle() == []
    at(s, TIMEOUT)
    events = s.settle()
    (evicted,) = of(events, qev.WorkloadEvicted)
    assert evicted.reason == "PodsReadyTimeout"
    assert "1 of 2 pods running after 60s" in evicted.message
    # Backoff: base 60 s for the first requeue; it waits with a reason until then.
    assert s.state.workloads["job"].requeue_at == TIMEOUT + 60
    assert s.state.workloads["job"].pending_reason[0] == "WaitingForBackoff"  # type: ignore[index]
    assert s.decider.next_deadline(s.state) == TIMEOUT + 60
    at(s, TIMEOUT + 59)
    assert not of(s.settle(), qev.QuotaReserved)
    at(s, TIMEOUT + 60)
    (again,) = of(s.settle(), qev.QuotaReserved)
    assert again.attempt == 2


def test_ready_pods_mean_no_timeout() -> None:
    s = sim()
    s.submit("job", 2)
    s.settle()
    admit(s, "job", pods_started=2)
    assert s.state.workloads["job"].run.pods_ready
    assert s.decider.next_deadline(s.state) is None
    at(s, 10 * TIMEOUT)
    assert not of(s.settle(), qev.WorkloadEvicted)


def test_backoff_doubles_and_the_limit_rejects() -> None:
    s = sim(backoffLimitCount=1, backoffBaseSeconds=10)
    s.submit("job", 1)
    s.settle()
    admit(s, "job")
    at(s, TIMEOUT)
    s.settle()
    assert s.state.workloads["job"].requeue_at == TIMEOUT + 10
    at(s, TIMEOUT + 10)
    s.settle()
    admit(s, "job")
    at(s, 2 * TIMEOUT + 10)
    events = s.settle()
    assert of(events, qev.WorkloadEvicted)[0].reason == "PodsReadyTimeout"
    (rejected,) = of(events, qev.WorkloadRejected)
    assert rejected.reason == "RequeuingLimitExceeded"
    assert "evicted 2 times" in rejected.message
    assert s.state.status_of("job") == "Rejected"


def test_backoff_is_capped() -> None:
    s = sim(backoffBaseSeconds=100, backoffMaxSeconds=150)
    config = s.state.wait_for_pods_ready
    assert [config.backoff(n) for n in (1, 2, 3)] == [100.0, 150.0, 150.0]


def test_eviction_timestamp_sends_it_to_the_back_creation_keeps_its_place() -> None:
    for timestamp, first in (("Eviction", "later"), ("Creation", "job")):
        s = sim(timestamp=timestamp, backoffBaseSeconds=1)
        s.submit("job", 8)
        s.settle()
        admit(s, "job")
        s.submit("later", 8)  # waits: the queue is full
        at(s, TIMEOUT)
        s.settle()  # job evicted and in backoff; "later" takes the quota meanwhile
        reserved = [e.workload_id for e in s.log if isinstance(e, qev.QuotaReserved)]
        assert reserved == ["job", "later"]
        order = sorted(("job", "later"), key=lambda n: s.state.workloads[n].order)
        assert order[0] == first, timestamp


def test_block_admission_holds_new_workloads_until_pods_run() -> None:
    s = sim(block=True)
    s.submit("first", 2)
    s.submit("second", 2)
    events = s.settle()
    assert [e.workload_id for e in of(events, qev.QuotaReserved)] == ["first"]
    assert s.state.workloads["second"].pending_reason[0] == "WaitingForPodsReady"  # type: ignore[index]
    admit(s, "first", pods_started=1)
    assert not of(s.settle(), qev.QuotaReserved)
    start(s, "first", range(1, 2))
    assert [e.workload_id for e in of(s.settle(), qev.QuotaReserved)] == ["second"]


def test_quota_held_for_nodes_that_never_come_times_out_from_the_reservation() -> None:
    """Kueue admits at quota reservation when the ClusterQueue has no admission check, and
    waitForPodsReady times the pods from admission (reference/kueue.md §1.8, §1.10): the
    clock runs while the workload waits for nodes, so nodes that never come do not hold the
    quota for ever; past backoffLimitCount it is deactivated (RequeuingLimitExceeded)."""
    s = sim(backoffLimitCount=0)
    s.submit("job", 2)
    assert of(s.settle(), qev.QuotaReserved)
    assert s.state.status_of("job") == "QuotaReserved"
    assert s.decider.next_deadline(s.state) == TIMEOUT
    at(s, TIMEOUT - 1)
    assert not of(s.settle(), qev.WorkloadEvicted)
    at(s, TIMEOUT)
    events = s.settle()
    (evicted,) = of(events, qev.WorkloadEvicted)
    assert evicted.reason == "PodsReadyTimeout"
    assert "quota reserved, its 2 pods' nodes not ready after 60s" in evicted.message
    (rejected,) = of(events, qev.WorkloadRejected)
    assert rejected.reason == "RequeuingLimitExceeded"
    assert s.state.status_of("job") == "Rejected"  # ended: holds no quota
    assert s.decider.next_deadline(s.state) is None


def test_admission_after_reservation_keeps_the_reservations_clock() -> None:
    """Without an admission check the nodes coming up late does not restart the clock."""
    s = sim()
    s.submit("job", 1)
    s.settle()
    at(s, TIMEOUT / 2)
    s.settle()
    admit(s, "job")
    assert s.decider.next_deadline(s.state) == TIMEOUT
    at(s, TIMEOUT)
    assert of(s.settle(), qev.WorkloadEvicted)[0].reason == "PodsReadyTimeout"


def test_block_admission_ends_when_the_blocking_reservation_times_out() -> None:
    """blockAdmission holds every admission while a workload's pods are not ready; one whose
    nodes never come blocked the cluster for ever, now only until its timeout."""
    s = sim(block=True)
    s.submit("stuck", 2)
    s.submit("next", 2)
    assert [e.workload_id for e in of(s.settle(), qev.QuotaReserved)] == ["stuck"]
    at(s, TIMEOUT - 1)
    assert not of(s.settle(), qev.QuotaReserved)
    at(s, TIMEOUT)
    events = s.settle()
    assert [e.workload_id for e in of(events, qev.WorkloadEvicted)] == ["stuck"]
    assert [e.workload_id for e in of(events, qev.QuotaReserved)] == ["next"]


def test_with_an_admission_check_the_clock_starts_at_admission() -> None:
    """Kueue times PodsReady from the Admitted condition; with a ProvisioningRequest check
    that is when the request is Provisioned (reference/kueue.md §1.9, §1.10). A DWS request
    queued for capacity is not evicted by waitForPodsReady; its own retry policy rules."""
    s = QueueSim(
        cluster(
            cq("a", 8, cohort=None, admissionChecks=["prov"]),
            waitForPodsReady={"enable": True, "timeout": f"{TIMEOUT:g}s"},
            admissionChecks=[{"name": "prov", "parameters": {"name": "cfg"}}],
            provisioningRequestConfigs=[
                {"name": "cfg", "provisioningClassName": "queued-provisioning.gke.io"}
            ],
        )
    )
    s.submit("job", 1)
    (reserved,) = of(s.settle(), qev.QuotaReserved)
    assert reserved.provisioning is not None
    assert s.decider.next_deadline(s.state) is None
    at(s, 10 * TIMEOUT)
    assert not of(s.settle(), qev.WorkloadEvicted)
    admit(s, "job")
    assert s.decider.next_deadline(s.state) == 11 * TIMEOUT
    at(s, 11 * TIMEOUT)
    assert of(s.settle(), qev.WorkloadEvicted)[0].reason == "PodsReadyTimeout"


def test_a_stockout_no_longer_holds_quota_for_ever() -> None:
    """The services' deciders in virtual time, a cloud whose pool never has capacity:
    Kueue's waitForPodsReady sequence (reference/kueue.md §1.10): evicted at the timeout,
    requeued after base * 2^(n-1) s, deactivated past backoffLimitCount; under
    blockAdmission the next workload gets the quota each time the stuck one lets it go."""
    spec = parse.cluster(
        {
            "name": "c",
            "region": "r",
            "zones": ["z"],
            "nodePools": [
                {
                    "name": "pool",
                    "machineType": "g2-standard-8",
                    "allocatable": {GPU: 1},
                    "capacity": [{"at": 0, "zones": {"z": 0}}],
                }
            ],
            **cluster(
                cq("a", 4, cohort=None),
                waitForPodsReady={
                    "enable": True,
                    "timeout": "300s",
                    "blockAdmission": True,
                    "requeuingStrategy": {"backoffLimitCount": 1, "backoffBaseSeconds": 60},
                },
            ),
        }
    )
    subs = [
        (0.0, name, parse.workload({"name": name, "queueName": "a", "podSets": [{"count": 4}]}))
        for name in ("stuck", "next")
    ]
    h = build(spec, subs, [], [QueueDecider(), ProvisionerDecider(), NodeAgentDecider()])
    h.run()
    trail = [
        (e.occurred_at, type(e.event).__name__, e.event.workload_id)
        for e in h.log.envelopes
        if isinstance(e.event, qev.QuotaReserved | qev.WorkloadEvicted | qev.WorkloadRejected)
    ]
    assert trail == [
        (0.0, "QuotaReserved", "stuck"),
        (300.0, "WorkloadEvicted", "stuck"),
        (300.0, "QuotaReserved", "next"),
        (600.0, "WorkloadEvicted", "next"),
        (600.0, "QuotaReserved", "stuck"),  # its backoff (60 s) ended at 360
        (900.0, "WorkloadEvicted", "stuck"),
        (900.0, "WorkloadRejected", "stuck"),  # RequeuingLimitExceeded
        (900.0, "QuotaReserved", "next"),  # its backoff ended at 660
        (1200.0, "WorkloadEvicted", "next"),
        (1200.0, "WorkloadRejected", "next"),
    ]
    rejected = [e.event for e in h.log.envelopes if isinstance(e.event, qev.WorkloadRejected)]
    assert {e.reason for e in rejected} == {"RequeuingLimitExceeded"}
