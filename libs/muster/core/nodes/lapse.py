"""Which nodes stopped beating: the rule the queue's heartbeat watch applies.

Heartbeats are not in the store; the watch turns a lapse into a ``node.lost`` event,
and every decision after that follows from the event, so replay needs no heartbeats.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field


@dataclass(slots=True)
class Watch:
    """Last heartbeat per node, and since when each node has been watched: a node that
    (re)appears gets a full grace period before it can be declared lost."""

    grace: float
    last_beat: dict[str, float] = field(default_factory=dict)
    watched_since: dict[str, float] = field(default_factory=dict)

    def beat(self, node: str, at: float) -> None:
        self.last_beat[node] = max(at, self.last_beat.get(node, at))

    def lapsed(self, watched: Iterable[str], now: float) -> list[str]:
        """The watched nodes silent for longer than the grace period, by name."""
        current = set(watched)
        for node in list(self.watched_since):
            if node not in current:
                del self.watched_since[node]
        out = []
        for node in sorted(current):
            since = self.watched_since.setdefault(node, now)
            last = max(self.last_beat.get(node, since), since)
            if now - last > self.grace:
                out.append(node)
        return out
