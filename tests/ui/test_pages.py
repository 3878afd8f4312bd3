"""The web UI in a real browser (Debian's chromium driven by Playwright) against the
running stack: a cohort of two ClusterQueues on two nodes of four A100s, a workload
borrowing, a shared-GPU pod, one pending for quota, one preempted by a reclaim, and a
standalone ProvisioningRequest; every page is loaded and checked for what a person would
see, the time slider shows the cluster before the preemption, and live mode shows a new
workload without a reload. Screenshots are kept in ``tests/ui/artifacts/``.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import pytest

from muster.cli.http import call
from muster.core.model import parse
from muster.runtime import admin
from muster.runtime.stack import Stack
from tests.ui.browser import ARTIFACTS, CHROMIUM, browser_or_skip, expect

pytestmark = [pytest.mark.e2e, pytest.mark.browser]

GPU = "nvidia.com/gpu"
RFC3339 = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{3})?Z")
QUOTA = [
    {"name": GPU, "nominalQuota": 4},
    {"name": "nvidia.com/gpucores", "nominalQuota": 400},
    {"name": "nvidia.com/gpumem", "nominalQuota": 4 * 81920},
]


def _queue(name: str, reclaim: str) -> dict[str, Any]:
    return {
        "name": name,
        "cohort": "lab",
        "preemption": {"reclaimWithinCohort": reclaim},
        "resourceGroups": [
            {
                "coveredResources": [q["name"] for q in QUOTA],
                "flavors": [{"name": "a100", "resources": QUOTA}],
            }
        ],
    }


CLUSTER = {
    "name": "ui",
    "region": "us-central1",
    "zones": ["us-central1-a"],
    "nodePools": [
        {
            "name": "dws-pool",
            "machineType": "g2-standard-8",
            "allocatable": {"cpu": 8, "memory": "32Gi", GPU: 1},
            "labels": {"cloud.google.com/gke-accelerator": "nvidia-l4"},
            "provisioningDelaySeconds": 0.5,
        }
    ],
    "resourceFlavors": [{"name": "a100"}],
    "clusterQueues": [_queue("research", "Never"), _queue("prod", "Any")],
    "localQueues": [
        {"namespace": "research", "name": "lq", "clusterQueue": "research"},
        {"namespace": "prod", "name": "lq", "clusterQueue": "prod"},
    ],
    "nodes": [
        {
            "name": "gpu",
            "count": 2,
            "allocatable": {GPU: 4, "cpu": 32, "memory": "256Gi"},
            "gpus": {"count": 4, "model": "NVIDIA-A100-SXM4-80GB", "memory": "80Gi", "split": 4},
        }
    ],
}
REQUEST = """
apiVersion: v1
kind: PodTemplate
metadata: {name: pi-template, namespace: default}
template:
  spec:
    nodeSelector: {cloud.google.com/gke-nodepool: dws-pool}
    containers:
      - name: pi
        image: perl
        resources: {requests: {cpu: 700m, nvidia.com/gpu: 1}}
---
apiVersion: autoscaling.x-k8s.io/v1beta1
kind: ProvisioningRequest
metadata: {name: pi-request, namespace: default}
spec:
  provisioningClassName: queued-provisioning.gke.io
  podSets: [{count: 2, podTemplateRef: {name: pi-template}}]
"""


def _workload(name: str, namespace: str, pods: int, requests: dict[str, int]) -> dict[str, Any]:
    return {
        "name": name,
        "namespace": namespace,
        "queueName": "lq",
        "podSets": [{"name": "main", "count": pods, "requests": requests}],
        "runtime": {"durationSeconds": 3600},
    }


@dataclass
class Scene:
    stack: Stack
    ids: dict[str, str]  # workload name -> id
    before_urgent: int  # the log's head just before "urgent" was submitted

    @property
    def url(self) -> str:
        return self.stack.url()

    def get(self, path: str) -> Any:
        return call("GET", f"{self.url}{path}")

    def submit(self, body: dict[str, Any]) -> str:
        wid = str(call("POST", f"{self.url}/v1/workloads", body)["id"])
        self.ids[body["name"]] = wid
        return wid

    def status(self, name: str) -> dict[str, Any]:
        return dict(self.get(f"/v1/workloads/{self.ids[name]}"))


def _wait(what: str, check: Callable[[], Any], timeout: float = 90.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        found = check()
        if found:
            return found
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} did not happen within {timeout}s")
        time.sleep(0.2)


@pytest.fixture(scope="module")
def scene(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Scene]:
    browser_or_skip()
    env = {"MUSTER_HEARTBEAT_SECONDS": "0.2"}
    with Stack(tmp_path_factory.mktemp("ui-stack"), poll_seconds=0.3, extra_env=env) as stack:
        asyncio.run(
            admin.configure(stack.store_url, parse.cluster(CLUSTER), stack.broker.bootstrap)
        )
        s = Scene(stack, {}, 0)
        call("POST", f"{s.url}/v1/apply", raw=REQUEST.encode(), content_type="application/yaml")
        s.submit(_workload("train-big", "research", 6, {GPU: 1}))
        _wait("train-big to run", lambda: s.status("train-big")["status"] == "Running")
        shared = {GPU: 1, "nvidia.com/gpucores": 30, "nvidia.com/gpumem": 10240}
        s.submit(_workload("notebook", "prod", 1, shared))
        _wait("notebook to run", lambda: s.status("notebook")["status"] == "Running")
        s.submit(_workload("wait-quota", "research", 1, {GPU: 2}))
        _wait(
            "wait-quota's pending reason",
            lambda: s.status("wait-quota").get("queue", {}).get("reason") not in (None, "Pending"),
        )
        s.before_urgent = int(s.get("/v1/ui/clock")["head"])
        s.submit(_workload("urgent", "prod", 3, {GPU: 1}))
        _wait("urgent to run", lambda: s.status("urgent")["status"] == "Running")
        _wait("train-big evicted", lambda: s.status("train-big")["status"] == "Pending")
        _wait(
            "wait-quota to run in the room", lambda: s.status("wait-quota")["status"] == "Running"
        )
        yield s


@pytest.fixture(scope="module")
def browser(scene: Scene) -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM)
        try:
            yield b
        finally:
            b.close()


@pytest.fixture
def page(browser: Any, request: pytest.FixtureRequest) -> Iterator[Any]:
    """A fresh tab; its screenshot is kept as a test artifact, pass or fail."""
    tab = browser.new_page(viewport={"width": 1400, "height": 1000})
    try:
        yield tab
    finally:
        ARTIFACTS.mkdir(exist_ok=True)
        shot = ARTIFACTS / f"{request.node.name}.png"
        tab.screenshot(path=str(shot), full_page=True)
        print(f"screenshot: {shot}")
        tab.close()


def _open(page: Any, scene: Scene, route: str) -> None:
    page.goto(f"{scene.url}/ui/#/{route}")
    page.wait_for_selector("#main table, #main .card, #main h1")


def test_overview_shows_queues_usage_and_borrowing(scene: Scene, page: Any) -> None:
    """kueue.md §1.3 (cohorts, borrowing): after the reclaim, prod holds its nominal 4
    GPUs with urgent's 3 and notebook's share; research's train-big was preempted and
    wait-quota (2) runs within research's own quota."""
    _open(page, scene, "queues")
    prod = page.get_by_test_id("cq-prod")
    research = page.get_by_test_id("cq-research")
    expect(prod).to_contain_text("prod")
    expect(research).to_contain_text("research")
    api = {q["name"]: q for q in scene.get("/v1/ui/queues")["clusterQueues"]}
    for name, card in (("prod", prod), ("research", research)):
        gpu = next(r for r in api[name]["resources"] if r["resource"] == GPU)
        row = card.get_by_test_id(f"quota-a100-{GPU}")
        expect(row).to_contain_text(f"{gpu['text']['usage']} / 4 used")
    assert next(r for r in api["prod"]["resources"] if r["resource"] == GPU)["usage"] == 4
    expect(page.get_by_test_id("cohort-lab")).to_contain_text("members: prod, research")


def test_pending_page_shows_positions_and_reasons(scene: Scene, page: Any) -> None:
    """Kueue's visibility API (kueue.md §1.9): each pending workload with its position and
    current reason, as the API answers."""
    items = _wait("a pending workload", lambda: scene.get("/v1/ui/pending")["items"])
    _open(page, scene, "pending")
    table = page.get_by_test_id("pending")
    for item in items:
        expect(table).to_contain_text(item["name"])
        expect(table).to_contain_text(item["reason"])
        expect(table).to_contain_text(item["message"])
    assert "train-big" in {i["name"] for i in items}


def test_workload_page_shows_timeline_conditions_and_pods(scene: Scene, page: Any) -> None:
    """A workload's life: submitted, quota reserved, admitted, evicted by the reclaim."""
    _open(page, scene, f"workload/{scene.ids['train-big']}")
    timeline = page.get_by_test_id("timeline")
    for kind in ("workload.submitted", "admission.quota_reserved", "admission.evicted"):
        expect(timeline).to_contain_text(kind)
    conditions = page.get_by_test_id("conditions")
    expect(conditions.locator("tr", has_text="Evicted")).to_contain_text("True")
    expect(conditions.locator("tr", has_text="QuotaReserved")).to_contain_text("False")
    expect(page.get_by_test_id("workload-status")).to_contain_text("Pending")
    _open(page, scene, f"workload/{scene.ids['urgent']}")
    pods = page.get_by_test_id("pods")
    expect(pods).to_contain_text("main-0")
    expect(pods).to_contain_text("gpu-")  # the node each pod is placed on
    expect(pods).to_contain_text("Running")
    started = page.get_by_test_id("timeline").locator("li", has_text="node.pod_started")
    expect(started.first).to_contain_text("on gpu-")
    reserved = page.get_by_test_id("conditions").locator("tr", has_text="QuotaReserved")
    expect(reserved).to_contain_text("Quota reserved in ClusterQueue prod")
    expect(reserved).to_contain_text(RFC3339)  # the time GET gives, as it gives it


def test_nodes_page_shows_gpus_and_shared_slices(scene: Scene, page: Any) -> None:
    """HAMi (peers.md §3): a shared pod's slice shows on the GPU it shares."""
    _open(page, scene, "nodes")
    expect(page.get_by_test_id("node-gpu-0")).to_contain_text("NVIDIA-A100-SXM4-80GB")
    expect(page.get_by_test_id("node-gpu-1")).to_contain_text("GPU 3")
    slice_ = page.locator(".slice", has_text="notebook")
    expect(slice_).to_contain_text("30%")
    expect(slice_).to_contain_text("10240 MiB")
    # The summary get nodes shows (views/nodes.py): GPUs used of each model, shared slices.
    nodes = {n["name"]: n for n in scene.get("/v1/nodes")["items"]}
    for name in ("gpu-0", "gpu-1"):
        (acc,) = nodes[name]["status"]["accelerators"]
        summary = page.get_by_test_id(f"accelerators-{name}")
        expect(summary).to_contain_text(f"NVIDIA-A100-SXM4-80GB {acc['used']}/4 used")
        shared = nodes[name]["status"]["sharedSlices"]
        if shared["pods"]:
            expect(summary).to_contain_text(f"{shared['pods']} pod(s) sharing")


def test_nodes_page_shows_a_provisioned_nodes_gpus(scene: Scene, page: Any) -> None:
    """GKE DWS (peers.md §4.3): the nodes a ProvisioningRequest brought up show their GPUs
    (model, used of total) and their own state, as ``get nodes`` shows them."""
    _wait(
        "the request's nodes to register",
        lambda: [
            n
            for n in scene.get("/v1/nodes")["items"]
            if n["spec"]["provisioningRequest"] == "default/pi-request"
            and n["status"]["state"] == "Ready"
        ],
    )
    _open(page, scene, "nodes")
    cards = page.locator(".card", has_text="request default/pi-request")
    expect(cards).to_have_count(2)  # two pods, one GPU a node
    for i in range(2):
        expect(cards.nth(i)).to_contain_text("nvidia-l4 0/1 used")
        expect(cards.nth(i)).to_contain_text("Ready")
        expect(cards.nth(i)).to_contain_text("nvidia.com/gpu 1")  # allocatable
    page.screenshot(path=str(ARTIFACTS / "nodes_provisioned.png"), full_page=True)


def test_provisioning_page_shows_conditions(scene: Scene, page: Any) -> None:
    """GKE's ProvisioningRequest conditions (Accepted, Provisioned) as the API shows them."""
    _wait(
        "the request to be provisioned",
        lambda: (
            scene.get("/v1/namespaces/default/provisioningrequests/pi-request")["status"]
            == "Provisioned"
        ),
    )
    _open(page, scene, "requests")
    card = page.get_by_test_id("request-default/pi-request")
    expect(card).to_contain_text("Provisioned")
    expect(card).to_contain_text("Accepted")
    # The same condition type and time format as a workload's (RFC 3339, not epoch seconds).
    expect(card.locator("tr", has_text="Accepted")).to_contain_text(RFC3339)
    expect(card).to_contain_text(re.compile(r"created \d{4}-\d\d-\d\dT"))


def test_time_slider_shows_the_past(scene: Scene, page: Any) -> None:
    """Moved to before urgent's submission, the workloads page has no urgent, train-big
    still runs and research borrows 2 GPUs; back to Live, urgent is there again."""
    _open(page, scene, "workloads")
    table = page.get_by_test_id("workloads")
    expect(table).to_contain_text("urgent")
    page.locator("#slider").fill(str(scene.before_urgent))
    expect(page.locator("#moment")).to_contain_text(f"As of position {scene.before_urgent}")
    expect(page.locator("#banner")).to_contain_text("as it was")
    expect(table).not_to_contain_text("urgent")
    expect(table.locator("tr", has_text="train-big")).to_contain_text("Running")
    page.get_by_role("link", name="Queues").click()
    research = page.get_by_test_id("cq-research")
    expect(research).to_contain_text("6 / 4 used, borrowing 2")
    page.screenshot(path=str(ARTIFACTS / "time_slider_queues_before_urgent.png"), full_page=True)
    page.locator("#live").click()
    page.get_by_role("link", name="Workloads").click()
    expect(page.get_by_test_id("workloads")).to_contain_text("urgent")
    # A time typed in: a moment before urgent's submission hides it again.
    submitted = scene.status("urgent")["submittedAt"]
    before = datetime.fromtimestamp(submitted - 0.001, UTC).isoformat().replace("+00:00", "Z")
    page.fill("#time-input", before)
    page.get_by_role("button", name="Go to time").click()
    expect(page.locator("#moment")).to_contain_text("As of position")
    expect(page.get_by_test_id("workloads")).not_to_contain_text("urgent")
    expect(page.get_by_test_id("workloads")).to_contain_text("wait-quota")
    moved_to = int(page.locator("#slider").input_value())  # the slider shows where it went
    assert 0 < moved_to <= scene.before_urgent


def test_live_mode_shows_a_new_workload_without_reload(scene: Scene, page: Any) -> None:
    """Live: the page follows the watch stream and redraws when something happens."""
    _open(page, scene, "workloads")
    page.evaluate("window.__same_page = true")
    scene.submit(_workload("late-arrival", "research", 1, {GPU: 1}))
    expect(page.get_by_test_id("workloads")).to_contain_text("late-arrival", timeout=20_000)
    assert page.evaluate("window.__same_page") is True  # not reloaded
