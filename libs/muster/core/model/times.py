"""Instants as users write and read them: RFC 3339 (``2026-11-26T10:03:00Z``), seconds
since the epoch, or a time relative to now (``-5m``, ``2h`` ago as ``-2h``)."""

from __future__ import annotations

import math
from datetime import UTC, datetime
from typing import overload

from muster.core.model.fields import InvalidInput, parse_duration


@overload
def rfc3339(seconds: float) -> str: ...
@overload
def rfc3339(seconds: None) -> None: ...
@overload
def rfc3339(seconds: float | None) -> str | None: ...


def rfc3339(seconds: float | None) -> str | None:
    """Every time muster shows: RFC 3339 in UTC, as Kubernetes prints timestamps, to the
    millisecond when it has any (events a few ms apart stay in order)."""
    if seconds is None:
        return None
    moment = datetime.fromtimestamp(seconds, UTC)
    spec = "milliseconds" if moment.microsecond >= 1000 else "seconds"
    return moment.isoformat(timespec=spec).replace("+00:00", "Z")


def parse_instant(raw: str, now: float, path: str) -> float:
    """Seconds since the epoch from RFC 3339 (UTC when no zone is named), epoch seconds, or
    ``-<duration>`` (or ``<duration>`` with a unit) before ``now``."""
    text = raw.strip()
    if text.startswith("-"):
        return now - parse_duration(text[1:], path)
    try:
        value = float(text)
    except ValueError:
        pass
    else:
        if not math.isfinite(value):
            raise InvalidInput(path, f"{raw!r} is not a finite time")
        return value
    try:
        at = datetime.fromisoformat(text)
    except ValueError:
        if text[-1:].isalpha():  # "2h": that long ago (a shell eats a leading "-" less)
            try:
                return now - parse_duration(text, path)
            except InvalidInput:
                pass
        raise InvalidInput(
            path,
            f"{raw!r} is not a time: give RFC 3339 (2026-11-26T10:03:00Z), epoch "
            "seconds, or a duration before now (5m, -2h)",
        ) from None
    return (at if at.tzinfo else at.replace(tzinfo=UTC)).timestamp()
