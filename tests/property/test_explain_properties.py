"""Every view agrees: at any point of a random log, ``explain`` (the queue's fold and the
workload's history) says what intake's read model says: the same status and the same
Kueue conditions (kueue.md §1.14), the pending reason aside (explain's is the dry run's,
which GET overlays at its edge).

Random GPU jobs of random priority on existing nodes, a ClusterQueue that preempts lower
priorities (kueue.md §1.5), the log cut at a random position.
"""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from muster.core.explain import explain
from muster.core.model import parse
from muster.core.queueing.decider import QueueDecider
from muster.core.queueing.visibility import pending, pending_one
from muster.core.runner import DeciderRunner
from muster.core.sim.harness import build
from muster.core.views.workloads import WorkloadsView
from tests.property.test_dws_properties import SETTINGS
from tests.unit.harness_inputs import gpu_job, gpu_node_cluster

jobs = st.lists(
    st.tuples(
        st.integers(0, 60),  # submitted at
        st.integers(1, 3),  # pods
        st.sampled_from([2, 4, 8]),  # GPUs a pod
        st.integers(5, 80),  # seconds
        st.sampled_from([0, 0, 10]),  # priority
    ),
    min_size=1,
    max_size=8,
)


@given(jobs=jobs, cut=st.floats(0.0, 1.0))
@SETTINGS
def test_explain_and_intake_agree_at_any_point(jobs: list[Any], cut: float) -> None:
    cluster = gpu_node_cluster(
        "c", nodes=2, gpus=8, nominal=16, preemption={"withinClusterQueue": "LowerPriority"}
    )
    subs = [
        gpu_job(f"j{i}", at, pods, gpus, seconds, priority=prio)
        for i, (at, pods, gpus, seconds, prio) in enumerate(jobs)
    ]
    h = build(parse.cluster(cluster), subs)
    h.run()
    log = h.log.envelopes
    position = log[min(len(log) - 1, int(cut * len(log)))].position
    upto = [e for e in log if e.position <= position]
    queue: DeciderRunner[Any] = DeciderRunner(QueueDecider())
    queue.fold(upto)
    intake: DeciderRunner[Any] = DeciderRunner(WorkloadsView())
    intake.fold(upto)
    for wid, view in intake.state.workloads.items():
        history = [e for e in upto if e.correlation_id == wid]
        x = explain(queue.state, wid, history, position)
        assert x.status == view.status, (wid, x.reason, view.reason)
        mine = {c.type: c for c in x.conditions}
        theirs = {c.type: c for c in view.conditions.ordered()}
        assert mine.keys() == theirs.keys()
        for type_, c in mine.items():
            if x.status == "Pending" and type_ == "QuotaReserved":
                assert (c.status, c.at) == (theirs[type_].status, theirs[type_].at)
            else:
                assert c == theirs[type_]


@given(
    jobs=st.lists(
        st.tuples(
            st.integers(0, 30),  # submitted at
            st.integers(1, 3),  # pods
            st.sampled_from([2, 4, 8]),  # GPUs a pod
            st.integers(20, 80),  # seconds
            st.sampled_from([0, 0, 10]),  # priority
            st.sampled_from(["a", "b"]),  # namespace: its LocalQueue
        ),
        min_size=1,
        max_size=14,
    ),
    cut=st.floats(0.0, 1.0),
    strict=st.booleans(),
)
@SETTINGS
def test_one_pending_item_is_the_one_of_the_whole_list(
    jobs: list[Any], cut: float, strict: bool
) -> None:
    """What explain asks of the dry run for one workload (``pending_one``: its verdict
    alone, its positions counted) is that workload's item of the whole list (``pending``,
    Kueue's visibility API, kueue.md §1.10), positions and reason included."""
    queue_fields: dict[str, Any] = {"preemption": {"withinClusterQueue": "LowerPriority"}}
    if strict:
        queue_fields["queueingStrategy"] = "StrictFIFO"
    cluster = gpu_node_cluster("c", nodes=2, gpus=8, nominal=16, namespaces=("a", "b"),
                               **queue_fields)  # fmt: skip
    subs = [
        gpu_job(f"j{i}", at, pods, gpus, seconds, priority=prio, namespace=ns)
        for i, (at, pods, gpus, seconds, prio, ns) in enumerate(jobs)
    ]
    h = build(parse.cluster(cluster), subs)
    h.run()
    log = h.log.envelopes
    position = log[min(len(log) - 1, int(cut * len(log)))].position
    queue: DeciderRunner[Any] = DeciderRunner(QueueDecider())
    queue.fold(e for e in log if e.position <= position)
    whole = {i.workload.id: i for i in pending(queue.state)}
    for wid in queue.state.workloads:
        assert pending_one(queue.state, wid) == whole.get(wid), wid
