"""Admin operations over the log itself."""

from __future__ import annotations

from typing import Any

from muster.core.access.policy import Action
from muster.core.access.tokens import Principal
from muster.core.model.times import rfc3339
from muster.core.queueing.decider import QueueDecider
from muster.runtime import admin
from services.intake.context import Context
from services.intake.errors import refuse


class Admin:
    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx

    async def replay(self, who: Principal, until: int | None = None) -> dict[str, Any]:
        """Rebuild the queue's state from the store, never from a snapshot."""
        self.ctx.access.require(who, Action.ADMIN)
        if until is not None and until < 0:
            raise refuse("InvalidQuery", "until must be a position >= 0", "untilPosition")
        decider = QueueDecider()
        runner = await admin.rebuild(self.ctx.loop.store, decider, until_position=until or None)
        now = runner.state.now
        return {
            "position": runner.position,
            "time": rfc3339(now) if now else None,  # the state's time, as every time shown
            "summary": decider.summary(runner.state),
        }
