"""The admission cycle (reference §1.3-1.5, §1.7; SEMANTICS.md §3, §5).

The queue decider runs alone here: ``QueueSim`` folds the configuration and the
submissions into a ``QueueState`` and calls ``decide`` one step at a time, folding
what it returns, so a test can see exactly what one call decided. Nothing
provisions nodes, so admitted workloads stay QuotaReserved until a test finishes
them by hand.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any, TypeVar

import pytest

from muster.core import inputs
from muster.core.events import Envelope, Event, NewEvent
from muster.core.events import queue as qev
from muster.core.model import parse
from muster.core.model.workload import WorkloadSpec
from muster.core.queueing.decider import QueueDecider
from muster.core.queueing.state import QueueState

GPU = "nvidia.com/gpu"
E = TypeVar("E", bound=Event)


# -- cluster descriptions --------------------------------------------------------------


def quota(nominal: int, borrowing: int | None = None, lending: int | None = None) -> dict[str, Any]:
    q: dict[str, Any] = {"name": GPU, "nominalQuota": nominal}
    if borrowing is not None:
        q["borrowingLimit"] = borrowing
    if lending is not None:
        q["lendingLimit"] = lending
    return q


def cq(
    name: str,
    flavors: Mapping[str, int | dict[str, Any]] | int,
    cohort: str | None = "co",
    **spec: Any,
) -> dict[str, Any]:
    """A ClusterQueue over GPUs: flavor -> nominal (or a ``quota(...)``), in order."""
    if not isinstance(flavors, Mapping):
        flavors = {"f": flavors}
    doc: dict[str, Any] = {
        "name": name,
        "resourceGroups": [
            {
                "coveredResources": [GPU],
                "flavors": [
                    {"name": f, "resources": [q if isinstance(q, dict) else quota(q)]}
                    for f, q in flavors.items()
                ],
            }
        ],
        **spec,
    }
    if cohort is not None:
        doc["cohort"] = cohort
    return doc


def cluster(*queues: dict[str, Any], **extra: Any) -> dict[str, Any]:
    """Flavors named by the queues; a LocalQueue ``default/<cq>`` for each ClusterQueue
    unless ``localQueues`` is given."""
    flavors = sorted({f["name"] for q in queues for g in q["resourceGroups"] for f in g["flavors"]})
    doc: dict[str, Any] = {
        "name": "t",
        "zones": ["z"],
        "resourceFlavors": [{"name": f} for f in flavors],
        "clusterQueues": list(queues),
        "localQueues": [
            {"namespace": "default", "name": q["name"], "clusterQueue": q["name"]} for q in queues
        ],
    }
    doc.update(extra)
    return doc


# -- the decider, stepped by hand --------------------------------------------------------


class QueueSim:
    def __init__(self, doc: dict[str, Any]) -> None:
        self.decider = QueueDecider()
        self.state: QueueState = self.decider.initial()
        self.log: list[Event] = []
        self.envelopes: list[Envelope] = []  # the log as a store would hold it (verify)
        self._position = 0
        self.feed(inputs.configuration(parse.cluster(doc), 0.0))

    def feed(self, news: Iterable[NewEvent], producer: str = "test") -> None:
        for new in news:
            self._position += 1
            envelope = Envelope(
                position=self._position,
                event_id=str(self._position),
                stream_id=new.stream_id,
                stream_version=self._position,
                type=new.event.TYPE,
                schema_version=new.event.VERSION,
                occurred_at=new.occurred_at,
                recorded_at=new.occurred_at,
                causation_id=new.causation_id,
                correlation_id=new.correlation_id,
                producer=producer,
                event=new.event,
            )
            self.state = self.decider.evolve(self.state, envelope)
            self.log.append(new.event)
            self.envelopes.append(envelope)

    def submit(
        self,
        name: str,
        gpus: int = 1,
        queue: str = "a",
        *,
        namespace: str = "default",
        priority: int | None = None,
        priority_class: str | None = None,
        at: float | None = None,
    ) -> WorkloadSpec:
        doc: dict[str, Any] = {
            "name": name,
            "namespace": namespace,
            "queueName": queue,
            "podSets": [{"name": "w", "count": gpus, "requests": {GPU: 1}}],
        }
        if priority is not None:
            doc["priority"] = priority
        if priority_class is not None:
            doc["priorityClassName"] = priority_class
        spec = parse.workload(doc)
        self.feed([inputs.submission(name, spec, self.state.now if at is None else at)])
        return spec

    def decide(self) -> list[Event]:
        """One call of the decider; its events are folded before returning."""
        news = self.decider.decide(self.state)
        self.feed(news)
        return [n.event for n in news]

    def settle(self, limit: int = 20) -> list[Event]:
        """Decide until the decider has nothing more to say."""
        out: list[Event] = []
        for _ in range(limit):
            events = self.decide()
            if not events:
                return out
            out += events
        raise AssertionError(f"no fixed point after {limit} decisions")

    def inject(self, event: Event) -> None:
        self.feed(
            [NewEvent(stream_id=qev.ADMISSION_STREAM, event=event, occurred_at=self.state.now)]
        )

    def finish(self, wid: str) -> None:
        self.inject(
            qev.WorkloadFinished(
                workload_id=wid, outcome="Succeeded", reason="Succeeded", message="done"
            )
        )

    def reconfigure(self, name: str, **changes: Any) -> None:
        """Change a ClusterQueue's spec (``stop_policy=...``) as ``muster apply`` would."""
        spec = dataclasses.replace(self.state.cluster_queues[name], **changes)
        self.inject(qev.ClusterQueueConfigured(spec=spec))


def of(events: Iterable[Event], cls: type[E], wid: str | None = None) -> list[E]:
    return [
        e
        for e in events
        if isinstance(e, cls) and (wid is None or getattr(e, "workload_id", None) == wid)
    ]


def reserved(events: Iterable[Event]) -> list[str]:
    return [e.workload_id for e in of(events, qev.QuotaReserved)]


def reason(sim: QueueSim, wid: str) -> tuple[str, str] | None:
    """The pending (reason, message) last recorded for ``wid``."""
    return sim.state.workloads[wid].pending_reason


def why(sim: QueueSim, wid: str) -> str | None:
    """Just the reason."""
    got = sim.state.workloads[wid].pending_reason
    return got[0] if got else None


def admit(sim: QueueSim, *workloads: tuple[str, int, str]) -> None:
    """Submit (name, gpus, queue) one at a time; each must be admitted at once."""
    for name, gpus, queue in workloads:
        sim.submit(name, gpus, queue)
        assert reserved(sim.settle()) == [name], name


# -- borrowing, limits, lending ------------------------------------------------------------


def kueue_example(a: dict[str, Any] | int = 9, b: dict[str, Any] | int = 12) -> QueueSim:
    """cluster_queue.md: ClusterQueues a (9) and b (12) in one cohort."""
    return QueueSim(cluster(cq("a", {"f": a}), cq("b", {"f": b})))


def test_borrows_the_idle_lenders_quota() -> None:
    sim = kueue_example()
    sim.submit("big", 21)  # a's 9 + b's 12, b idle
    events = sim.decide()
    (got,) = of(events, qev.QuotaReserved, "big")
    assert got.cluster_queue == "a" and got.usage == {"f": {GPU: 21}}


@pytest.mark.parametrize(
    ("a", "b", "most"),
    [
        # borrowingLimit 1: a holds at most 9 + 1.
        pytest.param(quota(9, borrowing=1), 12, 10, id="borrowingLimit"),
        # b's lendingLimit 1: b keeps 11 to itself, the cohort has 9 + 1.
        pytest.param(9, quota(12, lending=1), 10, id="lendingLimit"),
    ],
)
def test_limits_bound_what_a_queue_can_hold(a: Any, b: Any, most: int) -> None:
    sim = kueue_example(a, b)
    sim.submit("over", most + 1)
    sim.submit("max", most)
    events = sim.decide()
    assert reserved(events) == ["max"]
    assert reason(sim, "over") == (
        "ExceedsMaxQuota",
        "couldn't assign flavors to pod set w: insufficient quota for nvidia.com/gpu in "
        f"flavor f, request > maximum capacity ({most + 1} > {most})",
    )


def test_lending_limit_keeps_quota_local_for_the_lender() -> None:
    # b lends only 1: with a at its maximum of 10 (borrowing b's 1), b still admits 11.
    sim = kueue_example(9, quota(12, lending=1))
    admit(sim, ("a10", 10, "a"), ("b11", 11, "b"))
    # And that is all of it: one more for b does not fit (9 + 12 = 21 used).
    sim.submit("b1", 1, "b")
    assert reserved(sim.settle()) == []
    assert reason(sim, "b1") == (
        "WaitingForQuota",
        "couldn't assign flavors to pod set w: insufficient quota for nvidia.com/gpu in "
        "flavor f, 1 more needed",
    )


def test_without_lending_limit_the_borrower_can_take_the_lenders_quota() -> None:
    # The contrast: b lends everything, a takes 20 and leaves b only 1 of its 12.
    sim = kueue_example()
    admit(sim, ("a20", 20, "a"))
    sim.submit("b2", 2, "b")
    assert reserved(sim.settle()) == []
    assert why(sim, "b2") == "WaitingForQuota"


SHORT_2 = ("WaitingForQuota", "insufficient quota for nvidia.com/gpu in flavor f, 2 more needed")
OVER_21 = (
    "ExceedsMaxQuota",
    "insufficient quota for nvidia.com/gpu in flavor f, request > maximum capacity (22 > 21)",
)


@pytest.mark.parametrize(
    ("b_used", "size", "want"),
    [
        # b holds 5: a may take 21 - 5 = 16; 18 is 2 short but could fit once b frees it.
        (5, 18, SHORT_2),
        # 22 > 21 can never fit, whatever b does.
        (5, 22, OVER_21),
        (0, 22, OVER_21),
    ],
)
def test_waiting_for_quota_vs_exceeds_max_quota(
    b_used: int, size: int, want: tuple[str, str]
) -> None:
    sim = kueue_example()
    if b_used:
        admit(sim, ("b", b_used, "b"))
    sim.submit("x", size)
    assert reserved(sim.settle()) == []
    assert reason(sim, "x") == (want[0], "couldn't assign flavors to pod set w: " + want[1])


# -- ordering within one cycle ---------------------------------------------------------


def test_non_borrowing_workloads_go_before_borrowing_ones() -> None:
    # a (4) and b (4) in a cohort of 8. a's head wants 6 (borrows 2), b's wants 4 (no
    # borrowing). a's was submitted first and has the higher priority; still b's goes
    # first (lower borrowing level), and then a's 6 no longer fit in the 4 left.
    sim = QueueSim(cluster(cq("a", 4), cq("b", 4)))
    sim.submit("a-borrows", 6, "a", priority=100)
    sim.submit("b-within", 4, "b", priority=0)
    events = sim.decide()
    assert reserved(events) == ["b-within"]
    assert why(sim, "a-borrows") == "WaitingForQuota"


@pytest.mark.parametrize(("first", "second"), [("a", "b"), ("b", "a")])
def test_priority_decides_between_equally_borrowing_heads(first: str, second: str) -> None:
    # Both heads borrow (level 1) and only one fits: the higher priority goes first,
    # whichever queue it is in and whenever it was submitted.
    sim = QueueSim(cluster(cq("a", 4), cq("b", 4)))
    sim.submit("low", 6, first, priority=1)
    sim.submit("high", 6, second, priority=5)
    assert reserved(sim.decide()) == ["high"]


def test_priority_then_submission_order_within_a_queue() -> None:
    sim = QueueSim(cluster(cq("a", 3, cohort=None)))
    sim.submit("p0-first", 1, priority=0)
    sim.submit("p5", 1, priority=5)
    sim.submit("p0-second", 1, priority=0)
    sim.submit("p9", 1, priority=9)
    # 3 GPUs: p9, p5, then the older of the two p0s.
    assert reserved(sim.decide()) == ["p9", "p5", "p0-first"]


def test_one_decide_admits_many_workloads_of_one_queue() -> None:
    sim = QueueSim(cluster(cq("a", 10, cohort=None)))
    for i in range(11):
        sim.submit(f"w{i}", 1)
    events = sim.decide()
    # Kueue admits one head per queue per cycle; muster keeps going while they fit.
    assert reserved(events) == [f"w{i}" for i in range(10)]
    assert why(sim, "w10") == "WaitingForQuota"


@pytest.mark.parametrize(
    ("strategy", "small_admitted", "small_reason"),
    [
        (
            "StrictFIFO",
            False,
            ("BlockedByStrictFIFO", "waiting behind big in StrictFIFO ClusterQueue a"),
        ),
        ("BestEffortFIFO", True, None),
    ],
)
def test_strict_fifo_head_blocks_best_effort_lets_smaller_pass(
    strategy: str, small_admitted: bool, small_reason: tuple[str, str] | None
) -> None:
    sim = QueueSim(cluster(cq("a", 4, cohort=None, queueingStrategy=strategy)))
    admit(sim, ("hold", 2, "a"))
    sim.submit("big", 4)  # 2 free: does not fit
    sim.submit("small", 2)  # would fit
    events = sim.decide()
    assert reserved(events) == (["small"] if small_admitted else [])
    assert why(sim, "big") == "WaitingForQuota"
    assert reason(sim, "small") == small_reason


# -- flavor fungibility -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("when_can_borrow", "flavor"),
    [
        # f1 fits only by borrowing b's f1 quota; MayStopSearch (default) takes it.
        ("MayStopSearch", "f1"),
        # TryNextFlavor goes on to f2, where it fits within a's own quota.
        ("TryNextFlavor", "f2"),
    ],
)
def test_when_can_borrow(when_can_borrow: str, flavor: str) -> None:
    a = cq("a", {"f1": 2, "f2": 8}, flavorFungibility={"whenCanBorrow": when_can_borrow})
    b = cq("b", {"f1": 8})
    sim = QueueSim(cluster(a, b))
    sim.submit("w", 4)
    (got,) = of(sim.decide(), qev.QuotaReserved, "w")
    assert got.flavors == {"w": {GPU: flavor}}
    assert got.usage == {flavor: {GPU: 4}}


def test_try_next_flavor_keeps_the_first_when_every_flavor_borrows() -> None:
    # Both flavors need borrowing (a has 2 of each, b lends 8 of each): equal modes, so
    # the first flavor in order wins.
    a = cq("a", {"f1": 2, "f2": 2}, flavorFungibility={"whenCanBorrow": "TryNextFlavor"})
    b = cq("b", {"f1": 8, "f2": 8})
    sim = QueueSim(cluster(a, b))
    sim.submit("w", 4)
    (got,) = of(sim.decide(), qev.QuotaReserved, "w")
    assert got.flavors == {"w": {GPU: "f1"}}


@pytest.mark.parametrize(
    ("when_can_preempt", "flavor", "evicted"),
    [
        # Default: f1 needs preemption, so f2 is tried, where it fits: nobody is evicted.
        ("TryNextFlavor", "f2", []),
        # MayStopSearch: f1, where it can preempt the lower-priority holder, is taken.
        ("MayStopSearch", "f1", ["low"]),
    ],
)
def test_when_can_preempt(when_can_preempt: str, flavor: str, evicted: list[str]) -> None:
    a = cq(
        "a",
        {"f1": 4, "f2": 4},
        cohort=None,
        preemption={"withinClusterQueue": "LowerPriority"},
        flavorFungibility={"whenCanPreempt": when_can_preempt},
    )
    sim = QueueSim(cluster(a))
    admit(sim, ("low", 4, "a"))  # takes f1
    sim.submit("high", 4, priority=10)
    events = sim.settle()
    assert [e.workload_id for e in of(events, qev.WorkloadEvicted)] == evicted
    (got,) = of(events, qev.QuotaReserved, "high")
    assert got.flavors == {"w": {GPU: flavor}}


def test_may_stop_search_goes_on_when_nobody_can_be_preempted() -> None:
    a = cq(
        "a",
        {"f1": 4, "f2": 4},
        cohort=None,
        preemption={"withinClusterQueue": "LowerPriority"},
        flavorFungibility={"whenCanPreempt": "MayStopSearch"},
    )
    sim = QueueSim(cluster(a))
    sim.submit("vip", 4, priority=10)
    assert reserved(sim.settle()) == ["vip"]  # f1
    # f1 is full and only a higher priority holds it: no candidates there. f2 is free.
    sim.submit("x", 4, priority=0)
    events = sim.settle()
    assert reserved(events) == ["x"]
    (got,) = of(events, qev.QuotaReserved, "x")
    assert got.flavors == {"w": {GPU: "f2"}}


@pytest.mark.parametrize(
    ("preference", "flavor", "evicted"),
    [
        # f1: preempt low, then within a's nominal. f2: fits, borrowing b's quota.
        ("BorrowingOverPreemption", "f2", []),
        ("PreemptionOverBorrowing", "f1", ["low"]),
    ],
)
def test_fungibility_preference(preference: str, flavor: str, evicted: list[str]) -> None:
    a = cq(
        "a",
        {"f1": 4, "f2": 0},
        preemption={"withinClusterQueue": "LowerPriority"},
        flavorFungibility={
            "whenCanBorrow": "TryNextFlavor",
            "whenCanPreempt": "TryNextFlavor",
            "preference": preference,
        },
    )
    sim = QueueSim(cluster(a, cq("b", {"f2": 8})))
    admit(sim, ("low", 4, "a"))  # f1, within a's nominal
    sim.submit("high", 4, priority=10)
    events = sim.settle()
    assert [e.workload_id for e in of(events, qev.WorkloadEvicted)] == evicted
    (got,) = of(events, qev.QuotaReserved, "high")
    assert got.flavors == {"w": {GPU: flavor}}


# -- priority classes ---------------------------------------------------------------------


PRIORITY_CLASSES = [
    {"name": "high", "value": 1000},
    {"name": "low", "value": 10},
    {"name": "standard", "value": 50, "globalDefault": True},
]


def test_named_priority_class_value_is_used() -> None:
    sim = QueueSim(cluster(cq("a", 4, cohort=None), priorityClasses=PRIORITY_CLASSES))
    sim.submit("numeric", 4, priority=500)
    sim.submit("classy", 4, priority_class="high")
    assert reserved(sim.decide()) == ["classy"]  # 1000 > 500
    assert sim.state.workloads["classy"].priority == 1000


def test_unknown_priority_class_is_rejected() -> None:
    sim = QueueSim(cluster(cq("a", 4, cohort=None), priorityClasses=PRIORITY_CLASSES))
    sim.submit("lost", 1, priority_class="nope")
    events = sim.settle()
    (rejected,) = of(events, qev.WorkloadRejected, "lost")
    assert rejected.reason == "WorkloadPriorityClassNotFound"
    assert "nope" in rejected.message
    assert reserved(events) == []
    assert sim.state.status_of("lost") == "Rejected"


def test_global_default_priority_class_applies_to_workloads_without_one() -> None:
    sim = QueueSim(cluster(cq("a", 4, cohort=None), priorityClasses=PRIORITY_CLASSES))
    sim.submit("explicit", 4, priority=20)
    sim.submit("defaulted", 4)
    sim.submit("low", 4, priority_class="low")
    assert sim.state.workloads["defaulted"].priority == 50
    assert sim.state.workloads["low"].priority == 10  # a named class beats the default
    assert reserved(sim.decide()) == ["defaulted"]  # 50 > 20 > 10


# -- namespace quotas -------------------------------------------------------------------


def ns_cluster(enforcement: str = "Wait") -> dict[str, Any]:
    doc = cluster(
        cq("a", 16, cohort=None),
        namespaceQuotas=[
            {
                "namespace": "team",
                "name": "gpu-quota",
                "hard": {f"requests.{GPU}": 4},
                "enforcement": enforcement,
            }
        ],
    )
    doc["localQueues"] = [{"namespace": "team", "name": "a", "clusterQueue": "a"}]
    return doc


def test_namespace_quota_makes_a_workload_wait() -> None:
    sim = QueueSim(ns_cluster())
    sim.submit("first", 4, namespace="team")
    sim.submit("second", 1, namespace="team")
    events = sim.decide()
    assert reserved(events) == ["first"]  # the ClusterQueue has 16: only the namespace stops it
    assert reason(sim, "second") == (
        "NamespaceQuotaExceeded",
        "exceeded quota: gpu-quota, requested: nvidia.com/gpu=1, used: nvidia.com/gpu=4, "
        "limited: nvidia.com/gpu=4",
    )
    # It gets in once the namespace has room again.
    sim.finish("first")
    assert reserved(sim.settle()) == ["second"]


def test_namespace_quota_with_reject_enforcement_rejects() -> None:
    sim = QueueSim(ns_cluster("Reject"))
    sim.submit("first", 4, namespace="team")
    sim.submit("second", 1, namespace="team")
    events = sim.settle()
    assert reserved(events) == ["first"]
    (rejected,) = of(events, qev.WorkloadRejected, "second")
    assert rejected.reason == "NamespaceQuotaExceeded"
    assert rejected.message.startswith("exceeded quota: gpu-quota, requested: nvidia.com/gpu=1")
    assert sim.state.status_of("second") == "Rejected"


# -- stop policies ------------------------------------------------------------------------


def test_cluster_queue_hold_admits_nothing() -> None:
    sim = QueueSim(cluster(cq("a", 4, cohort=None, stopPolicy="Hold")))
    sim.submit("w", 1)
    assert reserved(sim.settle()) == []
    assert reason(sim, "w") == (
        "ClusterQueueStopped",
        "ClusterQueue a is stopped (stopPolicy Hold)",
    )


def test_local_queue_hold_admits_nothing_from_it() -> None:
    doc = cluster(cq("a", 4, cohort=None))
    doc["localQueues"] = [
        {"namespace": "default", "name": "a", "clusterQueue": "a", "stopPolicy": "Hold"},
        {"namespace": "default", "name": "open", "clusterQueue": "a"},
    ]
    sim = QueueSim(doc)
    sim.submit("held", 1, "a")
    sim.submit("free", 1, "open")
    assert reserved(sim.settle()) == ["free"]
    assert why(sim, "held") == "LocalQueueStopped"


def test_hold_keeps_what_is_admitted_hold_and_drain_evicts_it() -> None:
    sim = QueueSim(cluster(cq("a", 4, cohort=None)))
    admit(sim, ("running", 2, "a"))
    sim.reconfigure("a", stop_policy="Hold")
    sim.submit("new", 1)
    events = sim.settle()
    assert of(events, qev.WorkloadEvicted) == [] and reserved(events) == []
    assert sim.state.workloads["running"].holds_quota

    sim.reconfigure("a", stop_policy="HoldAndDrain")
    events = sim.settle()
    (evicted,) = of(events, qev.WorkloadEvicted)
    assert (evicted.workload_id, evicted.reason) == ("running", "ClusterQueueStopped")
    assert reserved(events) == []
    assert why(sim, "running") == "ClusterQueueStopped"
    # Restarting the queue admits both again, the evicted one first (older).
    sim.reconfigure("a", stop_policy="None")
    assert reserved(sim.settle()) == ["running", "new"]


def test_local_queue_hold_and_drain_evicts_its_workloads() -> None:
    doc = cluster(cq("a", 4, cohort=None))
    doc["localQueues"].append({"namespace": "default", "name": "other", "clusterQueue": "a"})
    sim = QueueSim(doc)
    admit(sim, ("drained", 2, "a"), ("kept", 2, "other"))
    lq = sim.state.local_queues["default/a"]
    sim.inject(qev.LocalQueueConfigured(spec=dataclasses.replace(lq, stop_policy="HoldAndDrain")))
    events = sim.settle()
    assert [(e.workload_id, e.reason) for e in of(events, qev.WorkloadEvicted)] == [
        ("drained", "LocalQueueStopped")
    ]
    assert reserved(events) == []
    assert sim.state.workloads["kept"].holds_quota


# -- admission fair sharing within one ClusterQueue ----------------------------------------


def afs_sim(mode: str) -> QueueSim:
    doc = cluster(
        cq("a", 8, cohort=None, admissionScope={"admissionMode": mode}),
    )
    doc["localQueues"] = [
        {"namespace": "tenant-a", "name": "lq", "clusterQueue": "a"},
        {"namespace": "tenant-b", "name": "lq", "clusterQueue": "a"},
    ]
    sim = QueueSim(doc)
    sim.submit("a-running", 4, "lq", namespace="tenant-a")
    assert reserved(sim.decide()) == ["a-running"]
    for name, ns, prio in [
        ("a-high-1", "tenant-a", 100),
        ("a-high-2", "tenant-a", 100),
        ("b-low-1", "tenant-b", 0),
        ("b-low-2", "tenant-b", 0),
    ]:
        sim.submit(name, 2, "lq", namespace=ns, priority=prio)
    return sim


def test_admission_fair_sharing_lets_the_lighter_tenant_go_first() -> None:
    # 4 of 8 left. Tenant a holds 4/8 = 0.5; b holds 0. b's first goes (0 < 0.5), then b
    # holds 2/8 = 0.25 < 0.5 and its second goes too: the queue is full before a's
    # higher-priority workloads are reached.
    sim = afs_sim("UsageBasedAdmissionFairSharing")
    assert reserved(sim.decide()) == ["b-low-1", "b-low-2"]


def test_admission_fair_sharing_takes_each_tenant_s_head_once() -> None:
    # Both tenants start at 0: a's older head goes first, and then b is the lighter tenant.
    # The head taken off the queue is the one that was decided (a's), not b's (the top now).
    doc = cluster(
        cq("a", 8, cohort=None, admissionScope={"admissionMode": "UsageBasedAdmissionFairSharing"})
    )
    doc["localQueues"] = [
        {"namespace": "tenant-a", "name": "lq", "clusterQueue": "a"},
        {"namespace": "tenant-b", "name": "lq", "clusterQueue": "a"},
    ]
    sim = QueueSim(doc)
    sim.submit("a-1", 2, "lq", namespace="tenant-a")
    sim.submit("a-2", 2, "lq", namespace="tenant-a")
    sim.submit("b-1", 2, "lq", namespace="tenant-b")
    assert reserved(sim.decide()) == ["a-1", "b-1", "a-2"]


def test_without_admission_fair_sharing_priority_orders_the_queue() -> None:
    sim = afs_sim("NoAdmissionFairSharing")
    assert reserved(sim.decide()) == ["a-high-1", "a-high-2"]


# -- fair sharing across ClusterQueues -------------------------------------------------------


@pytest.mark.parametrize(("enable", "winner"), [(True, "b-share"), (False, "a-prio")])
def test_fair_sharing_admits_the_lower_share_after_admission_first(
    enable: bool, winner: str
) -> None:
    # a (4), b (4), c (8, idle lender) in one cohort: lendable 16. a already uses 8.
    # a's head wants 4: a would borrow 8 -> 1000 * 8 / 16 = 500.
    # b's head wants 6: b would borrow 2 -> 1000 * 2 / 16 = 125.
    # 8 left, room for one. With fair sharing b's goes first despite a's priority and age;
    # the classic order (both borrow) is by priority.
    sim = QueueSim(cluster(cq("a", 4), cq("b", 4), cq("c", 8), fairSharing={"enable": enable}))
    admit(sim, ("a-running", 8, "a"))
    sim.submit("a-prio", 4, "a", priority=10)
    sim.submit("b-share", 6, "b", priority=0)
    assert reserved(sim.decide()) == [winner]


def test_fair_sharing_compares_subtrees_at_each_cohort() -> None:
    # root (own 8) <- x <- qx1 (4), qx2 (4); root <- y <- qy (4). Everything: 20, lendable 20.
    # qx2 already uses 10, so x borrows 2 from root. 10 left: room for one of the heads.
    # qx1's head wants 6: qx1 borrows 2 (share 100) but x would borrow 8 (share 400).
    # qy's head wants 7: qy and y borrow 3 (share 150).
    # At root, x (400) is compared with y (150): qy's head goes first. Comparing the
    # ClusterQueues' own shares (100 < 150) would pick qx1's.
    root_quota = [{"coveredResources": [GPU], "flavors": [{"name": "f", "resources": [quota(8)]}]}]
    sim = QueueSim(
        cluster(
            cq("qx1", 4, cohort="x"),
            cq("qx2", 4, cohort="x"),
            cq("qy", 4, cohort="y"),
            cohorts=[
                {"name": "root", "resourceGroups": root_quota},
                {"name": "x", "parentName": "root"},
                {"name": "y", "parentName": "root"},
            ],
            fairSharing={"enable": True},
        )
    )
    admit(sim, ("qx2-running", 10, "qx2"))
    sim.submit("x-head", 6, "qx1")
    sim.submit("y-head", 7, "qy")
    assert reserved(sim.decide()) == ["y-head"]
