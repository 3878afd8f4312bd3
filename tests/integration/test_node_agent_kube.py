"""The node agent's Kubernetes backend against the fake API server, through the real client.

A real SQLite store and a DeciderLoop (no Kafka) hold the node agent's state (its decider with
``simulated=False``); the test appends what the queue and intake would (nodes registered, a
workload submitted, reserved and admitted with its pods placed), then plays the batch platform
and the kubelet: it creates the pods with muster's labels on the placed nodes and moves them
through the ``status`` subresource. Nothing sleeps to synchronise: each step awaits the
watcher's own progress (``PodWatcher.wait_until``), bounded by a timeout.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import AsyncIterator
from typing import Any, cast

import pytest
from kubernetes_asyncio.client import ApiClient, CoreV1Api
from kubernetes_asyncio.client.exceptions import ApiException

from muster.core.events import Envelope
from muster.core.events import node as nev
from muster.core.events import queue as qev
from muster.core.events import workload as wev
from muster.core.model.workload import PodSet, WorkloadSpec
from muster.core.nodes import kube
from muster.core.nodes.decider import NodeAgentDecider
from muster.core.nodes.state import NodeAgentState
from muster.store import SqlEventStore
from muster.testing.kube_api import MERGE_PATCH, FakeKubeApi, KubeApiError
from services.node_agent.kube import PodWatcher
from tests.integration.kube_env import KubeEnv, kube_env

W = "feedfacefeedface"
NS = "team"
PLACEMENTS = {"main-0": "n1", "main-1": "n2"}
T0 = "2025-06-15T15:06:40Z"
T0_EPOCH = 1_750_000_000.0
# The client's stubs leave out the `_content_type` keyword its methods accept.
AS_MERGE_PATCH: dict[str, Any] = {"_content_type": MERGE_PATCH}


def pod_body(
    pod: str, node: str, *, workload: str = W, attempt: int = 1, name: str | None = None
) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name or f"train-{pod}",
            "labels": {
                kube.WORKLOAD_LABEL: workload,
                kube.ATTEMPT_LABEL: str(attempt),
                kube.POD_LABEL: pod,
                "app": "train",
            },
        },
        "spec": {
            "nodeName": node,
            "restartPolicy": "Never",
            "containers": [{"name": "main", "image": "busybox"}],
        },
    }


def container(state: dict[str, Any]) -> dict[str, Any]:
    """A container status as the kubelet writes it (every field the client requires)."""
    return {
        "name": "main",
        "image": "busybox",
        "imageID": "docker.io/library/busybox@sha256:0",
        "ready": "running" in state,
        "restartCount": 0,
        "started": "running" in state,
        "state": state,
    }


def running_status() -> dict[str, Any]:
    return {
        "phase": "Running",
        "startTime": T0,
        "containerStatuses": [container({"running": {"startedAt": T0}})],
    }


def ended_status(code: int, container_reason: str, **extra: Any) -> dict[str, Any]:
    term = {"exitCode": code, "reason": container_reason, "startedAt": T0, "finishedAt": T0}
    return {
        "phase": "Succeeded" if code == 0 else "Failed",
        "startTime": T0,
        "containerStatuses": [container({"terminated": term})],
        **extra,
    }


class Env(KubeEnv):
    """Pod watchers (replicas, restarts) over one store and one fake cluster."""

    def __init__(self, store: SqlEventStore, api: FakeKubeApi, client: ApiClient) -> None:
        super().__init__(store, api, client)
        self.core = CoreV1Api(client)

    async def start(self, node: str = "") -> PodWatcher:
        """A watcher over its own loop; ``node``: a node-bound agent (MUSTER_NODE_NAME)."""
        watcher = PodWatcher(
            await self.loop(NodeAgentDecider(simulated=False, node=node)),
            self.client,
            poll_seconds=0.2,
            backoff_first=0.01,
            backoff_cap=0.05,
            node=node,
        )
        self.running[watcher] = asyncio.create_task(watcher.run())
        await watcher.wait_until(lambda: watcher.pods.synced)
        return watcher

    async def place(self, placements: dict[str, str] = PLACEMENTS, attempt: int = 1) -> None:
        """Register the nodes, submit W, reserve and admit it with its pods placed."""
        for node in sorted(set(placements.values())):
            await self.append(
                nev.stream(node),
                nev.NodeRegistered(node=node, allocatable={"cpu": 8000}, agent="node-agent"),
            )
        spec = WorkloadSpec(
            name="train",
            namespace=NS,
            queue_name="lq",
            pod_sets=(PodSet(name="main", count=len(placements), requests={"cpu": 1000}),),
        )
        await self.append(wev.stream(W), wev.WorkloadSubmitted(workload_id=W, spec=spec))
        await self.append(
            qev.ADMISSION_STREAM,
            qev.QuotaReserved(
                workload_id=W,
                cluster_queue="cq",
                flavors={},
                usage={},
                node_selectors={},
                attempt=attempt,
                message="",
            ),
            qev.WorkloadAdmitted(
                workload_id=W,
                cluster_queue="cq",
                attempt=attempt,
                placements=placements,
                message="",
            ),
        )

    async def create(self, pod: str, node: str, **kw: Any) -> str:
        body: Any = pod_body(pod, node, **kw)
        created = await self.core.create_namespaced_pod(NS, body)
        return str(created.metadata.name)

    async def set_status(self, name: str, status: dict[str, Any]) -> None:
        """As the kubelet does: a merge patch of the status subresource."""
        body: Any = {"status": status}
        await self.core.patch_namespaced_pod_status(name, NS, body, **AS_MERGE_PATCH)

    async def node_events(self, *nodes: str) -> list[Envelope]:
        out: list[Envelope] = []
        for node in nodes or sorted(set(PLACEMENTS.values())):
            out += await self.store.read_stream(nev.stream(node))
        return [e for e in out if e.type != "node.registered"]


def summary(events: list[Envelope]) -> list[tuple[str, str]]:
    return [(e.type, cast(Any, e.event).pod) for e in events]


def expected(watcher: PodWatcher) -> dict[tuple[str, int, str], Any]:
    state: NodeAgentState = watcher.loop.runner.state
    return state.pods


def started(watcher: PodWatcher, pod: str, attempt: int = 1) -> Any:
    def check() -> bool:
        p = expected(watcher).get((W, attempt, pod))
        return p is not None and p.finishes_at is not None

    return check


def ended(watcher: PodWatcher, pod: str, attempt: int = 1) -> Any:
    return lambda: (W, attempt, pod) not in expected(watcher)


async def settled(env: Env, watcher: PodWatcher, passes: int = 2) -> None:
    """Let the watcher make ``passes`` more whole passes (it would append anything left)."""
    target = watcher.passes + passes
    watcher.wake()
    await watcher.wait_until(lambda: watcher.passes >= target)


@pytest.fixture
async def env(sqlite_store: SqlEventStore) -> AsyncIterator[Env]:
    async with kube_env(Env, sqlite_store, timeout=15) as e:
        yield e


# --------------------------------------------------------------------------- the fake's pods


async def test_the_fake_serves_pods_with_a_status_subresource(env: Env) -> None:
    core = env.core
    name = await env.create("main-0", "n1")
    pod = await core.read_namespaced_pod(name, NS)
    assert pod.status.phase == "Pending"  # whatever status was sent, a pod starts Pending
    assert pod.spec.node_name == "n1"

    await env.set_status(name, running_status())
    pod = await core.read_namespaced_pod(name, NS)
    assert pod.status.phase == "Running"
    assert pod.status.container_statuses[0].state.running is not None
    # The status subresource changes nothing else; the main resource does not change status.
    patch: Any = {"metadata": {"labels": {"x": "y"}}, "status": {"phase": "Failed"}}
    await core.patch_namespaced_pod_status(name, NS, patch, **AS_MERGE_PATCH)
    stored = env.api.get("Pod", name, NS)
    assert stored is not None
    assert stored["status"]["phase"] == "Failed" and "x" not in stored["metadata"]["labels"]
    await core.patch_namespaced_pod(name, NS, patch, **AS_MERGE_PATCH)
    stored = env.api.get("Pod", name, NS)
    assert stored is not None
    assert stored["metadata"]["labels"]["x"] == "y" and stored["status"]["phase"] == "Failed"

    with pytest.raises(ApiException) as err:
        bad: Any = {"metadata": {"name": "bad"}, "spec": {"containers": []}}
        await core.create_namespaced_pod(NS, bad)
    assert err.value.status == 422
    with pytest.raises(ApiException) as err:
        nameless: Any = {"metadata": {}, "spec": {"containers": [{"name": "c", "image": "i"}]}}
        await core.create_namespaced_pod(NS, nameless)
    assert err.value.status == 422

    deleted = await core.delete_namespaced_pod(name, NS)
    assert deleted.metadata.name == name  # pods answer a DELETE with the pod
    with pytest.raises(KubeApiError):
        env.api.delete("Pod", name, NS)


async def test_the_fake_selects_pods_by_label_and_node(env: Env) -> None:
    await env.create("main-0", "n1")
    await env.create("main-1", "n2")
    other: Any = {
        "metadata": {"name": "unrelated"},
        "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": "i"}]},
    }
    await env.core.create_namespaced_pod("elsewhere", other)

    def names(listed: Any) -> list[str]:
        return sorted(p.metadata.name for p in listed.items)

    everything = await env.core.list_pod_for_all_namespaces()
    assert names(everything) == ["train-main-0", "train-main-1", "unrelated"]
    ours = await env.core.list_pod_for_all_namespaces(label_selector=kube.SELECTOR)
    assert names(ours) == ["train-main-0", "train-main-1"]
    on_n1 = await env.core.list_pod_for_all_namespaces(field_selector="spec.nodeName=n1")
    assert names(on_n1) == ["train-main-0", "unrelated"]
    both = await env.core.list_namespaced_pod(
        NS, label_selector=kube.SELECTOR, field_selector="spec.nodeName=n2"
    )
    assert names(both) == ["train-main-1"]
    pending = await env.core.list_pod_for_all_namespaces(field_selector="status.phase=Pending")
    assert len(pending.items) == 3
    with pytest.raises(ApiException) as err:
        await env.core.list_pod_for_all_namespaces(field_selector="spec.nodeNam=n1")
    assert err.value.status == 400


# --------------------------------------------------------------------------- reporting


async def test_pods_report_started_then_succeeded_or_failed(env: Env) -> None:
    watcher = await env.start()
    await env.place()
    await watcher.wait_until(lambda: len(expected(watcher)) == 2)
    first = await env.create("main-0", "n1")
    second = await env.create("main-1", "n2")
    await settled(env, watcher)
    assert await env.node_events() == []  # Pending: nothing to say

    await env.set_status(first, running_status())
    await env.set_status(second, running_status())
    await watcher.wait_until(started(watcher, "main-0"))
    await watcher.wait_until(started(watcher, "main-1"))
    await env.set_status(first, ended_status(0, "Completed"))
    await env.set_status(second, ended_status(3, "Error"))
    await watcher.wait_until(ended(watcher, "main-0"))
    await watcher.wait_until(ended(watcher, "main-1"))
    await settled(env, watcher)

    events = await env.node_events()
    assert Counter(summary(events)) == {
        ("node.pod_started", "main-0"): 1,
        ("node.pod_started", "main-1"): 1,
        ("node.pod_succeeded", "main-0"): 1,
        ("node.pod_failed", "main-1"): 1,
    }
    by_type = dict(zip(summary(events), events, strict=True))
    start = by_type[("node.pod_started", "main-0")]
    assert start.stream_id == nev.stream("n1")
    assert start.event == nev.PodStarted(
        node="n1", workload_id=W, attempt=1, pod="main-0", finishes_at=T0_EPOCH, run=0
    )
    assert start.correlation_id == W and start.causation_id is None
    assert start.producer == "node-agent"
    failed = by_type[("node.pod_failed", "main-1")]
    assert failed.stream_id == nev.stream("n2")
    assert failed.event == nev.PodFailed(
        node="n2", workload_id=W, attempt=1, pod="main-1", exit_code=3, reason="Error"
    )
    assert watcher.pods.relists == 0


async def test_pods_first_seen_ended_and_pods_not_expected(env: Env) -> None:
    watcher = await env.start()
    await env.place()
    await watcher.wait_until(lambda: len(expected(watcher)) == 2)
    # Not reported: another workload, another attempt, a node it was not placed on.
    strangers = [
        await env.create("main-0", "n1", workload="0000000000000000", name="other-workload"),
        await env.create("main-0", "n1", attempt=2, name="other-attempt"),
        await env.create("main-0", "n2", name="other-node"),
    ]
    for name in strangers:
        await env.set_status(name, ended_status(1, "Error"))
    # Evicted before the agent saw it run; the other one OOMKilled the same way.
    first = await env.create("main-0", "n1")
    second = await env.create("main-1", "n2")
    await env.set_status(first, ended_status(137, "Error", reason="Evicted"))
    await env.set_status(second, ended_status(137, "OOMKilled"))
    await watcher.wait_until(lambda: not expected(watcher))
    await settled(env, watcher)

    events = await env.node_events()
    assert summary(events) == [
        ("node.pod_started", "main-0"),
        ("node.pod_failed", "main-0"),
        ("node.pod_started", "main-1"),
        ("node.pod_failed", "main-1"),
    ]
    failures = [cast(nev.PodFailed, e.event) for e in events if e.type == "node.pod_failed"]
    assert [(f.exit_code, f.reason) for f in failures] == [(137, "Evicted"), (137, "OOMKilled")]


async def test_a_restart_appends_nothing_twice(env: Env) -> None:
    first = await env.start()
    await env.place()
    await first.wait_until(lambda: len(expected(first)) == 2)
    name = await env.create("main-0", "n1")
    await env.set_status(name, running_status())
    await first.wait_until(started(first, "main-0"))
    await env.stop(first)
    head = await env.store.head()

    second = await env.start()  # a fresh state, folded from the store
    await settled(env, second)
    assert await env.store.head() == head
    await env.set_status(name, ended_status(0, "Completed"))
    await second.wait_until(ended(second, "main-0"))
    await settled(env, second)
    assert [e.type for e in await env.node_events("n1")] == [
        "node.pod_started",
        "node.pod_succeeded",
    ]


async def test_two_replicas_record_each_event_once(env: Env) -> None:
    a = await env.start()
    b = await env.start()
    await env.place()
    await a.wait_until(lambda: len(expected(a)) == 2)
    names = [await env.create(p, n) for p, n in PLACEMENTS.items()]
    for name in names:
        await env.set_status(name, running_status())
    for name in names:
        await env.set_status(name, ended_status(0, "Completed"))
    await a.wait_until(lambda: not expected(a))
    await b.wait_until(lambda: not expected(b))
    await settled(env, a)
    await settled(env, b)
    assert Counter(e.type for e in await env.node_events()) == {
        "node.pod_started": 2,
        "node.pod_succeeded": 2,
    }


async def test_node_bound_agents_follow_and_report_only_their_nodes_pods(env: Env) -> None:
    """docs/operations.md: a DaemonSet pod per node (MUSTER_NODE_NAME from spec.nodeName)
    watches only the pods bound to its node and reports them on that node's stream."""
    a = await env.start(node="n1")
    b = await env.start(node="n2")
    await env.place()
    await a.wait_until(lambda: list(expected(a)) == [(W, 1, "main-0")])
    await b.wait_until(lambda: list(expected(b)) == [(W, 1, "main-1")])
    names = [await env.create(p, n) for p, n in PLACEMENTS.items()]
    for name in names:
        await env.set_status(name, running_status())
    await a.wait_until(lambda: [p.node for p in a.cache.values()] == ["n1"])
    await b.wait_until(lambda: [p.node for p in b.cache.values()] == ["n2"])
    for name in names:
        await env.set_status(name, ended_status(0, "Completed"))
    await a.wait_until(lambda: not expected(a))
    await b.wait_until(lambda: not expected(b))
    await settled(env, a)
    await settled(env, b)
    for node in ("n1", "n2"):
        events = await env.node_events(node)
        assert [e.type for e in events] == ["node.pod_started", "node.pod_succeeded"]
        assert {e.producer for e in events} == {f"node-agent-{node}"}


async def test_a_pod_deleted_while_running_failed(env: Env) -> None:
    watcher = await env.start()
    await env.place({"main-0": "n1"})
    await watcher.wait_until(lambda: len(expected(watcher)) == 1)
    name = await env.create("main-0", "n1")
    await env.set_status(name, running_status())
    await watcher.wait_until(started(watcher, "main-0"))
    await env.core.delete_namespaced_pod(name, NS)
    await watcher.wait_until(ended(watcher, "main-0"))
    *_, failed = await env.node_events("n1")
    assert failed.event == nev.PodFailed(
        node="n1", workload_id=W, attempt=1, pod="main-0", exit_code=137, reason="Deleted"
    )


async def test_a_replaced_pod_is_reported_once_per_run(env: Env) -> None:
    watcher = await env.start()
    await env.place({"main-0": "n1"})
    await watcher.wait_until(lambda: len(expected(watcher)) == 1)
    old = await env.create("main-0", "n1", name="train-main-0-a")
    await env.set_status(old, running_status())
    await env.set_status(old, ended_status(2, "Error"))
    await watcher.wait_until(ended(watcher, "main-0"))
    # The queue replaces it (backoffLimit); the failed pod stays, as a Job's do.
    await env.append(
        qev.ADMISSION_STREAM,
        qev.PodReplaced(workload_id=W, attempt=1, pod="main-0", node="n1", failures=1, message=""),
    )
    await watcher.wait_until(lambda: (W, 1, "main-0") in expected(watcher))
    await settled(env, watcher)
    assert [e.type for e in await env.node_events("n1")] == [
        "node.pod_started",
        "node.pod_failed",
    ]
    new = await env.create("main-0", "n1", name="train-main-0-b")
    await env.set_status(new, running_status())
    await watcher.wait_until(started(watcher, "main-0"))
    await env.set_status(new, ended_status(0, "Completed"))
    await watcher.wait_until(ended(watcher, "main-0"))
    await settled(env, watcher)
    events = await env.node_events("n1")
    assert [(e.type, getattr(e.event, "run", None)) for e in events] == [
        ("node.pod_started", 0),
        ("node.pod_failed", None),
        ("node.pod_started", 1),
        ("node.pod_succeeded", None),
    ]


# --------------------------------------------------------------------------- watches


async def test_a_compacted_history_relists_and_loses_nothing(env: Env) -> None:
    watcher = await env.start()
    await env.place()
    await watcher.wait_until(lambda: len(expected(watcher)) == 2)
    name = await env.create("main-0", "n1")
    await watcher.wait_until(lambda: bool(watcher.cache))
    await env.api.wait_for_watches(1, kind="Pod")
    relists = watcher.pods.relists
    # Synchronously: the change is queued for the watch, the history forgotten, the watch ended
    # before it could send it; resuming from the version it saw is 410 Gone.
    env.api.set_pod_status(NS, name, running_status())
    env.api.compact()
    assert env.api.drop_watches() >= 1
    await watcher.wait_until(started(watcher, "main-0"))
    assert watcher.pods.relists > relists

    # The new watch works; a pod deleted while no watch was open is seen gone by the relist.
    other = await env.create("main-1", "n2")
    await env.set_status(other, running_status())
    await watcher.wait_until(started(watcher, "main-1"))
    await env.api.wait_for_watches(1, kind="Pod")
    env.api.set_pod_status(NS, name, ended_status(0, "Completed"))
    env.api.delete("Pod", other, NS)
    env.api.compact()
    assert env.api.drop_watches() >= 1
    await watcher.wait_until(lambda: not expected(watcher))
    await settled(env, watcher)
    events = await env.node_events()
    assert summary(events) == [
        ("node.pod_started", "main-0"),
        ("node.pod_succeeded", "main-0"),
        ("node.pod_started", "main-1"),
        ("node.pod_failed", "main-1"),
    ]
    assert cast(nev.PodFailed, events[-1].event).reason == "Deleted"


async def test_dropped_watch_connections_are_resumed(env: Env) -> None:
    watcher = await env.start()
    await env.place({"main-0": "n1"})
    await watcher.wait_until(lambda: len(expected(watcher)) == 1)
    name = await env.create("main-0", "n1")
    await watcher.wait_until(lambda: bool(watcher.cache))
    await env.api.wait_for_watches(1, kind="Pod")
    seen_version = watcher.pods.resource_version
    watches = len(env.api.watch_requests())
    env.api.set_pod_status(NS, name, running_status())
    assert env.api.drop_watches(abort=True) >= 1  # cut before the change was sent
    await watcher.wait_until(started(watcher, "main-0"))
    assert watcher.pods.relists == 0  # resumed, not relisted
    resumed = [r for r in env.api.watch_requests()[watches:] if r.path == "/api/v1/pods"]
    assert resumed and int(resumed[0].query["resourceVersion"]) >= int(seen_version)
    assert resumed[0].query["labelSelector"] == kube.SELECTOR
