"""``kubectl apply`` for muster: queue objects (admin), workloads and standalone
ProvisioningRequests (the tenant's namespaces). The core reads and checks everything
first (``core/intake/applies``); the lot is appended in one transaction: a refusal
appends nothing, an accepted apply all of it."""

from __future__ import annotations

import time
from typing import Any

from muster.core import inputs
from muster.core.access.tokens import Principal
from muster.core.events import NewEvent, StreamAppend
from muster.core.events import workload as wev
from muster.core.intake import applies, submissions
from muster.core.intake import requests as provreqs
from muster.runtime import admin
from muster.store import ConcurrencyConflict
from services.intake.context import Context, decided
from services.intake.errors import Refused
from services.intake.objects import config_object
from services.intake.readers import ManifestReaders
from services.intake.workloads import digests, gang_states, members_known


class Applies:
    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.readers = ManifestReaders()

    def close(self) -> None:
        self.readers.close()

    async def apply(self, who: Principal, text: str | bytes) -> list[dict[str, Any]]:
        """One row per object: configured, unchanged, submitted, created or skipped."""
        got = decided(await self.readers.read(text))
        await self.ctx.loop.step()
        checked = decided(applies.check(who, got, self.ctx.state))
        self.ctx.access.rate(who, len(checked.items) + len(checked.requests))
        config = inputs.queue_configuration(checked.manifests, time.time())
        changed, created, made = await self._append(config, checked)
        await self.ctx.loop.step()
        return _rows(checked, config, changed, created, made)

    async def _append(
        self, config: list[NewEvent], checked: applies.Checked
    ) -> tuple[set[str], list[bool], list[bool]]:
        """Configuration that changed, new workloads and new requests, in one transaction
        (a conflict: read again and plan again). (config streams changed, workload
        created?, request created?)"""
        now = time.time()
        made = [inputs.provisioning_request(req, now) for req in checked.requests]
        store = self.ctx.loop.store
        while True:
            batch = await admin.config_changes(store, config)
            firsts = await store.first_events(
                [wev.stream(i.workload_id) for i in checked.items] + [n.stream_id for n in made]
            )
            known = {**members_known(self.ctx, checked.items), **digests(firsts)}
            states = await gang_states(store, checked.items)
            plan = decided(submissions.plan(checked.items, known, now, states))
            fresh = []
            for req, new in zip(checked.requests, made, strict=True):
                first = firsts.get(new.stream_id)
                stored = getattr(first.event, "spec", None) if first is not None else None
                refused = provreqs.conflict(req, stored)
                if refused is not None:
                    raise Refused(refused)
                fresh.append(first is None)
            batch += plan.stream_appends()
            batch += [
                StreamAppend(n.stream_id, 0, [n]) for n, f in zip(made, fresh, strict=True) if f
            ]
            if not batch:
                return set(), plan.created, fresh
            try:
                await store.append(batch, producer=inputs.INTAKE, recorded_at=time.time())
            except ConcurrencyConflict:
                continue
            self.ctx.loop.appended()
            return {b.stream_id for b in batch}, plan.created, fresh


def _rows(
    checked: applies.Checked,
    config: list[NewEvent],
    changed: set[str],
    created: list[bool],
    made: list[bool],
) -> list[dict[str, Any]]:
    m = checked.manifests
    rows: list[dict[str, Any]] = []
    for new in config:
        kind, name = config_object(new.event)
        rows.append(_row(kind, name, "configured" if new.stream_id in changed else "unchanged"))
    for item, src, first in zip(checked.items, m.sources, created, strict=True):
        name = f"{item.spec.namespace}/{item.spec.name}"
        rows.append(_row(src.kind, name, "submitted" if first else "unchanged", item.workload_id))
    for req, first in zip(checked.requests, made, strict=True):
        rows.append(_row("ProvisioningRequest", req.key, "created" if first else "unchanged"))
    for line in m.skipped:
        head, _, reason = line.partition(": ")
        kind, _, name = head.partition(" ")
        rows.append(_row(kind, name, f"skipped: {reason}"))
    return rows


def _row(kind: str, name: str, result: str, wid: str | None = None) -> dict[str, Any]:
    row = {"kind": kind, "name": name, "result": result}
    if wid is not None:
        row["id"] = wid
    return row
