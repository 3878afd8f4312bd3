"""``muster sim`` with Kubernetes manifests, through the CLI's entry point: the multislice
seed runs on a small TPU cluster. (``muster apply`` against a real intake: tests/api/test_cli.py)"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from muster.cli.main import main
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


def test_apply_refuses_a_cluster_description_as_manifests(
    files: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run(["apply", "-f", str(files["cluster"])], capsys)
    assert code == 1
    assert "not Kubernetes manifests (a cluster description goes to --cluster)" in err
    code, _, err = run(["apply"], capsys)
    assert code == 1
    assert "give --cluster FILE" in err



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
