"""A moment in the log, as ``explain --at`` takes it.

* RFC 3339 (``2026-11-26T10:03:00Z``, an offset, or a date alone: its midnight in UTC);
* relative to now: ``-5m``, ``-2h``, ``-90s``, ``-1d`` (a minus sign and a duration);
* a log position: ``@12345``, or a bare integer (``12345``).

A bare number is a position, never epoch seconds: "at 1732615380" reads as a position
too large for most logs, and says so, rather than silently meaning a time. ``now`` is an
argument: the core reads no clock.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime

from muster.core.model.fields import InvalidInput, parse_duration

_POSITION = re.compile(r"^@?([0-9]+)$")
HINT = (
    "give an RFC 3339 time (2026-11-26T10:03:00Z), a relative one (-5m, -2h) "
    "or a log position (@12345)"
)


@dataclass(frozen=True, slots=True)
class At:
    """Either a log position or a time (seconds since the epoch), never both."""

    position: int | None = None
    time: float | None = None


def parse_at(raw: str, now: float, field: str = "at") -> At:
    """``raw`` as a point in the log; ``InvalidInput`` naming ``field`` otherwise."""
    text = raw.strip()
    if not text:
        raise InvalidInput(field, f"empty; {HINT}")
    if m := _POSITION.match(text):
        return At(position=int(m.group(1)))
    if text.startswith("-"):
        try:
            return At(time=now - parse_duration(text[1:], field))
        except InvalidInput:
            raise InvalidInput(field, f"{raw!r} is not a relative time; {HINT}") from None
    return At(time=_rfc3339(text, raw, field))


def _rfc3339(text: str, raw: str, field: str) -> float:
    try:
        moment = datetime.fromisoformat(text.replace("z", "Z"))
        moment.timestamp()  # out of range for some offsets at the ends of the calendar
    except (ValueError, OverflowError):
        raise InvalidInput(field, f"{raw!r} is not a time; {HINT}") from None
    if moment.tzinfo is None:
        if "T" in text.upper() or " " in text:
            raise InvalidInput(field, f"{raw!r} has no time zone (add Z or an offset)")
        moment = moment.replace(tzinfo=UTC)  # a date alone: its midnight in UTC
    return moment.timestamp()
