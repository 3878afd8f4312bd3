"""The queue service's decider: settle what holds quota, then run the admission cycle."""

from __future__ import annotations

from typing import Any

from muster.core.events import Envelope, NewEvent
from muster.core.queueing import state as qs
from muster.core.queueing.cycle import admission_cycle
from muster.core.queueing.settle import settle


class QueueDecider:
    name = "queue"
    categories = frozenset({"config", "workload", "admission", "provisioning", "node", "timer"})
    snapshot_format = "queue-state-v2"

    def initial(self) -> qs.QueueState:
        return qs.QueueState()

    def evolve(self, state: qs.QueueState, envelope: Envelope) -> qs.QueueState:
        return qs.evolve(state, envelope)

    def decide(self, state: qs.QueueState) -> list[NewEvent]:
        settled = settle(state)
        if settled:
            # Fold the releases first: the cycle then sees the quota they free.
            return settled
        return admission_cycle(state)

    def next_deadline(self, state: qs.QueueState) -> float | None:
        return None

    def summary(self, state: qs.QueueState) -> dict[str, Any]:
        return qs.summary(state)
