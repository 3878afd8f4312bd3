"""A head's flavor assignment is worked out again before it is admitted only when another
verdict was processed since it was nominated (issue 16: the queue assigned every admitted
workload's flavors twice in a row, ~10 % of a cycle outside placement). Kueue's order
within a cohort (kueue.md §1.4: workloads that do not borrow go first) still sees the
room an earlier admission of the same round took."""

from __future__ import annotations

from typing import Any

import pytest

from muster.core.queueing import admit
from tests.unit.test_queueing_admission import kueue_example, reserved


def _count_reassignments(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The workloads ``process`` nominates again (the cycle's own nominations, which
    cycle.py imported by name, are not counted)."""
    again: list[str] = []
    nominate = admit.nominate

    def counting(snap: Any, cq: Any, wl: Any, *args: Any) -> Any:
        again.append(wl.id)
        return nominate(snap, cq, wl, *args)

    monkeypatch.setattr(admit, "nominate", counting)
    return again


def test_a_lone_queues_heads_are_assigned_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """One ClusterQueue: each round has one head, nothing is processed between its
    nomination and its admission, so it is not assigned again."""
    sim = kueue_example()
    for i in range(4):
        sim.submit(f"w{i}", 2)
    again = _count_reassignments(monkeypatch)
    assert reserved(sim.decide()) == ["w0", "w1", "w2", "w3"]
    assert again == []


def test_a_borrower_nominated_in_the_same_round_is_assigned_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """kueue.md §1.4: in a round, a's head (within its nominal quota) goes before b's (which
    borrows a's idle 9). Each fitted when nominated; once a's head took its quota, b's
    is assigned again and no longer fits: the cohort never holds more than 21."""
    sim = kueue_example()
    sim.submit("mine", 9, "a")
    sim.submit("borrower", 21, "b")
    again = _count_reassignments(monkeypatch)
    assert reserved(sim.decide()) == ["mine"]
    assert "borrower" in again and "mine" not in again
