"""Scenarios S1 and S2 through the real services: the broker, the four services as
processes over one SQLite store, the seed manifests applied with ``muster apply``.

S1: the seed's Job behind the seed's DWS ClusterQueue (admission check dws-prov) waits
for capacity, is admitted only once its node is Provisioned, runs and its node goes.
S2: the seed's standalone ProvisioningRequest (4 nodes) stays Accepted with
NotProvisioned while no single zone holds 4, then gets all 4 in zone b at once; nobody
uses them, so they are removed when the booking expires. Real time is compressed: the
capacity arrives seconds after the cloud is configured, the booking lasts 3 s and the
Job declares a 1 s runtime (the one annotation added to the seed's Job).
"""

from __future__ import annotations

import asyncio
import copy
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from muster.cli.commands import deciders
from muster.cli.http import call
from muster.cli.main import main
from muster.core.events import Envelope
from muster.core.events import provisioning as pev
from muster.core.events import queue as qev
from muster.core.model import parse
from muster.core.verify import verify_decisions
from muster.runtime import admin
from muster.runtime.stack import Stack
from muster.store import SqlEventStore

pytestmark = pytest.mark.e2e

SEEDS = Path(__file__).resolve().parents[2] / "examples" / "scenarios" / "dws"
GPU = "nvidia.com/gpu"


def _cluster(capacity: list[dict[str, Any]]) -> Any:
    return parse.cluster(
        {
            "name": "dws-e2e",
            "region": "us-central1",
            "zones": ["us-central1-a", "us-central1-b"],
            "bookingSeconds": 3,
            "nodePools": [
                {
                    "name": "dws-pool",
                    "machineType": "g2-standard-8",
                    "allocatable": {"cpu": 8, "memory": "32Gi", GPU: 1},
                    "taints": [{"key": GPU, "value": "present", "effect": "NoSchedule"}],
                    "provisioningDelaySeconds": 0.5,
                    "capacity": capacity,
                }
            ],
        }
    )


NONE = {"at": 0, "zones": {"us-central1-a": 0, "us-central1-b": 0}}
# First no capacity anywhere, so both requests are seen waiting however slow the machine;
# then the cloud is described again: 3 nodes in zone a 2 s later, 4 in zone b at 6 s.
DRY = _cluster([NONE])
CLUSTER = _cluster(
    [NONE, {"at": 2, "zones": {"us-central1-a": 3}}, {"at": 6, "zones": {"us-central1-b": 4}}]
)


def _wait(what: str, check: Callable[[], Any], timeout: float = 90.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        found = check()
        if found:
            return found
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} did not happen within {timeout}s")
        time.sleep(0.2)


async def _log(url: str) -> list[Envelope]:
    store = SqlEventStore(url)
    try:
        return await store.read_all(0)
    finally:
        await store.close()


def test_s1_and_s2_through_the_services(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    job = yaml.safe_load((SEEDS / "job.yaml").read_text())
    job = copy.deepcopy(job)
    job["metadata"]["annotations"]["muster.dev/runtime-seconds"] = "1"
    job_path = tmp_path / "job.yaml"
    job_path.write_text(yaml.safe_dump(job))
    with Stack(tmp_path / "stack", poll_seconds=0.3) as stack:
        asyncio.run(admin.configure(stack.store_url, DRY, stack.broker.bootstrap))
        with pytest.raises(SystemExit) as done:
            main(
                [
                    "apply",
                    "--store-url",
                    stack.store_url,
                    "--server",
                    stack.url(),
                    "-f",
                    str(SEEDS / "queues.yaml"),
                    "-f",
                    str(job_path),
                    "-f",
                    str(SEEDS / "provisioning-request.yaml"),
                ]
            )
        out = capsys.readouterr().out
        assert done.value.code == 0, out
        rows = [line.split(None, 2) for line in out.splitlines()]
        assert ["ProvisioningRequest", "default/pi-request", "created"] in rows

        def both_waiting() -> bool:
            log = asyncio.run(_log(stack.store_url))
            waiting = {
                e.event.request_id for e in log if isinstance(e.event, pev.ProvisioningWaiting)
            }
            return len(waiting) == 2 and "default/pi-request" in waiting

        _wait("both requests to wait for capacity", both_waiting)
        asyncio.run(admin.configure(stack.store_url, CLUSTER, stack.broker.bootstrap))

        def job_done() -> Any:
            items = call("GET", f"{stack.url()}/v1/workloads?limit=10")["items"]
            return [w for w in items if w["name"] == "sample-job" and w["status"] == "Succeeded"]

        _wait("the Job to succeed", job_done)

        def request(status: str) -> Any:
            view = call(
                "GET", f"{stack.url()}/v1/namespaces/default/provisioningrequests/pi-request"
            )
            return view if view["status"] == status else None

        provisioned = _wait("pi-request Provisioned", lambda: request("Provisioned"))
        assert provisioned["zone"] == "us-central1-b" and len(provisioned["nodes"]) == 4
        expired = _wait("pi-request's booking to expire", lambda: request("BookingExpired"))
        assert expired["nodesRemoved"].startswith("BookingExpired")

        def released() -> bool:
            state = call("GET", f"{stack.url('provisioner')}/state?fresh=1")["summary"]
            return not state["nodes_in_use"] or not any(state["nodes_in_use"].values())

        _wait("every node to be removed", released)
        with pytest.raises(SystemExit):
            main(["provreq", "default/pi-request", "--server", stack.url()])
        described = capsys.readouterr().out
        assert "Provisioned" in described and "BookingExpired" in described
        log = asyncio.run(_log(stack.store_url))

    by_request: dict[str, list[Envelope]] = {}
    for env in log:
        rid = getattr(env.event, "request_id", None)
        if rid is not None:
            by_request.setdefault(rid, []).append(env)
    (s1,) = [r for r in by_request if r != "default/pi-request"]
    # S1: reserved, Accepted, waited, provisioned, admitted, finished, node removed.
    s1_types = [e.type for e in log if e.correlation_id == s1.rpartition(".")[0]]
    order = [
        "workload.submitted",
        "admission.quota_reserved",
        "provisioning.accepted",
        "provisioning.waiting",
        "provisioning.nodes_creating",
        "provisioning.provisioned",
        "admission.admitted",
        "admission.finished",
        "provisioning.nodes_deleted",
    ]
    assert [t for t in s1_types if t in order] == order
    # S2: NotProvisioned while no zone holds 4; then one NodesCreating of 4 nodes in zone b.
    s2 = by_request["default/pi-request"]
    waiting = [e.event for e in s2 if isinstance(e.event, pev.ProvisioningWaiting)]
    assert waiting and all(w.reason == "NotProvisioned" for w in waiting)
    (creating,) = [e.event for e in s2 if isinstance(e.event, pev.NodesCreating)]
    assert {n.zone for n in creating.nodes} == {"us-central1-b"} and len(creating.nodes) == 4
    assert [type(e.event).__name__ for e in s2][-2:] == [
        "ProvisioningBookingExpired",
        "NodesDeleted",
    ]
    admitted = [e for e in log if isinstance(e.event, qev.WorkloadAdmitted)]
    provisioned_at = next(
        e.position for e in log if isinstance(e.event, pev.ProvisioningProvisioned)
    )
    assert all(a.position > provisioned_at for a in admitted)
    for decider in deciders().values():
        checked, mismatches = verify_decisions(log, decider)
        assert checked > 0 and mismatches == [], decider.name
