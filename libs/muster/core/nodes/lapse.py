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
    (re)appears gets a full grace period before it can be declared lost.

    With ``interval`` (the agents' heartbeat period), a node lapses with its agent: when
    one node of an agent lapses, its other nodes that have missed two rounds go too. An
    agent killed mid-round leaves its nodes' last beats up to a round apart, and the
    nodes it beat last must not stay placeable for that round after the first is lost.
    """

    grace: float
    interval: float | None = None
    last_beat: dict[str, float] = field(default_factory=dict)
    watched_since: dict[str, float] = field(default_factory=dict)
    agent_of: dict[str, str] = field(default_factory=dict)

    def beat(self, node: str, at: float, agent: str | None = None) -> None:
        self.last_beat[node] = max(at, self.last_beat.get(node, at))
        if agent:
            self.agent_of[node] = agent

    def lapsed(self, watched: Iterable[str], now: float) -> list[str]:
        """The watched nodes silent for longer than the grace period (or gone with their
        agent), by name."""
        current = set(watched)
        for node in list(self.watched_since):
            if node not in current:
                del self.watched_since[node]
        silent = {}
        for node in current:
            since = self.watched_since.setdefault(node, now)
            silent[node] = now - max(self.last_beat.get(node, since), since)
        out = {node for node, s in silent.items() if s > self.grace}
        if self.interval is not None:
            gone = {self.agent_of[n] for n in out if n in self.agent_of}
            out |= {
                node
                for node, s in silent.items()
                if s > 2 * self.interval and self.agent_of.get(node) in gone
            }
        return sorted(out)


@dataclass(slots=True)
class Hearing:
    """Up to when the watch has heard every beat: the send time of its own latest probe
    read back from each partition of the heartbeat topic (beats and probes share a
    partition's order, and the probe's time is the watch's own clock).

    A silence is measured up to ``through()``, never to the wall clock: a stalled
    consumer or broker freezes every silence instead of making every node look dead.
    Until a probe came back on every partition the watch has heard nothing, and declares
    nothing.
    """

    partitions: frozenset[int] = frozenset()
    heard: dict[int, float] = field(default_factory=dict)

    def back(self, partition: int, sent_at: float) -> None:
        self.heard[partition] = max(sent_at, self.heard.get(partition, sent_at))

    def through(self) -> float | None:
        if not self.partitions or not self.partitions <= self.heard.keys():
            return None
        return min(self.heard[p] for p in self.partitions)
