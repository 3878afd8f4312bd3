"""The provisioner's Kubernetes backend against the fake API server, through the real client.

A real SQLite store and a DeciderLoop (no Kafka) hold the provisioner's state; the test appends
what the queue and intake would, and plays the cluster autoscaler with the fake's helpers
(``set_condition``, ``add_node``, ``compact``, ``drop_watches``). Nothing sleeps to synchronise:
each step awaits the backend's own progress (``KubeBackend.wait_until``), bounded by a timeout.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from muster.core.events import Event
from muster.core.events import provisioning as pev
from muster.core.events import queue as qev
from muster.core.events import workload as wev
from muster.core.model.queues import DWS_CLASS
from muster.core.model.workload import PodSet, ProvisioningRequestSpec, WorkloadSpec
from muster.core.provisioning import kube
from muster.core.provisioning.decider import ProvisionerDecider
from muster.core.provisioning.state import ProvisionerState
from muster.store import SqlEventStore
from muster.testing.kube_api import FakeKubeApi
from services.provisioner.kube import KubeBackend
from tests.integration.kube_env import KubeEnv, kube_env

GPU = "nvidia.com/gpu"
W = "feedfacefeedface"
RID = f"{W}.1"
NS = "team"  # the workload's namespace
PR = "train-provisioning-1"  # <workload name>-<check>-<attempt> (a queue without a check)
TEMPLATE = f"ppt-{PR}-workers"
DWS_PR = "train-dws-1"  # of a ClusterQueue whose provisioning check is "dws"
DWS_TEMPLATE = f"ppt-{DWS_PR}-workers"
LABEL = kube.DEFAULT_NODE_LABEL
ZONE = "us-central1-b"


class Env(KubeEnv):
    """Provisioner backends (replicas, restarts) over one store and one fake cluster."""

    async def start(self, **options: Any) -> KubeBackend:
        backend = KubeBackend(
            await self.loop(ProvisionerDecider(simulated=False)),
            self.client,
            kube.KubeOptions(**options),
            poll_seconds=0.2,
            backoff_first=0.01,
            backoff_cap=0.05,
        )
        self.running[backend] = asyncio.create_task(backend.run())
        await backend.wait_until(lambda: backend.requests.synced and backend.nodes.synced)
        return backend

    async def reserve(
        self, *pod_sets: PodSet, ask: qev.ProvisioningAsk | None = None, **kw: Any
    ) -> None:
        """Submit workload W and reserve quota for it, as intake and the queue would."""
        spec = WorkloadSpec(
            name="train",
            namespace="team",
            queue_name="lq",
            pod_sets=pod_sets or (PodSet(name="workers", count=2, requests={"cpu": 4000}),),
        )
        await self.append(wev.stream(W), wev.WorkloadSubmitted(workload_id=W, spec=spec))
        await self.append(
            qev.ADMISSION_STREAM,
            qev.QuotaReserved(
                workload_id=W,
                cluster_queue="cq",
                flavors={},
                usage={},
                node_selectors=kw.pop("node_selectors", {}),
                attempt=1,
                message="",
                provisioning=ask,
                **kw,
            ),
        )

    async def types(self, rid: str = RID) -> list[str]:
        return [e.type for e in await self.store.read_stream(pev.request_stream(rid))]

    async def recorded(self, backend: KubeBackend, n: int, rid: str = RID) -> list[Event]:
        """Wait until the request's stream holds ``n`` events (never more); return them."""

        def enough() -> bool:
            return backend.loop.runner.versions.get(pev.request_stream(rid), 0) >= n

        await backend.wait_until(enough)
        events = [e.event for e in await self.store.read_stream(pev.request_stream(rid))]
        assert len(events) == n, [type(e).__name__ for e in events]
        return events


def status(backend: KubeBackend, rid: str = RID) -> str | None:
    state: ProvisionerState = backend.loop.runner.state
    req = state.requests.get(rid)
    return req.status if req is not None else "Pending" if rid in state.wanted else None


def has(api: FakeKubeApi, kind: str, name: str, ns: str = NS) -> Callable[[], bool]:
    return lambda: api.get(kind, name, ns) is not None


def gone(api: FakeKubeApi, kind: str, name: str, ns: str = NS) -> Callable[[], bool]:
    return lambda: api.get(kind, name, ns) is None


def owners(api: FakeKubeApi, template: str) -> list[dict[str, Any]]:
    obj = api.get("PodTemplate", template, NS) or {}
    refs: list[dict[str, Any]] = obj.get("metadata", {}).get("ownerReferences", [])
    return refs


@pytest.fixture
async def env(sqlite_store: SqlEventStore) -> AsyncIterator[Env]:
    async with kube_env(Env, sqlite_store, timeout=10) as e:
        yield e


async def provisioned(env: Env, backend: KubeBackend, nodes: int = 2) -> None:
    """Accepted, then Provisioned on ``nodes`` labelled nodes in ZONE."""
    await env.reserve()
    await backend.wait_until(has(env.api, "ProvisioningRequest", PR))
    for i in range(nodes):
        env.api.add_node(f"n{i}", labels={LABEL: PR, kube.ZONE_LABEL: ZONE})
    env.api.set_condition(NS, PR, "Accepted", "True", "Accepted")
    env.api.set_condition(NS, PR, "Provisioned", "True", "Provisioned", "capacity is ready")
    await backend.wait_until(lambda: status(backend) == "Provisioned")


# --------------------------------------------------------------------------- creation


async def test_a_quota_reservation_creates_its_templates_and_request(env: Env) -> None:
    backend = await env.start()
    ask = qev.ProvisioningAsk(
        check="dws",
        provisioning_class=DWS_CLASS,
        parameters={"maxRunDurationSeconds": "3600"},
        pod_set_merge_policy="IdenticalWorkloadSchedulingRequirements",
    )
    workers = PodSet(name="workers", count=3, requests={"cpu": 2000, GPU: 1})
    extra = PodSet(name="extra", count=2, requests={"cpu": 2000, GPU: 1})
    selectors = {"workers": {"pool": "a100"}, "extra": {"pool": "a100"}}
    await env.reserve(workers, extra, ask=ask, node_selectors=selectors)
    await backend.wait_until(has(env.api, "ProvisioningRequest", DWS_PR))

    pr = env.api.get("ProvisioningRequest", DWS_PR, NS)
    assert pr is not None
    assert pr["metadata"]["annotations"] == {kube.REQUEST_ID_ANNOTATION: RID}
    assert pr["metadata"]["labels"] == {kube.MANAGED_LABEL: "true"}
    assert pr["spec"] == {
        "provisioningClassName": DWS_CLASS,
        "parameters": {"maxRunDurationSeconds": "3600"},
        "podSets": [{"count": 5, "podTemplateRef": {"name": DWS_TEMPLATE}}],  # merged for GKE
    }
    # Deleting the request deletes its template: the template is owned by it.
    await backend.wait_until(lambda: bool(owners(env.api, DWS_TEMPLATE)))
    template = env.api.get("PodTemplate", DWS_TEMPLATE, NS)
    assert template is not None
    assert template["metadata"]["annotations"] == {kube.REQUEST_ID_ANNOTATION: RID}
    (owner,) = template["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["name"], owner["uid"]) == (
        kube.KIND,
        DWS_PR,
        pr["metadata"]["uid"],
    )
    spec = template["template"]["spec"]
    assert spec["containers"][0]["resources"] == {
        "requests": {"cpu": "2", GPU: "1"},
        "limits": {GPU: "1"},
    }
    assert spec["nodeSelector"] == {"pool": "a100"}
    assert await env.types() == []  # nothing observed yet


async def test_conditions_become_events_in_order(env: Env) -> None:
    backend = await env.start()
    await env.reserve()
    await backend.wait_until(has(env.api, "ProvisioningRequest", PR))

    env.api.set_condition(NS, PR, "Accepted", "True", "Accepted", "queued")
    (accepted,) = await env.recorded(backend, 1)
    assert isinstance(accepted, pev.ProvisioningAccepted)
    assert (accepted.workload_id, accepted.attempt, accepted.message) == (W, 1, "queued")
    assert status(backend) == "Accepted"

    env.api.set_condition(NS, PR, "Provisioned", "False", "NotProvisioned", "no capacity yet")
    _, waiting = await env.recorded(backend, 2)
    assert isinstance(waiting, pev.ProvisioningWaiting)
    assert (waiting.reason, waiting.message) == ("NotProvisioned", "no capacity yet")
    state: ProvisionerState = backend.loop.runner.state
    assert state.requests[RID].waiting == ("NotProvisioned", "no capacity yet")

    env.api.add_node("gpu-1", labels={LABEL: PR, kube.ZONE_LABEL: ZONE})
    env.api.add_node("gpu-2", labels={LABEL: PR, kube.ZONE_LABEL: ZONE})
    env.api.add_node("unrelated", labels={LABEL: "someone-else"})
    env.api.set_condition(NS, PR, "Provisioned", "True", "Provisioned", "ready")
    *_, prov = await env.recorded(backend, 3)
    assert isinstance(prov, pev.ProvisioningProvisioned)
    assert (prov.zone, dict(prov.assignments), prov.message) == (ZONE, {}, "ready")
    assert [n.name for n in prov.nodes] == ["gpu-1", "gpu-2"]
    assert status(backend) == "Provisioned"
    assert await env.types() == [
        "provisioning.accepted",
        "provisioning.waiting",
        "provisioning.provisioned",
    ]


async def test_failed(env: Env) -> None:
    backend = await env.start()
    await env.reserve()
    await backend.wait_until(has(env.api, "ProvisioningRequest", PR))
    env.api.set_condition(NS, PR, "Accepted", "True", "Accepted")
    env.api.set_condition(NS, PR, "Failed", "True", "OutOfResources", "stockout")
    _, failed = await env.recorded(backend, 2)
    assert isinstance(failed, pev.ProvisioningFailed)
    assert (failed.reason, failed.message, failed.retryable) == ("OutOfResources", "stockout", True)
    # Over (no nodes): forgotten at once, counted as Failed.
    assert status(backend) is None and backend.loop.runner.state.over == {"Failed": 1}
    await backend.wait_until(gone(env.api, "ProvisioningRequest", PR))  # it serves nothing now


@pytest.mark.parametrize("condition", ["BookingExpired", "CapacityRevoked"])
async def test_booking_expired_and_capacity_revoked_release_the_nodes(
    env: Env, condition: str
) -> None:
    backend = await env.start()
    await provisioned(env, backend)
    env.api.set_condition(NS, PR, condition, "True", condition, "time is up")
    *_, ended, deleted = await env.recorded(backend, 4)
    assert type(ended).__name__ == f"Provisioning{condition}"
    assert isinstance(deleted, pev.NodesDeleted)
    assert (deleted.nodes, deleted.reason) == (("n0", "n1"), condition)
    assert status(backend) is None  # over: forgotten once its nodes were deleted
    assert backend.loop.runner.state.over == {"Deleted": 1}
    assert not backend.loop.runner.state.held
    await backend.wait_until(gone(env.api, "ProvisioningRequest", PR))
    await backend.wait_until(gone(env.api, "PodTemplate", TEMPLATE))


# --------------------------------------------------------------------------- release


async def test_a_finished_workload_deletes_the_request_and_its_nodes(env: Env) -> None:
    backend = await env.start()
    await provisioned(env, backend)
    await env.append(
        qev.ADMISSION_STREAM,
        qev.WorkloadAdmitted(
            workload_id=W, cluster_queue="cq", attempt=1, placements={}, message="", request_id=RID
        ),
        qev.WorkloadFinished(workload_id=W, outcome="Succeeded", reason="Done", message=""),
    )
    *_, deleted = await env.recorded(backend, 3)
    assert isinstance(deleted, pev.NodesDeleted)
    assert (deleted.nodes, deleted.reason) == (("n0", "n1"), "Released")
    assert env.api.get("ProvisioningRequest", PR, NS) is None
    assert env.api.get("PodTemplate", TEMPLATE, NS) is None
    assert status(backend) is None  # over: forgotten once its nodes were deleted
    assert backend.loop.runner.state.over == {"Deleted": 1}


async def test_released_while_accepted_is_deleted_then_cancelled(env: Env) -> None:
    backend = await env.start()
    await env.reserve()
    await backend.wait_until(has(env.api, "ProvisioningRequest", PR))
    env.api.set_condition(NS, PR, "Accepted", "True", "Accepted")
    await env.recorded(backend, 1)
    await env.append(
        qev.ADMISSION_STREAM, qev.WorkloadEvicted(workload_id=W, reason="Preempted", message="")
    )
    _, cancelled = await env.recorded(backend, 2)
    assert isinstance(cancelled, pev.ProvisioningCancelled)
    assert env.api.get("ProvisioningRequest", PR, NS) is None
    assert env.api.get("PodTemplate", TEMPLATE, NS) is None
    assert status(backend) is None and backend.loop.runner.state.over == {"Cancelled": 1}
    assert not backend.vanished  # deleted by muster: not "deleted outside muster"


# --------------------------------------------------------------------------- standalone


async def test_a_standalone_request_is_created_under_the_users_name(env: Env) -> None:
    backend = await env.start()
    users = {
        "apiVersion": "v1",
        "kind": "PodTemplate",
        "metadata": {"name": "tmpl", "namespace": "ml"},
        "template": {"spec": {"containers": [{"name": "c", "image": "user/image"}]}},
    }
    env.api.put(users)  # the user's template is there already: kept as it is
    spec = ProvisioningRequestSpec(
        name="capacity",
        namespace="ml",
        provisioning_class=kube.DEFAULT_CLASS,  # several pod sets: not queued provisioning
        pod_sets=(
            PodSet(name="tmpl", count=4, requests={GPU: 8}),
            PodSet(name="other", count=1, requests={"cpu": 1000}),
        ),
    )
    rid = pev.standalone_id("ml", "capacity")
    await env.append(pev.request_stream(rid), pev.ProvisioningRequested(request_id=rid, spec=spec))
    await backend.wait_until(has(env.api, "ProvisioningRequest", "capacity", "ml"))
    pr = env.api.get("ProvisioningRequest", "capacity", "ml")
    assert pr is not None
    assert pr["metadata"]["annotations"] == {kube.REQUEST_ID_ANNOTATION: rid}
    assert pr["spec"]["podSets"] == [
        {"count": 4, "podTemplateRef": {"name": "tmpl"}},
        {"count": 1, "podTemplateRef": {"name": "other"}},
    ]
    kept = env.api.get("PodTemplate", "tmpl", "ml")
    assert kept is not None and kept["template"]["spec"]["containers"][0]["image"] == "user/image"
    assert env.api.get("PodTemplate", "other", "ml") is not None  # absent: created

    env.api.set_condition("ml", "capacity", "Provisioned", "True", "Provisioned")
    _, accepted, _ = await env.recorded(backend, 3, rid)  # after ProvisioningRequested
    assert isinstance(accepted, pev.ProvisioningAccepted) and accepted.workload_id == ""
    assert status(backend, rid) == "Provisioned"

    await env.append(pev.request_stream(rid), pev.ProvisioningDeleteRequested(request_id=rid))
    await backend.wait_until(gone(env.api, "ProvisioningRequest", "capacity", "ml"))
    assert env.api.get("PodTemplate", "tmpl", "ml") is not None  # the user's: never deleted
    assert await env.types(rid) == [
        "provisioning.requested",
        "provisioning.accepted",
        "provisioning.provisioned",
        "provisioning.delete_requested",  # deleting it is all
    ]


# --------------------------------------------------------------------------- idempotence


async def test_a_restart_appends_nothing_twice(env: Env) -> None:
    first = await env.start()
    await provisioned(env, first)
    assert await env.types() == ["provisioning.accepted", "provisioning.provisioned"]
    await env.stop(first)
    head = await env.store.head()
    posts = sum(r.method == "POST" for r in env.api.requests)

    second = await env.start()  # a fresh state, folded from the store
    passes = second.passes
    second.wake()
    await second.wait_until(lambda: second.passes >= passes + 2)  # whole passes, synced
    assert await env.store.head() == head
    assert sum(r.method == "POST" for r in env.api.requests) == posts
    assert status(second) == "Provisioned"

    env.api.set_condition(NS, PR, "BookingExpired", "True", "BookingExpired")
    await env.recorded(second, 4)


async def test_creating_what_exists_is_fine_only_if_ours(env: Env) -> None:
    backend = await env.start()
    await env.reserve()
    await backend.wait_until(has(env.api, "ProvisioningRequest", PR))
    desired = kube.desired_objects(backend.loop.runner.state, RID, backend.options)
    await backend.create(desired)  # 409 on each object: ours, so nothing to do
    assert len(env.api.objects("ProvisioningRequest")) == 1
    assert len(env.api.objects("PodTemplate")) == 1

    env.api.delete("ProvisioningRequest", PR, NS)
    env.api.put(
        {
            "apiVersion": kube.API_VERSION,
            "kind": kube.KIND,
            "metadata": {"name": PR, "namespace": NS},
            "spec": {
                "provisioningClassName": "someone.else.io",
                "podSets": [{"count": 1, "podTemplateRef": {"name": "x"}}],
            },
        }
    )
    (failed,) = await env.recorded(backend, 1)  # muster's was deleted, a stranger's is there
    assert isinstance(failed, pev.ProvisioningFailed)
    assert (failed.reason, failed.retryable) == ("AlreadyExists", False)
    stranger = env.api.get("ProvisioningRequest", PR, NS)
    assert stranger is not None and stranger["spec"]["provisioningClassName"] == "someone.else.io"
    assert env.api.get("PodTemplate", TEMPLATE, NS) is None  # muster's, owned by nothing now


async def test_two_replicas_record_each_event_once(env: Env) -> None:
    a = await env.start()
    b = await env.start()
    await env.reserve()
    await a.wait_until(has(env.api, "ProvisioningRequest", PR))
    env.api.add_node("n0", labels={LABEL: PR, kube.ZONE_LABEL: ZONE})
    env.api.set_condition(NS, PR, "Accepted", "True", "Accepted")
    env.api.set_condition(NS, PR, "Provisioned", "True", "Provisioned")
    await a.wait_until(lambda: status(a) == "Provisioned")
    await b.wait_until(lambda: status(b) == "Provisioned")
    await env.recorded(a, 2)
    assert await env.types() == ["provisioning.accepted", "provisioning.provisioned"]
    assert len(env.api.objects("ProvisioningRequest")) == 1


# --------------------------------------------------------------------------- watches


async def test_a_compacted_history_relists_and_loses_nothing(env: Env) -> None:
    backend = await env.start()
    await env.reserve()
    await backend.wait_until(has(env.api, "ProvisioningRequest", PR))
    await backend.wait_until(lambda: bool(backend.requests.cache))
    await env.api.wait_for_watches(1, kind="ProvisioningRequest")
    relists = backend.requests.relists
    # Synchronously: the change is queued for the watch, the history forgotten, the watch ended
    # before it could send it; resuming from the version it saw is 410 Gone.
    env.api.set_condition(NS, PR, "Accepted", "True", "Accepted")
    env.api.compact()
    assert env.api.drop_watches() >= 1
    await env.recorded(backend, 1)
    assert backend.requests.relists > relists

    env.api.set_condition(NS, PR, "Provisioned", "True", "Provisioned")  # the new watch works
    await env.recorded(backend, 2)


async def test_dropped_watch_connections_are_resumed(env: Env) -> None:
    backend = await env.start()
    await env.reserve()
    await backend.wait_until(has(env.api, "ProvisioningRequest", PR))
    await backend.wait_until(lambda: bool(backend.requests.cache))
    await env.api.wait_for_watches(1, kind="ProvisioningRequest")
    seen_version = backend.requests.resource_version
    watches = len(env.api.watch_requests())
    env.api.set_condition(NS, PR, "Accepted", "True", "Accepted")
    assert env.api.drop_watches(abort=True) >= 1  # cut before the change was sent
    await env.recorded(backend, 1)
    assert backend.requests.relists == 0  # resumed, not relisted
    resumed = [r for r in env.api.watch_requests()[watches:] if "provisioningrequests" in r.path]
    assert resumed and int(resumed[0].query["resourceVersion"]) >= int(seen_version)

    env.api.add_node("late", labels={LABEL: PR, kube.ZONE_LABEL: ZONE})  # nodes resumed too
    await backend.wait_until(lambda: ("", "late") in backend.nodes.cache)
    env.api.set_condition(NS, PR, "Provisioned", "True", "Provisioned")
    *_, prov = await env.recorded(backend, 2)
    assert isinstance(prov, pev.ProvisioningProvisioned)
    assert [n.name for n in prov.nodes] == ["late"]
