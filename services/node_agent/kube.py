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
expects are reported; the pure function decides which. A node-bound agent (a DaemonSet pod,
``MUSTER_NODE_NAME``) lists and watches only the pods bound to its node (field selector
``spec.nodeName``), so N agents do not each follow every pod of the cluster. This module only
does I/O, logs, and retries failures with backoff; it never raises out of :func:`kube_pods` for
a cluster problem.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import time
from typing import Any

import aiohttp
import structlog
from kubernetes_asyncio.client import ApiClient, CoreV1Api
from kubernetes_asyncio.client.exceptions import ApiException

from muster.core.events import Event, NewEvent
from muster.core.events import node as nev
from muster.core.nodes import kube
from muster.runtime.kube import Backoff, Cursor, Reconciler, connect, object_key
from muster.runtime.loop import DeciderLoop
from muster.runtime.settings import Settings

JsonObj = dict[str, Any]

log = structlog.get_logger("node-agent").bind(backend="kubernetes")


async def kube_pods(loop: DeciderLoop, settings: Settings) -> None:
    """The routine: connect (retrying), then watch and report until cancelled."""
    client = await connect(settings, log)
    try:
        watcher = PodWatcher(
            loop, client, poll_seconds=settings.poll_seconds, node=settings.node_name
        )
        await watcher.run()
    finally:
        await client.close()


class PodWatcher(Reconciler):
    """The pods informer + reconcile over one DeciderLoop (whose state it reads and steps)."""

    def __init__(
        self,
        loop: DeciderLoop,
        client: ApiClient,
        *,
        tombstone_seconds: float = 3600.0,
        node: str = "",
        **kw: Any,
    ) -> None:
        super().__init__(loop, client, log, **kw)
        self.core = CoreV1Api(client)
        # The API server's selection: muster workloads' pods, on this agent's node if bound.
        self.selectors: dict[str, Any] = {"label_selector": kube.SELECTOR}
        if node:
            self.selectors["field_selector"] = f"spec.nodeName={node}"
        self.tombstone_seconds = tombstone_seconds
        self.pods = Cursor("pods")
        # (namespace, name) -> the pod as last seen (muster workloads' pods only).
        self.cache: dict[tuple[str, str], kube.ObservedPod] = {}
        # uid -> (monotonic time it went, its last state): deleted pods still count as runs.
        self.gone: dict[str, tuple[float, kube.ObservedPod]] = {}

    async def run(self) -> None:
        async with asyncio.TaskGroup() as tg:
            tg.create_task(self._forever("pods informer", self._inform))
            tg.create_task(self._forever("reconcile", self._reconcile_forever))

    # ------------------------------------------------------------------ informer

    async def _inform(self, backoff: Backoff) -> None:
        await self.inform(
            self.pods,
            self._list,
            self.core.list_pod_for_all_namespaces,
            (),
            self.selectors,
            self._replace,
            self._apply,
            backoff,
        )

    async def _list(self) -> JsonObj:
        """The pods as JSON: a typed V1PodList would cost a model per container status."""
        # Unread (the client's stubs do not know): an aiohttp response, its status unchecked.
        response: aiohttp.ClientResponse = await self.core.list_pod_for_all_namespaces(
            **self.selectors, _preload_content=False
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

    def _replace(self, listed: JsonObj) -> None:
        fresh: dict[tuple[str, str], kube.ObservedPod] = {}
        for item in listed.get("items") or ():
            if isinstance(item, dict) and (seen := kube.observe_pod(item)) is not None:
                fresh[object_key(item)] = seen
        for key, last in self.cache.items():  # deleted (maybe re-created) while unwatched
            if key not in fresh or fresh[key].uid != last.uid:
                self._bury(last)
        self.cache = fresh

    def _apply(self, type_: str, obj: JsonObj) -> None:
        key = object_key(obj)
        if type_ == "DELETED":
            last = kube.observe_pod(obj)
            self.cache.pop(key, None)
            if last is not None:
                self._bury(last)
        elif (seen := kube.observe_pod(obj)) is not None:
            self.cache[key] = seen
        else:
            self.cache.pop(key, None)  # its labels were taken off: no longer ours to report

    def _bury(self, last: kube.ObservedPod) -> None:
        uid = last.uid or f"{last.namespace}/{last.name}"
        self.gone[uid] = (time.monotonic(), dataclasses.replace(last, deleted=True))

    # ------------------------------------------------------------------ reconcile

    def observed(self) -> list[kube.ObservedPod]:
        """The cache and the recently deleted pods, as the pure function takes them."""
        horizon = time.monotonic() - self.tombstone_seconds
        self.gone = {uid: v for uid, v in self.gone.items() if v[0] >= horizon}
        live = {p.uid for p in self.cache.values()}
        return [*self.cache.values(), *(p for uid, (_, p) in self.gone.items() if uid not in live)]

    async def reconcile(self) -> list[tuple[str, Event]]:
        """One pass: fold what is new, plan, append."""
        await self.loop.step()
        if not self.pods.synced:
            return []
        state = self.loop.runner.state
        at = max(time.time(), state.now)
        events = kube.plan_events(state, self.observed(), at)
        if events:
            news = [
                NewEvent(
                    stream_id=nev.stream(node),
                    event=event,
                    occurred_at=at,
                    correlation_id=getattr(event, "workload_id", None) or None,
                )
                for node, event in events
            ]
            # Built before any await: the versions are those the plan was made from.
            await self._append(self.loop.runner.appends(news))
        return events
