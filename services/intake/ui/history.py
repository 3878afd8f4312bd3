"""Intake's read model as it was at a past position of the log, for the UI's time slider.

The state is rebuilt by ``runtime/history.py`` with the same view intake folds live
(``WorkloadsView``), from the newest history snapshot at or before the position, as
``explain --at`` rebuilds the queue's. One rebuilt state is kept and folded forward:
moving the slider later folds only what lies between; moving it earlier starts again
from a snapshot or the beginning. A caller renders what it needs while it holds the
state (``at`` is a context manager holding the lock), so no other request folds it
further meanwhile.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

from muster.core.runner import DeciderRunner
from muster.core.timepoint import At
from muster.core.views.workloads import WorkloadsState, WorkloadsView
from muster.runtime import history
from muster.store import SqlEventStore

# Events read at a time while looking for the position of a moment.
BATCH = 2_000


class History:
    def __init__(self, store: SqlEventStore) -> None:
        self.store = store
        self._runner: DeciderRunner[Any] | None = None
        self._lock = asyncio.Lock()

    @contextlib.asynccontextmanager
    async def at(self, position: int) -> AsyncIterator[WorkloadsState]:
        """The read model as it was right after ``position`` (held until the block ends)."""
        async with self._lock:
            rebuilt = await history.state_at(
                self.store, At(position=position), decider=WorkloadsView(), kept=self._runner
            )
            self._runner = rebuilt.runner
            state = rebuilt.runner.state
            assert isinstance(state, WorkloadsState)
            yield state

    async def position_at(self, when: float) -> int:
        """The last position before the first event that occurred after ``when`` (as
        ``muster replay --until TIME`` cuts the log)."""
        after = 0
        while True:
            envs = await self.store.read_all(after, limit=BATCH)
            past = next((e for e in envs if e.occurred_at > when), None)
            if past is not None:
                return past.position - 1
            if len(envs) < BATCH:
                return envs[-1].position if envs else after
            after = envs[-1].position
