"""core/pickling.compact: slotted dataclasses pickle as a tuple of their fields' values and
come back equal, frozen ones included; what the snapshots of explain --at are made of."""

from __future__ import annotations

import pickle
from dataclasses import dataclass, field

import pytest

from muster.core.model.workload import PodSet, WorkloadSpec
from muster.core.pickling import compact
from muster.core.queueing.state import WorkloadEntry


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
