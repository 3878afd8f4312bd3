"""A step rings the store's doorbell once, for all it appended (issue 16: per-step costs on
the one-a-request paths). The queue appends its releases, then the cycle that sees them;
the node agent a timer's event, then what it made due. Each ring woke every service it
concerned for a read and a fold, so two rings a step cost each reader a second step."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from muster.core.events import Folded, NewEvent, StreamAppend
from muster.core.events import timer as tev
from muster.runtime.loop import DeciderLoop
from muster.runtime.metrics import ServiceMetrics
from muster.runtime.settings import load
from muster.store import SqlEventStore, bell
from muster.store.bell import Interest, bell_path
from muster.store.migrate import upgrade_async


@dataclass
class _Count:
    now: float = 0.0
    folded: int = 0


class _TwoDecisions:
    """Decides one timer event at a time until it has folded ``wanted`` of its own: a step
    of it appends ``wanted`` times (as the queue appends releases, then admissions)."""

    name = "twice"
    categories = frozenset({"timer"})
    snapshot_format = "twice-v1"

    def __init__(self, wanted: int = 2, deadline: float | None = None) -> None:
        self.wanted, self.deadline = wanted, deadline

    def initial(self) -> _Count:
        return _Count()

    def evolve(self, state: _Count, envelope: Folded) -> _Count:
        state.now = max(state.now, envelope.occurred_at)
        if envelope.stream_id == "timer-decided":
            state.folded += 1
        return state

    def decide(self, state: _Count) -> list[NewEvent]:
        if state.folded >= self.wanted or (self.deadline and state.now < self.deadline):
            return []
        event = tev.TimerFired(owner="decided", deadline=state.now)
        return [NewEvent(stream_id="timer-decided", event=event, occurred_at=state.now)]

    def next_deadline(self, state: _Count) -> float | None:
        return self.deadline if self.deadline and state.now < self.deadline else None

    def summary(self, state: _Count) -> dict[str, Any]:
        return {}


async def _loop(tmp_path: Path, decider: _TwoDecisions) -> tuple[DeciderLoop, list[Any]]:
    """A loop over a SQLite file whose bell records every ring it makes."""
    url = f"sqlite:///{tmp_path / 'muster.db'}"
    await upgrade_async(url)
    store = SqlEventStore(url)
    settings = load({}, store_url=url, kafka_bootstrap="unused:9092", poll_seconds=300)
    loop = DeciderLoop(decider, store, settings, ServiceMetrics())  # type: ignore[arg-type]
    rings: list[Any] = []
    fast = store._fast
    assert fast is not None
    real_ring = fast.bell.ring

    def ring(head: int, kinds: Any = ()) -> None:
        rings.append((head, set(kinds)))
        real_ring(head, kinds)

    fast.bell.ring = ring  # type: ignore[method-assign]
    return loop, rings


def _head_in_file(url: str, interest: Interest | None = None) -> int:
    fd = os.open(bell_path(url), os.O_RDONLY)
    try:
        return bell._head_in(fd, interest)
    finally:
        os.close(fd)


async def test_a_step_that_appends_twice_rings_once_with_the_last_head(tmp_path: Path) -> None:
    loop, rings = await _loop(tmp_path, _TwoDecisions(wanted=2))
    commits: list[int] = []
    real_append = loop.store.append

    async def append(batch: Any, **kw: Any) -> Any:
        done = await real_append(batch, **kw)
        commits.append(len(done))
        return done

    loop.store.append = append  # type: ignore[method-assign]
    try:
        await loop.step()
        appended = await loop.store.read_all()
        assert [e.stream_id for e in appended] == ["timer-decided", "timer-decided"]
        assert [e.producer for e in appended] == ["twice", "twice"]
        # Two commits (each decision was folded before the next was made), one ring.
        assert commits == [1, 1]
        assert rings == [(2, {("timer", "timer.fired")})]
        assert _head_in_file(loop.store.url) == 2
        assert _head_in_file(loop.store.url, Interest({"timer"}, {"timer.fired"})) == 2
        await loop.step()  # quiet: nothing appended, nothing rung
        assert len(rings) == 1
    finally:
        await loop.store.close()


async def test_a_timer_rings_once_for_its_event_and_what_it_made_due(tmp_path: Path) -> None:
    """The node agent's pod ends: the timer's event and the decisions it made due, one
    ring; and a timer that makes nothing due still rings for its own event."""
    loop, rings = await _loop(tmp_path, _TwoDecisions(wanted=1, deadline=5.0))
    try:
        await loop.step()
        assert rings == []  # before the deadline it decides nothing
        await loop._fire(5.0)
        kinds = [e.stream_id for e in await loop.store.read_all()]
        assert kinds == ["timer-twice", "timer-decided"]
        assert rings == [(2, {("timer", "timer.fired")})]
        await loop._fire(6.0)  # makes nothing due
        assert rings[1:] == [(3, {("timer", "timer.fired")})]
    finally:
        await loop.store.close()


async def test_an_append_told_not_to_ring_leaves_the_bell_to_the_caller(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'muster.db'}"
    await upgrade_async(url)
    store = SqlEventStore(url)
    try:
        first = await store.append(_timer("timer-a", 1.0), producer="t", recorded_at=0.0)
        assert _head_in_file(url) == 1
        more = await store.append(_timer("timer-b", 2.0), producer="t", recorded_at=0.0,
                                  ring=False)  # fmt: skip
        assert [e.position for e in more] == [2]
        assert _head_in_file(url) == 1  # committed, not rung
        store.ring([*first, *more])
        assert _head_in_file(url) == 2
        assert _head_in_file(url, Interest({"timer"}, {"timer.fired"})) == 2
        assert _head_in_file(url, Interest({"node"}, {"node.removed"})) == 0
    finally:
        await store.close()


def _timer(stream: str, at: float) -> list[StreamAppend]:
    new = NewEvent(stream_id=stream, event=tev.TimerFired(owner="t", deadline=at), occurred_at=at)
    return [StreamAppend(stream, None, [new])]


async def test_a_long_step_rings_before_it_ends(tmp_path: Path, monkeypatch: Any) -> None:
    """Downstream services do not wait for a long step's end (a batch's rounds) to start on
    its first decisions: a commit waits at most ``RING_WITHIN`` and one more decision."""
    monkeypatch.setattr("muster.runtime.loop.RING_WITHIN", 0.0)
    loop, rings = await _loop(tmp_path, _TwoDecisions(wanted=3))
    try:
        await loop.step()
        assert [head for head, _ in rings] == [2, 3]  # the first two at the second, then the end
    finally:
        await loop.store.close()
