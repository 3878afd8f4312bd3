"""The cyclic collector around a service's life: paused for a rebuild, settled after
start-up (runtime/memory.py)."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from muster.runtime.memory import YOUNG_THRESHOLD, collection_paused, settle_collector


@pytest.fixture
def collector() -> Iterator[None]:
    """Whatever a test does to the collector is undone."""
    threshold, enabled = gc.get_threshold(), gc.isenabled()
    yield
    gc.unfreeze()
    gc.set_threshold(*threshold)
    (gc.enable if enabled else gc.disable)()


def test_a_pause_ends_as_it_began(collector: None) -> None:
    gc.enable()
    with collection_paused():
        assert not gc.isenabled()
    assert gc.isenabled()
    gc.disable()
    with collection_paused():
        pass
    assert not gc.isenabled()  # a pause does not switch on what was off


def test_settling_freezes_start_up_and_widens_the_young_generation(collector: None) -> None:
    gc.unfreeze()
    built_at_start_up = [[i] for i in range(1000)]
    older = gc.get_threshold()[1:]
    settle_collector()
    assert gc.get_freeze_count() >= len(built_at_start_up)
    assert gc.get_threshold() == (YOUNG_THRESHOLD, *older)
