"""Timer streams (``timer-<owner>``): a deadline in some service's state has passed."""

from __future__ import annotations

from dataclasses import dataclass

from muster.core.events.base import Event, event_class


def stream(owner: str) -> str:
    return f"timer-{owner}"


@event_class("timer.fired")
@dataclass(frozen=True, slots=True, kw_only=True)
class TimerFired(Event):
    owner: str
    deadline: float
