"""Kueue's visibility API: pending workloads in admission order, with their positions
and the reason each waits."""

from __future__ import annotations

import time
from typing import Any

from muster.core.access.policy import Action
from muster.core.access.tokens import Principal
from muster.core.intake.refusal import not_found
from muster.core.queueing import visibility
from muster.runtime.loop import DeciderLoop
from services.intake.context import Context
from services.intake.errors import Refused, refuse


class Pending:
    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.cache = _Visibility()

    async def page(
        self,
        who: Principal,
        *,
        cluster_queue: str | None = None,
        local_queue: tuple[str, str] | None = None,
        limit: int = 1000,
        offset: int = 0,
    ) -> dict[str, Any]:
        if not 0 < limit <= visibility.MAX_LIMIT or offset < 0:
            raise refuse(
                "InvalidQuery",
                f"limit must be 1 to {visibility.MAX_LIMIT} and offset at least 0",
                "limit",
            )
        ctx = self.ctx
        if local_queue is not None:
            ctx.access.require(who, Action.READ, local_queue[0])
        await ctx.loop.step()
        if cluster_queue is not None and cluster_queue not in ctx.state.queue.cluster_queues:
            raise Refused(not_found(f"ClusterQueue {cluster_queue}"))
        if local_queue is not None and "/".join(local_queue) not in ctx.state.local_queues:
            raise Refused(not_found(f"LocalQueue {local_queue[1]} in namespace {local_queue[0]}"))
        items = [
            i
            for i in self.cache.at(ctx.loop).items
            if ctx.access.visible(who, i.workload.spec.namespace)
        ]
        return {
            "items": visibility.page(
                items,
                cluster_queue=cluster_queue,
                local_queue=local_queue,
                limit=limit,
                offset=offset,
            )
        }

    def item(self, wid: str) -> visibility.PendingItem | None:
        """The dry run's item for a pending workload: the one source of its current reason
        (GET, the list, the pending pages and explain all take it from here)."""
        return self.cache.at(self.ctx.loop, wid).by_id.get(wid)

    def reasons(self) -> dict[str, visibility.PendingItem]:
        """Every pending workload's item, by id (the list's reasons)."""
        return self.cache.at(self.ctx.loop).by_id

    def place(self, wid: str) -> dict[str, Any] | None:
        """A pending workload's positions and reason, as the list shows them."""
        item = self.item(wid)
        if item is None:
            return None
        current = item.to_json()
        return {
            k: current[k]
            for k in ("positionInClusterQueue", "positionInLocalQueue", "reason", "message")
        }


class _Visibility:
    """The dry-run cycle behind the visibility API. It costs O(pending), so under load it
    is recomputed at most every ``MAX_AGE`` seconds (sooner for a workload it lacks)."""

    MAX_AGE = 1.0

    def __init__(self) -> None:
        self.position = -1
        self.computed_at = 0.0
        self.items: list[visibility.PendingItem] = []
        self.by_id: dict[str, visibility.PendingItem] = {}

    def at(self, loop: DeciderLoop, wanted: str | None = None) -> _Visibility:
        moved = loop.runner.position != self.position
        stale = time.monotonic() - self.computed_at >= self.MAX_AGE
        if moved and (stale or self.position < 0 or (wanted and wanted not in self.by_id)):
            self.items = visibility.pending(loop.runner.state.queue)
            self.by_id = {i.workload.id: i for i in self.items}
            self.position = loop.runner.position
            self.computed_at = time.monotonic()
        return self
