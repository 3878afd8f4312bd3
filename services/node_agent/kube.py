"""The node agent's Kubernetes backend: report what the pods placed on its nodes do.

A routine of the node-agent service (``MUSTER_NODE_AGENT_BACKEND=kubernetes``). Two tasks:

* an informer for the pods of muster workloads (label ``muster.dev/workload-id``, every
  namespace): list, then watch from the list's resourceVersion with bookmarks; a watch the
  server ends is resumed from the last resourceVersion seen, as is one whose connection drops;
  ``410 Gone`` relists. A pod that disappears (deleted, or missing from a relist) is kept for a
  while with its last state, so a run deleted before it ended is reported failed;
* reconcile: once the cache is filled, and whenever it or the folded state moves, run
  :func:`muster.core.nodes.kube.plan_events` over the state and the cache, and append its events
  on the nodes' streams, guarded by the versions of the streams the state was folded to (a
  replica, a restart or the decider that wrote first makes the append conflict, and it is
  re-planned rather than repeated).

Only pods on nodes this agent owns (``muster.core.nodes.state.mine``) and that its state
expects are reported; the pure function decides which. This module only does I/O, logs, and
retries failures with backoff; it never raises out of :func:`kube_pods` for a cluster problem.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import random
import time
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
import structlog
from kubernetes_asyncio import watch
from kubernetes_asyncio.client import ApiClient, CoreV1Api
from kubernetes_asyncio.client.exceptions import ApiException

from muster.core.events import Event, NewEvent, StreamAppend
from muster.core.events import node as nev
from muster.core.nodes import kube
from muster.runtime.kube import Backoff, api_client
from muster.runtime.loop import DeciderLoop
from muster.runtime.settings import Settings
from muster.store import ConcurrencyConflict

JsonObj = dict[str, Any]

log = structlog.get_logger("node-agent").bind(backend="kubernetes")


async def kube_pods(loop: DeciderLoop, settings: Settings) -> None:
    """The routine: connect (retrying), then watch and report until cancelled."""
    backoff = Backoff()
    while True:
        try:
            client = await api_client(settings)
        except Exception as exc:
            log.warning("no Kubernetes API configuration; retrying", error=repr(exc))
            await backoff.sleep()
            continue
        break
    try:
        await PodWatcher(loop, client, poll_seconds=settings.poll_seconds).run()
    finally:
        await client.close()


def _key(obj: JsonObj) -> tuple[str, str]:
    meta = obj.get("metadata") or {}
    return str(meta.get("namespace") or ""), str(meta.get("name") or "")


class PodWatcher:
    """The pods informer + reconcile over one DeciderLoop (whose state it reads and steps)."""

    def __init__(
        self,
        loop: DeciderLoop,
        client: ApiClient,
        *,
        poll_seconds: float = 1.0,
        tick_seconds: float = 0.05,
        watch_timeout_seconds: int = 300,
        backoff_first: float = 0.2,
        backoff_cap: float = 30.0,
        tombstone_seconds: float = 3600.0,
    ) -> None:
        self.loop = loop
        self.client = client
        self.core = CoreV1Api(client)
        self.poll_seconds = poll_seconds
        self.tick_seconds = tick_seconds
        self.watch_timeout_seconds = watch_timeout_seconds
        self.backoff_first = backoff_first
        self.backoff_cap = backoff_cap
        self.tombstone_seconds = tombstone_seconds
        # (namespace, name) -> the pod as last seen (muster workloads' pods only).
        self.cache: dict[tuple[str, str], kube.ObservedPod] = {}
        # uid -> (monotonic time it went, its last state): deleted pods still count as runs.
        self.gone: dict[str, tuple[float, kube.ObservedPod]] = {}
        self.synced = False
        self.resource_version = ""
        self.relists = 0
        self.watches = 0
        self._changed = asyncio.Event()
        self._progress = asyncio.Event()
        self.passes = 0
        self.appended = 0  # events appended
        self.conflicts = 0

    # ------------------------------------------------------------------ running

    async def run(self) -> None:
        async with asyncio.TaskGroup() as tg:
            tg.create_task(self._forever("pods informer", self._inform))
            tg.create_task(self._forever("reconcile", self._reconcile_forever))

    def wake(self) -> None:
        """Reconcile soon (the state or the cluster may have moved)."""
        self._changed.set()

    async def wait_until(self, predicate: Callable[[], bool], timeout: float = 5.0) -> None:
        """Wait for ``predicate`` to hold, re-checked after each pass and cache change."""
        async with asyncio.timeout(timeout):
            while not predicate():
                await self._progress.wait()

    def _signal(self) -> None:
        self._progress.set()
        self._progress = asyncio.Event()

    async def _forever(self, what: str, task: Callable[[Backoff], Awaitable[None]]) -> None:
        backoff = Backoff(self.backoff_first, self.backoff_cap)
        while True:
            try:
                await task(backoff)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning(f"{what} failed; retrying", error=repr(exc), exc_info=True)
                await backoff.sleep()

    # ------------------------------------------------------------------ informer

    async def _inform(self, backoff: Backoff) -> None:
        """List, then watch from the list's version; relist only on 410 Gone."""
        while True:
            self._replace(await self._list())
            backoff.reset()
            await self._watch(backoff)
            self.relists += 1
            log.info("watch expired; relisting", kind="pods")

    async def _list(self) -> JsonObj:
        """The pods as JSON: a typed V1PodList would cost a model per container status."""
        # Unread (the client's stubs do not know): an aiohttp response, its status unchecked.
        response: aiohttp.ClientResponse = await self.core.list_pod_for_all_namespaces(
            label_selector=kube.SELECTOR, _preload_content=False
        )  # type: ignore[assignment]
        try:
            data = await response.read()
        finally:
            response.release()
        if not 200 <= response.status <= 299:
            exc = ApiException(status=response.status, reason=response.reason)
            exc.body = data
            raise exc
        listed: JsonObj = json.loads(data)
        return listed

    async def _watch(self, backoff: Backoff) -> None:
        """Follow changes from ``resource_version``; returns when it expired (410)."""
        while True:
            timeout = int(self.watch_timeout_seconds * random.uniform(1.0, 2.0))
            self.watches += 1
            try:
                async with watch.Watch(return_type="object") as w:
                    stream = w.stream(
                        self.core.list_pod_for_all_namespaces,
                        label_selector=kube.SELECTOR,
                        resource_version=self.resource_version,
                        allow_watch_bookmarks=True,
                        timeout_seconds=timeout,
                    )
                    async for event in stream:
                        self._apply(str(event["type"]), event["raw_object"])
                        if w.resource_version:
                            self.resource_version = str(w.resource_version)
                        backoff.reset()
            except ApiException as exc:
                if exc.status == 410:
                    return
                raise
            except (aiohttp.ClientError, TimeoutError) as exc:
                log.info(
                    "watch connection lost; resuming",
                    kind="pods",
                    resource_version=self.resource_version,
                    error=repr(exc),
                )
                await backoff.sleep()
            # Ended by the server (its timeout) or cut: resume from the last version seen.

    def _replace(self, listed: JsonObj) -> None:
        fresh: dict[tuple[str, str], kube.ObservedPod] = {}
        for item in listed.get("items") or ():
            if isinstance(item, dict) and (seen := kube.observe_pod(item)) is not None:
                fresh[_key(item)] = seen
        for key, last in self.cache.items():  # deleted (maybe re-created) while unwatched
            if key not in fresh or fresh[key].uid != last.uid:
                self._bury(last)
        self.cache = fresh
        self.resource_version = str((listed.get("metadata") or {}).get("resourceVersion", ""))
        self.synced = True
        self._changed.set()
        self._signal()

    def _apply(self, type_: str, obj: JsonObj) -> None:
        if type_ not in ("ADDED", "MODIFIED", "DELETED"):
            return  # BOOKMARK: only moves the version on
        key = _key(obj)
        if type_ == "DELETED":
            last = kube.observe_pod(obj)
            self.cache.pop(key, None)
            if last is not None:
                self._bury(last)
        elif (seen := kube.observe_pod(obj)) is not None:
            self.cache[key] = seen
        else:
            self.cache.pop(key, None)  # its labels were taken off: no longer ours to report
        self._changed.set()
        self._signal()

    def _bury(self, last: kube.ObservedPod) -> None:
        uid = last.uid or f"{last.namespace}/{last.name}"
        self.gone[uid] = (time.monotonic(), dataclasses.replace(last, deleted=True))

    # ------------------------------------------------------------------ reconcile

    async def _reconcile_forever(self, backoff: Backoff) -> None:
        last_position = -1
        last_poll = 0.0
        while True:
            # asyncio.timeout, not wait_for: 3.11's wait_for can swallow a cancellation.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.tick_seconds):
                    await self._changed.wait()
            now = time.monotonic()
            due = now - last_poll >= self.poll_seconds
            if not (self._changed.is_set() or due or self.loop.runner.position != last_position):
                continue
            self._changed.clear()
            if due:
                last_poll = now
            await self.reconcile()
            backoff.reset()
            last_position = self.loop.runner.position

    def observed(self) -> list[kube.ObservedPod]:
        """The cache and the recently deleted pods, as the pure function takes them."""
        horizon = time.monotonic() - self.tombstone_seconds
        self.gone = {uid: v for uid, v in self.gone.items() if v[0] >= horizon}
        live = {p.uid for p in self.cache.values()}
        return [*self.cache.values(), *(p for uid, (_, p) in self.gone.items() if uid not in live)]

    async def reconcile(self) -> list[tuple[str, Event]]:
        """One pass: fold what is new, plan, append."""
        try:
            await self.loop.step()
            if not self.synced:
                return []
            state = self.loop.runner.state
            at = max(time.time(), state.now)
            events = kube.plan_events(state, self.observed(), at)
            if events:
                # Built before any await: the versions are those the plan was made from.
                await self._append(self._appends(events, at))
            return events
        finally:
            self.passes += 1
            self._signal()

    def _appends(self, events: list[tuple[str, Event]], at: float) -> list[StreamAppend]:
        runner = self.loop.runner
        by_stream: dict[str, list[NewEvent]] = {}
        for node, event in events:
            stream = nev.stream(node)
            by_stream.setdefault(stream, []).append(
                NewEvent(
                    stream_id=stream,
                    event=event,
                    occurred_at=at,
                    correlation_id=getattr(event, "workload_id", None) or None,
                )
            )
        return [
            StreamAppend(stream, runner.versions.get(stream, 0), news)
            for stream, news in by_stream.items()
        ]

    async def _append(self, appends: list[StreamAppend]) -> None:
        try:
            stored = await self.loop.store.append(
                appends, producer=self.loop.name, recorded_at=time.time()
            )
        except ConcurrencyConflict as exc:
            self.conflicts += 1
            self.loop.metrics.conflicts.labels(self.loop.name).inc()
            log.info("another writer recorded first; re-planning", stream=exc.stream_id)
        else:
            self.appended += len(stored)
            for env in stored:
                self.loop.metrics.decisions.labels(self.loop.name, env.type).inc()
                log.info("recorded", stream=env.stream_id, type=env.type)
            self.loop.appended()
        await self.loop.step()
        self._changed.set()  # what was recorded may call for more
