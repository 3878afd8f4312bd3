"""The queue service's decider: settle what holds quota, then run the admission cycle."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from muster.core.events import NewEvent
from muster.core.queueing import attained, figures, sharding
from muster.core.queueing import state as qs
from muster.core.queueing.cycle import admission_cycle
from muster.core.queueing.notebook import Notebook
from muster.core.queueing.reservations import next_reservation_time
from muster.core.queueing.settle import settle


class QueueDecider:
    """``name`` ``queue``: the one decider of every cohort tree. Any other name: one of a
    split queue's deciders, deciding for the trees it claims (``sharding.py``)."""

    categories = frozenset(
        {"config", "cloud", "workload", "admission", "provisioning", "node", "timer"}
    )
    snapshot_format = "queue-state-v26"
    clock_only = qs.clock_only_types()  # replay reads these without payload (core/decider.py)
    clock_only_when = qs.CLOCK_ONLY_WHEN  # and these, when the field is set
    fold_bare = staticmethod(qs.fold_bare)  # how it folds them (core/decider.py bare_fold)
    keeps_history = True  # its snapshots are kept by position too (explain --at)

    def __init__(self, name: str = sharding.UNSPLIT) -> None:
        self.name = name

    def initial(self) -> qs.QueueState:
        return qs.QueueState()

    # The state's own evolve, no wrapper around it: a replay calls it a million times.
    evolve = staticmethod(qs.evolve)

    def decide(self, state: qs.QueueState) -> list[NewEvent]:
        if self.name != sharding.UNSPLIT:
            return sharding.decide(state, self.name)
        settled = settle(state)
        if settled:
            # Fold the releases first: the cycle then sees the quota they free.
            return settled
        return admission_cycle(state)

    def decided_before(self, state: qs.QueueState) -> list[NewEvent]:
        """What the queue decided in ``state`` before a preemption in a cohort tree that
        reserved quota in the same cycle waited for the next one (``verify``): the cycle
        without that wait, on a fresh notebook (so ``decide``'s parking does not hide a
        lane). The unsplit queue's only: split deciders came after it."""
        fresh = replace(state, notes=Notebook())
        if self.name != sharding.UNSPLIT or settle(fresh):
            return []
        return admission_cycle(fresh, defer_preemptions=False)

    def next_deadline(self, state: qs.QueueState) -> float | None:
        """waitForPodsReady's next timeout, the end of a requeue backoff, of a
        preemption protection (minAdmitDuration), an attained-service level change, or a
        head's wait reaching its queue's backfill.reserveAfterSeconds."""
        config = state.wait_for_pods_ready
        times = []
        if config.enable:
            times = [
                at + config.timeout_seconds
                for at in (qs.pods_ready_clock(state.workloads[w]) for w in state.awaiting_pods)
                if at is not None
            ]
        times += [
            at
            for at in (state.workloads[w].requeue_at for w in state.backing_off)
            if at is not None
        ]
        if (protection := qs.protection_ends(state)) is not None:
            times.append(protection)
        # Attained-service levels move with time; they matter only while something waits.
        if state.pending and (due := attained.next_due(state)) is not None:
            times.append(due)
        if (reserving := next_reservation_time(state)) is not None:
            times.append(reserving)
        if (
            self.name != sharding.UNSPLIT
            and (claims := sharding.next_deadline(state, self.name)) is not None
        ):
            times.append(claims)
        return min((t for t in times if t > state.now), default=None)

    def summary(self, state: qs.QueueState) -> dict[str, Any]:
        return qs.summary(state)

    def admission_attempt(self, state: qs.QueueState, news: list[NewEvent]) -> str | None:
        """What ``decide(state)`` returning ``news`` was as an admission attempt (Kueue's
        ``kueue_admission_attempts_total``): see ``figures.admission_attempt``."""
        return figures.admission_attempt(state, news)
