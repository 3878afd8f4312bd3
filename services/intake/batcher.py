"""Group commit for submissions: concurrent requests share one store transaction.

A transaction costs about the same for one event as for a hundred, so requests that
arrive while one is committing are appended together in the next. If any stream in a
group conflicts (a retried idempotency key), the group is retried one append at a time
so that only that request sees the conflict.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass, field

from muster.core.events import Envelope, StreamAppend
from muster.store import ConcurrencyConflict, SqlEventStore

MAX_GROUP = 500


@dataclass
class _Pending:
    item: StreamAppend
    done: asyncio.Future[Envelope] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future()
    )


class GroupCommitter:
    def __init__(self, store: SqlEventStore, producer: str) -> None:
        self.store = store
        self.producer = producer
        self._queue: asyncio.Queue[_Pending] = asyncio.Queue()
        self._task: asyncio.Task[None] | None = None
        self.groups = 0  # transactions committed (for tests and metrics)

    async def append(self, item: StreamAppend) -> Envelope:
        """Append one stream's single event; raises ConcurrencyConflict like the store."""
        if len(item.events) != 1:
            raise ValueError("the group committer appends one event per stream")
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._drain())
        pending = _Pending(item)
        await self._queue.put(pending)
        return await pending.done

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _drain(self) -> None:
        while True:
            group = [await self._queue.get()]
            while not self._queue.empty() and len(group) < MAX_GROUP:
                group.append(self._queue.get_nowait())
            await self._commit(group)

    async def _commit(self, group: list[_Pending]) -> None:
        try:
            envs = await self.store.append(
                [p.item for p in group], producer=self.producer, recorded_at=time.time()
            )
        except ConcurrencyConflict as conflict:
            if len(group) > 1:
                for p in group:
                    await self._commit([p])
            else:
                group[0].done.set_exception(conflict)
            return
        except Exception as exc:  # the store is away: every waiting request gets the error
            for p in group:
                if not p.done.done():
                    p.done.set_exception(exc)
            return
        self.groups += 1
        for p, env in zip(group, envs, strict=True):
            p.done.set_result(env)
