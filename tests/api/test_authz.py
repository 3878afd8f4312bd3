"""The authorisation matrix: every endpoint of the HTTP API, called by its owner tenant,
another tenant, the admin and nobody. 401 and 403 stay distinct; lists show a tenant
only its own namespaces; every route of the router is in the matrix. The same rules
over gRPC, method by method."""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any

import grpc
import pytest
from google.protobuf import json_format

from muster.api.v1 import muster_pb2 as pb
from services.intake.objects import KINDS
from tests.api.conftest import Api, bearer, grpc_meta, workload

WHO = ("team-a", "team-b", "admin", None)  # owner, another tenant, admin, no token
_n = itertools.count()


def fresh() -> str:
    return f"n{next(_n)}"


REQUEST = {
    "namespace": "team-a",
    "podSets": [{"name": "p", "count": 1, "requests": {"nvidia.com/gpu": "1"}}],
}
LQ = """apiVersion: kueue.x-k8s.io/v1beta1
kind: LocalQueue
metadata: {name: NAME, namespace: team-a}
spec: {clusterQueue: cq}
"""
POD = """apiVersion: v1
kind: Pod
metadata: {name: NAME, namespace: team-a, labels: {kueue.x-k8s.io/queue-name: lq}}
spec: {containers: [{name: c, image: busybox, resources: {requests: {cpu: "1"}}}]}
"""


@dataclass
class Fixture:
    wid: str
    request: str


async def setup(api: Api) -> Fixture:
    """A fresh workload and ProvisioningRequest of team-a."""
    resp = await api.http.post("/v1/workloads", json=workload(fresh()), headers=bearer("team-a"))
    assert resp.status == 201
    wid = (await resp.json())["id"]
    name = fresh()
    resp = await api.http.post(
        "/v1/provisioningrequests", json={**REQUEST, "name": name}, headers=bearer("team-a")
    )
    assert resp.status == 201, await resp.text()
    return Fixture(wid, name)


# (route as the router names it, method, path builder, body builder, expected per WHO)
Row = tuple[str, str, Any, Any, tuple[int, int, int, int]]
OWN = (200, 403, 200, 401)
MATRIX: list[Row] = [
    (
        "/v1/workloads",
        "POST",
        lambda f: "/v1/workloads",
        lambda: workload(fresh()),
        (201, 403, 201, 401),
    ),
    (
        "/v1/workloads:batch",
        "POST",
        lambda f: "/v1/workloads:batch",
        lambda: {"items": [workload(fresh())]},
        (201, 403, 201, 401),
    ),
    ("/v1/workloads", "GET", lambda f: "/v1/workloads?namespace=team-a", None, OWN),
    ("/v1/workloads/{id}", "GET", lambda f: f"/v1/workloads/{f.wid}", None, OWN),
    (
        "/v1/workloads/{id}",
        "DELETE",
        lambda f: f"/v1/workloads/{f.wid}",
        None,
        (202, 403, 202, 401),
    ),
    (
        "/v1/workloads/{id}/cancel",
        "POST",
        lambda f: f"/v1/workloads/{f.wid}/cancel",
        None,
        (202, 403, 202, 401),
    ),
    ("/v1/workloads/{id}/events", "GET", lambda f: f"/v1/workloads/{f.wid}/events", None, OWN),
    ("/v1/workloads/{id}/explain", "GET", lambda f: f"/v1/workloads/{f.wid}/explain", None, OWN),
    (
        # An external admission check's controller: the admin only (no such check here).
        "/v1/workloads/{id}/admissionchecks/{check}",
        "PUT",
        lambda f: f"/v1/workloads/{f.wid}/admissionchecks/approval",
        lambda: {"state": "Ready"},
        (403, 403, 404, 401),
    ),
    (
        "/v1/clusterqueues/{name}/pendingworkloads",
        "GET",
        lambda f: "/v1/clusterqueues/cq/pendingworkloads",
        None,
        (200, 200, 200, 401),
    ),
    (
        "/v1/clusterqueues/{name}/events",
        "GET",
        lambda f: "/v1/clusterqueues/cq/events",
        None,
        (200, 200, 200, 401),
    ),
    (
        "/v1/namespaces/{namespace}/localqueues/{name}/pendingworkloads",
        "GET",
        lambda f: "/v1/namespaces/team-a/localqueues/lq/pendingworkloads",
        None,
        OWN,
    ),
    (
        "/v1/namespaces/{namespace}/localqueues/{name}/events",
        "GET",
        lambda f: "/v1/namespaces/team-a/localqueues/lq/events",
        None,
        OWN,
    ),
    (
        "/v1/provisioningrequests",
        "POST",
        lambda f: "/v1/provisioningrequests",
        lambda: {**REQUEST, "name": fresh()},
        (201, 403, 201, 401),
    ),
    (
        "/v1/provisioningrequests",
        "GET",
        lambda f: "/v1/provisioningrequests?namespace=team-a",
        None,
        OWN,
    ),
    (
        "/v1/namespaces/{namespace}/provisioningrequests/{name}",
        "GET",
        lambda f: f"/v1/namespaces/team-a/provisioningrequests/{f.request}",
        None,
        OWN,
    ),
    (
        "/v1/namespaces/{namespace}/provisioningrequests/{name}",
        "DELETE",
        lambda f: f"/v1/namespaces/team-a/provisioningrequests/{f.request}",
        None,
        (202, 403, 202, 401),
    ),
    (
        "/v1/apply",
        "POST",
        lambda f: "/v1/apply",
        lambda: LQ.replace("NAME", fresh()),
        (403, 403, 200, 401),
    ),
    ("/v1/apply", "POST", lambda f: "/v1/apply", lambda: POD.replace("NAME", fresh()), OWN),
    ("/v1/admin/replay", "POST", lambda f: "/v1/admin/replay", lambda: {}, (403, 403, 200, 401)),
    ("/v1/report", "GET", lambda f: "/v1/report?namespace=team-a", None, OWN),
]
EXAMPLE = {"resourceflavors": "f", "clusterqueues": "cq", "localqueues": "lq"}
for k in KINDS:
    if k.kind == "ProvisioningRequest":
        continue
    everyone = (200, 200, 200, 401)
    MATRIX.append((f"/v1/{k.plural}", "GET", lambda f, p=k.plural: f"/v1/{p}", None, everyone))
    if k.namespaced:
        MATRIX.append(
            (
                f"/v1/namespaces/{{namespace}}/{k.plural}",
                "GET",
                lambda f, p=k.plural: f"/v1/namespaces/team-a/{p}",
                None,
                OWN,
            )
        )
        name = EXAMPLE.get(k.plural, "absent")
        MATRIX.append(
            (
                f"/v1/namespaces/{{namespace}}/{k.plural}/{{name}}",
                "GET",
                lambda f, p=k.plural, n=name: f"/v1/namespaces/team-a/{p}/{n}",
                None,
                (200, 403, 200, 401) if name != "absent" else (404, 403, 404, 401),
            )
        )
    else:
        name = EXAMPLE.get(k.plural, "absent")
        MATRIX.append(
            (
                f"/v1/{k.plural}/{{name}}",
                "GET",
                lambda f, p=k.plural, n=name: f"/v1/{p}/{n}",
                None,
                (200, 200, 200, 401) if name != "absent" else (404, 404, 404, 401),
            )
        )
# The web UI's JSON: cluster-scoped pages for every tenant (their workloads filtered), a
# workload's page as GET /v1/workloads/{id}.
ALL = (200, 200, 200, 401)
MATRIX += [
    (f"/v1/ui/{page}", "GET", lambda f, p=page: f"/v1/ui/{p}", None, ALL)
    for page in ("clock", "queues", "pending", "workloads", "nodes", "provisioningrequests")
]
MATRIX += [
    ("/v1/ui/workloads/{id}", "GET", lambda f: f"/v1/ui/workloads/{f.wid}", None, OWN),
    ("/v1/ui/events", "GET", lambda f: "/v1/ui/events?after=0", None, ALL),
]
PUBLIC = {"/openapi.json", "/healthz", "/metrics", "/state", "/ui", "/ui/", "/ui/static"}


def test_every_route_is_in_the_matrix(api_: Api) -> None:
    routed = {
        (r.resource.canonical, r.method)
        for r in api_.http.app.router.routes()
        if r.method != "HEAD" and r.resource is not None
    }
    covered = {(row[0], row[1]) for row in MATRIX}
    assert routed - covered == {(p, "GET") for p in PUBLIC}
    assert covered <= routed


@pytest.mark.parametrize(
    "row", MATRIX, ids=[f"{r[1]} {r[2](Fixture('ID', 'REQ'))}" for r in MATRIX]
)
async def test_matrix(api_: Api, row: Row) -> None:
    _, method, path, body, expected = row
    for who, want in zip(WHO, expected, strict=True):
        f = await setup(api_)
        before = await api_.head()
        data = body() if body is not None else None
        kwargs: dict[str, Any] = {"headers": bearer(who)}
        if isinstance(data, str):
            kwargs["data"] = data
        elif data is not None:
            kwargs["json"] = data
        resp = await api_.http.request(method, path(f), **kwargs)
        answer = await resp.json()
        assert resp.status == want, (who, answer)
        if want in (401, 403):
            assert answer["error"]["code"] == ("Unauthenticated" if want == 401 else "Forbidden")
            assert await api_.head() == before  # a refusal appends nothing
        if want == 401:
            assert resp.headers["WWW-Authenticate"].startswith("Bearer")


async def test_lists_show_a_tenant_only_its_namespaces(api_: Api) -> None:
    a = await setup(api_)
    resp = await api_.http.post(
        "/v1/workloads", json=workload("mine", "team-b"), headers=bearer("team-b")
    )
    assert resp.status == 201
    b_id = (await resp.json())["id"]

    async def ids(who: str, path: str, key: str = "id", items: str = "items") -> set[str]:
        resp = await api_.http.get(path, headers=bearer(who))
        assert resp.status == 200
        return {i[key] for i in (await resp.json())[items]}

    # Accounting (sacct): a tenant's report holds its own workloads only.
    assert await ids("team-b", "/v1/report", items="workloads") == {b_id}
    assert a.wid in await ids("admin", "/v1/report", items="workloads")

    assert a.wid not in await ids("team-b", "/v1/workloads")
    assert b_id in await ids("team-b", "/v1/workloads")
    assert {a.wid, b_id} <= await ids("admin", "/v1/workloads")
    assert a.wid not in await ids("team-b", "/v1/clusterqueues/cq/pendingworkloads")
    assert b_id in await ids("team-b", "/v1/clusterqueues/cq/pendingworkloads")
    assert await ids("team-b", "/v1/localqueues", "namespace") == {"team-b"}
    assert await ids("admin", "/v1/localqueues", "namespace") == {"team-a", "team-b"}
    assert await ids("team-b", "/v1/provisioningrequests") == set()
    resp = await api_.http.get("/v1/clusterqueues/cq/events", headers=bearer("team-b"))
    seen = {e["workloadId"] for e in (await resp.json())["events"]}
    assert b_id in seen and a.wid not in seen


# gRPC: each method by owner, other tenant, admin, nobody.
C = grpc.StatusCode
OK, DENIED, NOAUTH = C.OK, C.PERMISSION_DENIED, C.UNAUTHENTICATED
GRPC_OWN = (OK, DENIED, OK, NOAUTH)


def _spec(name: str) -> pb.WorkloadSpec:
    return json_format.ParseDict(workload(name), pb.WorkloadSpec())


GRPC: list[tuple[str, str, Any, tuple[grpc.StatusCode, ...]]] = [
    ("Submissions", "Submit", lambda f: pb.SubmitRequest(workload=_spec(fresh())), GRPC_OWN),
    (
        "Submissions",
        "SubmitBatch",
        lambda f: pb.SubmitBatchRequest(items=[pb.SubmitRequest(workload=_spec(fresh()))]),
        GRPC_OWN,
    ),
    ("Submissions", "GetWorkload", lambda f: pb.GetWorkloadRequest(id=f.wid), GRPC_OWN),
    (
        "Submissions",
        "ListWorkloads",
        lambda f: pb.ListWorkloadsRequest(namespace="team-a"),
        GRPC_OWN,
    ),
    ("Submissions", "Cancel", lambda f: pb.CancelRequest(id=f.wid), GRPC_OWN),
    ("Submissions", "Watch", lambda f: pb.WatchRequest(workload_id=f.wid), GRPC_OWN),
    ("Submissions", "Watch", lambda f: pb.WatchRequest(local_queue="team-a/lq"), GRPC_OWN),
    ("Submissions", "Watch", lambda f: pb.WatchRequest(cluster_queue="cq"), (OK, OK, OK, NOAUTH)),
    (
        "Admin",
        "Apply",
        lambda f: pb.ApplyRequest(manifests=LQ.replace("NAME", fresh())),
        (DENIED, DENIED, OK, NOAUTH),
    ),
    ("Admin", "Apply", lambda f: pb.ApplyRequest(manifests=POD.replace("NAME", fresh())), GRPC_OWN),
    ("Admin", "GetObject", lambda f: pb.ObjectRef(kind="cq", name="cq"), (OK, OK, OK, NOAUTH)),
    (
        "Admin",
        "GetObject",
        lambda f: pb.ObjectRef(kind="localqueue", name="lq", namespace="team-a"),
        GRPC_OWN,
    ),
    (
        "Admin",
        "GetObject",
        lambda f: pb.ObjectRef(kind="provreq", name=f.request, namespace="team-a"),
        GRPC_OWN,
    ),
    ("Admin", "ListObjects", lambda f: pb.ListObjectsRequest(kind="cq"), (OK, OK, OK, NOAUTH)),
    (
        "Admin",
        "ListObjects",
        lambda f: pb.ListObjectsRequest(kind="lq", namespace="team-a"),
        GRPC_OWN,
    ),
    ("Admin", "Replay", lambda f: pb.ReplayRequest(), (DENIED, DENIED, OK, NOAUTH)),
    ("Submissions", "Explain", lambda f: pb.ExplainRequest(id=f.wid), GRPC_OWN),
    (
        "Submissions",
        "UpdateAdmissionCheck",  # admin only; the admin is told there is no such check
        lambda f: pb.UpdateAdmissionCheckRequest(id=f.wid, check="nope", state="Ready"),
        (DENIED, DENIED, C.NOT_FOUND, NOAUTH),
    ),
    ("Admin", "Report", lambda f: pb.ReportRequest(namespace="team-a"), GRPC_OWN),
    ("Admin", "Report", lambda f: pb.ReportRequest(), (OK, OK, OK, NOAUTH)),  # one's own
    ("Admin", "ListNodes", lambda f: pb.ListNodesRequest(), (OK, OK, OK, NOAUTH)),
]


@pytest.mark.parametrize("row", GRPC, ids=[f"{r[1]}-{i}" for i, r in enumerate(GRPC)])
async def test_grpc_matrix(api_: Api, row: Any) -> None:
    service, method, build, expected = row
    for who, want in zip(WHO, expected, strict=True):
        f = await setup(api_)
        before = await api_.head()
        stub = api_.submissions if service == "Submissions" else api_.admin
        call = getattr(stub, method)
        try:
            if method == "Watch":
                async for _ in call(build(f), metadata=grpc_meta(who)):
                    pass
            else:
                await call(build(f), metadata=grpc_meta(who))
            code = C.OK
        except grpc.aio.AioRpcError as exc:
            code = exc.code()
        assert code == want, (method, who)
        if code != C.OK:
            assert await api_.head() == before
