"""A blocking client: the asynchronous one, run on an event loop of its own in a thread of
its own, so that it blocks its caller like any blocking call, even inside a running event
loop (a test driving the CLI). In asynchronous code use ``AsyncClient`` instead.
"""

from __future__ import annotations

import asyncio
import builtins
import threading
from collections.abc import AsyncGenerator, AsyncIterator, Coroutine, Iterator, Mapping, Sequence
from typing import Any, TypeVar

from muster_client.http import AsyncClient
from muster_client.models import (
    Event,
    Explanation,
    Report,
    Spec,
    Submitted,
    Workload,
    WorkloadPage,
)
from muster_client.retry import RetryPolicy

T = TypeVar("T")


class Client:
    """muster's API over HTTP, blocking. Same arguments and operations as ``AsyncClient``."""

    def __init__(
        self,
        base_url: str,
        token: str | None = None,
        *,
        timeout: float = 30.0,
        retry_policy: RetryPolicy | None = None,
    ) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="muster-client", daemon=True
        )
        self._thread.start()
        self.aio = AsyncClient(base_url, token, timeout=timeout, retry_policy=retry_policy)

    @property
    def base_url(self) -> str:
        return self.aio.base_url

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def close(self) -> None:
        if self._loop.is_closed():
            return
        try:
            self._run(self.aio.close())
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join()
            self._loop.close()

    def _run(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()

    def request(
        self,
        method: str,
        path: str,
        *,
        json: Any = None,
        data: bytes | None = None,
        content_type: str = "application/json",
        params: Mapping[str, str | int] | None = None,
        headers: Mapping[str, str] | None = None,
        idempotent: bool | None = None,
    ) -> Any:
        return self._run(
            self.aio.request(
                method,
                path,
                json=json,
                data=data,
                content_type=content_type,
                params=params,
                headers=headers,
                idempotent=idempotent,
            )
        )

    def submit(self, spec: Spec, *, idempotency_key: str | None = None) -> Submitted:
        return self._run(self.aio.submit(spec, idempotency_key=idempotency_key))

    def submit_batch(
        self, specs: Sequence[Spec], *, idempotency_keys: Sequence[str] | None = None
    ) -> builtins.list[Submitted]:
        return self._run(self.aio.submit_batch(specs, idempotency_keys=idempotency_keys))

    def get(self, workload_id: str) -> Workload:
        return self._run(self.aio.get(workload_id))

    def list(
        self,
        *,
        namespace: str | None = None,
        status: str | None = None,
        limit: int = 100,
        after: str | None = None,
    ) -> WorkloadPage:
        return self._run(
            self.aio.list(namespace=namespace, status=status, limit=limit, after=after)
        )

    def iter_workloads(
        self, *, namespace: str | None = None, status: str | None = None, page_size: int = 1000
    ) -> Iterator[Workload]:
        return self._iterate(
            self.aio.iter_workloads(namespace=namespace, status=status, page_size=page_size)
        )

    def cancel(self, workload_id: str) -> Workload:
        return self._run(self.aio.cancel(workload_id))

    def explain(self, workload_id: str, *, at: str | None = None) -> Explanation:
        return self._run(self.aio.explain(workload_id, at=at))

    def update_admission_check(
        self,
        workload_id: str,
        check: str,
        state: str,
        *,
        message: str | None = None,
        attempt: int | None = None,
        requeue_after_seconds: int | None = None,
        pod_set_updates: Sequence[Mapping[str, Any]] | None = None,
    ) -> Workload:
        return self._run(
            self.aio.update_admission_check(
                workload_id,
                check,
                state,
                message=message,
                attempt=attempt,
                requeue_after_seconds=requeue_after_seconds,
                pod_set_updates=pod_set_updates,
            )
        )

    def nodes(self) -> builtins.list[dict[str, Any]]:
        return self._run(self.aio.nodes())

    def report(
        self, *, since: str | None = None, until: str | None = None, namespace: str | None = None
    ) -> Report:
        return self._run(self.aio.report(since=since, until=until, namespace=namespace))

    def events(
        self,
        *,
        workload_id: str | None = None,
        cluster_queue: str | None = None,
        local_queue: str | None = None,
        since: int = 0,
    ) -> builtins.list[Event]:
        return self._run(
            self.aio.events(
                workload_id=workload_id,
                cluster_queue=cluster_queue,
                local_queue=local_queue,
                since=since,
            )
        )

    def watch(
        self,
        *,
        workload_id: str | None = None,
        cluster_queue: str | None = None,
        local_queue: str | None = None,
        since: int = 0,
    ) -> Iterator[Event]:
        """As ``AsyncClient.watch``: blocks for each next event."""
        return self._iterate(
            self.aio.watch(
                workload_id=workload_id,
                cluster_queue=cluster_queue,
                local_queue=local_queue,
                since=since,
            )
        )

    def _iterate(self, agen: AsyncGenerator[T, None]) -> Iterator[T]:
        try:
            while True:
                try:
                    yield self._run(_next(agen))
                except StopAsyncIteration:
                    return
        finally:
            if not self._loop.is_closed():
                self._run(agen.aclose())


async def _next(agen: AsyncIterator[T]) -> T:
    return await agen.__anext__()
