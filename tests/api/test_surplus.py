"""A pod set's ``surplus`` (Volcano's minAvailable: pods above ``minCount`` wait for room)
over HTTP and gRPC: accepted with a minCount, stored as given, refused naming the field
otherwise, and refused without an event."""

from __future__ import annotations

from typing import Any

import grpc
import pytest
from google.protobuf import json_format

from muster.api.v1 import muster_pb2 as pb
from muster.core.events.workload import WorkloadSubmitted
from tests.api.conftest import Api, bearer, grpc_meta, workload

WAITING = [{"count": 4, "minCount": 2, "surplus": "Wait", "requests": {"nvidia.com/gpu": "1"}}]


async def _stored(api_: Api) -> dict[str, Any]:
    return {
        e.event.spec.name: e.event.spec.pod_sets[0].surplus
        for e in await api_.store.read_all(0, categories={"workload"})
        if isinstance(e.event, WorkloadSubmitted)
    }


async def test_surplus_is_taken_over_http_and_grpc(api_: Api) -> None:
    resp = await api_.http.post(
        "/v1/workloads", json=workload("h", podSets=WAITING), headers=bearer("team-a")
    )
    assert resp.status == 201
    spec = json_format.ParseDict(workload("g", podSets=WAITING), pb.WorkloadSpec())
    await api_.submissions.Submit(pb.SubmitRequest(workload=spec), metadata=grpc_meta("team-a"))
    assert await _stored(api_) == {"h": "Wait", "g": "Wait"}


async def test_surplus_without_min_count_is_refused_naming_it(api_: Api) -> None:
    before = await api_.head()
    bad = [{"count": 4, "surplus": "Wait"}]
    resp = await api_.http.post(
        "/v1/workloads", json=workload("h", podSets=bad), headers=bearer("team-a")
    )
    assert resp.status == 422
    assert (await resp.json())["error"]["field"] == "podSets[0].surplus"
    spec = json_format.ParseDict(workload("g", podSets=bad), pb.WorkloadSpec())
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await api_.submissions.Submit(pb.SubmitRequest(workload=spec), metadata=grpc_meta("team-a"))
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert dict(err.value.trailing_metadata() or ())["muster-error-field"] == "podSets[0].surplus"
    assert await api_.head() == before
