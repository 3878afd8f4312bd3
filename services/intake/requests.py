"""Standalone ProvisioningRequests (GKE's DWS without a queue): create, read, list and
delete. Their spec is immutable, as in Kubernetes (``core/intake/requests``)."""

from __future__ import annotations

import time
from typing import Any

from muster.core import inputs
from muster.core.access.policy import Action
from muster.core.access.tokens import Principal
from muster.core.events import StreamAppend
from muster.core.intake import requests as provreqs
from muster.core.intake.refusal import not_found
from muster.store import ConcurrencyConflict
from services.intake import paging
from services.intake.context import Context, decided
from services.intake.errors import Refused
from services.intake.paging import MAX_LIST


class Requests:
    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx

    async def create(self, who: Principal, body: object) -> tuple[dict[str, Any], bool]:
        """The request, and whether this call created it (the same spec again: False)."""
        spec = decided(provreqs.read(who, body))
        self.ctx.access.rate(who, 1)
        new = inputs.provisioning_request(spec, time.time())
        created = True
        try:
            await self.ctx.committer.append(StreamAppend(new.stream_id, 0, [new]))
            self.ctx.loop.appended()
        except ConcurrencyConflict:
            # Its first event alone (what created it), however long its stream has grown.
            firsts = await self.ctx.loop.store.first_events([new.stream_id])
            first = firsts[new.stream_id].event
            refused = provreqs.conflict(spec, getattr(first, "spec", None))
            if refused is not None:
                raise Refused(refused) from None
            created = False
        await self.ctx.loop.step()
        return self._json(spec.key), created

    async def page(
        self,
        who: Principal,
        namespace: str | None = None,
        only_standalone: bool = False,
        limit: int = MAX_LIST,
        after: str | None = None,
    ) -> dict[str, Any]:
        """Every request, standalone and made for queued workloads, oldest first. Those of
        queued workloads belong to no namespace: only a caller that sees all sees them."""
        await paging.prepare(self.ctx, who, namespace, limit)
        visible = self.ctx.access.visible
        items = [
            v
            for v in self.ctx.state.requests.values()
            if (v.spec is not None or not only_standalone)
            and (namespace is None or (v.spec is not None and v.spec.namespace == namespace))
            and visible(who, v.spec.namespace if v.spec is not None else None)
        ]
        return paging.page(items, limit, after, key=lambda v: v.id, render=lambda v: v.to_json())

    async def get(self, who: Principal, namespace: str, name: str) -> dict[str, Any]:
        self.ctx.access.require(who, Action.READ, namespace)
        await self.ctx.loop.step()
        rid = f"{namespace}/{name}"
        if rid not in self.ctx.state.requests:
            raise Refused(not_found(f"ProvisioningRequest {rid}"))
        return self._json(rid)

    async def delete(self, who: Principal, namespace: str, name: str) -> dict[str, Any]:
        await self.ctx.loop.step()
        rid = f"{namespace}/{name}"
        view = self.ctx.state.requests.get(rid)
        await self.ctx.record(decided(provreqs.delete(who, namespace, name, view, time.time())))
        return self._json(rid)

    def _json(self, rid: str) -> dict[str, Any]:
        view = self.ctx.state.requests.get(rid)
        return view.to_json() if view is not None else {"id": rid, "status": "Pending"}
