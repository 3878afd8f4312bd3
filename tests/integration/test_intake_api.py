"""Intake's HTTP API against a real SQLite store: validation, idempotency, cancel, history."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import orjson
import pytest
from aiohttp.test_utils import TestClient, TestServer

from muster.cli import commands
from muster.core.events import NewEvent, StreamAppend
from muster.core.events import queue as qev
from muster.core.model import parse
from muster.core.views.workloads import WorkloadsView
from muster.runtime import admin
from muster.runtime.loop import DeciderLoop
from muster.runtime.metrics import ServiceMetrics
from muster.runtime.service import http_app
from muster.runtime.settings import load
from muster.store import SqlEventStore
from services.intake.api import routes

CLUSTER = {
    "name": "t",
    "zones": ["a"],
    "resourceFlavors": [{"name": "f"}],
    "clusterQueues": [
        {
            "name": "cq",
            "resourceGroups": [
                {
                    "coveredResources": ["nvidia.com/gpu"],
                    "flavors": [
                        {"name": "f", "resources": [{"name": "nvidia.com/gpu", "nominalQuota": 8}]}
                    ],
                }
            ],
        }
    ],
    "localQueues": [{"namespace": "team", "name": "lq", "clusterQueue": "cq"}],
}
GOOD = {
    "name": "train",
    "namespace": "team",
    "queueName": "lq",
    "podSets": [{"count": 2, "requests": {"nvidia.com/gpu": 1}}],
}


STORES: dict[int, SqlEventStore] = {}


def store_of(client: TestClient[Any, Any]) -> SqlEventStore:
    return STORES[id(client)]


@pytest.fixture
async def client(sqlite_store: SqlEventStore) -> AsyncIterator[TestClient[Any, Any]]:
    await admin.apply_cluster(sqlite_store, parse.cluster(CLUSTER), now=1.0)
    settings = load(
        {}, store_url=sqlite_store.url, kafka_bootstrap="unused:9092", max_body_bytes=4096
    )
    loop = DeciderLoop(WorkloadsView(), sqlite_store, settings, ServiceMetrics(), decides=False)
    await loop.restore()
    app = http_app(loop, ServiceMetrics(), None)
    routes(app, loop)
    async with TestClient(TestServer(app)) as c:
        STORES[id(c)] = sqlite_store
        yield c
        del STORES[id(c)]


def with_(**changes: Any) -> dict[str, Any]:
    return {**GOOD, **changes}


BAD = [
    ("not json", b"{nope", 400, "MalformedJSON", None),
    ("array body", b"[]", 422, "InvalidField", ""),
    ("missing name", {k: v for k, v in GOOD.items() if k != "name"}, 422, "InvalidField", "name"),
    ("count as string", with_(podSets=[{"count": "2"}]), 422, "InvalidField", "podSets[0].count"),
    ("zero count", with_(podSets=[{"count": 0}]), 422, "InvalidField", "podSets[0].count"),
    (
        "negative gpus",
        with_(podSets=[{"count": 1, "requests": {"nvidia.com/gpu": -1}}]),
        422,
        "InvalidField",
        "podSets[0].requests.nvidia.com/gpu",
    ),
    (
        "zero gpus",
        with_(podSets=[{"count": 1, "requests": {"nvidia.com/gpu": 0}}]),
        422,
        "InvalidField",
        "podSets[0].requests.nvidia.com/gpu",
    ),
    (
        "absurd memory",
        with_(podSets=[{"count": 1, "requests": {"memory": "999999Ei"}}]),
        422,
        "InvalidField",
        "podSets[0].requests.memory",
    ),
    ("unknown field", with_(gpus=8), 422, "InvalidField", "gpus"),
    ("bad name", with_(name="Not_A_Name"), 422, "InvalidField", "name"),
    ("no pod sets", with_(podSets=[]), 422, "InvalidField", "podSets"),
    ("unknown queue", with_(queueName="nope"), 422, "UnknownQueue", "queueName"),
    (
        "oversized",
        with_(labels={f"k{i}": "v" * 60 for i in range(100)}),
        413,
        "PayloadTooLarge",
        None,
    ),
]


@pytest.mark.parametrize(("case", "body", "status", "code", "field"), BAD, ids=[b[0] for b in BAD])
async def test_bad_input_is_refused_precisely_and_leaves_no_event(
    client: TestClient[Any, Any], case: str, body: Any, status: int, code: str, field: str | None
) -> None:
    store = store_of(client)
    before = await store.head()
    if isinstance(body, bytes):
        resp = await client.post("/v1/workloads", data=body)
    else:
        resp = await client.post("/v1/workloads", json=body)
    assert resp.status == status, await resp.text()
    err = (await resp.json())["error"]
    assert err["code"] == code
    assert err.get("field") == (field or None)
    assert err["message"]
    assert await store.head() == before


@pytest.mark.parametrize("size", [100, 10_000])
async def test_a_body_without_a_declared_length_is_held_to_the_limit(
    client: TestClient[Any, Any], size: int
) -> None:
    """Chunked transfer encoding (no Content-Length): the body, read whole however it
    arrived, is accepted under the limit (4096 here) and refused above it, leaving no event."""
    store = store_of(client)
    before = await store.head()
    body = orjson.dumps(with_(labels={"pad": "x" * 50})) if size < 4096 else b" " * size

    async def chunks() -> AsyncIterator[bytes]:
        yield body

    resp = await client.post(
        "/v1/workloads", data=chunks(), headers={"Content-Type": "application/json"}
    )
    if size < 4096:
        assert resp.status == 201, await resp.text()
        assert (await resp.json())["name"] == "train"
    else:
        assert resp.status == 413
        assert (await resp.json())["error"]["code"] == "PayloadTooLarge"
        assert await store.head() == before


async def test_submit_get_list_and_history(client: TestClient[Any, Any]) -> None:
    resp = await client.post("/v1/workloads", json=GOOD)
    assert resp.status == 201
    created = await resp.json()
    assert created["status"] == "Pending" and created["pods"] == 2
    got = await (await client.get(f"/v1/workloads/{created['id']}")).json()
    assert (got["name"], got["namespace"], got["queueName"]) == ("train", "team", "lq")
    listed = await (await client.get("/v1/workloads?namespace=team")).json()
    assert [w["id"] for w in listed["items"]] == [created["id"]]
    assert (await (await client.get("/v1/workloads?namespace=other")).json())["items"] == []
    # A status filter in any case, as kubectl users type it; an unknown one is refused.
    pending = await (await client.get("/v1/workloads?status=pending")).json()
    assert [w["id"] for w in pending["items"]] == [created["id"]]
    assert (await (await client.get("/v1/workloads?status=RUNNING")).json())["items"] == []
    bad = await client.get("/v1/workloads?status=sleeping")
    assert bad.status == 400 and (await bad.json())["error"]["field"] == "status"
    history = await (await client.get(f"/v1/workloads/{created['id']}/events")).json()
    assert [e["type"] for e in history["events"]] == ["workload.submitted"]
    assert (await client.get("/v1/workloads/nope")).status == 404


async def test_idempotency_key_returns_the_original_and_refuses_another_body(
    client: TestClient[Any, Any],
) -> None:
    store = store_of(client)
    first = await client.post("/v1/workloads", json=GOOD, headers={"Idempotency-Key": "run-1"})
    assert first.status == 201
    head = await store.head()
    again = await client.post("/v1/workloads", json=GOOD, headers={"Idempotency-Key": "run-1"})
    assert again.status == 200
    assert (await again.json())["id"] == (await first.json())["id"]
    other = await client.post(
        "/v1/workloads", json=with_(name="other"), headers={"Idempotency-Key": "run-1"}
    )
    assert other.status == 409
    assert (await other.json())["error"]["code"] == "IdempotencyKeyReused"
    assert await store.head() == head


async def test_cancel_records_the_request_once_finished_refuses(
    client: TestClient[Any, Any],
) -> None:
    wid = (await (await client.post("/v1/workloads", json=GOOD)).json())["id"]
    resp = await client.post(f"/v1/workloads/{wid}/cancel")
    assert resp.status == 202
    assert (await resp.json())["cancelRequested"] is True
    assert (await client.delete("/v1/workloads/unknown")).status == 404


async def test_list_pages_and_validates_limit(client: TestClient[Any, Any]) -> None:
    ids = [
        (await (await client.post("/v1/workloads", json=with_(name=f"w{i}"))).json())["id"]
        for i in range(5)
    ]
    page = await (await client.get("/v1/workloads?limit=2")).json()
    assert [w["id"] for w in page["items"]] == ids[:2] and page["next"] == ids[1]
    rest = await (await client.get(f"/v1/workloads?limit=10&after={page['next']}")).json()
    assert [w["id"] for w in rest["items"]] == ids[2:] and rest["next"] is None
    assert (await client.get("/v1/workloads?limit=0")).status == 400


async def test_health_and_metrics(client: TestClient[Any, Any]) -> None:
    assert (await client.get("/healthz")).status == 200
    text = await (await client.get("/metrics")).text()
    assert "muster_events_folded_total" in text


async def test_pending_workloads_visibility(
    client: TestClient[Any, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    """Positions in admission order and the current reason, from a dry run of the cycle."""
    ids = []
    for i, prio in enumerate([0, 5, 0, 9, 0, 1]):
        resp = await client.post("/v1/workloads", json=with_(name=f"w{i}", priority=prio))
        assert resp.status == 201
        ids.append((await resp.json())["id"])
    resp = await client.get("/v1/clusterqueues/cq/pendingworkloads")
    assert resp.status == 200
    items = (await resp.json())["items"]
    # Priority first, then submission order: w3 (9), w1 (5), w5 (1), w0, w2, w4.
    assert [i["name"] for i in items] == ["w3", "w1", "w5", "w0", "w2", "w4"]
    assert [i["positionInClusterQueue"] for i in items] == list(range(6))
    # 8 GPUs of quota, 2 per workload: four fit now, the rest wait for exactly 2 more.
    assert [i["reason"] for i in items] == ["Admissible"] * 4 + ["WaitingForQuota"] * 2
    assert "nvidia.com/gpu in flavor f, 2 more needed" in items[4]["message"]
    page = await (await client.get("/v1/clusterqueues/cq/pendingworkloads?limit=2&offset=1")).json()
    assert [i["name"] for i in page["items"]] == ["w1", "w5"]
    lq = await (await client.get("/v1/namespaces/team/localqueues/lq/pendingworkloads")).json()
    assert [i["positionInLocalQueue"] for i in lq["items"]] == list(range(6))
    one = await (await client.get(f"/v1/workloads/{ids[4]}")).json()
    assert one["queue"]["positionInClusterQueue"] == 5
    assert one["queue"]["reason"] == "WaitingForQuota"
    # One source for the current reason: GET, the list, the pending page and explain agree.
    assert (one["reason"], one["message"]) == (items[5]["reason"], items[5]["message"])
    listed = {w["id"]: w for w in (await (await client.get("/v1/workloads")).json())["items"]}
    assert listed[ids[4]]["reason"] == "WaitingForQuota"
    assert listed[ids[3]]["reason"] == "Admissible"
    why = await (await client.get(f"/v1/workloads/{ids[4]}/explain")).json()
    assert (why["reason"], why["message"]) == (one["reason"], one["message"])
    assert why["queue"]["positionInClusterQueue"] == 5
    (short,) = why["shortfall"]
    assert (short["resource"], short["flavor"], short["missing"]) == ("nvidia.com/gpu", "f", "2")
    (cond,) = one["conditions"]
    assert (cond["type"], cond["status"], cond["reason"]) == (
        "QuotaReserved",
        "False",
        "WaitingForQuota",
    )
    assert one["conditions"] == why["conditions"]
    assert cond["lastTransitionTime"].endswith("Z") and one["submittedTime"].endswith("Z")
    # At a past position (before it was submitted) and at bad input: 400 naming `at`.
    first = await (await client.get(f"/v1/workloads/{ids[4]}/events")).json()
    before = first["events"][0]["position"] - 1
    then = await (await client.get(f"/v1/workloads/{ids[4]}/explain?at=@{before}")).json()
    assert (then["status"], then["reason"], then["position"]) == ("Unknown", "NotSubmitted", before)
    for bad_at in ("yesterday", "", "@99999999"):
        bad_resp = await client.get(f"/v1/workloads/{ids[4]}/explain", params={"at": bad_at})
        assert bad_resp.status == 400
        assert (await bad_resp.json())["error"]["field"] == "at"
    assert (await client.get("/v1/clusterqueues/nope/pendingworkloads")).status == 404
    assert (await client.get("/v1/namespaces/team/localqueues/x/pendingworkloads")).status == 404
    bad = await client.get("/v1/clusterqueues/cq/pendingworkloads?limit=0")
    assert bad.status == 400
    # The CLI shows the same as a table, and refuses a malformed queue name.
    server = str(client.make_url("")).rstrip("/")
    assert await asyncio.to_thread(commands.pending, server, "cq", None, 3, "table") == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split()[:5] == ["CQ#", "LQ#", "WORKLOAD", "PRIORITY", "REASON"]
    assert [ln.split()[2] for ln in lines[1:]] == ["team/w3", "team/w1", "team/w5"]
    with pytest.raises(commands.CliError):
        await asyncio.to_thread(commands.pending, server, None, "no-slash", 3, "table")


PROVREQ = {
    "name": "pi-request",
    "namespace": "team",
    "provisioningClassName": "queued-provisioning.gke.io",
    "parameters": {"maxRunDurationSeconds": "3600"},
    "podSets": [{"name": "pi-template", "count": 4, "requests": {"nvidia.com/gpu": 1}}],
}


async def test_provisioning_requests_create_get_list_delete(
    client: TestClient[Any, Any],
) -> None:
    store = store_of(client)
    created = await client.post("/v1/provisioningrequests", json=PROVREQ)
    assert created.status == 201, await created.text()
    view = await created.json()
    assert (view["id"], view["status"], view["podSets"]) == (
        "team/pi-request",
        "Pending",
        [{"name": "pi-template", "count": 4}],
    )
    # kubectl apply again: unchanged; another spec under the name: immutable.
    head = await store.head()
    assert (await client.post("/v1/provisioningrequests", json=PROVREQ)).status == 200
    other = await client.post("/v1/provisioningrequests", json={**PROVREQ, "parameters": {}})
    assert other.status == 409
    assert (await other.json())["error"]["code"] == "AlreadyExists"
    assert await store.head() == head
    got = await client.get("/v1/namespaces/team/provisioningrequests/pi-request")
    assert (await got.json())["parameters"] == {"maxRunDurationSeconds": "3600"}
    listed = await (await client.get("/v1/provisioningrequests?standalone=1")).json()
    assert [v["id"] for v in listed["items"]] == ["team/pi-request"]
    assert (await client.get("/v1/namespaces/team/provisioningrequests/nope")).status == 404
    gone = await client.delete("/v1/namespaces/team/provisioningrequests/pi-request")
    assert gone.status == 202 and (await gone.json())["deleted"] is True
    again = await client.delete("/v1/namespaces/team/provisioningrequests/pi-request")
    assert again.status == 409
    assert (await client.delete("/v1/namespaces/team/provisioningrequests/nope")).status == 404


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({**PROVREQ, "podSets": []}, "podSets"),
        ({**PROVREQ, "parameters": {"maxRunDurationSeconds": "999999999"}}, "parameters"),
        ({**PROVREQ, "name": "Bad_Name"}, "name"),
        ({**PROVREQ, "podSets": [{"count": 0, "requests": {}}]}, "podSets[0].count"),
    ],
)
async def test_bad_provisioning_requests_are_refused_and_leave_no_event(
    client: TestClient[Any, Any], body: dict[str, Any], field: str
) -> None:
    store = store_of(client)
    before = await store.head()
    resp = await client.post("/v1/provisioningrequests", json=body)
    assert resp.status == 422
    err = (await resp.json())["error"]
    assert err["field"].startswith(field) and err["message"]
    assert await store.head() == before


async def test_a_consumer_of_a_request_needs_no_queue_but_not_both(
    client: TestClient[Any, Any],
) -> None:
    consumer = {k: v for k, v in GOOD.items() if k != "queueName"}
    consumer["consumesProvisioningRequest"] = "pi-request"
    resp = await client.post("/v1/workloads", json=consumer)
    assert resp.status == 201, await resp.text()
    both = await client.post("/v1/workloads", json={**GOOD, "consumesProvisioningRequest": "x"})
    assert both.status == 422
    assert (await both.json())["error"]["field"] == "queueName"


EXTERNAL_CHECK = """
apiVersion: kueue.x-k8s.io/v1beta1
kind: AdmissionCheck
metadata: {name: approval}
spec: {controllerName: example.com/approval}
"""


async def _reserved_with_checks(client: TestClient[Any, Any], wid: str, *checks: str) -> None:
    """The queue's quota reservation for ``wid``, gated by ``checks``, as the queue appends it."""
    reserved = qev.QuotaReserved(
        workload_id=wid,
        cluster_queue="cq",
        flavors={"main": {"nvidia.com/gpu": "f"}},
        usage={"f": {"nvidia.com/gpu": 2}},
        node_selectors={},
        attempt=1,
        message="Quota reserved in ClusterQueue cq",
        checks=checks,
    )
    new = NewEvent(stream_id=qev.ADMISSION_STREAM, event=reserved, occurred_at=2.0)
    await store_of(client).append(
        [StreamAppend(qev.ADMISSION_STREAM, None, [new])], producer="queue", recorded_at=2.0
    )


async def test_an_external_check_reports_its_state_and_the_workload_shows_it(
    client: TestClient[Any, Any],
) -> None:
    """kueue.md §1.8: an external check's controller sets the check's state for the
    workload; GET shows status.admissionChecks as Kueue's (name, state, message,
    lastTransitionTime, podSetUpdates). A word that gates nothing is refused, leaving no
    event behind."""
    store = store_of(client)
    assert (await client.post("/v1/apply", data=EXTERNAL_CHECK)).status == 200
    wid = (await (await client.post("/v1/workloads", json=GOOD)).json())["id"]
    url = f"/v1/workloads/{wid}/admissionchecks/approval"
    early = await client.put(url, json={"state": "Ready"})
    assert early.status == 409  # no quota reserved yet: nothing to gate
    assert (await early.json())["error"]["code"] == "CheckNotApplicable"

    await _reserved_with_checks(client, wid, "approval")
    got = await (await client.get(f"/v1/workloads/{wid}")).json()
    assert [(c["name"], c["state"]) for c in got["admissionChecks"]] == [("approval", "Pending")]
    update = {"name": "main", "annotations": {"example.com/approved-by": "alice"}}
    resp = await client.put(
        url, json={"state": "Ready", "message": "approved", "podSetUpdates": [update]}
    )
    assert resp.status == 200, await resp.text()
    (check,) = (await resp.json())["admissionChecks"]
    assert (check["name"], check["state"], check["message"]) == ("approval", "Ready", "approved")
    assert check["podSetUpdates"] == [update]
    assert check["lastTransitionTime"].endswith("Z")  # RFC 3339, as every time shown
    history = await (await client.get(f"/v1/workloads/{wid}/events")).json()
    assert history["events"][-1]["type"] == "workload.admission_check_updated"

    before = await store.head()
    for body, status, code, field in [
        ({"state": "Maybe"}, 422, "InvalidField", "state"),
        ({}, 422, "InvalidField", "state"),
        ({"state": "Ready", "requeueAfterSeconds": 5}, 422, "InvalidField", "requeueAfterSeconds"),
        ({"state": "Ready", "podSetUpdates": [{"name": "x"}]}, 422, "InvalidField", None),
        ({"state": "Ready", "attempt": 7}, 409, "CheckNotApplicable", None),
        ({"state": "Ready", "colour": "red"}, 422, "InvalidField", "colour"),
    ]:
        bad = await client.put(url, json=body)
        err = (await bad.json())["error"]
        assert (bad.status, err["code"]) == (status, code), (body, err)
        if field is not None:
            assert err["field"] == field
    assert (await client.put(f"/v1/workloads/{wid}/admissionchecks/nope", json={})).status == 404
    assert (await client.put("/v1/workloads/nope/admissionchecks/approval", json={})).status == 404
    assert await store.head() == before


def member(name: str, **changes: Any) -> dict[str, Any]:
    """A member of gang ``g`` of 3 (peers.md §1.5, Armada gangId + gangCardinality)."""
    body = {
        **GOOD,
        "name": name,
        "gang": {"name": "g", "cardinality": 3},
        "podSets": [{"count": 1, "requests": {"nvidia.com/gpu": 1}}],
    }
    return {**body, **changes}


async def test_gang_members_wait_until_complete_then_form_one_workload(
    client: TestClient[Any, Any],
) -> None:
    """Members are pending as GangIncomplete until the third submits the gang's workload;
    a retried member appends nothing; a member that disagrees is refused by field."""
    store = store_of(client)
    a = await client.post("/v1/workloads", json=member("a"), headers={"Idempotency-Key": "a"})
    assert a.status == 201, await a.text()
    first = await a.json()
    assert (first["status"], first["reason"]) == ("Pending", "GangIncomplete")
    assert first["message"] == "gang g has 1 of 3 members"
    head = await store.head()
    again = await client.post("/v1/workloads", json=member("a"), headers={"Idempotency-Key": "a"})
    assert again.status == 200 and (await again.json())["id"] == first["id"]
    assert await store.head() == head
    odd = await client.post("/v1/workloads", json=member("x", priority=7))
    assert odd.status == 422
    assert (await odd.json())["error"]["field"] == "priority"
    assert (await odd.json())["error"]["code"] == "GangMismatch"
    assert await store.head() == head

    assert (await client.post("/v1/workloads", json=member("b"))).status == 201
    got = await (await client.get(f"/v1/workloads/{first['id']}")).json()
    assert got["message"] == "gang g has 2 of 3 members"
    mine = await (await client.get(f"/v1/workloads/{first['id']}/events")).json()
    assert [e["type"] for e in mine["events"]] == ["workload.gang_member_submitted"] * 2
    incomplete = await (await client.get(f"/v1/workloads/{first['id']}/explain")).json()
    assert (incomplete["status"], incomplete["reason"]) == ("Pending", "GangIncomplete")
    assert not [
        w for w in (await (await client.get("/v1/workloads")).json())["items"] if w["name"] == "g"
    ]

    last = await (await client.post("/v1/workloads", json=member("c"))).json()
    gid = last["gang"]["workloadId"]
    assert last["reason"] != "GangIncomplete"
    gang = await (await client.get(f"/v1/workloads/{gid}")).json()
    assert (gang["name"], gang["pods"], gang["status"]) == ("g", 3, "Pending")
    # a member waits in its gang's place in the queue
    again_a = await (await client.get(f"/v1/workloads/{first['id']}")).json()
    assert again_a["queue"] == gang["queue"] and again_a["queue"]["positionInClusterQueue"] == 0
    # explained by its gang's workload, now, and as it was before the gang formed
    why = await (await client.get(f"/v1/workloads/{first['id']}/explain")).json()
    assert (why["id"], why["gang"]["workloadId"]) == (gid, gid)
    assert why["reason"] == gang["reason"] and why["queue"] == {
        k: gang["queue"][k] for k in ("positionInClusterQueue", "positionInLocalQueue")
    }
    then = await client.get(f"/v1/workloads/{first['id']}/explain", params={"at": f"@{head}"})
    assert (await then.json())["reason"] == "GangIncomplete"
    history = await (await client.get(f"/v1/workloads/{gid}/events")).json()
    assert [e["type"] for e in history["events"]] == ["workload.gang_member_submitted"] * 3 + [
        "workload.submitted"
    ]


async def test_cancelling_a_gang_member_cancels_the_gang(client: TestClient[Any, Any]) -> None:
    a = await (await client.post("/v1/workloads", json=member("a"))).json()
    resp = await client.post(f"/v1/workloads/{a['id']}/cancel")
    assert resp.status == 202
    assert (await resp.json())["status"] == "Cancelled"
    late = await client.post("/v1/workloads", json=member("b"))
    assert late.status == 409
    assert (await late.json())["error"]["code"] == "GangCancelled"


GANG_APPLY = "\n---\n".join(
    [
        """
apiVersion: scheduling.volcano.sh/v1beta1
kind: PodGroup
metadata: {name: pg, namespace: team}
spec: {minMember: 2, queue: lq}
"""
    ]
    + [
        f"""
apiVersion: v1
kind: Pod
metadata:
  name: p{i}
  namespace: team
  annotations: {{scheduling.k8s.io/group-name: pg}}
spec:
  containers: [{{name: c, image: x, resources: {{requests: {{nvidia.com/gpu: 1}}}}}}]
"""
        for i in range(3)
    ]
)


async def test_applying_a_pod_group_and_its_pods_forms_the_gang_at_once(
    client: TestClient[Any, Any],
) -> None:
    """peers.md §2.4: a Volcano PodGroup of minMember 2 and three pods naming it: one apply
    submits the gang of two (one workload) and the third pod as a workload of its own;
    applying again changes nothing."""
    store = store_of(client)
    resp = await client.post("/v1/apply", data=GANG_APPLY)
    assert resp.status == 200, await resp.text()
    rows = (await resp.json())["items"]
    assert [(r["kind"], r["result"]) for r in rows] == [("Pod", "submitted")] * 3
    listed = (await (await client.get("/v1/workloads")).json())["items"]
    by_name = {w["name"]: w for w in listed}
    assert by_name["pg"]["pods"] == 2
    assert by_name["p0"]["gang"]["workloadId"] == by_name["pg"]["id"]
    # p2 is no gang member: it waits as any workload (its reason the dry run's, computed now).
    assert "gang" not in by_name["p2"] and by_name["p2"]["reason"] == "Admissible"
    head = await store.head()
    again = await client.post("/v1/apply", data=GANG_APPLY)
    assert [r["result"] for r in (await again.json())["items"]] == ["unchanged"] * 3
    assert await store.head() == head
