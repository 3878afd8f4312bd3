"""Intake's operations, the same for HTTP, gRPC and the Kafka ingest topic.

Each takes the caller (a ``Principal``) and plain JSON-like input, checks access, limits
and the input before anything is appended (a refusal leaves no event), and answers with
JSON-like output or raises ``ApiError``. The transports only translate.

A submission's idempotency key picks its workload id, so a retry appends against the
same stream and optimistic concurrency turns it into "return the original".
"""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from muster.core import inputs
from muster.core.access.policy import Action, authorize, visible_namespaces
from muster.core.access.rate import Limit, Limiter
from muster.core.access.tokens import Authenticator, AuthError, Principal
from muster.core.codec import to_plain
from muster.core.events import Envelope, NewEvent, StreamAppend, encode_payload
from muster.core.events import workload as wev
from muster.core.events.workload import WorkloadSubmitted
from muster.core.intake import submissions
from muster.core.intake.refusal import Refusal
from muster.core.model import kinds, manifests, parse
from muster.core.model.fields import InvalidInput
from muster.core.model.workload import ProvisioningRequestSpec, WorkloadSpec
from muster.core.queueing import visibility
from muster.core.queueing.decider import QueueDecider
from muster.core.views.workloads import TERMINAL, WorkloadsState, submitted_view
from muster.runtime import admin
from muster.runtime.loop import DeciderLoop
from muster.runtime.settings import Settings
from muster.store import ConcurrencyConflict
from services.intake.batcher import GroupCommitter
from services.intake.errors import ApiError
from services.intake.readers import ManifestReaders

T = TypeVar("T")
MAX_LIST = 1000
WATCH_BATCH = 500
# Categories a queue's watch reads: its workloads' lives and its own configuration.
WATCH_CATEGORIES = frozenset({"config", "workload", "admission", "provisioning", "node"})


def invalid(exc: InvalidInput) -> ApiError:
    return ApiError(422, "InvalidField", exc.problem, exc.path)


def not_found(what: str) -> ApiError:
    return ApiError(404, "NotFound", f"{what} not found")


@dataclass(frozen=True, slots=True)
class Submitted:
    workload: dict[str, Any]
    created: bool  # False: a repeated idempotency key answered with the original


@dataclass(frozen=True, slots=True)
class Scope:
    """What a watch follows: one workload, a ClusterQueue or a LocalQueue."""

    workload_id: str | None = None
    cluster_queue: str | None = None
    local_queue: tuple[str, str] | None = None  # (namespace, name)


class Intake:
    def __init__(self, loop: DeciderLoop, authenticator: Authenticator) -> None:
        self.loop = loop
        self.settings: Settings = loop.settings
        self.auth = authenticator
        self.limiter = Limiter()
        self.committer = GroupCommitter(loop.store, producer=inputs.INTAKE)
        self.visibility = _Visibility()
        self.readers = ManifestReaders()

    async def close(self) -> None:
        await self.committer.close()
        self.readers.close()

    @property
    def state(self) -> WorkloadsState:
        state = self.loop.runner.state
        assert isinstance(state, WorkloadsState)
        return state

    # -- access -----------------------------------------------------------------

    def authenticate(self, authorization: str | None) -> Principal:
        try:
            return self.auth.authenticate(authorization, time.time())
        except AuthError as exc:
            raise ApiError(401, "Unauthenticated", exc.reason) from None

    @staticmethod
    def require(
        who: Principal, action: Action, namespace: str | None = None, queue: str | None = None
    ) -> None:
        denied = authorize(who, action, namespace, queue)
        if denied is not None:
            raise ApiError(403, "Forbidden", denied.reason)

    def _visible(self, who: Principal, namespace: str | None) -> bool:
        allowed = visible_namespaces(who)
        return allowed is None or (namespace is not None and namespace in allowed)

    def _rate(self, who: Principal, cost: int) -> None:
        rate = who.rate if who.rate is not None else self.settings.submit_rate
        if rate <= 0:  # 0: no limit
            return
        burst = who.burst if who.burst is not None else self.settings.submit_burst
        try:
            wait = self.limiter.check(who.name, Limit(rate, burst), time.time(), cost)
        except ValueError as exc:
            raise ApiError(413, "BatchTooLarge", str(exc)) from None
        if wait is not None:
            raise ApiError(
                429,
                "RateLimited",
                f"tenant {who.name} is over its submission rate of {rate:g}/s "
                f"(burst {burst}); retry in {wait:.2f}s",
                retry_after=wait,
            )

    # -- workloads --------------------------------------------------------------------

    async def submit(
        self, who: Principal, body: object, header_key: str | None = None
    ) -> Submitted:
        spec, body_key = _decided(submissions.read(who, body))
        return (await self._submit(who, [(spec, header_key or body_key)], batch=False))[0]

    async def submit_batch(self, who: Principal, items: object) -> list[Submitted]:
        """All valid and accepted, or none: one bad item refuses the batch, naming it."""
        read = _decided(submissions.read_batch(who, items, self.settings.max_batch))
        return await self._submit(who, read, batch=True)

    async def _submit(
        self, who: Principal, read: list[tuple[WorkloadSpec, str | None]], *, batch: bool
    ) -> list[Submitted]:
        items = [
            submissions.Item(spec, key, self._new_id(spec, key), f"items[{i}]." if batch else "")
            for i, (spec, key) in enumerate(read)
        ]
        for item in items:
            await self._require_queue(item)
        self._rate(who, len(items))
        return await self._commit(items)

    async def _commit(self, items: list[submissions.Item]) -> list[Submitted]:
        """The core's plan, appended in one transaction. A conflict means some id was
        taken meanwhile: what created those streams is read and the plan made again
        (each round learns at least one id, so it ends)."""
        known: dict[str, str] = {}
        while True:
            plan = _decided(submissions.plan(items, known, time.time()))
            try:
                await self._append_plan(plan)
                break
            except ConcurrencyConflict:
                streams = [wev.stream(i.workload_id) for i in items]
                known = _digests(await self.loop.store.first_events(streams))
        if not all(plan.created):
            await self.loop.step()  # the originals, for the answers
        return [
            Submitted(self._fresh(new), True)
            if new is not None
            else Submitted(self._workload_json(item.workload_id), False)
            for item, new in zip(items, plan.events, strict=True)
        ]

    @staticmethod
    def _new_id(spec: WorkloadSpec, key: str | None) -> str:
        return inputs.workload_id(spec.namespace, key) if key else uuid.uuid4().hex[:16]

    async def _append_plan(self, plan: submissions.Plan) -> None:
        if len(plan.append) == 1:  # one request: shares a transaction with its neighbours
            await self.committer.append(StreamAppend(plan.append[0].stream_id, 0, plan.append))
        elif plan.append:
            await self.loop.store.append(
                [StreamAppend(n.stream_id, 0, [n]) for n in plan.append],
                producer=inputs.INTAKE,
                recorded_at=time.time(),
            )
        if plan.append:
            self.loop.appended()

    async def _require_queue(self, item: submissions.Item) -> None:
        refused = submissions.unknown_queue(item.spec, self.state.local_queues, item.field)
        if refused is not None:
            await self.loop.step()  # configuration may have been applied a moment ago
            refused = submissions.unknown_queue(item.spec, self.state.local_queues, item.field)
        if refused is not None:
            raise ApiError.refused(refused)

    @staticmethod
    def _fresh(new: NewEvent) -> dict[str, Any]:
        assert isinstance(new.event, WorkloadSubmitted)
        return submitted_view(new.event, new.occurred_at).to_json()

    def _workload_json(self, wid: str) -> dict[str, Any]:
        view = self.state.workloads.get(wid)
        return view.to_json() if view is not None else {"id": wid, "status": "Pending"}

    def _own_workload(self, who: Principal, wid: str, action: Action) -> Any:
        view = self.state.workloads.get(wid)
        if view is None:
            raise not_found(f"workload {wid}")
        self.require(who, action, view.namespace, view.queue_name)
        return view

    async def get(self, who: Principal, wid: str) -> dict[str, Any]:
        await self.loop.step()
        view = self._own_workload(who, wid, Action.READ)
        body = view.to_json()
        if view.id in self.state.queue.pending:
            item = self.visibility.at(self.loop, view.id).by_id.get(view.id)
            if item is not None:
                current = item.to_json()
                body["queue"] = {
                    k: current[k]
                    for k in ("positionInClusterQueue", "positionInLocalQueue", "reason", "message")
                }
        return body

    async def list_workloads(
        self,
        who: Principal,
        namespace: str | None = None,
        status: str | None = None,
        limit: int = 100,
        after: str | None = None,
    ) -> dict[str, Any]:
        if not 0 < limit <= MAX_LIST:
            raise ApiError(
                400, "InvalidQuery", f"limit must be an integer from 1 to {MAX_LIST}", "limit"
            )
        if namespace:
            self.require(who, Action.READ, namespace)
        await self.loop.step()
        items = [
            v
            for v in self.state.workloads.values()
            if (not namespace or v.namespace == namespace)
            and (not status or v.status == status)
            and self._visible(who, v.namespace)
        ]
        return _page(items, limit, after, key=lambda v: v.id, render=lambda v: v.to_json())

    async def cancel(self, who: Principal, wid: str) -> dict[str, Any]:
        await self.loop.step()
        view = self._own_workload(who, wid, Action.CANCEL)
        if view.status in TERMINAL:
            raise ApiError(409, "AlreadyFinished", f"workload {wid} is already {view.status}")
        await self._record(inputs.cancellation(wid, time.time()))
        return self._workload_json(wid)

    async def _record(self, new: NewEvent) -> None:
        """Append a request (cancel, delete) at any stream version, and fold it."""
        await self.loop.store.append(
            [StreamAppend(new.stream_id, None, [new])],
            producer=inputs.INTAKE,
            recorded_at=time.time(),
        )
        self.loop.appended()
        await self.loop.step()

    # -- events -------------------------------------------------------------------

    def _check_scope(self, who: Principal, scope: Scope) -> Callable[[Envelope], bool]:
        """Access to the scope, and the filter its events pass."""
        state = self.state
        if scope.workload_id is not None:
            self._own_workload(who, scope.workload_id, Action.READ)
            return lambda env: True
        if scope.local_queue is not None:
            ns, name = scope.local_queue
            self.require(who, Action.READ, ns)
            if f"{ns}/{name}" not in state.local_queues:
                raise not_found(f"LocalQueue {name} in namespace {ns}")
            stream = f"config-localqueue-{ns}.{name}"

            def in_local_queue(env: Envelope) -> bool:
                view = state.workloads.get(env.correlation_id or "")
                if view is not None:
                    return view.namespace == ns and view.queue_name == name
                return env.stream_id == stream

            return in_local_queue
        cq = scope.cluster_queue or ""
        if cq not in state.queue.cluster_queues:
            raise not_found(f"ClusterQueue {cq}")
        stream = f"config-clusterqueue-{cq}"

        def in_cluster_queue(env: Envelope) -> bool:
            view = state.workloads.get(env.correlation_id or "")
            if view is not None:
                lq = state.queue.local_queues.get(f"{view.namespace}/{view.queue_name}")
                return (
                    lq is not None and lq.cluster_queue == cq and self._visible(who, view.namespace)
                )
            return env.stream_id == stream

        return in_cluster_queue

    async def events(
        self, who: Principal, scope: Scope, after: int = 0, limit: int = WATCH_BATCH
    ) -> list[dict[str, Any]]:
        """The scope's events after a position, in log order (at most ``limit``)."""
        await self.loop.step()
        keep = self._check_scope(who, scope)
        return [event_json(e) for e in await self._read(scope, keep, after, limit)]

    async def _read(
        self, scope: Scope, keep: Callable[[Envelope], bool], after: int, limit: int
    ) -> list[Envelope]:
        store = self.loop.store
        if scope.workload_id is not None:
            return await store.read_correlated(scope.workload_id, after, limit=limit)
        # Only what intake has folded: the filter asks its state whose workload an event is.
        folded = self.loop.runner.position
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

    async def watch(
        self, who: Principal, scope: Scope, after: int = 0, follow: bool = True
    ) -> AsyncIterator[dict[str, Any]]:
        """The scope's events from after a position; with ``follow``, then each new one as
        intake folds it (resume with the last position seen). Access is checked here,
        before the first event is asked for."""
        await self.loop.step()
        keep = self._check_scope(who, scope)
        return self._follow(scope, keep, after, follow)

    async def _follow(
        self, scope: Scope, keep: Callable[[Envelope], bool], after: int, follow: bool
    ) -> AsyncIterator[dict[str, Any]]:
        while True:
            envs = await self._read(scope, keep, after, WATCH_BATCH)
            for env in envs:
                after = env.position
                yield event_json(env)
            if len(envs) == WATCH_BATCH:
                continue
            if not follow:
                return
            await self.loop.moved(self.settings.poll_seconds * 5)

    # -- visibility (Kueue's pending workloads) ---------------------------------------

    async def pending(
        self,
        who: Principal,
        *,
        cluster_queue: str | None = None,
        local_queue: tuple[str, str] | None = None,
        limit: int = 1000,
        offset: int = 0,
    ) -> dict[str, Any]:
        if not 0 < limit <= visibility.MAX_LIMIT or offset < 0:
            raise ApiError(
                400,
                "InvalidQuery",
                f"limit must be 1 to {visibility.MAX_LIMIT} and offset at least 0",
                "limit",
            )
        if local_queue is not None:
            self.require(who, Action.READ, local_queue[0])
        await self.loop.step()
        if cluster_queue is not None and cluster_queue not in self.state.queue.cluster_queues:
            raise not_found(f"ClusterQueue {cluster_queue}")
        if local_queue is not None and "/".join(local_queue) not in self.state.local_queues:
            raise not_found(f"LocalQueue {local_queue[1]} in namespace {local_queue[0]}")
        items = [
            i
            for i in self.visibility.at(self.loop).items
            if self._visible(who, i.workload.spec.namespace)
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

    # -- standalone ProvisioningRequests ----------------------------------------------

    async def create_request(self, who: Principal, body: object) -> tuple[dict[str, Any], bool]:
        """Create a standalone ProvisioningRequest. Its spec is immutable, as in Kubernetes:
        the same spec again answers with the request (False), another spec 409."""
        try:
            spec = parse.provisioning_request(body)
        except InvalidInput as exc:
            raise invalid(exc) from None
        self.require(who, Action.SUBMIT, spec.namespace)
        self._rate(who, 1)
        created = await self._create(spec)
        await self.loop.step()
        return self._request_json(spec.key), created

    async def _append_apply(
        self,
        config: list[NewEvent],
        subs: list[submissions.Item],
        requests: list[ProvisioningRequestSpec],
    ) -> tuple[set[str], list[bool], list[bool]]:
        """Configuration that changed, new workloads and new requests, in one transaction
        (a conflict: read again and plan again). (config streams changed, workload
        created?, request created?)"""
        now = time.time()
        made = [inputs.provisioning_request(req, now) for req in requests]
        while True:
            store = self.loop.store
            batch = await admin.config_changes(store, config)
            firsts = await store.first_events(
                [wev.stream(i.workload_id) for i in subs] + [n.stream_id for n in made]
            )
            plan = _decided(submissions.plan(subs, _digests(firsts), now))
            fresh = []
            for req, new in zip(requests, made, strict=True):
                first = firsts.get(new.stream_id)
                if first is not None and getattr(first.event, "spec", None) != req:
                    raise _request_exists(req.key)
                fresh.append(first is None)
            batch += [StreamAppend(n.stream_id, 0, [n]) for n in plan.append]
            batch += [
                StreamAppend(n.stream_id, 0, [n]) for n, f in zip(made, fresh, strict=True) if f
            ]
            if not batch:
                return set(), plan.created, fresh
            try:
                await store.append(batch, producer=inputs.INTAKE, recorded_at=time.time())
            except ConcurrencyConflict:
                continue
            self.loop.appended()
            return {b.stream_id for b in batch}, plan.created, fresh

    async def _create(self, spec: ProvisioningRequestSpec) -> bool:
        """Append a request's creation; False when the same spec was created before."""
        new = inputs.provisioning_request(spec, time.time())
        try:
            await self.committer.append(StreamAppend(new.stream_id, 0, [new]))
        except ConcurrencyConflict:
            first = (await self.loop.store.read_stream(new.stream_id))[0].event
            if getattr(first, "spec", None) != spec:
                raise _request_exists(spec.key) from None
            return False
        self.loop.appended()
        return True

    def _request_json(self, rid: str) -> dict[str, Any]:
        view = self.state.requests.get(rid)
        return view.to_json() if view is not None else {"id": rid, "status": "Pending"}

    async def list_requests(
        self,
        who: Principal,
        namespace: str | None = None,
        only_standalone: bool = False,
        limit: int = MAX_LIST,
        after: str | None = None,
    ) -> dict[str, Any]:
        """Every request, standalone and made for queued workloads, oldest first. Those of
        queued workloads belong to no namespace: only a caller that sees all sees them."""
        if namespace:
            self.require(who, Action.READ, namespace)
        await self.loop.step()
        items = [
            v
            for v in self.state.requests.values()
            if (v.spec is not None or not only_standalone)
            and (namespace is None or (v.spec is not None and v.spec.namespace == namespace))
            and self._visible(who, v.spec.namespace if v.spec is not None else None)
        ]
        return _page(items, limit, after, key=lambda v: v.id, render=lambda v: v.to_json())

    async def get_request(self, who: Principal, namespace: str, name: str) -> dict[str, Any]:
        self.require(who, Action.READ, namespace)
        await self.loop.step()
        rid = f"{namespace}/{name}"
        if rid not in self.state.requests:
            raise not_found(f"ProvisioningRequest {rid}")
        return self._request_json(rid)

    async def delete_request(self, who: Principal, namespace: str, name: str) -> dict[str, Any]:
        """Delete: node creation stops; nodes already there go when unneeded (GKE's rules)."""
        self.require(who, Action.CANCEL, namespace)
        await self.loop.step()
        rid = f"{namespace}/{name}"
        view = self.state.requests.get(rid)
        if view is None or view.spec is None:
            raise not_found(f"ProvisioningRequest {rid}")
        if view.deleted:
            raise ApiError(409, "AlreadyDeleted", f"ProvisioningRequest {rid} is already deleted")
        await self._record(inputs.provisioning_deletion(rid, time.time()))
        return self._request_json(rid)

    # -- manifests ------------------------------------------------------------------

    async def apply(self, who: Principal, text: str | bytes) -> list[dict[str, Any]]:
        """``kubectl apply`` for muster: queue objects (admin), workloads and standalone
        ProvisioningRequests (the tenant's namespaces). Everything is checked first —
        syntax, fields, access, queues, conflicts, rate — and appended in one transaction:
        a refusal appends nothing, an accepted apply all of it."""
        m, requests = _decided(await self.readers.read(text))
        if m.queue_object_count:
            self.require(who, Action.ADMIN)
        for wl in m.workloads:
            self.require(who, Action.SUBMIT, wl.namespace, wl.queue_name or None)
        for _, req, _ in requests:
            self.require(who, Action.SUBMIT, req.namespace)
        await self.loop.step()
        self._check_references(m)
        defined = {f"{q.namespace}/{q.name}" for q in m.local_queues}
        for i, wl in enumerate(m.workloads):
            if wl.consumes is None and f"{wl.namespace}/{wl.queue_name}" not in (
                self.state.local_queues | defined
            ):
                raise ApiError(
                    422,
                    "UnknownQueue",
                    f"{m.sources[i].kind} {wl.namespace}/{wl.name}: LocalQueue "
                    f"{wl.queue_name!r} does not exist in namespace {wl.namespace!r}",
                )
        subs = [
            submissions.Item(wl, key, inputs.workload_id(wl.namespace, key), "")
            for wl, key in ((wl, f"{wl.namespace}/{wl.name}") for wl in m.workloads)
        ]
        for item, wl in zip(subs, m.workloads, strict=True):
            seen = self.state.workloads.get(item.workload_id)
            if seen is not None and seen.digest != inputs.digest(wl):
                raise ApiError(
                    409,
                    "IdempotencyKeyReused",
                    f"workload {wl.namespace}/{wl.name} exists with another spec; a "
                    "submitted workload's spec is immutable (delete it, then apply)",
                )
        for _, req, _ in requests:
            existing = self.state.requests.get(req.key)
            if existing is not None and existing.spec != req:
                raise _request_exists(req.key)
        self._rate(who, len(subs) + len(requests))
        rows: list[dict[str, Any]] = []
        config = inputs.queue_configuration(m, time.time())
        specs = [req for _, req, _ in requests]
        changed, created, made = await self._append_apply(config, subs, specs)
        for new in config:
            kind, name = config_object(new.event)
            rows.append(_row(kind, name, "configured" if new.stream_id in changed else "unchanged"))
        for item, wl, src, first in zip(subs, m.workloads, m.sources, created, strict=True):
            result = "submitted" if first else "unchanged"
            rows.append(_row(src.kind, f"{wl.namespace}/{wl.name}", result, item.workload_id))
        for req, first in zip(specs, made, strict=True):
            rows.append(_row("ProvisioningRequest", req.key, "created" if first else "unchanged"))
        for line in m.skipped:
            head, _, reason = line.partition(": ")
            kind, _, name = head.partition(" ")
            rows.append(_row(kind, name, f"skipped: {reason}"))
        await self.loop.step()
        return rows

    def _check_references(self, m: manifests.Manifests) -> None:
        """Flavors and ClusterQueues named must exist, or come in the same apply. (Kueue
        would accept and mark the queue inactive; a typo is better refused at once.)"""
        q = self.state.queue
        flavors = set(q.flavors) | {f.name for f in m.resource_flavors}
        queues = set(q.cluster_queues) | {c.name for c in m.cluster_queues}
        owners = [("ClusterQueue", c.name, c.resource_groups) for c in m.cluster_queues]
        owners += [("Cohort", c.name, c.resource_groups) for c in m.cohorts]
        for kind, name, groups in owners:
            for gi, group in enumerate(groups):
                for fi, fq in enumerate(group.flavors):
                    if fq.name not in flavors:
                        raise ApiError(
                            422,
                            "UnknownFlavor",
                            f"{kind} {name}: ResourceFlavor {fq.name!r} does not exist "
                            "(apply it first, or in the same file)",
                            f"{kind} {name}.spec.resourceGroups[{gi}].flavors[{fi}].name",
                        )
        for lq in m.local_queues:
            if lq.cluster_queue not in queues:
                raise ApiError(
                    422,
                    "UnknownQueue",
                    f"LocalQueue {lq.namespace}/{lq.name}: ClusterQueue {lq.cluster_queue!r} "
                    "does not exist (apply it first, or in the same file)",
                    f"LocalQueue {lq.namespace}/{lq.name}.spec.clusterQueue",
                )

    # -- configured objects -----------------------------------------------------------

    async def list_objects(
        self,
        who: Principal,
        kind: str,
        namespace: str | None = None,
        limit: int = MAX_LIST,
        after: str | None = None,
    ) -> dict[str, Any]:
        k = object_kind(kind)
        if not 0 < limit <= MAX_LIST:
            raise ApiError(
                400, "InvalidQuery", f"limit must be an integer from 1 to {MAX_LIST}", "limit"
            )
        if namespace and k.namespaced:
            self.require(who, Action.READ, namespace)
        await self.loop.step()
        objs = [
            o
            for o in k.objects(self.state)
            if (not k.namespaced or self._visible(who, o["namespace"]))
            and (not namespace or not k.namespaced or o["namespace"] == namespace)
        ]
        return _page(objs, limit, after, key=_object_key, render=lambda o: o)

    async def get_object(
        self, who: Principal, kind: str, name: str, namespace: str | None = None
    ) -> dict[str, Any]:
        k = object_kind(kind)
        if k.namespaced:
            namespace = namespace or "default"
            self.require(who, Action.READ, namespace)
        await self.loop.step()
        for o in k.objects(self.state):
            if o["name"] == name and (not k.namespaced or o["namespace"] == namespace):
                return o
        where = f" in namespace {namespace}" if k.namespaced else ""
        raise not_found(f"{k.kind} {name}{where}")

    # -- admin ------------------------------------------------------------------------

    async def replay(self, who: Principal, until: int | None = None) -> dict[str, Any]:
        """Rebuild the queue's state from the store, never from a snapshot."""
        self.require(who, Action.ADMIN)
        if until is not None and until < 0:
            raise ApiError(400, "InvalidQuery", "until must be a position >= 0", "untilPosition")
        decider = QueueDecider()
        runner = await admin.rebuild(self.loop.store, decider, until_position=until or None)
        return {"position": runner.position, "summary": decider.summary(runner.state)}


def _decided(got: T | Refusal) -> T:
    """What the core decided, or its refusal raised for the transport to answer."""
    if isinstance(got, Refusal):
        raise ApiError.refused(got)
    return got


def _digests(firsts: Mapping[str, Envelope]) -> dict[str, str]:
    """Workload id -> the request digest of its stored submission (what created it)."""
    return {
        env.event.workload_id: env.event.request_digest or ""
        for env in firsts.values()
        if isinstance(env.event, WorkloadSubmitted)
    }


def _request_exists(key: str) -> ApiError:
    return ApiError(
        409,
        "AlreadyExists",
        f"ProvisioningRequest {key} already exists with another spec; a request's spec is "
        "immutable (and names are not reused after deletion)",
    )


def _row(kind: str, name: str, result: str, wid: str | None = None) -> dict[str, Any]:
    row = {"kind": kind, "name": name, "result": result}
    if wid is not None:
        row["id"] = wid
    return row


def event_json(env: Envelope) -> dict[str, Any]:
    ev = env.event
    return {
        "position": env.position,
        "time": env.occurred_at,
        "type": env.type,
        "producer": env.producer,
        "stream": env.stream_id,
        "workloadId": env.correlation_id,
        "reason": getattr(ev, "reason", None) or getattr(ev, "outcome", None),
        "message": getattr(ev, "message", None),
        "data": encode_payload(ev),
    }


def _page(
    items: list[Any],
    limit: int,
    after: str | None,
    *,
    key: Callable[[Any], str],
    render: Callable[[Any], dict[str, Any]],
) -> dict[str, Any]:
    """One page in a stable order: ``after`` is the previous page's ``next`` (its last key)."""
    if after:
        keys = [key(i) for i in items]
        items = items[keys.index(after) + 1 :] if after in keys else []
    page = items[:limit]
    return {
        "items": [render(i) for i in page],
        "next": key(page[-1]) if len(items) > limit else None,
    }


def _object_key(o: Mapping[str, Any]) -> str:
    return f"{o['namespace']}/{o['name']}" if o.get("namespace") else str(o["name"])


# -- the kinds ``muster get`` reads ------------------------------------------------


def config_object(event: Any) -> tuple[str, str]:
    """A configuration event's object as a manifest names it: (kind, [namespace/]name)."""
    spec: Any = getattr(event, "spec", None)
    kind = {
        "ResourceFlavorConfigured": "ResourceFlavor",
        "ClusterQueueConfigured": "ClusterQueue",
        "LocalQueueConfigured": "LocalQueue",
        "CohortConfigured": "Cohort",
        "PriorityClassConfigured": getattr(spec, "kind", "PriorityClass"),
        "NamespaceQuotaConfigured": "ResourceQuota",
        "AdmissionCheckConfigured": "AdmissionCheck",
        "ProvisioningRequestConfigConfigured": "ProvisioningRequestConfig",
    }.get(type(event).__name__, type(event).__name__)
    return str(kind), str(getattr(spec, "key", None) or getattr(spec, "name", ""))


@dataclass(frozen=True, slots=True)
class ObjectKind(kinds.ResourceKind):
    """A configured kind and how to read its objects from intake's state."""

    objects: Callable[[WorkloadsState], Iterable[dict[str, Any]]] = lambda s: ()


def _obj(kind: str, spec: Any, status: dict[str, Any] | None = None) -> dict[str, Any]:
    plain = to_plain(spec)
    out: dict[str, Any] = {"kind": kind, "name": spec.name}
    namespace = getattr(spec, "namespace", None)
    if namespace is not None:
        out["namespace"] = namespace
    out["spec"] = {k: v for k, v in plain.items() if k not in ("name", "namespace")}
    out["status"] = status or {}
    return out


_HOLDING = frozenset({"QuotaReserved", "Admitted", "Running"})


def _queue_counts(state: WorkloadsState) -> dict[str, tuple[int, int]]:
    """(pending, admitted) workloads per LocalQueue "namespace/name", in one pass."""
    counts: dict[str, tuple[int, int]] = {}
    for v in state.workloads.values():
        key = f"{v.namespace}/{v.queue_name}"
        pending, admitted = counts.get(key, (0, 0))
        counts[key] = (pending + (v.status == "Pending"), admitted + (v.status in _HOLDING))
    return counts


def _local_queues(state: WorkloadsState) -> Iterable[dict[str, Any]]:
    counts = _queue_counts(state)
    for key, q in state.queue.local_queues.items():
        pending, admitted = counts.get(key, (0, 0))
        yield _obj("LocalQueue", q, {"pendingWorkloads": pending, "admittedWorkloads": admitted})


def _cluster_queues(state: WorkloadsState) -> Iterable[dict[str, Any]]:
    per_cq: dict[str, tuple[int, int]] = {}
    for key, (pending, admitted) in _queue_counts(state).items():
        lq = state.queue.local_queues.get(key)
        if lq is not None:
            p, a = per_cq.get(lq.cluster_queue, (0, 0))
            per_cq[lq.cluster_queue] = (p + pending, a + admitted)
    for name, q in state.queue.cluster_queues.items():
        pending, admitted = per_cq.get(name, (0, 0))
        status = {
            "pendingWorkloads": pending,
            "admittedWorkloads": admitted,
            "usage": to_plain(state.queue.usage.get(name, {})),
        }
        yield _obj("ClusterQueue", q, status)


def _request_objects(state: WorkloadsState) -> Iterable[dict[str, Any]]:
    for v in state.requests.values():
        if v.spec is None:
            continue
        view = v.to_json()
        yield {
            "kind": "ProvisioningRequest",
            "name": v.spec.name,
            "namespace": v.spec.namespace,
            "spec": {k: x for k, x in to_plain(v.spec).items() if k not in ("name", "namespace")},
            "status": {k: x for k, x in view.items() if k != "id"},
        }


_READERS: dict[str, Callable[[WorkloadsState], Iterable[dict[str, Any]]]] = {
    "ResourceFlavor": lambda s: (_obj("ResourceFlavor", f) for f in s.queue.flavors.values()),
    "ClusterQueue": _cluster_queues,
    "LocalQueue": _local_queues,
    "Cohort": lambda s: (_obj("Cohort", c) for c in s.queue.cohorts.values()),
    "PriorityClass": lambda s: (_obj(c.kind, c) for c in s.queue.priority_classes.values()),
    "ResourceQuota": lambda s: (
        _obj("ResourceQuota", q) for q in s.queue.namespace_quotas.values()
    ),
    "AdmissionCheck": lambda s: (
        _obj("AdmissionCheck", c) for c in s.queue.admission_checks.values()
    ),
    "ProvisioningRequestConfig": lambda s: (
        _obj("ProvisioningRequestConfig", c) for c in s.queue.provisioning_configs.values()
    ),
    "ProvisioningRequest": _request_objects,
}
KINDS = tuple(
    ObjectKind(k.kind, k.plural, k.short, k.namespaced, _READERS[k.kind])
    for k in (*kinds.CONFIG_KINDS, kinds.PROVISIONING_REQUEST)
)


def object_kind(name: str) -> ObjectKind:
    found = kinds.resource_kind(name, KINDS)
    if found is None:
        raise ApiError(404, "UnknownKind", f"unknown kind {name!r}; known: {kinds.known(KINDS)}")
    assert isinstance(found, ObjectKind)
    return found


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
