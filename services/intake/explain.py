"""``GET /v1/workloads/{id}/explain[?at=]``: a workload's state and why, now or at a past
point of the log (``core/explain.py``). Now: intake's own fold and its cached dry run.
At a past point: the queue's state rebuilt from the store, from the newest history
snapshot before it (``runtime/history.py``)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from muster.core import explain
from muster.core.access.policy import Action
from muster.core.access.tokens import Principal
from muster.core.model.fields import InvalidInput
from muster.core.runner import DeciderRunner
from muster.core.timepoint import parse_at
from muster.core.views.workloads import WorkloadView
from muster.runtime import history
from services.intake.context import Context
from services.intake.errors import refuse
from services.intake.pending import Pending
from services.intake.workloads import own


class Explain:
    def __init__(self, ctx: Context, pending: Pending) -> None:
        self.ctx = ctx
        self.pending = pending
        # The state the last past-point question rebuilt: the next one at or after it goes
        # on from it (a time slider moving forward); one question at a time uses it.
        self._kept: DeciderRunner[Any] | None = None
        self._lock = asyncio.Lock()

    async def explain(self, who: Principal, wid: str, at: str | None = None) -> dict[str, Any]:
        await self.ctx.loop.step()
        view = own(self.ctx, who, wid, Action.READ)
        queued = view.gang_id or view.id  # a gang member is explained by its gang
        if at is None:
            return _member(await self._now(queued), view)
        try:
            point = parse_at(at, time.time())
        except InvalidInput as exc:
            raise refuse("InvalidQuery", exc.problem, "at") from None
        if point.position is not None and point.position > self.ctx.loop.runner.position:
            raise refuse(
                "InvalidQuery",
                f"position {point.position} is past the log's end "
                f"({self.ctx.loop.runner.position})",
                "at",
            )
        async with self._lock:
            rebuilt = await history.state_at(self.ctx.loop.store, point, kept=self._kept)
            self._kept = rebuilt.runner
            position = rebuilt.runner.position
            events = await self._history(queued)
            # The dry run over a state of its own: off the event loop, as the fold was.
            # Named from intake's own state: the queue's keeps the latest ended only.
            found = await asyncio.to_thread(
                explain.explain,
                rebuilt.runner.state,
                queued,
                events,
                position,
                names=self.ctx.state.queue,
            )
        return _member(found.to_json(), view)

    async def _now(self, wid: str) -> dict[str, Any]:
        loop = self.ctx.loop
        position = loop.runner.position
        state = self.ctx.state.queue
        item = self.pending.item(wid) if wid in state.pending else None
        found = explain.explain(state, wid, await self._history(wid), position, item)
        return found.to_json()

    async def _history(self, wid: str) -> list[Any]:
        return await self.ctx.loop.store.read_correlated(wid)


def _member(body: dict[str, Any], view: WorkloadView) -> dict[str, Any]:
    """A gang member is explained by its gang's workload; before the gang formed, that
    workload is not in the queue yet: say why."""
    if view.gang_id is not None and body["reason"] == "NotSubmitted":
        body["status"], body["reason"] = "Pending", "GangIncomplete"
        body["message"] = (
            f"gang {view.gang} of {view.gang_size} members was not complete at position "
            f"{body['position']}: its workload is submitted with its last member"
        )
    if view.gang_id is not None:
        body["gang"] = view.gang_json()
    return body
