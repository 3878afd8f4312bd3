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
from tests.unit.test_queueing_admission import QueueSim, cluster, cq

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
    assert s.state.workloads["job"].status == "Rejected"


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
