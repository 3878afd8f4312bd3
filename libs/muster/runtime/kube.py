"""What both Kubernetes backends (provisioner, node agent) share: an API client from the
settings, backoff between retries, and the ``Reconciler``: informers (list, then watch
from the list's resourceVersion with bookmarks; a watch the server ends or whose
connection drops is resumed from the last version seen; ``410 Gone`` relists) plus a
reconcile loop over one DeciderLoop that appends with stream-version guards."""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import aiohttp
from kubernetes_asyncio import config as kube_config
from kubernetes_asyncio import watch
from kubernetes_asyncio.client import ApiClient, Configuration
from kubernetes_asyncio.client.exceptions import ApiException

from muster.core.events import StreamAppend
from muster.runtime.loop import DeciderLoop
from muster.runtime.settings import Settings
from muster.store import ConcurrencyConflict

JsonObj = dict[str, Any]


def object_key(obj: JsonObj) -> tuple[str, str]:
    """``(namespace, name)`` of an object (JSON); "" for what it lacks."""
    meta = obj.get("metadata") or {}
    return str(meta.get("namespace") or ""), str(meta.get("name") or "")


async def api_client(settings: Settings) -> ApiClient:
    """``MUSTER_KUBE_API_URL`` if set; else the pod's service account, else ``~/.kube/config``
    (or ``$KUBECONFIG``)."""
    if settings.kube_api_url:
        return ApiClient(Configuration(host=settings.kube_api_url))
    configuration = Configuration()
    try:
        kube_config.load_incluster_config(client_configuration=configuration)
    except kube_config.ConfigException:
        await kube_config.load_kube_config(client_configuration=configuration)
    return ApiClient(configuration)


async def connect(settings: Settings, log: Any) -> ApiClient:
    """An API client, retrying (with backoff) until the configuration is there."""
    backoff = Backoff()
    while True:
        try:
            return await api_client(settings)
        except Exception as exc:
            log.warning("no Kubernetes API configuration; retrying", error=repr(exc))
            await backoff.sleep()


class Backoff:
    """Exponential backoff (each wait jittered between half and all of it), reset by progress."""

    def __init__(self, first: float = 0.2, cap: float = 30.0) -> None:
        self.first = first
        self.cap = cap
        self.delay = first

    def reset(self) -> None:
        self.delay = self.first

    async def sleep(self) -> None:
        await asyncio.sleep(random.uniform(self.delay / 2, self.delay))
        self.delay = min(self.cap, self.delay * 2)


@dataclass(slots=True)
class Cursor:
    """Where one kind's list + watch stands."""

    kind: str
    synced: bool = False
    resource_version: str = ""
    relists: int = 0
    watches: int = 0


class Reconciler:
    """Informer tasks and a reconcile loop over one DeciderLoop (whose state it reads and
    steps). Subclasses say what the informers follow and what one ``reconcile`` pass does."""

    def __init__(
        self,
        loop: DeciderLoop,
        client: ApiClient,
        log: Any,
        *,
        poll_seconds: float = 1.0,
        tick_seconds: float = 0.05,
        watch_timeout_seconds: int = 300,
        backoff_first: float = 0.2,
        backoff_cap: float = 30.0,
    ) -> None:
        self.loop = loop
        self.client = client
        self.log = log
        self.poll_seconds = poll_seconds
        self.tick_seconds = tick_seconds
        self.watch_timeout_seconds = watch_timeout_seconds
        self.backoff_first = backoff_first
        self.backoff_cap = backoff_cap
        self._changed = asyncio.Event()
        self._progress = asyncio.Event()
        self.passes = 0
        self.appended = 0  # events appended
        self.conflicts = 0

    async def reconcile(self) -> object:
        """One pass: fold what is new, plan, append (and act). Counted in ``passes`` and
        signalled to ``wait_until`` by the loop that runs it, whether it succeeds or not."""
        raise NotImplementedError

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
                self.log.warning(f"{what} failed; retrying", error=repr(exc), exc_info=True)
                await backoff.sleep()

    # ------------------------------------------------------------------ informers

    async def inform(
        self,
        cursor: Cursor,
        list_json: Callable[[], Awaitable[JsonObj]],
        watch_fn: Callable[..., Awaitable[Any]],
        args: tuple[str, ...],
        kwargs: dict[str, Any],
        replace: Callable[[JsonObj], None],
        apply: Callable[[str, JsonObj], None],
        backoff: Backoff,
    ) -> None:
        """List, then watch from the list's version; relist only on 410 Gone. ``replace``
        takes a whole list, ``apply`` one watch event (never a bookmark)."""
        while True:
            listed = await list_json()
            replace(listed)
            cursor.resource_version = str((listed.get("metadata") or {}).get("resourceVersion", ""))
            cursor.synced = True
            self._changed.set()
            self._signal()
            backoff.reset()
            await self._watch(cursor, watch_fn, args, kwargs, apply, backoff)
            cursor.relists += 1
            self.log.info("watch expired; relisting", kind=cursor.kind)

    async def _watch(
        self,
        cursor: Cursor,
        watch_fn: Callable[..., Awaitable[Any]],
        args: tuple[str, ...],
        kwargs: dict[str, Any],
        apply: Callable[[str, JsonObj], None],
        backoff: Backoff,
    ) -> None:
        """Follow changes from ``cursor.resource_version``; returns when it expired (410)."""
        while True:
            timeout = int(self.watch_timeout_seconds * random.uniform(1.0, 2.0))
            cursor.watches += 1
            try:
                async with watch.Watch(return_type="object") as w:
                    stream = w.stream(
                        watch_fn,
                        *args,
                        resource_version=cursor.resource_version,
                        allow_watch_bookmarks=True,
                        timeout_seconds=timeout,
                        **kwargs,
                    )
                    async for event in stream:
                        type_ = str(event["type"])
                        if type_ in ("ADDED", "MODIFIED", "DELETED"):
                            apply(type_, event["raw_object"])
                            self._changed.set()
                            self._signal()
                        # BOOKMARK: only moves the version on
                        if w.resource_version:
                            cursor.resource_version = str(w.resource_version)
                        backoff.reset()
            except ApiException as exc:
                if exc.status == 410:
                    return
                raise
            except (aiohttp.ClientError, TimeoutError) as exc:
                self.log.info(
                    "watch connection lost; resuming",
                    kind=cursor.kind,
                    resource_version=cursor.resource_version,
                    error=repr(exc),
                )
                await backoff.sleep()
            # Ended by the server (its timeout) or cut: resume from the last version seen.

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
            try:
                await self.reconcile()
            finally:
                self.passes += 1
                self._signal()
            backoff.reset()
            last_position = self.loop.runner.position

    async def _append(self, appends: list[StreamAppend]) -> None:
        """Append what a pass planned, guarded by the versions it was planned from; another
        writer first means re-planning, not repeating."""
        try:
            stored = await self.loop.store.append(
                appends, producer=self.loop.name, recorded_at=time.time()
            )
        except ConcurrencyConflict as exc:
            self.conflicts += 1
            self.loop.metrics.conflicts.labels(self.loop.name).inc()
            self.log.info("another writer recorded first; re-planning", stream=exc.stream_id)
        else:
            self.appended += len(stored)
            for env in stored:
                self.loop.metrics.decisions.labels(self.loop.name, env.type).inc()
                self.log.info("recorded", stream=env.stream_id, type=env.type)
            self.loop.appended()
        await self.loop.step()
        self._changed.set()  # what was recorded may call for more
