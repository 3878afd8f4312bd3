"""``GET /v1/report``: accounting (``muster report``) over a time range, from intake's
fold of the log (``core/views/accounting.py``); a tenant sees its own namespaces."""

from __future__ import annotations

import time
from typing import Any

from muster.core.access.policy import Action, visible_namespaces
from muster.core.access.tokens import Principal
from muster.core.model.fields import InvalidInput
from muster.core.model.times import parse_instant, rfc3339
from muster.core.views import accounting
from services.intake.context import Context
from services.intake.errors import refuse

TIMES = ("submitTime", "startTime", "endTime")


class Report:
    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx

    async def report(
        self,
        who: Principal,
        since: str | None = None,
        until: str | None = None,
        namespace: str | None = None,
    ) -> dict[str, Any]:
        now = time.time()
        lo, hi = _instant(since, now, "since"), _instant(until, now, "until")
        if lo is not None and hi is not None and hi <= lo:
            raise refuse("InvalidQuery", "must be later than since", "until")
        if namespace:
            self.ctx.access.require(who, Action.READ, namespace)
        allowed = visible_namespaces(who)
        scope = frozenset({namespace}) if namespace else allowed
        await self.ctx.loop.step()
        state = self.ctx.state
        queues = {k: q.cluster_queue for k, q in state.queue.local_queues.items()}
        found = accounting.report(state.usage.values(), now, lo, hi, scope, queues)
        for row in found["workloads"]:
            row.update({k: rfc3339(row[k]) for k in TIMES})
            view = state.workloads.get(row["id"])
            if view is not None:  # the status every other view shows (Running, ...)
                row["status"] = view.status
        found.update(since=rfc3339(lo), until=rfc3339(hi), now=rfc3339(now))
        return found


def _instant(raw: str | None, now: float, name: str) -> float | None:
    if not raw:
        return None
    try:
        return parse_instant(raw, now, name)
    except InvalidInput as exc:
        raise refuse("InvalidQuery", exc.problem, name) from None
