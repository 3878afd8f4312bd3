"""The asynchronous client over muster's HTTP API (aiohttp)."""

from __future__ import annotations

import asyncio
import builtins
import time
import uuid
from collections.abc import AsyncGenerator, Awaitable, Callable, Mapping, Sequence
from typing import Any
from urllib.parse import quote

import aiohttp
import msgspec

from muster_client import errors, retry
from muster_client.errors import TransportError
from muster_client.models import (
    Event,
    Explanation,
    Report,
    Spec,
    Submitted,
    Workload,
    WorkloadPage,
    convert,
    spec_json,
)
from muster_client.retry import RetryPolicy

IDEMPOTENT_METHODS = frozenset({"GET", "HEAD", "PUT", "DELETE", "OPTIONS"})
EVENTS_PAGE = 1000  # the most one page of a history holds
NODES_PAGE = 1000  # the most one page of objects holds


def new_key() -> str:
    """An idempotency key for a submission the caller gave none: retrying it is then safe."""
    return uuid.uuid4().hex


def events_path(
    workload_id: str | None = None,
    cluster_queue: str | None = None,
    local_queue: str | None = None,
) -> str:
    """Where the events of one scope are: a workload, a ClusterQueue or a LocalQueue
    (``namespace/name``)."""
    given = [s for s in (workload_id, cluster_queue, local_queue) if s is not None]
    if len(given) != 1:
        raise ValueError("give exactly one of workload_id, cluster_queue, local_queue")
    if workload_id is not None:
        return f"/v1/workloads/{quote(workload_id, safe='')}/events"
    if cluster_queue is not None:
        return f"/v1/clusterqueues/{quote(cluster_queue, safe='')}/events"
    ns, slash, name = (local_queue or "").partition("/")
    if not slash or not ns or not name or "/" in name:
        raise ValueError("local_queue is namespace/name")
    return f"/v1/namespaces/{quote(ns, safe='')}/localqueues/{quote(name, safe='')}/events"


def check_body(
    state: str,
    message: str | None,
    attempt: int | None,
    requeue_after_seconds: int | None,
    pod_set_updates: Sequence[Mapping[str, Any]] | None,
) -> dict[str, Any]:
    """An admission check's new state as the API takes it (fields left at None unsent)."""
    body: dict[str, Any] = {"state": state}
    for key, value in (
        ("message", message),
        ("attempt", attempt),
        ("requeueAfterSeconds", requeue_after_seconds),
        ("podSetUpdates", [dict(u) for u in pod_set_updates] if pod_set_updates else None),
    ):
        if value is not None:
            body[key] = value
    return body


def _decode(raw: bytes) -> Any:
    if not raw.strip():
        return None
    try:
        return msgspec.json.decode(raw)
    except msgspec.DecodeError:
        return raw.decode(errors="replace")


async def _lines(stream: aiohttp.StreamReader) -> AsyncGenerator[bytes, None]:
    """A stream's complete non-empty lines, whatever their length (an event of a large
    gang can be long). A last line without its newline was cut off with the connection and
    is dropped: the event is read again on resuming."""
    buf = bytearray()
    scanned = 0
    async for chunk in stream.iter_any():
        buf += chunk
        while (end := buf.find(b"\n", scanned)) >= 0:
            line = bytes(buf[:end])
            del buf[: end + 1]
            scanned = 0
            if line.strip():
                yield line
        scanned = len(buf)


class AsyncClient:
    """muster's API over HTTP. ``base_url`` is intake's (e.g. ``http://localhost:8080``),
    ``token`` the bearer token (None: an open intake). Use as ``async with``, or ``close()``.
    """

    def __init__(
        self,
        base_url: str,
        token: str | None = None,
        *,
        timeout: float = 30.0,
        retry_policy: RetryPolicy | None = None,
        session: aiohttp.ClientSession | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.token = token or None
        self.timeout = timeout
        self.retry = retry_policy or RetryPolicy()
        self._session = session
        self._own_session = session is None

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.close()

    async def close(self) -> None:
        if self._session is not None and self._own_session:
            await self._session.close()
        self._session = None

    def _http(self) -> aiohttp.ClientSession:
        if self._session is None:  # made here: a session belongs to the running loop
            self._session = aiohttp.ClientSession()
            self._own_session = True
        return self._session

    def _headers(self, extra: Mapping[str, str] | None) -> dict[str, str]:
        out = {"Accept": "application/json"}
        if self.token:
            out["Authorization"] = f"Bearer {self.token}"
        out.update(extra or {})
        return out

    # -- the one way a call is made --------------------------------------------------------

    async def request(
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
        """``method path`` (relative to the base URL) with retries; the decoded JSON answer.
        Raises the ``ApiError`` subclass of a refusal, ``TransportError`` when unreachable."""
        return (
            await self.request_status(
                method,
                path,
                json=json,
                data=data,
                content_type=content_type,
                params=params,
                headers=headers,
                idempotent=idempotent,
            )
        )[0]

    async def request_status(
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
    ) -> tuple[Any, int]:
        """As ``request``, with the answer's HTTP status."""
        method = method.upper()
        sent = self._headers(headers)
        body = data
        if body is None and json is not None:
            body = msgspec.json.encode(json)
        if body is not None:
            sent["Content-Type"] = content_type
        if idempotent is None:
            idempotent = method in IDEMPOTENT_METHODS or "Idempotency-Key" in sent
        url = self.base_url + path
        started = time.monotonic()
        attempt = 0
        while True:
            attempt += 1
            wait_hint: float | None = None
            try:
                async with self._http().request(
                    method,
                    url,
                    data=body,
                    params=params,
                    headers=sent,
                    timeout=aiohttp.ClientTimeout(total=self.timeout),
                ) as resp:
                    raw = await resp.read()
                    status = resp.status
                    wait_hint = retry.parse_retry_after(resp.headers.get("Retry-After"))
            except aiohttp.ClientConnectorError as exc:  # never sent: always safe again
                failure: errors.MusterError = TransportError(str(exc))
                again = True
            except (aiohttp.ClientError, TimeoutError) as exc:
                failure = TransportError(str(exc) or type(exc).__name__)
                again = idempotent
            else:
                if status < 400:
                    return _decode(raw), status
                failure = errors.from_http(status, _decode(raw), wait_hint)
                again = retry.retryable_status(status, idempotent)
            wait = self.retry.delay(attempt, wait_hint)
            if not again or not self.retry.may_retry(attempt, started, wait):
                raise failure
            await asyncio.sleep(wait)

    # -- workloads ----------------------------------------------------------------------------

    async def submit(self, spec: Spec, *, idempotency_key: str | None = None) -> Submitted:
        """Submit one workload. The idempotency key (one is made when none is given, so a
        retry cannot submit twice) makes a repeat answer the original (``created=False``)."""
        body = spec_json(spec)
        key = idempotency_key or body.get("idempotencyKey") or new_key()
        answer, status = await self.request_status(
            "POST", "/v1/workloads", json=body, headers={"Idempotency-Key": key}
        )
        return Submitted(workload=convert(answer, Workload), created=status == 201)

    async def submit_batch(
        self, specs: Sequence[Spec], *, idempotency_keys: Sequence[str] | None = None
    ) -> builtins.list[Submitted]:
        """Submit workloads together: all are accepted, or none is (the error names the
        first bad one, e.g. ``items[3].podSets[0].count``)."""
        if idempotency_keys is not None and len(idempotency_keys) != len(specs):
            raise ValueError("one idempotency key for each spec")
        items = []
        for i, spec in enumerate(specs):
            body = spec_json(spec)
            if idempotency_keys is not None:
                body["idempotencyKey"] = idempotency_keys[i]
            body.setdefault("idempotencyKey", new_key())
            items.append(body)
        answer = await self.request(
            "POST", "/v1/workloads:batch", json={"items": items}, idempotent=True
        )
        return [convert(item, Submitted) for item in answer["items"]]

    async def get(self, workload_id: str) -> Workload:
        answer = await self.request("GET", f"/v1/workloads/{quote(workload_id, safe='')}")
        return convert(answer, Workload)

    async def list(
        self,
        *,
        namespace: str | None = None,
        status: str | None = None,
        limit: int = 100,
        after: str | None = None,
    ) -> WorkloadPage:
        """One page of workloads in submission order; the page's ``next`` is ``after`` for
        the next page."""
        params: dict[str, str | int] = {"limit": limit}
        for name, value in (("namespace", namespace), ("status", status), ("after", after)):
            if value:
                params[name] = value
        return convert(await self.request("GET", "/v1/workloads", params=params), WorkloadPage)

    def iter_workloads(
        self, *, namespace: str | None = None, status: str | None = None, page_size: int = 1000
    ) -> AsyncGenerator[Workload, None]:
        """Every workload, page after page."""
        return every_workload(self.list, namespace=namespace, status=status, page_size=page_size)

    async def cancel(self, workload_id: str) -> Workload:
        """Ask for the workload's cancellation (it is Cancelled once its pods are gone)."""
        path = f"/v1/workloads/{quote(workload_id, safe='')}/cancel"
        return convert(await self.request("POST", path, idempotent=True), Workload)

    async def explain(self, workload_id: str, *, at: str | None = None) -> Explanation:
        """Its state and why, now or ``at`` a past point (RFC 3339, ``-5m``, ``@12345``)."""
        path = f"/v1/workloads/{quote(workload_id, safe='')}/explain"
        answer = await self.request("GET", path, params={"at": at} if at else None)
        return convert({**answer, "detail": answer}, Explanation)

    async def update_admission_check(
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
        """An external admission check's controller sets the check's state (admin)."""
        body = check_body(state, message, attempt, requeue_after_seconds, pod_set_updates)
        path = (
            f"/v1/workloads/{quote(workload_id, safe='')}/admissionchecks/{quote(check, safe='')}"
        )
        return convert(await self.request("PUT", path, json=body), Workload)

    # -- nodes and accounting -----------------------------------------------------------------

    async def nodes(self) -> builtins.list[dict[str, Any]]:
        """Every node (``kind: Node`` objects, as ``muster get nodes`` reads them)."""
        out: builtins.list[dict[str, Any]] = []
        after: str | None = None
        while True:
            params: dict[str, str | int] = {"limit": NODES_PAGE} | (
                {"after": after} if after else {}
            )
            page = await self.request("GET", "/v1/nodes", params=params)
            out += page["items"]
            after = page.get("next")
            if not after or not page["items"]:
                return out

    async def report(
        self, *, since: str | None = None, until: str | None = None, namespace: str | None = None
    ) -> Report:
        """Accounting over ``[since, until)`` (RFC 3339, epoch seconds or ``-2h``)."""
        params = {
            k: v for k, v in (("since", since), ("until", until), ("namespace", namespace)) if v
        }
        return convert(await self.request("GET", "/v1/report", params=params), Report)

    # -- events -------------------------------------------------------------------------------

    async def events(
        self,
        *,
        workload_id: str | None = None,
        cluster_queue: str | None = None,
        local_queue: str | None = None,
        since: int = 0,
    ) -> builtins.list[Event]:
        """The scope's events after position ``since``, up to now (every page)."""
        path = events_path(workload_id, cluster_queue, local_queue)
        out: builtins.list[Event] = []
        while True:
            params: dict[str, str | int] = {"after": since, "limit": EVENTS_PAGE}
            page = (await self.request("GET", path, params=params))["events"]
            out += [convert(e, Event) for e in page]
            if len(page) < EVENTS_PAGE:
                return out
            since = out[-1].position

    async def watch(
        self,
        *,
        workload_id: str | None = None,
        cluster_queue: str | None = None,
        local_queue: str | None = None,
        since: int = 0,
    ) -> AsyncGenerator[Event, None]:
        """The scope's events after position ``since``, then each new one as it is
        committed, for as long as the caller iterates. A dropped connection is reopened
        from the last position yielded (with backoff), so no event is lost or repeated;
        ``TransportError`` or the refusal once the retry budget is spent."""
        path = events_path(workload_id, cluster_queue, local_queue)
        last = since
        started = time.monotonic()
        attempt = 0
        while True:
            wait_hint: float | None = None
            try:
                async with self._http().get(
                    self.base_url + path,
                    params={"after": last, "watch": "true"},
                    headers=self._headers(None),
                    timeout=aiohttp.ClientTimeout(total=None, sock_connect=self.timeout),
                ) as resp:
                    if resp.status >= 400:
                        wait_hint = retry.parse_retry_after(resp.headers.get("Retry-After"))
                        failure: errors.MusterError = errors.from_http(
                            resp.status, _decode(await resp.read()), wait_hint
                        )
                        if not retry.retryable_status(resp.status, True):
                            raise failure
                    else:
                        async for line in _lines(resp.content):
                            event = msgspec.json.decode(line, type=Event, strict=False)
                            if event.position <= last:
                                continue
                            last = event.position
                            started, attempt = time.monotonic(), 0  # progress: a fresh budget
                            yield event
                        failure = TransportError(f"the watch of {path} ended after {last}")
            except (aiohttp.ClientError, TimeoutError) as exc:
                failure = TransportError(str(exc) or type(exc).__name__)
            attempt += 1
            wait = self.retry.delay(attempt, wait_hint)
            if not self.retry.may_retry(attempt, started, wait):
                raise failure
            await asyncio.sleep(wait)


async def every_workload(
    list_page: Callable[..., Awaitable[WorkloadPage]],
    *,
    namespace: str | None,
    status: str | None,
    page_size: int,
) -> AsyncGenerator[Workload, None]:
    """Every workload, following each page's ``next`` (the HTTP and gRPC clients alike)."""
    after: str | None = None
    while True:
        page = await list_page(namespace=namespace, status=status, limit=page_size, after=after)
        for item in page.items:
            yield item
        if not page.next or not page.items:
            return
        after = page.next
