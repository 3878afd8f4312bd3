"""The provisioner's Kubernetes backend: ProvisioningRequests served by a cluster autoscaler.

A routine of the provisioner service (``MUSTER_PROVISIONER_BACKEND=kubernetes``). Three tasks:

* two informers, one for muster's ProvisioningRequests (label ``muster.dev/managed=true``, every
  namespace) and one for the Nodes labelled for a request (``MUSTER_KUBE_NODE_LABEL``): list,
  then watch from the list's resourceVersion with bookmarks; a watch the server ends is resumed
  from the last resourceVersion seen, as is one whose connection drops; ``410 Gone`` relists;
* reconcile: once both caches are filled, and whenever they or the folded state move, run
  :func:`muster.core.provisioning.kube.plan_actions` over the state and the caches, append its
  events (guarded by the versions of the streams the state was folded to, so a replica or a
  restart that decided the same thing first makes this append conflict, and it is re-planned
  rather than repeated), then create and delete what it says.

Every decision is the pure function's; this module only does I/O, logs, and retries failures
with backoff. It never raises out of :func:`kube_backend` for a cluster problem.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Awaitable, Callable, Container, Iterable
from dataclasses import dataclass, field
from typing import Any

import structlog
from kubernetes_asyncio.client import (
    ApiClient,
    CoreV1Api,
    CustomObjectsApi,
    V1DeleteOptions,
    V1Preconditions,
)
from kubernetes_asyncio.client.exceptions import ApiException

from muster.core.events import Event, NewEvent, StreamAppend
from muster.core.events import provisioning as pev
from muster.core.provisioning import kube
from muster.core.provisioning.state import ProvisionerState, correlation_id
from muster.runtime.kube import Backoff, Cursor, Reconciler, connect, object_key
from muster.runtime.loop import DeciderLoop
from muster.runtime.settings import Settings

JsonObj = dict[str, Any]
# The client's stubs leave out the `_content_type` keyword its methods accept.
AS_MERGE_PATCH: dict[str, Any] = {"_content_type": "application/merge-patch+json"}
REQUESTS, NODES = "requests", "nodes"

log = structlog.get_logger("provisioner").bind(backend="kubernetes")


def options_from(settings: Settings) -> kube.KubeOptions:
    return kube.KubeOptions(
        default_class=settings.kube_default_class,
        node_label=settings.kube_node_label,
        booking_seconds=settings.kube_booking_seconds,
        namespace=settings.kube_namespace,
    )


async def kube_backend(loop: DeciderLoop, settings: Settings) -> None:
    """The routine: connect (retrying), then run the backend until cancelled."""
    client = await connect(settings, log)
    try:
        backend = KubeBackend(
            loop, client, options_from(settings), poll_seconds=settings.poll_seconds
        )
        await backend.run()
    finally:
        await client.close()


class Rejected(Exception):
    """The API server refused an object for good: the request fails (not retried)."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(f"{reason}: {message}")
        self.reason = reason
        self.message = message


@dataclass(slots=True)
class Informer(Cursor):
    """One kind's cache, filled by list + watch."""

    cache: dict[tuple[str, str], JsonObj] = field(default_factory=dict)


def _rv(obj: JsonObj) -> int | None:
    raw = (obj.get("metadata") or {}).get("resourceVersion")
    return int(raw) if isinstance(raw, str) and raw.isascii() and raw.isdigit() else None


def _uid(obj: JsonObj) -> str:
    return str((obj.get("metadata") or {}).get("uid") or "")


def _api_message(exc: ApiException) -> str:
    with contextlib.suppress(ValueError, TypeError):
        body = json.loads(exc.body or "")
        if isinstance(body, dict) and body.get("message"):
            return str(body["message"])
    return f"{exc.status} {exc.reason}"


class KubeBackend(Reconciler):
    """Informers + reconcile over one DeciderLoop (whose state it reads and steps)."""

    def __init__(
        self, loop: DeciderLoop, client: ApiClient, options: kube.KubeOptions, **kw: Any
    ) -> None:
        super().__init__(loop, client, log, **kw)
        self.core = CoreV1Api(client)
        self.crd = CustomObjectsApi(client)
        self.options = options
        self.requests = Informer(REQUESTS)
        self.nodes = Informer(NODES)
        self.rejected: dict[str, tuple[str, str]] = {}
        self.vanished: set[str] = set()
        # (namespace, name) -> uid of the ProvisioningRequests we deleted: their DELETED events
        # are not "vanished", and a late event about them does not bring them back.
        self._deleting: dict[tuple[str, str], str] = {}

    # ------------------------------------------------------------------ running

    async def run(self) -> None:
        async with asyncio.TaskGroup() as tg:
            tg.create_task(self._forever("requests informer", self._inform_requests))
            tg.create_task(self._forever("nodes informer", self._inform_nodes))
            tg.create_task(self._forever("reconcile", self._reconcile_forever))

    # ------------------------------------------------------------------ informers

    async def _inform_requests(self, backoff: Backoff) -> None:
        await self._inform(
            self.requests,
            self.crd.list_cluster_custom_object,
            (kube.GROUP, kube.VERSION, kube.PLURAL),
            {"label_selector": kube.MANAGED_SELECTOR},
            backoff,
        )

    async def _inform_nodes(self, backoff: Backoff) -> None:
        await self._inform(
            self.nodes,
            self.core.list_node,
            (),
            {"label_selector": self.options.node_label},
            backoff,
        )

    async def _inform(
        self,
        informer: Informer,
        list_fn: Callable[..., Awaitable[Any]],
        args: tuple[str, ...],
        kwargs: dict[str, Any],
        backoff: Backoff,
    ) -> None:
        async def list_json() -> JsonObj:
            listed = await list_fn(*args, **kwargs)
            if not isinstance(listed, dict):  # a typed list (core kinds)
                listed = self.client.sanitize_for_serialization(listed)
            return dict(listed)

        await self.inform(
            informer,
            list_json,
            list_fn,
            args,
            kwargs,
            lambda listed: self._replace(informer, listed),
            lambda type_, obj: self._apply(informer, type_, obj),
            backoff,
        )

    def _replace(self, informer: Informer, listed: JsonObj) -> None:
        items = [i for i in listed.get("items") or () if isinstance(i, dict)]
        fresh = {object_key(i): i for i in items}
        if informer is self.requests:
            for key in set(informer.cache) - set(fresh):
                self._gone(informer.cache[key], key)
            self._deleting = {k: v for k, v in self._deleting.items() if k in fresh}
        informer.cache = fresh

    def _apply(self, informer: Informer, type_: str, obj: JsonObj) -> None:
        key = object_key(obj)
        if type_ == "DELETED":
            gone = informer.cache.pop(key, None)
            if informer is self.requests:
                self._gone(gone or obj, key)
        else:
            self._store(informer, obj)

    def _store(self, informer: Informer, obj: JsonObj) -> None:
        """Cache ``obj`` unless what is cached is newer (our own write can overtake its event)."""
        key = object_key(obj)
        if informer is self.requests and self._deleting.get(key) == _uid(obj):
            return  # an older view of one we deleted
        cached = informer.cache.get(key)
        old, new = (_rv(cached) if cached is not None else None), _rv(obj)
        if old is not None and new is not None and old > new:
            return
        informer.cache[key] = obj

    def _gone(self, obj: JsonObj, key: tuple[str, str]) -> None:
        """A ProvisioningRequest disappeared: by our hand, or someone else's (vanished)."""
        if key in self._deleting and self._deleting[key] == _uid(obj):
            del self._deleting[key]
            return
        seen = kube.observe_request(obj)
        if seen is not None:
            log.warning("ProvisioningRequest deleted outside muster", request=seen.request_id)
            self.vanished.add(seen.request_id)

    # ------------------------------------------------------------------ reconcile

    def observed(self) -> kube.Observed:
        """The caches as the pure functions take them."""
        requests: dict[str, kube.ObservedRequest] = {}
        for obj in self.requests.cache.values():
            seen = kube.observe_request(obj)
            if seen is not None:
                requests[seen.request_id] = seen
        return kube.Observed(
            requests=requests,
            nodes=kube.nodes_by_request(self.nodes.cache.values(), self.options.node_label),
            rejected=dict(self.rejected),
            vanished=frozenset(self.vanished),
        )

    async def reconcile(self) -> kube.Actions:
        """One pass: fold what is new, plan, append, then create and delete."""
        await self.loop.step()
        if not (self.requests.synced and self.nodes.synced):
            return kube.Actions()
        observed = self.observed()
        streams = await self._folded_streams(self.loop.runner.state, observed)
        # The state after that await: the plan and its appends' versions are of one fold.
        state = self.loop.runner.state
        self._forget(state)
        actions = kube.plan_actions(state, observed, self.options, streams)
        if actions.events:
            # Built before any await: the versions are those the plan was made from.
            await self._append(self._appends(actions.events))
        for obs in actions.delete:
            await self._guarded("delete", obs.request_id, self.delete(obs))
        for desired in actions.create:
            await self._guarded("create", desired.request_id, self.create(desired))
        return actions

    def _forget(self, state: Any) -> None:
        """Drop memories the state no longer needs."""
        for rid in list(self.rejected):
            if rid not in state.wanted:
                del self.rejected[rid]
        self.vanished &= set(state.open)

    async def _guarded(self, what: str, rid: str, action: Awaitable[None]) -> None:
        """One object's failure neither stops the pass nor the others: it is retried later."""
        try:
            await action
        except Rejected as exc:
            log.warning(
                f"{what} refused; the request fails",
                request=rid,
                reason=exc.reason,
                message=exc.message,
            )
            self.rejected[rid] = (exc.reason, exc.message)
            self._changed.set()
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.warning(f"{what} failed; will retry", request=rid, error=repr(exc))

    async def _folded_streams(
        self, state: ProvisionerState, observed: kube.Observed
    ) -> Container[str]:
        """The streams folded, of those ``should_delete`` asks about: the runner's versions,
        and the store's as of its position for those it let go of (``VERSIONS_KEPT``)."""
        runner = self.loop.runner
        asked = [s for s in kube.streams_asked(state, observed) if s not in runner.versions]
        if not asked:
            return runner.versions
        found = await self.loop.store.stream_versions(asked, at=runner.position)
        return runner.versions.keys() | found.keys()

    def _appends(self, events: tuple[tuple[str, Event], ...]) -> list[StreamAppend]:
        runner = self.loop.runner
        state = runner.state
        at = max(time.time(), state.now)
        return runner.appends(
            [
                NewEvent(
                    stream_id=pev.request_stream(rid),
                    event=event,
                    occurred_at=at,
                    correlation_id=correlation_id(state, rid),
                )
                for rid, event in events
            ]
        )

    # ------------------------------------------------------------------ objects

    async def create(self, desired: kube.DesiredRequest) -> None:
        """PodTemplates, then the ProvisioningRequest, then the templates' owner reference (so
        deleting the request deletes them). An existing object is fine if it is ours."""
        for template in desired.templates:
            await self._create_template(desired, template)
        try:
            created = await self._create_request(desired)
        except Rejected:
            if not desired.standalone:  # no request will own them: do not leave them behind
                names = [t["metadata"]["name"] for t in desired.templates]
                await self._delete_templates(desired.namespace, names, desired.request_id)
            raise
        self._store(self.requests, created)
        self._changed.set()
        if not desired.standalone:
            await self._own_templates(desired, created)

    async def _create_request(self, desired: kube.DesiredRequest) -> JsonObj:
        body: Any = desired.request
        try:
            created: JsonObj = await self.crd.create_namespaced_custom_object(
                kube.GROUP, kube.VERSION, desired.namespace, kube.PLURAL, body
            )
        except ApiException as exc:
            if exc.status == 409:
                created = await self.crd.get_namespaced_custom_object(
                    kube.GROUP, kube.VERSION, desired.namespace, kube.PLURAL, desired.name
                )
                if not kube.is_ours(created, desired.request_id):
                    raise Rejected(
                        "AlreadyExists",
                        f"ProvisioningRequest {desired.namespace}/{desired.name} exists and "
                        "was not created by muster for this request",
                    ) from None
            elif exc.status in (400, 422):
                raise Rejected("Invalid", _api_message(exc)) from None
            else:
                raise
        else:
            log.info(
                "ProvisioningRequest created",
                request=desired.request_id,
                name=f"{desired.namespace}/{desired.name}",
            )
        return created

    async def _create_template(self, desired: kube.DesiredRequest, template: JsonObj) -> None:
        name = template["metadata"]["name"]
        body: Any = template
        try:
            await self.core.create_namespaced_pod_template(desired.namespace, body)
        except ApiException as exc:
            if exc.status == 409:
                if desired.standalone:
                    return  # the user's own template
                existing = await self.core.read_namespaced_pod_template(name, desired.namespace)
                plain = self.client.sanitize_for_serialization(existing)
                if not kube.is_ours(plain, desired.request_id):
                    raise Rejected(
                        "AlreadyExists",
                        f"PodTemplate {desired.namespace}/{name} exists and was not created by "
                        "muster for this request",
                    ) from None
            elif exc.status in (400, 422):
                raise Rejected("Invalid", _api_message(exc)) from None
            else:
                raise

    async def _own_templates(self, desired: kube.DesiredRequest, created: JsonObj) -> None:
        uid = (created.get("metadata") or {}).get("uid")
        if not uid:
            return
        owner = {
            "apiVersion": kube.API_VERSION,
            "kind": kube.KIND,
            "name": desired.name,
            "uid": uid,
            "controller": True,
            "blockOwnerDeletion": True,
        }
        patch: Any = {"metadata": {"ownerReferences": [owner]}}
        for template in desired.templates:
            await self.core.patch_namespaced_pod_template(
                template["metadata"]["name"], desired.namespace, patch, **AS_MERGE_PATCH
            )

    async def delete(self, obs: kube.ObservedRequest) -> None:
        """Delete the ProvisioningRequest we saw (its uid: never a newer namesake), then the
        PodTemplates muster made for it; gone already is fine."""
        key = (obs.namespace, obs.name)
        options = V1DeleteOptions(preconditions=V1Preconditions(uid=obs.uid) if obs.uid else None)
        self._deleting[key] = obs.uid
        try:
            await self.crd.delete_namespaced_custom_object(
                kube.GROUP, kube.VERSION, obs.namespace, kube.PLURAL, obs.name, body=options
            )
        except ApiException as exc:
            if exc.status == 409:  # another object by that name now: the watch will tell
                self._deleting.pop(key, None)
                return
            if exc.status != 404:
                self._deleting.pop(key, None)
                raise
        log.info(
            "ProvisioningRequest deleted",
            request=obs.request_id,
            name=f"{obs.namespace}/{obs.name}",
        )
        self.requests.cache.pop(key, None)
        self._changed.set()
        self._signal()
        if "/" not in obs.request_id:  # a standalone request's templates are the user's
            await self._delete_templates(obs.namespace, obs.templates, obs.request_id)

    async def _delete_templates(self, namespace: str, names: Iterable[str], rid: str) -> None:
        """Delete the PodTemplates muster made for ``rid`` (by its annotation); gone is fine."""
        for name in names:
            try:
                existing = await self.core.read_namespaced_pod_template(name, namespace)
                if kube.is_ours(self.client.sanitize_for_serialization(existing), rid):
                    await self.core.delete_namespaced_pod_template(name, namespace)
            except ApiException as exc:
                if exc.status != 404:
                    raise
