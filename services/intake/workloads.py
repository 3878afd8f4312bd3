"""Workloads: submit (one or a batch), read, list and cancel.

A submission's idempotency key picks its workload id, so a retry appends against the
same stream and optimistic concurrency turns it into "return the original". What to
append is the core's plan (``core/intake/submissions``): a batch is all or nothing.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from muster.core import inputs
from muster.core.access.policy import Action
from muster.core.access.tokens import Principal
from muster.core.events import Envelope, NewEvent, StreamAppend
from muster.core.events import workload as wev
from muster.core.events.workload import WorkloadSubmitted
from muster.core.intake import admission_checks as admission_checks_core
from muster.core.intake import cancellations, gangs, submissions
from muster.core.intake.gangs import GangState
from muster.core.intake.refusal import not_found
from muster.core.model.workload import WorkloadSpec
from muster.core.views.workloads import (
    STATUSES,
    WorkloadView,
    admission_checks,
    status_named,
    submitted_view,
)
from muster.store import ConcurrencyConflict, SqlEventStore
from services.intake import paging
from services.intake.context import Context, decided
from services.intake.errors import Refused, refuse
from services.intake.pending import Pending


@dataclass(frozen=True, slots=True)
class Submitted:
    workload: dict[str, Any]
    created: bool  # False: a repeated idempotency key answered with the original


class Workloads:
    def __init__(self, ctx: Context, pending: Pending) -> None:
        self.ctx = ctx
        self.pending = pending

    async def submit(
        self, who: Principal, body: object, header_key: str | None = None
    ) -> Submitted:
        spec, body_key = decided(submissions.read(who, body))
        return (await self._submit(who, [(spec, header_key or body_key)], batch=False))[0]

    async def submit_batch(self, who: Principal, items: object) -> list[Submitted]:
        """All valid and accepted, or none: one bad item refuses the batch, naming it."""
        read = decided(submissions.read_batch(who, items, self.ctx.settings.max_batch))
        return await self._submit(who, read, batch=True)

    async def get(self, who: Principal, wid: str) -> dict[str, Any]:
        await self.ctx.loop.step()
        view = own(self.ctx, who, wid, Action.READ)
        body = view.to_json()
        queued = view.gang_id or view.id  # a gang member waits in its gang's place
        shown = self.ctx.state.workloads.get(queued, view)
        body["conditions"] = shown.conditions.to_json()
        entry = self.ctx.state.queue.workloads.get(queued)
        if entry is not None and entry.run.checks:
            body["admissionChecks"] = admission_checks(entry)
        if queued in self.ctx.state.queue.pending:
            place = self.pending.place(queued)
            if place is not None:
                body["queue"] = place
                _current_reason(body, place["reason"], place["message"])
        return body

    async def update_check(
        self, who: Principal, wid: str, check: str, body: object
    ) -> dict[str, Any]:
        """An external admission check's controller sets the check's state (kueue.md §1.8)."""
        await self.ctx.loop.step()
        state = self.ctx.state.queue
        await self.ctx.record(
            decided(admission_checks_core.update(who, wid, check, body, state, time.time()))
        )
        return await self.get(who, wid)

    async def page(
        self,
        who: Principal,
        namespace: str | None = None,
        status: str | None = None,
        limit: int = 100,
        after: str | None = None,
    ) -> dict[str, Any]:
        wanted = status_named(status) if status else None
        if status and wanted is None:
            raise refuse(
                "InvalidQuery", f"{status!r} is not one of {', '.join(STATUSES)}", "status"
            )
        await paging.prepare(self.ctx, who, namespace, limit)
        visible = self.ctx.access.visible
        items = [
            v
            for v in self.ctx.state.workloads.values()
            if (not namespace or v.namespace == namespace)
            and (not wanted or v.status == wanted)
            and visible(who, v.namespace)
        ]
        pending = self.ctx.state.queue.pending
        reasons = self.pending.reasons() if any(v.id in pending for v in items) else {}

        def render(v: WorkloadView) -> dict[str, Any]:
            body = v.to_json()
            shown = self.ctx.state.workloads.get(v.gang_id or v.id, v)
            body["conditions"] = shown.conditions.to_json()
            item = reasons.get(v.gang_id or v.id)
            if item is not None:
                _current_reason(body, item.reason, item.message)
            return body

        return paging.page(items, limit, after, key=lambda v: v.id, render=render)

    async def cancel(self, who: Principal, wid: str) -> dict[str, Any]:
        await self.ctx.loop.step()
        view = self.ctx.state.workloads.get(wid)
        await self.ctx.record(decided(cancellations.cancel(who, wid, view, time.time())))
        return self._json(wid)

    # -- submitting ----------------------------------------------------------------

    async def _submit(
        self, who: Principal, read: list[tuple[WorkloadSpec, str | None]], *, batch: bool
    ) -> list[Submitted]:
        items = [
            submissions.Item(spec, key, _new_id(spec, key), f"items[{i}]." if batch else "")
            for i, (spec, key) in enumerate(read)
        ]
        for item in items:
            local_queues = self.ctx.state.local_queues
            if submissions.unknown_queue(item.spec, local_queues, item.field) is not None:
                await self._require_queue(item)
        self.ctx.access.rate(who, len(items))
        return await self._commit(items)

    async def _require_queue(self, item: submissions.Item) -> None:
        """A queue not (yet) known: configuration may have been applied a moment ago."""
        await self.ctx.loop.step()
        refused = submissions.unknown_queue(item.spec, self.ctx.state.local_queues, item.field)
        if refused is not None:
            raise Refused(refused)

    async def _commit(self, items: list[submissions.Item]) -> list[Submitted]:
        """The core's plan, appended in one transaction. A conflict means some id was
        taken meanwhile, or a gang joined: what created those streams and the gangs are
        read and the plan made again (each round learns at least one id or member, so it
        ends)."""
        loop = self.ctx.loop
        known = members_known(self.ctx, items)
        gangs_joined = any(i.spec.gang is not None for i in items)
        states = await gang_states(loop.store, items) if gangs_joined else {}
        while True:
            plan = decided(submissions.plan(items, known, time.time(), states))
            try:
                await self._append(plan)
                break
            except ConcurrencyConflict:
                streams = [wev.stream(i.workload_id) for i in items]
                known = digests(await loop.store.first_events(streams))
                states = await gang_states(loop.store, items) if gangs_joined else {}
        if not all(plan.created) or plan.versions:
            await loop.step()  # the originals, and gang members, for the answers
        return [
            Submitted(_fresh(new), True)
            if new is not None and isinstance(new.event, WorkloadSubmitted)
            else Submitted(self._json(item.workload_id), new is not None)
            for item, new in zip(items, plan.events, strict=True)
        ]

    async def _append(self, plan: submissions.Plan) -> None:
        loop = self.ctx.loop
        if len(plan.append) == 1 and not plan.versions:
            # one request: shares a transaction with its neighbours (and is folded with it)
            first = plan.append[0]
            env = await self.ctx.committer.append(StreamAppend(first.stream_id, 0, plan.append))
            loop.appended(through=env.position)
        elif plan.append:
            await loop.store.append(
                plan.stream_appends(), producer=inputs.INTAKE, recorded_at=time.time()
            )
            loop.appended()

    def _json(self, wid: str) -> dict[str, Any]:
        view = self.ctx.state.workloads.get(wid)
        return view.to_json() if view is not None else {"id": wid, "status": "Pending"}


def _current_reason(body: dict[str, Any], reason: str, message: str) -> None:
    """A pending workload's reason is the dry run's (computed now), not the one the log
    recorded last (only when its kind changed): every view shows the same."""
    if body["status"] == "Pending":
        body["reason"], body["message"] = reason, message
        for c in body.get("conditions", ()):
            if c["type"] == "QuotaReserved" and c["status"] == "False":
                c["reason"], c["message"] = reason, message


def own(ctx: Context, who: Principal, wid: str, action: Action) -> WorkloadView:
    """The workload, if ``who`` may ``action`` it."""
    view = ctx.state.workloads.get(wid)
    if view is None:
        raise Refused(not_found(f"workload {wid}"))
    ctx.access.require(who, action, view.namespace, view.queue_name)
    return view


async def gang_states(store: SqlEventStore, items: list[submissions.Item]) -> dict[str, GangState]:
    """The gangs ``items`` join, as their streams stand."""
    streams = submissions.gang_streams(items)
    return {s: gangs.fold(s, await store.read_stream(s)) for s in streams}


def members_known(ctx: Context, items: list[submissions.Item]) -> dict[str, str]:
    """Gang members' digests by id: a member has no stream of its own, so a workload
    reusing its key would find none."""
    views = (ctx.state.workloads.get(i.workload_id) for i in items)
    return {v.id: v.digest or "" for v in views if v is not None and v.gang_id is not None}


def digests(firsts: Mapping[str, Envelope]) -> dict[str, str]:
    """Workload id -> the request digest of its stored submission (what created it)."""
    return {
        env.event.workload_id: env.event.request_digest or ""
        for env in firsts.values()
        if isinstance(env.event, WorkloadSubmitted)
    }


def _new_id(spec: WorkloadSpec, key: str | None) -> str:
    return inputs.workload_id(spec.namespace, key) if key else uuid.uuid4().hex[:16]


def _fresh(new: NewEvent) -> dict[str, Any]:
    assert isinstance(new.event, WorkloadSubmitted)
    return submitted_view(new.event, new.occurred_at).to_json()
