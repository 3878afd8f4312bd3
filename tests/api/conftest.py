"""One intake, served over HTTP and gRPC at once, with token authentication on:
tenants team-a and team-b (each its own namespace and LocalQueue) and an admin."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import pytest
import yaml
from aiohttp.test_utils import TestClient, TestServer

from muster.api.v1 import muster_pb2_grpc as rpc
from muster.core.access.tokens import Authenticator, load_token_file
from muster.core.model import parse
from muster.core.views.workloads import WorkloadsView
from muster.runtime import admin
from muster.runtime.loop import DeciderLoop
from muster.runtime.metrics import ServiceMetrics
from muster.runtime.service import http_app
from muster.runtime.settings import Settings, load
from muster.store import SqlEventStore
from services.intake import api, grpc_api
from services.intake.ops import Intake

TOKENS = {"team-a": "tok-a", "team-b": "tok-b", "admin": "tok-admin"}
TOKEN_FILE = {
    "tokens": [
        {"token": "tok-a", "name": "team-a", "namespaces": ["team-a"]},
        {"token": "tok-b", "name": "team-b", "namespaces": ["team-b"]},
        {"token": "tok-admin", "name": "ops", "admin": True},
    ]
}
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
    "localQueues": [
        {"namespace": "team-a", "name": "lq", "clusterQueue": "cq"},
        {"namespace": "team-b", "name": "lq", "clusterQueue": "cq"},
    ],
}


def workload(name: str = "train", namespace: str = "team-a", **changes: Any) -> dict[str, Any]:
    return {
        "name": name,
        "namespace": namespace,
        "queueName": "lq",
        "podSets": [{"count": 2, "requests": {"nvidia.com/gpu": "1"}}],
        **changes,
    }


def bearer(who: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {TOKENS[who]}"} if who else {}


def grpc_meta(who: str | None) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {TOKENS[who]}"),) if who else ()


@dataclass
class Api:
    http: TestClient[Any, Any]
    submissions: rpc.SubmissionsStub
    admin: rpc.AdminStub
    store: SqlEventStore
    intake: Intake
    settings: Settings
    channel: grpc.aio.Channel
    grpc_target: str

    async def head(self) -> int:
        return await self.store.head()


def settings_for(store: SqlEventStore, **overrides: Any) -> Settings:
    values: dict[str, Any] = {
        "store_url": store.url,
        "kafka_bootstrap": "unused:9092",
        "http_host": "127.0.0.1",
        "poll_seconds": 0.05,
        "max_body_bytes": 65536,
        "max_batch": 50,
        "submit_rate": 1000.0,
        "submit_burst": 1000,
    }
    values.update(overrides)
    return load({}, **values)


async def serve(store: SqlEventStore, tmp_path: Path, **overrides: Any) -> AsyncIterator[Api]:
    await admin.apply_cluster(store, parse.cluster(CLUSTER), now=1.0)
    token_file = tmp_path / "tokens.yaml"
    token_file.write_text(yaml.safe_dump(TOKEN_FILE))
    settings = settings_for(store, **overrides)
    loop = DeciderLoop(WorkloadsView(), store, settings, ServiceMetrics(), decides=False)
    await loop.restore()
    app = http_app(loop, ServiceMetrics(), None)
    intake = api.routes(app, loop, Authenticator(load_token_file(token_file), b"k" * 32))
    server, port = await grpc_api.start(intake, settings, port=0)
    follow = asyncio.create_task(loop.follow())  # as the service does: fold what comes
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}")
    try:
        async with TestClient(TestServer(app)) as http:
            yield Api(
                http,
                rpc.SubmissionsStub(channel),
                rpc.AdminStub(channel),
                store,
                intake,
                settings,
                channel,
                f"127.0.0.1:{port}",
            )
    finally:
        follow.cancel()
        await channel.close()
        await server.stop(grace=None)


@pytest.fixture
async def api_(sqlite_store: SqlEventStore, tmp_path: Path) -> AsyncIterator[Api]:
    async for a in serve(sqlite_store, tmp_path):
        yield a


def head_from(api: Api, loop: asyncio.AbstractEventLoop) -> Callable[[], int]:
    """The store's head, read from a thread driving the API while ``loop`` serves it."""

    def head() -> int:
        return asyncio.run_coroutine_threadsafe(api.store.head(), loop).result(timeout=30)

    return head
