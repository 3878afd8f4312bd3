"""The log, as a client follows it: one workload's events, a ClusterQueue's or a
LocalQueue's, after a position, then (watching) each new one as intake folds it."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

from muster.core.access.policy import Action
from muster.core.access.tokens import Principal
from muster.core.events import Envelope, encode_payload
from muster.core.intake.refusal import not_found
from muster.core.model.times import rfc3339
from services.intake.context import Context
from services.intake.errors import Refused
from services.intake.workloads import own

WATCH_BATCH = 500
# Categories a queue's watch reads: its workloads' lives and its own configuration.
WATCH_CATEGORIES = frozenset({"config", "workload", "admission", "provisioning", "node"})


@dataclass(frozen=True, slots=True)
class Scope:
    """What a watch follows: one workload, a ClusterQueue or a LocalQueue."""

    workload_id: str | None = None
    cluster_queue: str | None = None
    local_queue: tuple[str, str] | None = None  # (namespace, name)


class Events:
    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx

    async def read(
        self, who: Principal, scope: Scope, after: int = 0, limit: int = WATCH_BATCH
    ) -> list[dict[str, Any]]:
        """The scope's events after a position, in log order (at most ``limit``)."""
        await self.ctx.loop.step()
        keep = self._check_scope(who, scope)
        scope = self._gang_of(scope)
        return [event_json(e) for e in await self._fetch(scope, keep, after, limit)]

    async def watch(
        self, who: Principal, scope: Scope, after: int = 0, follow: bool = True
    ) -> AsyncIterator[dict[str, Any]]:
        """The scope's events from after a position; with ``follow``, then each new one as
        intake folds it (resume with the last position seen). Access is checked here,
        before the first event is asked for."""
        await self.ctx.loop.step()
        keep = self._check_scope(who, scope)
        return self._follow(self._gang_of(scope), keep, after, follow)

    async def everything(
        self, keep: Callable[[Envelope], bool], after: int = 0, limit: int = WATCH_BATCH
    ) -> list[Envelope]:
        """Every event ``keep`` passes after a position (the web UI's, across scopes)."""
        return await self._fetch(Scope(), keep, after, limit)

    def follow_everything(
        self, keep: Callable[[Envelope], bool], after: int = 0
    ) -> AsyncIterator[dict[str, Any]]:
        """``everything``, then each new one as intake folds it."""
        return self._follow(Scope(), keep, after, True)

    def _gang_of(self, scope: Scope) -> Scope:
        """A gang member's history is its gang's (the member has no stream of its own)."""
        view = self.ctx.state.workloads.get(scope.workload_id or "")
        return Scope(workload_id=view.gang_id) if view is not None and view.gang_id else scope

    def _check_scope(self, who: Principal, scope: Scope) -> Callable[[Envelope], bool]:
        """Access to the scope, and the filter its events pass."""
        ctx = self.ctx
        state = ctx.state
        if scope.workload_id is not None:
            own(ctx, who, scope.workload_id, Action.READ)
            return lambda env: True
        if scope.local_queue is not None:
            ns, name = scope.local_queue
            ctx.access.require(who, Action.READ, ns)
            if f"{ns}/{name}" not in state.local_queues:
                raise Refused(not_found(f"LocalQueue {name} in namespace {ns}"))
            stream = f"config-localqueue-{ns}.{name}"

            def in_local_queue(env: Envelope) -> bool:
                view = state.workloads.get(env.correlation_id or "")
                if view is not None:
                    return view.namespace == ns and view.queue_name == name
                return env.stream_id == stream

            return in_local_queue
        cq = scope.cluster_queue or ""
        if cq not in state.queue.cluster_queues:
            raise Refused(not_found(f"ClusterQueue {cq}"))
        stream = f"config-clusterqueue-{cq}"

        def in_cluster_queue(env: Envelope) -> bool:
            view = state.workloads.get(env.correlation_id or "")
            if view is not None:
                lq = state.queue.local_queues.get(f"{view.namespace}/{view.queue_name}")
                return (
                    lq is not None
                    and lq.cluster_queue == cq
                    and ctx.access.visible(who, view.namespace)
                )
            return env.stream_id == stream

        return in_cluster_queue

    async def _fetch(
        self,
        scope: Scope,
        keep: Callable[[Envelope], bool],
        after: int,
        limit: int,
        folded: int | None = None,
    ) -> list[Envelope]:
        """The scope's events after ``after``; a queue's (or everything's) only up to
        ``folded``, intake's position (now, if not given)."""
        store = self.ctx.loop.store
        if scope.workload_id is not None:
            return await store.read_correlated(scope.workload_id, after, limit=limit)
        # Only what intake has folded: the filter asks its state whose workload an event is.
        if folded is None:
            folded = self.ctx.loop.runner.position
        out: list[Envelope] = []
        while len(out) < limit:
            envs = await store.read_all(
                after, categories=WATCH_CATEGORIES, limit=WATCH_BATCH, until=folded
            )
            out += [e for e in envs if keep(e)]
            if len(envs) < WATCH_BATCH:
                break
            after = envs[-1].position
        return out[:limit]

    async def _follow(
        self, scope: Scope, keep: Callable[[Envelope], bool], after: int, follow: bool
    ) -> AsyncIterator[dict[str, Any]]:
        while True:
            folded = self.ctx.loop.runner.position
            envs = await self._fetch(scope, keep, after, WATCH_BATCH, folded)
            for env in envs:
                after = env.position
                yield event_json(env)
            if len(envs) == WATCH_BATCH:
                continue
            if scope.workload_id is None:
                # All of it was read through ``folded``: the next read starts there. From
                # the scope's last event, a quiet queue's watch read (and decoded) again,
                # each time intake's fold moved, all that came since for other queues.
                after = max(after, folded)
            if not follow:
                return
            await self.ctx.loop.moved(self.ctx.settings.poll_seconds * 5)


def event_json(env: Envelope) -> dict[str, Any]:
    ev = env.event
    return {
        "position": env.position,
        "time": env.occurred_at,
        "occurredTime": rfc3339(env.occurred_at),  # the same moment, as every time is shown
        "type": env.type,
        "producer": env.producer,
        "stream": env.stream_id,
        "workloadId": env.correlation_id,
        "reason": getattr(ev, "reason", None) or getattr(ev, "outcome", None),
        "message": getattr(ev, "message", None),
        "data": encode_payload(ev),
    }
