"""core/pickling.compact: slotted dataclasses pickle as a tuple of their fields' values and
come back equal, frozen ones included; what the snapshots of explain --at are made of."""

from __future__ import annotations

import pickle
from dataclasses import dataclass, field, replace

import pytest

from muster.core.model import parse
from muster.core.model.workload import PodSet, WorkloadSpec
from muster.core.pickling import compact, swapper
from muster.core.queueing import state as qs
from muster.core.queueing.decider import QueueDecider
from muster.core.queueing.state import WorkloadEntry
from muster.core.runner import DeciderRunner
from muster.core.sim.harness import build
from tests.unit.harness_inputs import gpu_job, gpu_node_cluster


@compact
@dataclass(slots=True)
class Plain:
    a: int
    b: dict[str, int] = field(default_factory=dict)
    c: str | None = None


@compact
@dataclass(frozen=True, slots=True)
class Frozen:
    x: tuple[int, ...]
    inner: Plain


@compact
@dataclass(slots=True)
class One:
    only: float


@compact
@dataclass(slots=True)
class Empty:
    pass


@pytest.mark.parametrize(
    "value",
    [
        Plain(1, {"k": 2}, "c"),
        Frozen((1, 2), Plain(3)),
        One(0.5),
        Empty(),
    ],
)
def test_round_trip_is_equal(value: object) -> None:
    assert pickle.loads(pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)) == value


def test_the_state_is_the_values_in_field_order() -> None:
    assert Plain(1, {"k": 2}).__getstate__() == (1, {"k": 2}, None)
    assert One(2.0).__getstate__() == (2.0,)
    assert Empty().__getstate__() == ()


def test_a_frozen_class_stays_frozen_after_a_restore() -> None:
    restored = pickle.loads(pickle.dumps(Frozen((1,), Plain(2))))
    with pytest.raises(AttributeError):
        restored.x = (3,)


def test_a_swap_is_a_replace_of_the_named_fields_and_keeps_the_others() -> None:
    """``swapper``: the copy equals ``dataclasses.replace`` of those fields, is a new object,
    holds the given values themselves and the others' by identity, and stays frozen."""
    inner = Plain(3)
    value = Frozen((1, 2), inner)
    swap = swapper(Frozen, ("x",))
    copy = swap(value, (7,))
    assert copy == replace(value, x=(7,)) and copy is not value
    assert copy.inner is inner and value.x == (1, 2)
    with pytest.raises(AttributeError):
        copy.x = (8,)  # type: ignore[misc]
    spec = parse.workload({"name": "w", "queueName": "q", "podSets": [{"name": "a", "count": 2}]})
    pod_sets = (PodSet(name="b", count=1, requests={"cpu": 1}),)
    swapped = swapper(WorkloadSpec, ("pod_sets", "runtime", "failure_policy"))
    got = swapped(spec, pod_sets, spec.runtime, spec.failure_policy)
    assert got == replace(spec, pod_sets=pod_sets) and got.pod_sets is pod_sets


def test_shared_objects_stay_shared() -> None:
    """Pickle's memo still works: a spec two entries share is one object after a restore."""
    spec = WorkloadSpec(
        name="w",
        namespace="ns",
        queue_name="q",
        pod_sets=(PodSet(name="p", count=2, requests={"cpu": 1}),),
    )
    entries = [WorkloadEntry(id=f"w{i}", spec=spec, order=i, submitted_at=0.0) for i in range(2)]
    a, b = pickle.loads(pickle.dumps(entries))
    assert a == entries[0] and b == entries[1]
    assert a.spec is b.spec


def test_an_entry_pickles_smaller_than_with_field_names() -> None:
    """The point of the tuple: no field name per object (dataclasses' own state for a
    non-frozen class is a dict of them)."""
    spec = WorkloadSpec(
        name="w", namespace="ns", queue_name="q", pod_sets=(PodSet(name="p", count=1, requests={}),)
    )
    entry = WorkloadEntry(id="w", spec=spec, order=1, submitted_at=0.0)
    assert b"submitted_at" not in pickle.dumps(entry)


def test_a_backlog_of_one_template_holds_its_parts_once() -> None:
    """Equal pod sets, policies, shapes and pending reasons of waiting workloads are one
    object each in the queue's state (``state.share``), so its snapshot holds them once;
    the state is equal to one folded without the sharing."""
    cluster = gpu_node_cluster("c", nodes=1, gpus=8, nominal=8)
    h = build(parse.cluster(cluster), [gpu_job(f"j{i}", 0, 2, 8, 60) for i in range(6)])
    h.run(until=5)
    queue: DeciderRunner[qs.QueueState] = DeciderRunner(QueueDecider())
    queue.fold(h.log.envelopes)
    waiting = [queue.state.workloads[w] for w in sorted(queue.state.pending)]
    assert len(waiting) >= 2
    first, second = waiting[:2]
    assert first.spec.pod_sets is second.spec.pod_sets
    assert first.spec.failure_policy is second.spec.failure_policy
    assert first.shape is second.shape
    assert first.pending_reason is not None and first.pending_reason is second.pending_reason
    restored: DeciderRunner[qs.QueueState] = DeciderRunner(QueueDecider())
    restored.restore(queue.snapshot())
    again = [restored.state.workloads[w] for w in sorted(restored.state.pending)]
    assert again == waiting and again[0].spec.pod_sets is again[1].spec.pod_sets


def test_fresh_attempts_come_back_as_fresh_objects_of_their_own() -> None:
    """A workload that never held quota pickles its attempt as "a fresh one"; restored,
    each is its own object (they are changed in place once quota is reserved), and an
    attempt that did hold quota comes back field for field."""
    fresh = [qs.Attempt(), qs.Attempt()]
    a, b = pickle.loads(pickle.dumps(fresh))
    assert a == b == qs.Attempt() and a is not b and a.pods_started is not b.pods_started
    a.pods_started.add("p0")
    assert not b.pods_started
    used = qs.Attempt(attempt=2, cluster_queue="cq", usage={"gpu": {"nvidia.com/gpu": 8}})
    used.pods_started.add("p1")
    assert pickle.loads(pickle.dumps(used)) == used
    assert len(pickle.dumps(qs.Attempt())) < len(pickle.dumps(used))
