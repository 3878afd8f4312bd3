"""What the Kubernetes backends' integration tests share: one store and one fake API server,
with reconcilers (replicas, restarts) coming and going over them."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from typing import Any, TypeVar

from kubernetes_asyncio.client import ApiClient, Configuration

from muster.core.decider import Decider
from muster.core.events import Event, NewEvent, StreamAppend
from muster.runtime.loop import DeciderLoop
from muster.runtime.metrics import ServiceMetrics
from muster.runtime.settings import load
from muster.store import SqlEventStore
from muster.testing.kube_api import FakeKubeApi

E = TypeVar("E", bound="KubeEnv")


class KubeEnv:
    """One store and one fake cluster; ``running`` maps each started reconciler to its task."""

    def __init__(self, store: SqlEventStore, api: FakeKubeApi, client: ApiClient) -> None:
        self.store = store
        self.api = api
        self.client = client
        self.settings = load({}, store_url=store.url, kafka_bootstrap="127.0.0.1:9")
        self.running: dict[Any, asyncio.Task[None]] = {}

    async def loop(self, decider: Decider[Any]) -> DeciderLoop:
        """A DeciderLoop over the store (no Kafka), restored to what the store holds."""
        loop = DeciderLoop(decider, self.store, self.settings, ServiceMetrics())
        await loop.restore()
        return loop

    async def stop(self, reconciler: Any) -> None:
        task = self.running.pop(reconciler)
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    async def append(self, stream: str, *events: Event) -> None:
        """Append as another service would, then wake every running reconciler."""
        version = await self.store.stream_version(stream)
        news = [NewEvent(stream_id=stream, event=e, occurred_at=time.time()) for e in events]
        await self.store.append(
            [StreamAppend(stream, version, news)], producer="test", recorded_at=time.time()
        )
        for reconciler in self.running:
            reconciler.wake()


@contextlib.asynccontextmanager
async def kube_env(cls: type[E], store: SqlEventStore, timeout: float) -> AsyncIterator[E]:
    """``cls`` over a fresh fake API server (bookmarks every 50 ms; a watch's timeoutSeconds
    lasts 5% as long); the test must end within ``timeout``, and every reconciler it left
    running is stopped."""
    async with (
        FakeKubeApi(bookmark_interval=0.05, timeout_seconds_scale=0.05) as api,
        ApiClient(Configuration(host=api.url)) as client,
    ):
        env = cls(store, api, client)
        try:
            async with asyncio.timeout(timeout):
                yield env
        finally:
            for reconciler in list(env.running):
                await env.stop(reconciler)
