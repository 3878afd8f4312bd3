"""Intake's read model as it was at a past position of the log, for the UI's time slider.

The state is rebuilt by folding the store from the beginning with the same view intake
folds live (``WorkloadsView``), never from a snapshot, as ``muster replay --until``
does. One rebuilt state is kept and folded forward: moving the slider later folds only
what lies between; moving it earlier starts again from the beginning. A caller renders
what it needs while it holds the state (``at`` is a context manager holding the lock),
so no other request folds it further meanwhile.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

from muster.core.runner import DeciderRunner
from muster.core.views.workloads import WorkloadsState, WorkloadsView
from muster.runtime.memory import collection_paused
from muster.store import SqlEventStore

# Events read and folded at a time: a fold holds intake's event loop (about 25 ms for
# 2,000 events), so other requests get their turn between batches.
BATCH = 2_000


class History:
    def __init__(self, store: SqlEventStore) -> None:
        self.store = store
        self._runner: DeciderRunner[Any] | None = None
        self._until = 0  # the position the kept state is the state at
        self._lock = asyncio.Lock()

    @contextlib.asynccontextmanager
    async def at(self, position: int) -> AsyncIterator[WorkloadsState]:
        """The read model as it was right after ``position`` (held until the block ends)."""
        async with self._lock:
            runner = self._runner
            if runner is None or position < self._until:
                runner = self._runner = DeciderRunner(WorkloadsView())
            await self._fold(runner, position)
            self._until = position
            state = runner.state
            assert isinstance(state, WorkloadsState)
            yield state

    async def _fold(self, runner: DeciderRunner[Any], until: int) -> None:
        with collection_paused():
            while True:
                envs = await self.store.read_all(
                    runner.position, categories=runner.categories, limit=BATCH, until=until
                )
                runner.fold(envs)
                if len(envs) < BATCH:
                    return

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
