"""One case table through HTTP and through gRPC: the same outcome, the same error code
and field, equivalent answers, and no event left behind by any refusal."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import grpc
import pytest

from muster.core.events import NewEvent, StreamAppend
from muster.core.events import queue as qev
from muster.core.model.times import rfc3339
from tests.api import drive
from tests.api.conftest import Api, bearer, workload

Args = Callable[[dict[str, str], str], dict[str, Any]]
C = grpc.StatusCode
LQ_YAML = """
apiVersion: kueue.x-k8s.io/v1beta1
kind: LocalQueue
metadata: {{name: lq-{t}, namespace: team-a}}
spec: {{clusterQueue: cq}}
"""
EXTERNAL_CHECK = """
apiVersion: kueue.x-k8s.io/v1beta1
kind: AdmissionCheck
metadata: {name: approval}
spec: {controllerName: example.com/approval}
"""
UPDATE = {"name": "main", "annotations": {"example.com/approved-by": "alice"}}
RF_YAML = """
apiVersion: kueue.x-k8s.io/v1beta1
kind: ResourceFlavor
metadata: {{name: rf-{t}}}
"""
CQ_YAML = """
apiVersion: kueue.x-k8s.io/v1beta1
kind: ClusterQueue
metadata: {{name: cq-{t}}}
spec:
  resourceGroups:
  - coveredResources: [cpu]
    flavors:
    - name: {flavor}
      resources: [{{name: cpu, nominalQuota: 8}}]
"""
JOB_YAML = """
apiVersion: batch/v1
kind: Job
metadata:
  name: job-{t}
  namespace: team-a
  labels: {{kueue.x-k8s.io/queue-name: lq}}
spec:
  parallelism: 2
  template:
    spec:
      containers:
      - name: c
        image: busybox
        resources: {{requests: {{nvidia.com/gpu: 1}}}}
"""


@dataclass(frozen=True)
class Case:
    name: str
    who: str | None
    op: str
    args: Args
    http: int
    grpc: grpc.StatusCode
    code: str | None = None
    field: str | None = None


def pod_sets(**ps: Any) -> list[dict[str, Any]]:
    return [{"count": 2, "requests": {"nvidia.com/gpu": "1"}, **ps}]


def sub(**changes: Any) -> Args:
    return lambda ids, t: {"workload": workload(f"w-{t}", **changes)}


INVALID = (422, C.INVALID_ARGUMENT, "InvalidField")
CASES = [
    Case("submit", "team-a", "submit", sub(), 201, C.OK),
    Case(
        "submit repeated key",
        "team-a",
        "submit",
        lambda ids, t: {"workload": workload("seed"), "key": "seed"},
        200,
        C.OK,
    ),
    Case(
        "submit key reused for another body",
        "team-a",
        "submit",
        lambda ids, t: {"workload": workload("other"), "key": "seed"},
        409,
        C.ALREADY_EXISTS,
        "IdempotencyKeyReused",
    ),
    Case(
        "missing name",
        "team-a",
        "submit",
        lambda ids, t: {"workload": {k: v for k, v in workload().items() if k != "name"}},
        *INVALID,
        "name",
    ),
    Case(
        "zero count",
        "team-a",
        "submit",
        sub(podSets=pod_sets(count=0)),
        *INVALID,
        "podSets[0].count",
    ),
    Case(
        "negative quantity",
        "team-a",
        "submit",
        sub(podSets=pod_sets(requests={"nvidia.com/gpu": "-1"})),
        *INVALID,
        "podSets[0].requests.nvidia.com/gpu",
    ),
    Case(
        "absurd quantity",
        "team-a",
        "submit",
        sub(podSets=pod_sets(requests={"memory": "999999Ei"})),
        *INVALID,
        "podSets[0].requests.memory",
    ),
    Case(
        "minCount above count",
        "team-a",
        "submit",
        sub(podSets=pod_sets(minCount=3)),
        *INVALID,
        "podSets[0].minCount",
    ),
    Case(
        "bad name",
        "team-a",
        "submit",
        lambda ids, t: {"workload": workload("Not_A_Name")},
        *INVALID,
        "name",
    ),
    Case("no pod sets", "team-a", "submit", sub(podSets=[]), *INVALID, "podSets"),
    # Gang members (peers.md §1.5): a gang of one forms at once, and the member shows
    # its gang's workload; a member disagreeing with its gang's first is refused by field.
    Case(
        "gang member",
        "team-a",
        "submit",
        lambda ids, t: {"workload": workload(f"w-{t}", gang={"name": f"g-{t}", "cardinality": 1})},
        201,
        C.OK,
    ),
    Case(
        "gang member disagreeing",
        "team-a",
        "batch",
        lambda ids, t: {
            "items": [
                {
                    "workload": workload(
                        f"m{i}-{t}", gang={"name": f"g-{t}", "cardinality": 3}, priority=i
                    )
                }
                for i in range(2)
            ]
        },
        422,
        C.INVALID_ARGUMENT,
        "GangMismatch",
        "items[1].priority",
    ),
    Case(
        "unknown queue",
        "team-a",
        "submit",
        sub(queueName="nope"),
        422,
        C.FAILED_PRECONDITION,
        "UnknownQueue",
        "queueName",
    ),
    Case(
        "unknown priority class name pattern",
        "team-a",
        "submit",
        sub(priorityClassName="UPPER"),
        *INVALID,
        "priorityClassName",
    ),
    Case(
        "another tenant's namespace",
        "team-a",
        "submit",
        lambda ids, t: {"workload": workload(f"w-{t}", namespace="team-b")},
        403,
        C.PERMISSION_DENIED,
        "Forbidden",
    ),
    Case("no token", None, "submit", sub(), 401, C.UNAUTHENTICATED, "Unauthenticated"),
    Case(
        "batch",
        "team-a",
        "batch",
        lambda ids, t: {
            "items": [{"workload": workload(f"b-{t}-{i}"), "key": f"b-{t}-{i}"} for i in range(3)]
        },
        201,
        C.OK,
    ),
    Case(
        "batch with one bad item",
        "team-a",
        "batch",
        lambda ids, t: {
            "items": [
                {"workload": workload(f"x-{t}")},
                {"workload": workload(f"y-{t}", podSets=pod_sets(count=0))},
            ]
        },
        *INVALID,
        "items[1].podSets[0].count",
    ),
    # A batch is all or nothing: a key reused for another body, in the store or within
    # the batch, refuses it whole, and the new items before it are not appended.
    Case(
        "batch whose last item reuses a key for another body",
        "team-a",
        "batch",
        lambda ids, t: {
            "items": [
                {"workload": workload(f"n-{t}"), "key": f"n-{t}"},
                {"workload": workload(f"m-{t}")},
                {"workload": workload("other"), "key": "seed"},
            ]
        },
        409,
        C.ALREADY_EXISTS,
        "IdempotencyKeyReused",
        "items[2].idempotencyKey",
    ),
    Case(
        "batch with one new key and two bodies",
        "team-a",
        "batch",
        lambda ids, t: {
            "items": [
                {"workload": workload(f"p-{t}"), "key": f"p-{t}"},
                {"workload": workload(f"q-{t}"), "key": f"p-{t}"},
            ]
        },
        409,
        C.ALREADY_EXISTS,
        "IdempotencyKeyReused",
        "items[1].idempotencyKey",
    ),
    Case(
        "batch retrying a key with its body, beside a new item",
        "team-a",
        "batch",
        lambda ids, t: {
            "items": [
                {"workload": workload("seed"), "key": "seed"},
                {"workload": workload(f"r-{t}"), "key": f"r-{t}"},
            ]
        },
        201,
        C.OK,
    ),
    Case("get", "team-a", "get", lambda ids, t: {"id": ids["seed"]}, 200, C.OK),
    Case("get by admin", "admin", "get", lambda ids, t: {"id": ids["seed"]}, 200, C.OK),
    Case(
        "get missing", "team-a", "get", lambda ids, t: {"id": "nope"}, 404, C.NOT_FOUND, "NotFound"
    ),
    Case(
        "get another tenant's",
        "team-b",
        "get",
        lambda ids, t: {"id": ids["seed"]},
        403,
        C.PERMISSION_DENIED,
        "Forbidden",
    ),
    Case("list", "team-a", "list", lambda ids, t: {"namespace": "team-a", "limit": 1}, 200, C.OK),
    Case(
        "list another tenant's namespace",
        "team-a",
        "list",
        lambda ids, t: {"namespace": "team-b"},
        403,
        C.PERMISSION_DENIED,
        "Forbidden",
    ),
    Case(
        "list with a bad limit",
        "team-a",
        "list",
        lambda ids, t: {"limit": 0},
        400,
        C.INVALID_ARGUMENT,
        "InvalidQuery",
        "limit",
    ),
    Case("cancel", "team-a", "cancel", lambda ids, t: {"id": ids[f"cancel-{t}"]}, 202, C.OK),
    Case(
        "cancel twice",
        "team-a",
        "cancel",
        lambda ids, t: {"id": ids["cancelled"]},
        202,
        C.OK,
    ),
    Case(
        "cancel another tenant's",
        "team-b",
        "cancel",
        lambda ids, t: {"id": ids["seed"]},
        403,
        C.PERMISSION_DENIED,
        "Forbidden",
    ),
    Case("events", "team-a", "events", lambda ids, t: {"id": ids["seed"]}, 200, C.OK),
    Case(
        "events resumed past the first",
        "team-a",
        "events",
        lambda ids, t: {"id": ids["seed"], "after": int(ids["seed-position"])},
        200,
        C.OK,
    ),
    Case(
        "events of another tenant's",
        "team-b",
        "events",
        lambda ids, t: {"id": ids["seed"]},
        403,
        C.PERMISSION_DENIED,
        "Forbidden",
    ),
    Case(
        "apply a LocalQueue",
        "admin",
        "apply",
        lambda ids, t: {"manifests": LQ_YAML.format(t=t)},
        200,
        C.OK,
    ),
    Case(
        "apply a LocalQueue as a tenant",
        "team-a",
        "apply",
        lambda ids, t: {"manifests": LQ_YAML.format(t=t)},
        403,
        C.PERMISSION_DENIED,
        "Forbidden",
    ),
    Case(
        "apply a Job",
        "team-a",
        "apply",
        lambda ids, t: {"manifests": JOB_YAML.format(t=t)},
        200,
        C.OK,
    ),
    Case(
        "apply bad YAML",
        "admin",
        "apply",
        lambda ids, t: {"manifests": "kind: [unclosed"},
        400,
        C.INVALID_ARGUMENT,
        "MalformedYAML",
    ),
    Case(
        "apply an unsupported field",
        "admin",
        "apply",
        lambda ids, t: {
            "manifests": LQ_YAML.format(t=t).replace(
                "clusterQueue: cq", "clusterQueue: cq, colour: red"
            )
        },
        *INVALID,
        "doc[0] (LocalQueue lq-{t}).spec.colour",
    ),
    Case(
        "apply a ClusterQueue with an unknown flavor",
        "admin",
        "apply",
        lambda ids, t: {"manifests": CQ_YAML.format(t=t, flavor="no-such-flavor")},
        422,
        C.FAILED_PRECONDITION,
        "UnknownFlavor",
        "ClusterQueue cq-{t}.spec.resourceGroups[0].flavors[0].name",
    ),
    Case(
        "apply a ClusterQueue and its flavor together",
        "admin",
        "apply",
        lambda ids, t: {
            "manifests": RF_YAML.format(t=t) + "---\n" + CQ_YAML.format(t=t, flavor=f"rf-{t}")
        },
        200,
        C.OK,
    ),
    Case(
        "apply a LocalQueue of an unknown ClusterQueue",
        "admin",
        "apply",
        lambda ids, t: {
            "manifests": LQ_YAML.format(t=t).replace("clusterQueue: cq", "clusterQueue: nope")
        },
        422,
        C.FAILED_PRECONDITION,
        "UnknownQueue",
        "LocalQueue team-a/lq-{t}.spec.clusterQueue",
    ),
    Case(
        "get a ClusterQueue",
        "team-a",
        "get_object",
        lambda ids, t: {"kind": "clusterqueue", "name": "cq"},
        200,
        C.OK,
    ),
    Case(
        "get a missing ClusterQueue",
        "team-a",
        "get_object",
        lambda ids, t: {"kind": "cq", "name": "nope"},
        404,
        C.NOT_FOUND,
        "NotFound",
    ),
    Case(
        "list LocalQueues of one's namespace",
        "team-a",
        "list_objects",
        lambda ids, t: {"kind": "localqueues", "namespace": "team-a"},
        200,
        C.OK,
    ),
    Case(
        "list LocalQueues of another namespace",
        "team-a",
        "list_objects",
        lambda ids, t: {"kind": "localqueues", "namespace": "team-b"},
        403,
        C.PERMISSION_DENIED,
        "Forbidden",
    ),
    # What operators use (explain, report, nodes, an external check's state): the same
    # answers and refusals over gRPC as over HTTP (docs/api.md, "gRPC").
    Case("explain", "team-a", "explain", lambda ids, t: {"id": ids["seed"]}, 200, C.OK),
    Case(
        "explain at a past position",
        "team-a",
        "explain",
        lambda ids, t: {"id": ids["seed"], "at": f"@{ids['seed-position']}"},
        200,
        C.OK,
    ),
    Case(
        "explain at no time",
        "team-a",
        "explain",
        lambda ids, t: {"id": ids["seed"], "at": "yesterday"},
        400,
        C.INVALID_ARGUMENT,
        "InvalidQuery",
        "at",
    ),
    Case(
        "explain another tenant's",
        "team-b",
        "explain",
        lambda ids, t: {"id": ids["seed"]},
        403,
        C.PERMISSION_DENIED,
        "Forbidden",
    ),
    Case(
        "explain a missing one",
        "team-a",
        "explain",
        lambda ids, t: {"id": "nope"},
        404,
        C.NOT_FOUND,
        "NotFound",
    ),
    Case(
        "report",
        "team-a",
        "report",
        lambda ids, t: {"since": "2026-01-01T00:00:00Z", "until": ids["until"]},
        200,
        C.OK,
    ),
    Case(
        "report from no time",
        "team-a",
        "report",
        lambda ids, t: {"since": "yesterday"},
        400,
        C.INVALID_ARGUMENT,
        "InvalidQuery",
        "since",
    ),
    Case(
        "report of another tenant's namespace",
        "team-a",
        "report",
        lambda ids, t: {"namespace": "team-b"},
        403,
        C.PERMISSION_DENIED,
        "Forbidden",
    ),
    Case("nodes", "team-a", "nodes", lambda ids, t: {}, 200, C.OK),
    Case(
        "nodes with a bad limit",
        "team-a",
        "nodes",
        lambda ids, t: {"limit": 0},
        400,
        C.INVALID_ARGUMENT,
        "InvalidQuery",
        "limit",
    ),
    Case(
        "set a check's state",
        "admin",
        "update_check",
        lambda ids, t: {
            "id": ids["checked"],
            "check": "approval",
            "body": {"state": "Ready", "message": "approved", "podSetUpdates": [UPDATE]},
        },
        200,
        C.OK,
    ),
    Case(
        "set a check's state as a tenant",
        "team-a",
        "update_check",
        lambda ids, t: {"id": ids["checked"], "check": "approval", "body": {"state": "Ready"}},
        403,
        C.PERMISSION_DENIED,
        "Forbidden",
    ),
    Case(
        "set the state of a check gating nothing",
        "admin",
        "update_check",
        lambda ids, t: {"id": ids["seed"], "check": "approval", "body": {"state": "Ready"}},
        409,
        C.FAILED_PRECONDITION,
        "CheckNotApplicable",
    ),
    Case(
        "set no state",
        "admin",
        "update_check",
        lambda ids, t: {"id": ids["checked"], "check": "approval", "body": {}},
        *INVALID,
        "state",
    ),
    Case(
        "set a missing check's state",
        "admin",
        "update_check",
        lambda ids, t: {"id": ids["checked"], "check": "nope", "body": {"state": "Ready"}},
        404,
        C.NOT_FOUND,
        "NotFound",
    ),
    Case("replay", "admin", "replay", lambda ids, t: {}, 200, C.OK),
    Case(
        "replay as a tenant",
        "team-a",
        "replay",
        lambda ids, t: {},
        403,
        C.PERMISSION_DENIED,
        "Forbidden",
    ),
]


async def seed(api: Api) -> dict[str, str]:
    """Workloads the cases refer to, submitted over HTTP by team-a; ``checked`` holds quota
    gated by the external AdmissionCheck ``approval`` (kueue.md §1.8)."""
    ids: dict[str, str] = {}
    resp = await api.http.post("/v1/apply", data=EXTERNAL_CHECK, headers=bearer("admin"))
    assert resp.status == 200, await resp.text()
    for key in ("seed", "cancel-h", "cancel-g", "cancelled", "checked"):
        name = key if key == "seed" else f"c-{key}"
        resp = await api.http.post(
            "/v1/workloads",
            json=workload(name),
            headers={**bearer("team-a"), "Idempotency-Key": key},
        )
        assert resp.status == 201, await resp.text()
        ids[key] = (await resp.json())["id"]
    resp = await api.http.post(f"/v1/workloads/{ids['cancelled']}/cancel", headers=bearer("team-a"))
    assert resp.status == 202
    first = (await api.store.read_correlated(ids["seed"]))[0]
    ids["seed-position"] = str(first.position)
    await _reserve(api, ids["checked"], "approval")
    # A report up to here charges the same over both: rounded down to the millisecond, never
    # ahead of either call's clock (rounded up, a call within that half millisecond charged
    # the reservation up to its own clock, the other up to ``until``).
    ids["until"] = f"{math.floor(time.time() * 1000) / 1000:.3f}"
    return ids


async def _reserve(api: Api, wid: str, *checks: str) -> None:
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
    new = NewEvent(stream_id=qev.ADMISSION_STREAM, event=reserved, occurred_at=time.time())
    await api.store.append(
        [StreamAppend(qev.ADMISSION_STREAM, None, [new])], producer="queue", recorded_at=time.time()
    )


VOLATILE = {"id", "name", "submittedAt", "updatedAt", "time", "position", "workloadId"}
VOLATILE |= {"submittedTime", "updatedTime", "lastTransitionTime", "occurredTime", "now"}


def normal(value: Any) -> Any:
    """Comparable across transports: no nulls, no defaults-only fields, no times or ids."""
    if isinstance(value, dict):
        return {
            k: normal(v)
            for k, v in value.items()
            if v is not None and k not in VOLATILE and v not in ("", [], {})
        }
    if isinstance(value, list):
        return [normal(v) for v in value]
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def http_as_grpc(op: str, status: int, body: Any) -> Any:
    """The HTTP answer in the gRPC response's shape: Submit wraps the workload; Explain
    types the top of the answer and carries all of it in ``detail``."""
    if op == "submit":
        return {"workload": body, "created": status == 201}
    if op == "explain":
        top = ("id", "position", "time", "status", "reason", "message", "conditions")
        return {k: body[k] for k in top} | {"detail": body}
    return body


async def test_a_replay_answers_its_time_in_rfc3339_over_both(api_: Api) -> None:
    """The rebuilt state's time as every time is shown (docs/api.md), beside the summary's
    seconds; the same over gRPC."""
    await seed(api_)
    h = await drive.http(api_, "admin", "replay", {})
    g = await drive.grpc_call(api_, "admin", "replay", {})
    assert h.body["time"] == g.body["time"] == rfc3339(h.body["summary"]["now"])
    assert h.body["time"].endswith("Z")


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
async def test_http_and_grpc_agree(api_: Api, case: Case) -> None:
    ids = await seed(api_)
    before = await api_.head()
    h = await drive.http(api_, case.who, case.op, case.args(ids, "h"))
    after_http = await api_.head()
    g = await drive.grpc_call(api_, case.who, case.op, case.args(ids, "g"))
    after_grpc = await api_.head()
    field = case.field.format(t="h") if case.field else None
    assert (h.status, h.code, h.field) == (case.http, case.code, field), h.body
    field = case.field.format(t="g") if case.field else None
    assert (g.status, g.code, g.field) == (case.grpc, case.code, field), g.body
    if case.code is not None:  # a refusal leaves nothing behind, over either transport
        assert after_http == before
        assert after_grpc == after_http
        assert isinstance(g.body, str) and g.body  # the reason, in the status details
        assert h.body["error"]["message"]
    else:
        assert normal(http_as_grpc(case.op, h.status, h.body)) == normal(g.body)
