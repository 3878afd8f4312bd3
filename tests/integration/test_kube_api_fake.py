"""The fake Kubernetes API server, driven through the real kubernetes_asyncio client.

Every assertion goes over HTTP through ``CoreV1Api``/``CustomObjectsApi`` and
``kubernetes_asyncio.watch.Watch``; the fake's Python helpers only play the cluster-autoscaler.
Nothing sleeps to synchronise: tests await the events themselves (bounded by a timeout).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from kubernetes_asyncio import watch
from kubernetes_asyncio.client import (
    ApiClient,
    Configuration,
    CoreV1Api,
    CustomObjectsApi,
    V1Container,
    V1Node,
    V1ObjectMeta,
    V1PodSpec,
    V1PodTemplate,
    V1PodTemplateSpec,
)
from kubernetes_asyncio.client.exceptions import ApiException

from muster.testing.kube_api import JSON_PATCH, MERGE_PATCH, FakeKubeApi, KubeApiError

GROUP, VERSION, PLURAL = "autoscaling.x-k8s.io", "v1", "provisioningrequests"
NS = "team"
CLASS = "queued-provisioning.gke.io"
# The client's .pyi stubs leave out the `_content_type` keyword its methods do accept.
AS_MERGE_PATCH: dict[str, Any] = {"_content_type": MERGE_PATCH}
AS_JSON_PATCH: dict[str, Any] = {"_content_type": JSON_PATCH}


@pytest.fixture
async def kube() -> AsyncIterator[FakeKubeApi]:
    # timeoutSeconds=1 lasts 50 ms; bookmarks every 50 ms when asked for.
    async with FakeKubeApi(bookmark_interval=0.05, timeout_seconds_scale=0.05) as k:
        yield k


@pytest.fixture
async def api(kube: FakeKubeApi) -> AsyncIterator[ApiClient]:
    async with ApiClient(Configuration(host=kube.url)) as c:
        yield c


@pytest.fixture
def core(api: ApiClient) -> CoreV1Api:
    return CoreV1Api(api)


@pytest.fixture
def crd(api: ApiClient) -> CustomObjectsApi:
    return CustomObjectsApi(api)


def provreq(name: str, *, count: int = 2, labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "ProvisioningRequest",
        "metadata": {"name": name, "labels": labels or {}},
        "spec": {
            "provisioningClassName": CLASS,
            "podSets": [{"count": count, "podTemplateRef": {"name": f"{name}-tmpl"}}],
        },
    }


def podtemplate(name: str, labels: dict[str, str] | None = None) -> V1PodTemplate:
    return V1PodTemplate(
        metadata=V1ObjectMeta(name=name, labels=labels),
        template=V1PodTemplateSpec(
            spec=V1PodSpec(containers=[V1Container(name="main", image="busybox")])
        ),
    )


def condition(type_: str, status: str = "True", reason: str = "Provisioned") -> dict[str, Any]:
    return {
        "type": type_,
        "status": status,
        "reason": reason,
        "message": "",
        "lastTransitionTime": "2025-01-01T00:00:00Z",
    }


def status_body(e: pytest.ExceptionInfo[ApiException]) -> dict[str, Any]:
    body: dict[str, Any] = json.loads(e.value.body or "")
    return body


async def collect(n: int, func: Any, *args: Any, **kwargs: Any) -> list[dict[str, Any]]:
    """The first ``n`` events of a watch (fewer if the server ends it first)."""
    out: list[dict[str, Any]] = []
    async with asyncio.timeout(10), watch.Watch() as w:
        async for ev in w.stream(func, *args, **kwargs):
            out.append(ev)
            if len(out) == n:
                break
    return out


def pr_events(crd: CustomObjectsApi, n: int, **kwargs: Any) -> Any:
    return collect(n, crd.list_namespaced_custom_object, GROUP, VERSION, NS, PLURAL, **kwargs)


def summary(events: list[dict[str, Any]]) -> list[tuple[str, str]]:
    return [(e["type"], e["raw_object"]["metadata"]["name"]) for e in events]


def rvs(events: list[dict[str, Any]]) -> list[int]:
    return [int(e["raw_object"]["metadata"]["resourceVersion"]) for e in events]


# --------------------------------------------------------------------------- CRUD


async def test_podtemplates_create_get_list_delete(kube: FakeKubeApi, core: CoreV1Api) -> None:
    created = await core.create_namespaced_pod_template(NS, podtemplate("t1", {"app": "a"}))
    meta = created.metadata
    assert (meta.name, meta.namespace) == ("t1", NS)
    assert meta.uid and meta.creation_timestamp is not None
    assert meta.resource_version == str(kube.resource_version)
    await core.create_namespaced_pod_template("other", podtemplate("t2"))

    got = await core.read_namespaced_pod_template("t1", NS)
    assert got.metadata.uid == meta.uid
    assert got.template.spec.containers[0].image == "busybox"

    in_ns = await core.list_namespaced_pod_template(NS)
    assert [t.metadata.name for t in in_ns.items] == ["t1"]
    assert in_ns.metadata.resource_version == str(kube.resource_version)
    everywhere = await core.list_pod_template_for_all_namespaces()
    assert sorted(t.metadata.name for t in everywhere.items) == ["t1", "t2"]

    deleted = await core.delete_namespaced_pod_template("t1", NS)  # podtemplates return it
    assert deleted.metadata.name == "t1"
    assert [t["metadata"]["name"] for t in kube.objects("PodTemplate")] == ["t2"]
    with pytest.raises(ApiException) as e:
        await core.read_namespaced_pod_template("t1", NS)
    assert e.value.status == 404


async def test_provisioning_requests_create_get_list_delete(
    kube: FakeKubeApi, crd: CustomObjectsApi
) -> None:
    body = provreq("pr1")
    body["status"] = {"conditions": [condition("Provisioned")]}  # dropped: status subresource
    created = await crd.create_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, body)
    assert created["metadata"]["namespace"] == NS
    assert created["metadata"]["generation"] == 1
    assert created["metadata"]["resourceVersion"] == str(kube.resource_version)
    assert "status" not in created
    await crd.create_namespaced_custom_object(GROUP, VERSION, "other", PLURAL, provreq("pr2"))

    got = await crd.get_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, "pr1")
    assert got == created
    assert await crd.get_namespaced_custom_object_status(GROUP, VERSION, NS, PLURAL, "pr1") == got

    listed = await crd.list_namespaced_custom_object(GROUP, VERSION, NS, PLURAL)
    assert listed["kind"] == "ProvisioningRequestList"
    assert listed["apiVersion"] == f"{GROUP}/{VERSION}"
    assert listed["metadata"]["resourceVersion"] == str(kube.resource_version)
    assert [i["metadata"]["name"] for i in listed["items"]] == ["pr1"]
    assert listed["items"][0]["kind"] == "ProvisioningRequest"  # unstructured items keep it
    cluster_wide = await crd.list_cluster_custom_object(GROUP, VERSION, PLURAL)
    assert sorted(i["metadata"]["name"] for i in cluster_wide["items"]) == ["pr1", "pr2"]

    deleted = await crd.delete_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, "pr1")
    assert deleted["kind"] == "Status" and deleted["status"] == "Success"
    assert deleted["details"] == {
        "name": "pr1",
        "group": GROUP,
        "kind": PLURAL,
        "uid": created["metadata"]["uid"],
    }
    assert [o["metadata"]["name"] for o in kube.objects(PLURAL)] == ["pr2"]


async def test_generate_name(crd: CustomObjectsApi) -> None:
    body = provreq("")
    body["metadata"] = {"generateName": "pr-"}
    created = await crd.create_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, body)
    name = created["metadata"]["name"]
    assert name.startswith("pr-") and len(name) == len("pr-") + 5


async def test_conflicts_and_missing_objects_are_status_objects(
    core: CoreV1Api, crd: CustomObjectsApi
) -> None:
    await core.create_namespaced_pod_template(NS, podtemplate("t"))
    with pytest.raises(ApiException) as e:
        await core.create_namespaced_pod_template(NS, podtemplate("t"))
    assert e.value.status == 409
    assert status_body(e) == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": 'podtemplates "t" already exists',
        "reason": "AlreadyExists",
        "details": {"name": "t", "kind": "podtemplates"},
        "code": 409,
    }

    await crd.create_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, provreq("pr"))
    with pytest.raises(ApiException) as e:
        await crd.create_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, provreq("pr"))
    assert (e.value.status, status_body(e)["reason"]) == (409, "AlreadyExists")
    assert status_body(e)["message"] == f'{PLURAL}.{GROUP} "pr" already exists'

    with pytest.raises(ApiException) as e:
        await crd.get_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, "nope")
    assert e.value.status == 404
    assert status_body(e)["reason"] == "NotFound"
    assert status_body(e)["message"] == f'{PLURAL}.{GROUP} "nope" not found'
    assert status_body(e)["details"] == {"name": "nope", "group": GROUP, "kind": PLURAL}

    with pytest.raises(ApiException) as e:
        await crd.delete_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, "nope")
    assert e.value.status == 404
    with pytest.raises(ApiException) as e:
        await core.delete_namespaced_pod_template("nope", NS)
    assert (e.value.status, status_body(e)["message"]) == (404, 'podtemplates "nope" not found')


async def test_bodies_are_validated_like_the_crd(kube: FakeKubeApi, crd: CustomObjectsApi) -> None:
    no_kind = provreq("a")
    del no_kind["kind"]
    with pytest.raises(ApiException) as e:
        await crd.create_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, no_kind)
    assert e.value.status == 400  # unstructured bodies must say what they are

    no_pod_sets = provreq("a")
    del no_pod_sets["spec"]["podSets"]
    with pytest.raises(ApiException) as e:
        await crd.create_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, no_pod_sets)
    assert (e.value.status, status_body(e)["reason"]) == (422, "Invalid")
    assert status_body(e)["details"]["causes"] == [
        {"reason": "FieldValueRequired", "message": "Required value", "field": "spec.podSets"}
    ]

    typo = provreq("a")
    typo["spec"]["podSetz"] = []  # unknown fields are pruned, not stored
    created = await crd.create_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, typo)
    assert "podSetz" not in created["spec"]

    bad = condition("Provisioned", status="Maybe")
    with pytest.raises(ApiException) as e:
        await crd.patch_namespaced_custom_object_status(
            GROUP,
            VERSION,
            NS,
            PLURAL,
            "a",
            {"status": {"conditions": [bad]}},
            **AS_MERGE_PATCH,
        )
    assert e.value.status == 422
    assert status_body(e)["details"]["causes"][0]["field"] == "status.conditions[0].status"
    with pytest.raises(KubeApiError) as helper_error:
        kube.set_condition(NS, "a", "Provisioned", "True", reason="not a reason!")
    assert helper_error.value.code == 422


async def test_label_and_field_selectors(crd: CustomObjectsApi) -> None:
    for name, labels in [("a", {"q": "x", "tier": "batch"}), ("b", {"q": "x"}), ("c", {})]:
        await crd.create_namespaced_custom_object(
            GROUP, VERSION, NS, PLURAL, provreq(name, labels=labels)
        )

    async def names(**kwargs: Any) -> list[str]:
        got = await crd.list_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, **kwargs)
        return [i["metadata"]["name"] for i in got["items"]]

    assert await names(label_selector="q=x") == ["a", "b"]
    assert await names(label_selector="q=x,tier!=batch") == ["b"]
    assert await names(label_selector="q==x,tier") == ["a"]
    assert await names(label_selector="!q") == ["c"]
    assert await names(label_selector="tier in (batch,serving)") == ["a"]
    assert await names(field_selector="metadata.name=b") == ["b"]
    assert await names(field_selector="metadata.name!=b", label_selector="q=x") == ["a"]
    with pytest.raises(ApiException) as e:
        await names(field_selector="spec.provisioningClassName=x")
    assert e.value.status == 400


# --------------------------------------------------------------------------- status and spec


async def test_status_patch_sets_conditions_and_emits_modified(
    kube: FakeKubeApi, crd: CustomObjectsApi
) -> None:
    created = await crd.create_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, provreq("pr"))
    listening = asyncio.create_task(
        pr_events(crd, 1, resource_version=created["metadata"]["resourceVersion"])
    )
    await kube.wait_for_watches(1)

    cond = condition("Provisioned")
    patched = await crd.patch_namespaced_custom_object_status(
        GROUP,
        VERSION,
        NS,
        PLURAL,
        "pr",
        # the status endpoint ignores everything but status
        {"status": {"conditions": [cond]}, "spec": {"provisioningClassName": "other.io"}},
        **AS_MERGE_PATCH,
    )
    assert patched["status"]["conditions"] == [cond]
    assert patched["spec"] == created["spec"]
    assert patched["metadata"]["generation"] == 1

    [event] = await listening
    assert event["type"] == "MODIFIED"
    assert event["object"]["status"]["conditions"] == [cond]
    assert (
        event["raw_object"]["metadata"]["resourceVersion"] == patched["metadata"]["resourceVersion"]
    )


async def test_a_dict_patch_is_sent_as_json_patch_unless_told_otherwise(
    kube: FakeKubeApi, crd: CustomObjectsApi
) -> None:
    """kubernetes_asyncio picks application/json-patch+json for any CustomObjectsApi patch.

    A dict body is then not a JSON patch, and the API server says 400: callers must pass
    ``_content_type="application/merge-patch+json"`` (or send a list of JSON-patch ops).
    """
    await crd.create_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, provreq("pr"))
    with pytest.raises(ApiException) as e:
        await crd.patch_namespaced_custom_object_status(
            GROUP, VERSION, NS, PLURAL, "pr", {"status": {"conditions": []}}
        )
    assert e.value.status == 400
    assert "jsonpatch.Patch" in status_body(e)["message"]
    assert kube.requests[-1].content_type == JSON_PATCH

    cond = condition("Accepted")
    ops = [{"op": "add", "path": "/status", "value": {"conditions": [cond]}}]
    patched = await crd.patch_namespaced_custom_object_status(
        GROUP, VERSION, NS, PLURAL, "pr", ops, **AS_JSON_PATCH
    )
    assert patched["status"]["conditions"] == [cond]


async def test_spec_is_immutable(kube: FakeKubeApi, crd: CustomObjectsApi) -> None:
    created = await crd.create_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, provreq("pr"))
    new_pod_sets = {"spec": {"podSets": [{"count": 3, "podTemplateRef": {"name": "x"}}]}}
    with pytest.raises(ApiException) as e:
        await crd.patch_namespaced_custom_object(
            GROUP, VERSION, NS, PLURAL, "pr", new_pod_sets, **AS_MERGE_PATCH
        )
    assert (e.value.status, status_body(e)["reason"]) == (422, "Invalid")
    assert status_body(e)["message"] == (
        f'ProvisioningRequest.{GROUP} "pr" is invalid: '
        'spec.podSets: Invalid value: "array": Value is immutable'
    )

    replaced = dict(created, spec=dict(created["spec"], provisioningClassName="other.io"))
    with pytest.raises(ApiException) as e:
        await crd.replace_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, "pr", replaced)
    assert e.value.status == 422
    assert status_body(e)["details"]["causes"][0]["field"] == "spec.provisioningClassName"
    assert kube.get(PLURAL, "pr", NS) == created

    # Labels may change; status written through the main resource is ignored.
    relabelled = await crd.patch_namespaced_custom_object(
        GROUP,
        VERSION,
        NS,
        PLURAL,
        "pr",
        {"metadata": {"labels": {"x": "y"}}, "status": {"conditions": [condition("Failed")]}},
        **AS_MERGE_PATCH,
    )
    assert relabelled["metadata"]["labels"] == {"x": "y"}
    assert "status" not in relabelled
    assert int(relabelled["metadata"]["resourceVersion"]) > int(
        created["metadata"]["resourceVersion"]
    )


async def test_updates_are_optimistically_concurrent(crd: CustomObjectsApi) -> None:
    created = await crd.create_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, provreq("pr"))
    fresh = await crd.patch_namespaced_custom_object(
        GROUP,
        VERSION,
        NS,
        PLURAL,
        "pr",
        {"metadata": {"labels": {"a": "1"}}},
        **AS_MERGE_PATCH,
    )
    with pytest.raises(ApiException) as e:  # created's resourceVersion is stale now
        await crd.replace_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, "pr", created)
    assert (e.value.status, status_body(e)["reason"]) == (409, "Conflict")

    unversioned = json.loads(json.dumps(fresh))
    del unversioned["metadata"]["resourceVersion"]
    with pytest.raises(ApiException) as e:  # custom resources refuse unconditional PUTs
        await crd.replace_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, "pr", unversioned)
    assert e.value.status == 422

    same = await crd.replace_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, "pr", fresh)
    assert same == fresh  # a write that changes nothing gets no new resourceVersion


# --------------------------------------------------------------------------- watches


async def test_watch_from_a_resource_version_sees_only_later_events_in_order(
    kube: FakeKubeApi, crd: CustomObjectsApi
) -> None:
    await crd.create_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, provreq("before"))
    start = kube.resource_version
    await crd.create_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, provreq("a"))
    await crd.create_namespaced_custom_object(GROUP, VERSION, "elsewhere", PLURAL, provreq("x"))
    await crd.create_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, provreq("b"))
    kube.set_condition(NS, "a", "Provisioned", "True", reason="Provisioned")
    await crd.delete_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, "b")

    events = await pr_events(crd, 4, resource_version=str(start))
    assert summary(events) == [
        ("ADDED", "a"),
        ("ADDED", "b"),
        ("MODIFIED", "a"),
        ("DELETED", "b"),
    ]
    assert events[2]["object"]["status"]["conditions"][0]["type"] == "Provisioned"
    assert rvs(events) == sorted(rvs(events)) and rvs(events)[0] > start
    assert rvs(events)[-1] == kube.resource_version  # a DELETED event carries the deletion's


async def test_a_watch_without_resource_version_starts_with_the_current_objects(
    kube: FakeKubeApi, crd: CustomObjectsApi
) -> None:
    await crd.create_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, provreq("old"))
    listening = asyncio.create_task(pr_events(crd, 2))
    await kube.wait_for_watches(1)
    await crd.create_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, provreq("new"))
    assert summary(await listening) == [("ADDED", "old"), ("ADDED", "new")]


async def test_list_then_watch_from_the_list_version_loses_nothing(
    kube: FakeKubeApi, core: CoreV1Api, crd: CustomObjectsApi
) -> None:
    await crd.create_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, provreq("a"))
    listed = await crd.list_namespaced_custom_object(GROUP, VERSION, NS, PLURAL)
    # Everything between the list and the watch: API writes, controller writes, other kinds.
    await crd.create_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, provreq("b"))
    await core.create_namespaced_pod_template(NS, podtemplate("t"))
    kube.set_condition(NS, "a", "Provisioned", "True", reason="Provisioned")
    await crd.delete_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, "a")

    events = await pr_events(crd, 3, resource_version=listed["metadata"]["resourceVersion"])
    assert summary(events) == [("ADDED", "b"), ("MODIFIED", "a"), ("DELETED", "a")]


async def test_watch_follows_label_selector_transitions(
    kube: FakeKubeApi, crd: CustomObjectsApi
) -> None:
    start = kube.resource_version
    await crd.create_namespaced_custom_object(
        GROUP, VERSION, NS, PLURAL, provreq("pr", labels={"phase": "active"})
    )
    for phase in ("done", "active"):
        await crd.patch_namespaced_custom_object(
            GROUP,
            VERSION,
            NS,
            PLURAL,
            "pr",
            {"metadata": {"labels": {"phase": phase}}},
            **AS_MERGE_PATCH,
        )
    events = await pr_events(crd, 3, resource_version=str(start), label_selector="phase=active")
    # Leaving the selector looks like a deletion, re-entering like a creation.
    assert summary(events) == [("ADDED", "pr"), ("DELETED", "pr"), ("ADDED", "pr")]
    assert events[1]["raw_object"]["metadata"]["labels"] == {"phase": "active"}


async def test_node_create_and_delete_events(kube: FakeKubeApi, core: CoreV1Api) -> None:
    kube.add_node("existing", labels={"pool": "gpu"})
    listening = asyncio.create_task(collect(4, core.list_node, label_selector="pool=gpu"))
    await kube.wait_for_watches(1, kind="Node")

    kube.add_node("n1", labels={"pool": "gpu"})
    kube.add_node("cpu-1", labels={"pool": "cpu"})  # filtered out
    await core.create_node(V1Node(metadata=V1ObjectMeta(name="n2", labels={"pool": "gpu"})))
    gone = await core.delete_node("n1")
    assert gone.status == "Success" and gone.details.name == "n1"

    events = await listening
    assert summary(events) == [
        ("ADDED", "existing"),
        ("ADDED", "n1"),
        ("ADDED", "n2"),
        ("DELETED", "n1"),
    ]
    assert isinstance(events[1]["object"], V1Node)
    assert events[1]["object"].status.allocatable["cpu"] == "8"
    assert [n.metadata.name for n in (await core.list_node()).items] == ["cpu-1", "existing", "n2"]


async def test_bookmarks_arrive_when_asked_for_and_carry_a_resumable_version(
    kube: FakeKubeApi, crd: CustomObjectsApi
) -> None:
    await crd.create_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, provreq("pr"))
    start = str(kube.resource_version)
    kube.add_node("n1")  # another kind moves the global version on

    async with asyncio.timeout(10), watch.Watch() as w:
        stream = w.stream(
            crd.list_namespaced_custom_object,
            GROUP,
            VERSION,
            NS,
            PLURAL,
            resource_version=start,
            allow_watch_bookmarks=True,
        )
        bookmark = await anext(stream)
    assert bookmark["type"] == "BOOKMARK"
    assert bookmark["object"] == {  # bookmarks are not turned into models
        "kind": "ProvisioningRequest",
        "apiVersion": f"{GROUP}/{VERSION}",
        "metadata": {"resourceVersion": str(kube.resource_version)},
    }
    assert w.resource_version == str(kube.resource_version)  # the client resumes from it

    await crd.create_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, provreq("later"))
    resumed = await pr_events(crd, 1, resource_version=w.resource_version)
    assert summary(resumed) == [("ADDED", "later")]


async def test_no_bookmarks_unless_asked(kube: FakeKubeApi, crd: CustomObjectsApi) -> None:
    # timeoutSeconds=4 lasts 200 ms here: four bookmark intervals.
    events = await pr_events(crd, 1, resource_version=str(kube.resource_version), timeout_seconds=4)
    assert events == []


async def test_timeout_seconds_ends_the_stream(kube: FakeKubeApi, crd: CustomObjectsApi) -> None:
    began = time.monotonic()
    events = await pr_events(crd, 1, resource_version=str(kube.resource_version), timeout_seconds=1)
    assert events == []
    assert time.monotonic() - began < 0.5
    assert len(kube.watch_requests()) == 1  # with timeout_seconds the client does not reconnect
    assert kube.watch_count() == 0


async def test_a_compacted_version_gets_410_gone(kube: FakeKubeApi, crd: CustomObjectsApi) -> None:
    await crd.create_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, provreq("a"))
    old = str(kube.resource_version)
    await crd.create_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, provreq("b"))
    assert kube.compact() == kube.resource_version

    # With timeout_seconds the Watch raises at once...
    with pytest.raises(ApiException) as e:
        await pr_events(crd, 1, resource_version=old, timeout_seconds=5)
    assert e.value.status == 410
    assert e.value.reason == f"Expired: too old resource version: {old} ({kube.resource_version})"
    assert len(kube.watch_requests()) == 1

    # ...without, it retries once from the same version, then raises.
    with pytest.raises(ApiException) as e:
        await pr_events(crd, 1, resource_version=old)
    assert e.value.status == 410
    retries = kube.watch_requests()[1:]
    assert [r.query["resourceVersion"] for r in retries] == [old, old]

    # The current version is still watchable; a list at an old exact version is gone too.
    floor = kube.compact()
    await crd.create_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, provreq("c"))
    assert summary(await pr_events(crd, 1, resource_version=str(floor))) == [("ADDED", "c")]
    with pytest.raises(ApiException) as e:
        await crd.list_namespaced_custom_object(
            GROUP, VERSION, NS, PLURAL, resource_version=old, resource_version_match="Exact"
        )
    assert (e.value.status, status_body(e)["reason"]) == (410, "Expired")


async def test_an_exact_list_reads_history(kube: FakeKubeApi, crd: CustomObjectsApi) -> None:
    await crd.create_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, provreq("a"))
    then = str(kube.resource_version)
    await crd.create_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, provreq("b"))
    await crd.delete_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, "a")
    past = await crd.list_namespaced_custom_object(
        GROUP, VERSION, NS, PLURAL, resource_version=then, resource_version_match="Exact"
    )
    assert past["metadata"]["resourceVersion"] == then
    assert [i["metadata"]["name"] for i in past["items"]] == ["a"]


async def test_a_cleanly_ended_watch_is_resumed_by_the_client(
    kube: FakeKubeApi, crd: CustomObjectsApi
) -> None:
    start = str(kube.resource_version)
    await crd.create_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, provreq("a"))
    async with asyncio.timeout(10), watch.Watch() as w:
        stream = w.stream(
            crd.list_namespaced_custom_object, GROUP, VERSION, NS, PLURAL, resource_version=start
        )
        first = await anext(stream)
        assert kube.drop_watches() == 1
        kube.put(provreq("b") | {"metadata": {"name": "b", "namespace": NS}})
        second = await anext(stream)
    assert summary([first, second]) == [("ADDED", "a"), ("ADDED", "b")]
    requests = kube.watch_requests()
    assert len(requests) == 2
    assert (
        requests[1].query["resourceVersion"] == first["raw_object"]["metadata"]["resourceVersion"]
    )


async def test_a_cut_connection_surfaces_as_a_payload_error(
    kube: FakeKubeApi, crd: CustomObjectsApi
) -> None:
    listening = asyncio.create_task(pr_events(crd, 1))
    await kube.wait_for_watches(1)
    assert kube.drop_watches(abort=True) == 1
    with pytest.raises(aiohttp.ClientPayloadError):
        await listening


async def test_put_is_a_no_op_when_nothing_changes(kube: FakeKubeApi) -> None:
    first = kube.put(provreq("pr") | {"metadata": {"name": "pr", "namespace": NS}})
    assert kube.put(first) == first
    assert kube.resource_version == int(first["metadata"]["resourceVersion"])
    assert kube.objects("ProvisioningRequest", NS) == [first]
