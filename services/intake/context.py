"""What intake's operations share: the loop folding the log into intake's state, the
access checks, and the group committer single submissions share transactions through."""

from __future__ import annotations

import time
from typing import TypeVar

from muster.core import inputs
from muster.core.events import NewEvent, StreamAppend
from muster.core.intake.refusal import Refusal
from muster.core.views.workloads import WorkloadsState
from muster.runtime.loop import DeciderLoop
from muster.runtime.settings import Settings
from services.intake.access import Access
from services.intake.batcher import GroupCommitter
from services.intake.errors import Refused

T = TypeVar("T")


class Context:
    def __init__(self, loop: DeciderLoop, access: Access) -> None:
        self.loop = loop
        self.access = access
        self.committer = GroupCommitter(
            loop.store, producer=inputs.INTAKE, on_commit=loop.fold_appended
        )

    @property
    def settings(self) -> Settings:
        return self.loop.settings

    @property
    def state(self) -> WorkloadsState:
        state = self.loop.runner.state
        assert isinstance(state, WorkloadsState)
        return state

    async def record(self, new: NewEvent) -> None:
        """Append a request (cancel, delete) at any stream version, and fold it."""
        await self.loop.store.append(
            [StreamAppend(new.stream_id, None, [new])],
            producer=inputs.INTAKE,
            recorded_at=time.time(),
        )
        self.loop.appended()
        await self.loop.step()


def decided(got: T | Refusal) -> T:
    """What the core decided, or its refusal raised for the transport to answer."""
    if isinstance(got, Refusal):
        raise Refused(got)
    return got
