"""``muster sim`` and ``muster apply -f`` with Kubernetes manifests, through the CLI's entry
point: the multislice seed runs on a small TPU cluster, queue objects land in a real SQLite
store (once), and workloads reach intake with ``namespace/name`` as idempotency key."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml

from muster.cli.main import main
from muster.core.model import manifests, parse
from tests.unit.test_manifests import SEEDS

# One pool of TPU v5e hosts (4 chips each) that the seed's flavor selects: 6 hosts, 24 chips.
CLUSTER = """\
name: tpu
region: us-west4
zones: [us-west4-a]
nodePools:
  - name: tpu-v5e
    machineType: ct5lp-hightpu-4t
    allocatable: {google.com/tpu: 4, cpu: 24, memory: 48Gi}
    labels:
      cloud.google.com/gke-tpu-accelerator: tpu-v5-lite-podslice
      cloud.google.com/gke-tpu-topology: 2x4
    maxNodes: 6
"""


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as info:
        main(argv)
    out, err = capsys.readouterr()
    return int(info.value.code or 0), out, err


@pytest.fixture
def files(tmp_path: Path) -> dict[str, Path]:
    paths = {"cluster": tmp_path / "cluster.yaml"}
    paths["cluster"].write_text(CLUSTER)
    for name, text in SEEDS.items():
        path = tmp_path / name.replace("/", "-")
        path.write_text(text)
        paths[name] = path
    return paths


def test_sim_runs_the_multislice_manifests(
    files: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["sim", "--cluster", str(files["cluster"]), "--workloads"]
    argv += [str(files["multislice/kueue.yaml"]), str(files["multislice/jobsets.yaml"])]
    code, out, err = run([*argv, "--json"], capsys)
    assert (code, err) == (0, "")
    lines = [json.loads(line) for line in out.splitlines()]
    summary = lines[-1]["summary"]
    assert summary["workloads"] == 3
    assert summary["outcomes"] == {"Succeeded": 3}
    # 24 chips hold the 3-slice JobSet (24) or the 1- and 2-slice ones (8 + 16), never all:
    # two rounds of `sleep 60`.
    assert summary["makespan_seconds"] == 120.0
    submitted = [e["stream_id"] for e in lines[:-1] if e["type"] == "workload.submitted"]
    assert submitted == [
        "workload-multislice-1slice-0",
        "workload-multislice-2slice-1",
        "workload-multislice-3slice-2",
    ]
    configured = {e["stream_id"] for e in lines[:-1] if e["type"].startswith("config.")}
    assert {
        "config-flavor-vlp-24",
        "config-clusterqueue-cluster-queue",
        "config-localqueue-default.multislice-queue",
    } <= configured

    code, out, _ = run(argv, capsys)
    assert code == 0
    assert "workloads 3, admitted 3" in out


def test_sim_reports_skipped_kinds_on_stderr(
    files: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["sim", "--cluster", str(files["cluster"]), "--workloads"]
    topology = files["cluster"].parent / "topology.yaml"
    topology.write_text(
        "apiVersion: kueue.x-k8s.io/v1beta1\nkind: Topology\nmetadata: {name: default}\n"
        "spec: {levels: [{nodeLabel: kubernetes.io/hostname}]}\n"
    )
    code, out, err = run([*argv, str(topology), "--json"], capsys)
    assert code == 0
    assert f"{topology}: Topology default: not a queueing object, ignored" in err
    assert json.loads(out.splitlines()[-1])["summary"]["workloads"] == 0


def test_sim_refuses_a_bad_manifest_with_its_path(
    files: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(SEEDS["multislice/kueue.yaml"].replace("nominalQuota: 24", "nominalQuota: -1"))
    code, out, err = run(
        ["sim", "--cluster", str(files["cluster"]), "--workloads", str(bad)], capsys
    )
    assert (code, out) == (1, "")
    assert err == (
        f"muster sim: {bad}: doc[1] (ClusterQueue cluster-queue).spec.resourceGroups[0]"
        ".flavors[0].resources[0].nominalQuota: must not be negative, got -1\n"
    )


class Intake(BaseHTTPRequestHandler):
    """Answers like intake: 201 with the workload, or 422 UnknownQueue for queue ``missing``."""

    received: list[tuple[str, str | None, Any]] = []

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.received.append((self.path, self.headers.get("Idempotency-Key"), body))
        answer: dict[str, Any] = {"id": f"id-{len(self.received)}", "status": "Pending"}
        status = 201
        if self.path == "/v1/provisioningrequests":
            answer = {"id": f"{body['namespace']}/{body['name']}", "status": "Accepted"}
        elif body["queueName"] == "missing":
            error = {"code": "UnknownQueue", "message": "no such queue", "field": "queueName"}
            status, answer = 422, {"error": error}
        self._answer(status, json.dumps(answer).encode())

    def _answer(self, status: int, answer: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def intake() -> Iterator[tuple[str, list[tuple[str, str | None, Any]]]]:
    received: list[tuple[str, str | None, Any]] = []
    handler = type("Handler", (Intake,), {"received": received})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", received
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def test_apply_configures_queue_objects_once_and_submits_workloads(
    files: dict[str, Path],
    tmp_path: Path,
    intake: tuple[str, list[tuple[str, str | None, Any]]],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("MUSTER_KAFKA_BOOTSTRAP", raising=False)
    server, received = intake
    store = f"sqlite:///{tmp_path / 'muster.db'}"
    assert run(["migrate", "--store-url", store], capsys)[0] == 0
    argv = ["apply", "--store-url", store, "--server", server]
    argv += ["-f", str(files["dws/queues.yaml"]), "-f", str(files["multislice/jobsets.yaml"])]
    argv += ["-f", str(files["dws/provisioning-request.yaml"])]

    code, out, err = run(argv, capsys)
    assert (code, err) == (0, "")
    rows = [line.split(None, 2) for line in out.splitlines()]
    assert rows == [
        ["KIND", "NAME", "RESULT"],
        ["ResourceFlavor", "default-flavor", "configured"],
        ["ClusterQueue", "dws-cluster-queue", "configured"],
        ["LocalQueue", "default/dws-local-queue", "configured"],
        ["AdmissionCheck", "dws-prov", "configured"],
        ["ProvisioningRequestConfig", "dws-config", "configured"],
        ["JobSet", "default/multislice-1slice", "submitted: id-1 (Pending)"],
        ["JobSet", "default/multislice-2slice", "submitted: id-2 (Pending)"],
        ["JobSet", "default/multislice-3slice", "submitted: id-3 (Pending)"],
        ["ProvisioningRequest", "default/pi-request", "created (Accepted)"],
    ]
    assert [(path, key) for path, key, _ in received] == [
        ("/v1/workloads", "default/multislice-1slice"),
        ("/v1/workloads", "default/multislice-2slice"),
        ("/v1/workloads", "default/multislice-3slice"),
        ("/v1/provisioningrequests", None),
    ]
    expected = manifests.read(list(yaml.safe_load_all(SEEDS["multislice/jobsets.yaml"])))
    assert [parse.workload(body) for _, _, body in received[:3]] == list(expected.workloads)
    request = manifests.read(list(yaml.safe_load_all(SEEDS["dws/provisioning-request.yaml"])))
    assert [parse.provisioning_request(received[3][2])] == [
        r for _, r, _ in request.provisioning_requests()
    ]

    # Again: the store already holds the same queue objects.
    code, out, _ = run(["apply", "--store-url", store, "-f", str(files["dws/queues.yaml"])], capsys)
    assert code == 0
    assert [line.split()[-1] for line in out.splitlines()[1:6]] == ["unchanged"] * 5


def test_apply_fails_when_intake_is_unreachable(
    files: dict[str, Path], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    # Nothing listens on a port that was just closed: the workload is not submitted.
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    code, out, _ = run(
        ["apply", "--server", f"http://127.0.0.1:{port}", "-f", str(files["hami/sample-pod.yaml"])],
        capsys,
    )
    assert code == 1
    (row,) = [line.split(None, 2) for line in out.splitlines()[1:]]
    assert row[:2] == ["Pod", "default/sample-pod"]
    assert row[2].startswith(f"not submitted: http://127.0.0.1:{port}: ")


def test_apply_needs_a_store_for_queue_objects(
    files: dict[str, Path], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("MUSTER_STORE_URL", raising=False)
    code, _, err = run(["apply", "-f", str(files["multislice/kueue.yaml"])], capsys)
    assert code == 1
    assert "give --store-url or set MUSTER_STORE_URL" in err


def test_apply_refuses_a_cluster_description_as_manifests(
    files: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run(["apply", "-f", str(files["cluster"])], capsys)
    assert code == 1
    assert "not Kubernetes manifests (a cluster description goes to --cluster)" in err
    code, _, err = run(["apply"], capsys)
    assert code == 1
    assert "give --cluster FILE" in err


def test_apply_reports_a_workload_intake_refuses(
    files: dict[str, Path],
    tmp_path: Path,
    intake: tuple[str, list[tuple[str, str | None, Any]]],
    capsys: pytest.CaptureFixture[str],
) -> None:
    server, received = intake
    path = tmp_path / "two-pods.yaml"
    missing = SEEDS["hami/sample-pod.yaml"].replace(
        "  name: sample-pod\n",
        "  name: lost-pod\n  labels: {kueue.x-k8s.io/queue-name: missing}\n",
    )
    path.write_text(SEEDS["hami/sample-pod.yaml"] + "---\n" + missing)
    code, out, _ = run(["apply", "--server", server, "-f", str(path)], capsys)
    assert code == 1
    assert [line.split(None, 2) for line in out.splitlines()[1:]] == [
        ["Pod", "default/sample-pod", "submitted: id-1 (Pending)"],
        ["Pod", "default/lost-pod", "refused: HTTP 422: no such queue (queueName)"],
    ]
    assert len(received) == 2


DWS_CLUSTER = """\
name: dws
region: us-central1
zones: [us-central1-a, us-central1-b]
nodePools:
  - name: dws-pool
    machineType: g2-standard-8
    allocatable: {nvidia.com/gpu: 1, cpu: 8}
    taints: [{key: nvidia.com/gpu, value: present, effect: NoSchedule}]
    provisioningDelaySeconds: 60s
    capacity:
      - {at: 0s, zones: {us-central1-a: 3, us-central1-b: 0}}
      - {at: 30m, zones: {us-central1-b: 4}}
"""


def _sim_json(out: str) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    lines = [json.loads(line) for line in out.splitlines()]
    return lines[:-1], lines[-1]["summary"]


def test_sim_runs_s2_and_s2c_from_the_seed_request(
    files: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cluster = tmp_path / "dws-cluster.yaml"
    cluster.write_text(DWS_CLUSTER)
    seed = str(files["dws/provisioning-request.yaml"])
    code, out, err = run(["sim", "--cluster", str(cluster), "--workloads", seed, "--json"], capsys)
    assert (code, err) == (0, "")
    events, _ = _sim_json(out)
    kinds = [(e["type"], e["occurred_at"]) for e in events if e["stream_id"].endswith("pi-request")]
    assert ("provisioning.nodes_creating", 1800.0) in kinds
    (creating,) = [e for e in events if e["type"] == "provisioning.nodes_creating"]
    assert {n["zone"] for n in creating["payload"]["nodes"]} == {"us-central1-b"}
    assert kinds[-2:] == [
        ("provisioning.booking_expired", 1860.0 + 600.0),
        ("provisioning.nodes_deleted", 1860.0 + 600.0),
    ]
    # S2c: the same request deleted (muster.dev/delete-at) while it is Accepted.
    docs = list(yaml.safe_load_all(SEEDS["dws/provisioning-request.yaml"]))
    docs[1]["metadata"]["annotations"] = {"muster.dev/delete-at": "10m"}
    deleted = tmp_path / "deleted.yaml"
    deleted.write_text(yaml.safe_dump_all(docs))
    code, out, _ = run(
        ["sim", "--cluster", str(cluster), "--workloads", str(deleted), "--json"], capsys
    )
    events, _ = _sim_json(out)
    kinds = [e["type"] for e in events if e["stream_id"].endswith("pi-request")]
    assert kinds[-2:] == ["provisioning.delete_requested", "provisioning.cancelled"]
    assert "provisioning.nodes_creating" not in kinds
