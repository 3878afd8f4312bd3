"""Event ids (store/rows.py ``EventIds``): a UUID's form and version, unique within a
process without a draw per event, and drawn afresh in a forked child and before the
counter runs out."""

from __future__ import annotations

import os
import uuid

import pytest

from muster.store.rows import EventIds, new_event_id


def test_ids_are_version_4_uuids_and_unique() -> None:
    ids = [new_event_id() for _ in range(10_000)]
    assert len(set(ids)) == len(ids)
    assert {uuid.UUID(i).version for i in ids} == {4}
    assert all(str(uuid.UUID(i)) == i for i in ids[:10])  # canonical text


def test_two_generators_draw_apart() -> None:
    a, b = EventIds(), EventIds()
    assert a()[:24] != b()[:24]


def test_a_counter_at_its_end_draws_again() -> None:
    ids = EventIds()
    ids._next = 0xFFFFFFFFFFFF
    last, after = ids(), ids()
    assert last.endswith("ffffffffffff")
    assert after[:24] != last[:24] and uuid.UUID(after).version == 4


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork here")
def test_a_forked_child_does_not_repeat_its_parents_ids() -> None:
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its next id, to the parent
        os.close(read)
        os.write(write, new_event_id().encode())
        os._exit(0)
    os.close(write)
    child = os.read(read, 64).decode()
    os.close(read)
    os.waitpid(pid, 0)
    mine = new_event_id()
    assert child[:24] != mine[:24]
