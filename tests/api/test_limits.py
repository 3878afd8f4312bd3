"""Limits and malformed input at the edges: body and message size, batch size, the
per-tenant submission rate (429 + Retry-After; RESOURCE_EXHAUSTED + retry-after),
protobuf that does not decode or carries unknown fields. None leaves an event."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest
from google.protobuf import json_format

from muster.api.v1 import muster_pb2 as pb
from muster.store import SqlEventStore
from tests.api.conftest import Api, bearer, grpc_meta, serve, workload


@pytest.fixture
async def slow(sqlite_store: SqlEventStore, tmp_path: Path) -> AsyncIterator[Api]:
    """An intake whose tenants may submit a burst of 3, then one every 50 s (slow enough
    that no refill lands during a test, however loaded the machine)."""
    async for a in serve(sqlite_store, tmp_path, submit_rate=0.02, submit_burst=3, max_batch=5):
        yield a


async def test_rate_limit_is_per_tenant_with_retry_after(slow: Api) -> None:
    codes = []
    for i in range(4):
        resp = await slow.http.post(
            "/v1/workloads", json=workload(f"w{i}"), headers=bearer("team-a")
        )
        codes.append(resp.status)
    assert codes == [201, 201, 201, 429]
    body = await resp.json()
    assert body["error"]["code"] == "RateLimited"
    assert 40 <= int(resp.headers["Retry-After"]) <= 50  # one token at 0.02/s: 50 s
    before = await slow.head()
    # Another tenant has its own bucket.
    resp = await slow.http.post(
        "/v1/workloads", json=workload("b", "team-b"), headers=bearer("team-b")
    )
    assert resp.status == 201
    assert await slow.head() == before + 1
    # gRPC draws on the same bucket.
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await slow.submissions.Submit(
            pb.SubmitRequest(workload=json_format.ParseDict(workload("g"), pb.WorkloadSpec())),
            metadata=grpc_meta("team-a"),
        )
    assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    trailing = dict(err.value.trailing_metadata() or ())
    assert trailing["muster-error-code"] == "RateLimited"
    assert 40 <= int(trailing["retry-after"]) <= 50


async def test_a_batch_costs_its_size(slow: Api) -> None:
    items = [workload(f"b{i}") for i in range(4)]
    resp = await slow.http.post(
        "/v1/workloads:batch", json={"items": items}, headers=bearer("team-a")
    )
    assert resp.status == 413  # 4 > burst 3: never possible, so not a 429
    assert (await resp.json())["error"]["code"] == "BatchTooLarge"
    resp = await slow.http.post(
        "/v1/workloads:batch", json={"items": items[:3]}, headers=bearer("team-a")
    )
    assert resp.status == 201
    resp = await slow.http.post(
        "/v1/workloads:batch", json={"items": items[3:]}, headers=bearer("team-a")
    )
    assert resp.status == 429


async def test_batch_size_limit(slow: Api) -> None:
    before = await slow.head()
    items = [workload(f"b{i}") for i in range(6)]
    resp = await slow.http.post(
        "/v1/workloads:batch", json={"items": items}, headers=bearer("admin")
    )
    assert resp.status == 413
    err = (await resp.json())["error"]
    assert err["code"] == "BatchTooLarge" and "limit of 5" in err["message"]
    with pytest.raises(grpc.aio.AioRpcError) as e:
        await slow.submissions.SubmitBatch(
            pb.SubmitBatchRequest(
                items=[
                    pb.SubmitRequest(workload=json_format.ParseDict(i, pb.WorkloadSpec()))
                    for i in items
                ]
            ),
            metadata=grpc_meta("admin"),
        )
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert await slow.head() == before


async def test_body_and_message_size_limits(api_: Api) -> None:
    before = await api_.head()
    big = workload("big", labels={f"k{i}": "v" * 60 for i in range(2000)})
    resp = await api_.http.post("/v1/workloads", json=big, headers=bearer("team-a"))
    assert resp.status == 413
    assert (await resp.json())["error"]["code"] == "PayloadTooLarge"
    with pytest.raises(grpc.aio.AioRpcError) as e:
        await api_.submissions.Submit(
            pb.SubmitRequest(workload=json_format.ParseDict(big, pb.WorkloadSpec())),
            metadata=grpc_meta("team-a"),
        )
    assert e.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert await api_.head() == before


async def _raw_call(api: Api, method: str, payload: bytes) -> grpc.aio.AioRpcError:
    call = api.channel.unary_unary(method)  # no serializers: bytes in, bytes out
    with pytest.raises(grpc.aio.AioRpcError) as e:
        await call(payload, metadata=grpc_meta("team-a"))
    return e.value


async def test_malformed_protobuf_is_invalid_argument(api_: Api) -> None:
    before = await api_.head()
    err = await _raw_call(api_, "/muster.v1.Submissions/Submit", b"\xff\xff\xff\xff")
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert dict(err.trailing_metadata() or ())["muster-error-code"] == "MalformedProtobuf"
    # A wire-valid message with a field number this version does not know (field 99).
    spec = json_format.ParseDict(workload("x"), pb.WorkloadSpec())
    payload = pb.SubmitRequest(workload=spec).SerializeToString() + b"\x98\x06\x01"
    err = await _raw_call(api_, "/muster.v1.Submissions/Submit", payload)
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert dict(err.trailing_metadata() or ())["muster-error-code"] == "UnknownField"
    assert await api_.head() == before


async def test_wrong_types_and_unknown_fields_over_http(api_: Api) -> None:
    before = await api_.head()
    for body, field in [
        (workload(podSets=[{"count": "2"}]), "podSets[0].count"),
        (workload(gpus=8), "gpus"),
        (workload(priority=1.5), "priority"),
        (workload(labels=["a"]), "labels"),
    ]:
        resp = await api_.http.post("/v1/workloads", json=body, headers=bearer("team-a"))
        assert resp.status == 422, body
        assert (await resp.json())["error"]["field"] == field
    resp = await api_.http.post(
        "/v1/workloads",
        data=b"{nope",
        headers={**bearer("team-a"), "Content-Type": "application/json"},
    )
    assert resp.status == 400
    assert await api_.head() == before


async def test_bad_tokens(api_: Api) -> None:
    for header in ("Bearer nope", "Basic abc", "Bearer a.b.c", "Bearer"):
        resp = await api_.http.get("/v1/workloads", headers={"Authorization": header})
        assert resp.status == 401, header
        assert (await resp.json())["error"]["code"] == "Unauthenticated"


async def test_signed_tokens(api_: Api) -> None:
    from muster.core.access.tokens import sign_token

    token = sign_token(b"k" * 32, {"sub": "ci", "ns": ["team-b"]})
    resp = await api_.http.post(
        "/v1/workloads",
        json=workload("signed", "team-b"),
        headers={"Authorization": f"Bearer {token}"},
    )
    assert resp.status == 201
    resp = await api_.http.post(
        "/v1/workloads",
        json=workload("signed", "team-a"),
        headers={"Authorization": f"Bearer {token}"},
    )
    assert resp.status == 403
    expired = sign_token(b"k" * 32, {"sub": "ci", "ns": ["team-b"], "exp": 1})
    resp = await api_.http.get("/v1/workloads", headers={"Authorization": f"Bearer {expired}"})
    assert resp.status == 401
    forged = sign_token(b"x" * 32, {"sub": "ci", "admin": True})
    resp = await api_.http.post("/v1/admin/replay", headers={"Authorization": f"Bearer {forged}"})
    assert resp.status == 401


async def test_hostile_manifests_are_refused_with_a_4xx_and_leave_nothing(api_: Api) -> None:
    before = await api_.head()
    deep = "a: " + "[" * 600 + "]" * 600  # the constructor's recursion would end in a 500
    laughs = "a: &a [x, x]\n" + "".join(
        f"{c}: &{c} [{', '.join(['*' + p] * 15)}]\n"
        for p, c in zip("abcdefgh", "bcdefghi", strict=True)
    )
    cases = [
        (deep, "nested too deeply: more than 64 levels"),
        (laughs, "more than 100 aliases"),
        ("kind: [unclosed", "not valid YAML or JSON"),
    ]
    for text, message in cases:
        resp = await api_.http.post("/v1/apply", data=text, headers=bearer("team-a"))
        assert resp.status == 400, text[:40]
        body = await resp.json()
        assert body["error"]["code"] == "MalformedYAML"
        assert message in body["error"]["message"]
        assert "\n" not in body["error"]["message"]
    assert await api_.head() == before


@pytest.fixture
async def roomy(sqlite_store: SqlEventStore, tmp_path: Path) -> AsyncIterator[Api]:
    """An intake taking bodies of up to 1 MiB (the service's default)."""
    async for a in serve(sqlite_store, tmp_path, max_body_bytes=1_048_576):
        yield a


async def test_a_large_apply_is_read_in_a_worker_process_and_refused_the_same(
    roomy: Api,
) -> None:
    """Bodies over INLINE_BYTES are read in a worker process: its refusals come back
    intact (a 4xx naming the problem) and leave nothing."""
    from services.intake.readers import INLINE_BYTES

    pod = (
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: p{i}, namespace: team-a, labels: "
        "{{kueue.x-k8s.io/queue-name: nope}}}}\nspec: {{containers: [{{name: c, image: x, "
        'resources: {{requests: {{cpu: "1"}}}}}}]}}\n'
    )
    many = "---\n".join(pod.format(i=i) for i in range(600))
    assert len(many) > INLINE_BYTES
    before = await roomy.head()
    for text, status, code, says in [
        (many, 422, "UnknownQueue", "LocalQueue 'nope' does not exist"),
        (many + "---\na: " + "[" * 100 + "]" * 100, 400, "MalformedYAML", "nested too deeply"),
    ]:
        resp = await roomy.http.post("/v1/apply", data=text, headers=bearer("team-a"))
        assert resp.status == status
        error = (await resp.json())["error"]
        assert error["code"] == code and says in error["message"]
    assert await roomy.head() == before


async def test_a_large_apply_from_the_worker_is_reassembled_in_order(roomy: Api) -> None:
    """The worker's answer comes in chunks: every workload arrives, in document order."""
    from services.intake.readers import CHUNK, INLINE_BYTES

    pod = (
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: p{i}, namespace: team-a, labels: "
        "{{kueue.x-k8s.io/queue-name: lq}}}}\nspec: {{containers: [{{name: c, image: x, "
        'resources: {{requests: {{nvidia.com/gpu: "1"}}}}}}]}}\n'
    )
    count = 3 * CHUNK + 7
    many = "---\n".join(pod.format(i=i) for i in range(count))
    assert len(many) > INLINE_BYTES
    resp = await roomy.http.post("/v1/apply", data=many, headers=bearer("team-a"))
    assert resp.status == 200, await resp.text()
    rows = (await resp.json())["items"]
    assert [r["name"] for r in rows] == [f"team-a/p{i}" for i in range(count)]
    assert {r["result"] for r in rows} == {"submitted"}
