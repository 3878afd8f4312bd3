"""``muster apply -f``, ``get``, ``describe`` and ``delete`` against a real intake (HTTP on
loopback, a SQLite store): kubectl's verbs and outputs, every seed manifest applies
cleanly, and a refused apply leaves nothing behind."""

from __future__ import annotations

import asyncio
import contextlib
import csv
import io
import json
import socket
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from muster.cli.main import main
from muster.core.events import NewEvent, StreamAppend
from muster.core.events import node as nev
from muster.core.events import provisioning as pev
from muster.core.events import queue as qev
from muster.core.events import workload as wev
from muster.core.events.workload import WorkloadSubmitted
from muster.core.model import manifests, parse
from muster.core.model.inventory import Gpu
from muster.core.queueing.decider import QueueDecider
from muster.core.views.conditions import rfc3339
from muster.runtime import admin
from tests.api.conftest import CLUSTER, TOKENS, Api, bearer, workload

GPU = "nvidia.com/gpu"

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
SCENARIOS = EXAMPLES / "scenarios"
# Every seed manifest; the DWS queues and the multislice queues before their workloads.
SEED_FILES = [
    SCENARIOS / "dws" / "queues.yaml",
    SCENARIOS / "dws" / "job.yaml",
    SCENARIOS / "dws" / "provisioning-request.yaml",
    SCENARIOS / "multislice" / "kueue.yaml",
    SCENARIOS / "multislice" / "jobsets.yaml",
    SCENARIOS / "multislice" / "preemption.yaml",
    SCENARIOS / "gpu-operator" / "priority-and-quota.yaml",
    SCENARIOS / "gpu-operator" / "model-affinity-pod.yaml",
    SCENARIOS / "hami" / "sample-pod.yaml",
    SCENARIOS / "volcano" / "job-regular.yaml",
    SCENARIOS / "volcano" / "job-supernode.yaml",
]


def test_the_seed_list_is_every_seed_manifest() -> None:
    assert set(SEED_FILES) == set(SCENARIOS.rglob("*.yaml"))


async def cli(
    api: Api, *argv: str, token: str | None = "admin", stdin: str | None = None
) -> tuple[int, str, str]:
    """``muster ARGV`` in a thread (the CLI is synchronous; intake serves on this loop)."""
    server = str(api.http.make_url("")).rstrip("/")
    full = ([f"--token={TOKENS[token]}"] if token else []) + list(argv)
    if argv[0] in ("apply", "get", "describe", "delete", "cancel", "provreq", "explain", "report"):
        full += ["--server", server]

    def go() -> tuple[int, str, str]:
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            old = sys.stdin
            sys.stdin = io.StringIO(stdin or "")
            try:
                main(full)
            except SystemExit as exc:
                return int(exc.code or 0), out.getvalue(), err.getvalue()
            finally:
                sys.stdin = old
        return 0, out.getvalue(), err.getvalue()

    return await asyncio.to_thread(go)


def rows(out: str) -> list[list[str]]:
    return [line.split(None, 2) for line in out.splitlines()[1:]]


LQ = """apiVersion: kueue.x-k8s.io/v1beta1
kind: LocalQueue
metadata: {{name: {name}, namespace: {namespace}}}
spec: {{clusterQueue: cq}}
"""


async def test_every_seed_manifest_applies_cleanly_and_twice_changes_nothing(
    api_: Api, tmp_path: Path
) -> None:
    # The seed's Pods and Volcano Jobs name no queue or Volcano's "default", which Volcano
    # always has; here it is a LocalQueue like any other.
    default = tmp_path / "default-queue.yaml"
    default.write_text(LQ.format(name="default", namespace="default"))
    argv = ["apply", "-f", str(default)] + [a for f in SEED_FILES for a in ("-f", str(f))]
    code, out, err = await cli(api_, *argv)
    assert (code, err) == (0, ""), out
    results = rows(out)
    assert results and all(not r[2].startswith(("refused", "not")) for r in results), out
    kinds = {r[0] for r in results}
    assert {"ClusterQueue", "LocalQueue", "ResourceFlavor", "JobSet", "Job", "Pod"} <= kinds
    assert {"ProvisioningRequest", "AdmissionCheck", "PriorityClass", "ResourceQuota"} <= kinds
    # What was submitted is exactly what the manifests say.
    m = manifests.combine(
        *(manifests.read(list(yaml.safe_load_all(f.read_text()))) for f in SEED_FILES)
    )
    submitted = [
        e.event.spec
        for e in await api_.store.read_all(0, categories={"workload"})
        if isinstance(e.event, WorkloadSubmitted)
    ]
    assert sorted(submitted, key=lambda s: (s.namespace, s.name)) == sorted(
        m.workloads, key=lambda s: (s.namespace, s.name)
    )
    head = await api_.head()
    code, out, _ = await cli(api_, *argv)
    assert code == 0
    assert {r[2] for r in rows(out) if not r[2].startswith("skipped")} == {"unchanged"}
    assert await api_.head() == head


async def test_apply_reads_standard_input(api_: Api) -> None:
    text = (
        (SCENARIOS / "hami" / "sample-pod.yaml")
        .read_text()
        .replace("name: sample-pod", "name: piped-pod")
        .replace("  namespace: default\n", "")
    )
    lq = LQ.format(name="default", namespace="default")
    code, out, err = await cli(api_, "apply", "-f", "-", stdin=lq + "---\n" + text)
    assert code == 0, err
    assert ["Pod", "default/piped-pod", "submitted"] in rows(out)


async def test_a_refused_apply_leaves_nothing(api_: Api) -> None:
    head = await api_.head()
    pod = (SCENARIOS / "hami" / "sample-pod.yaml").read_text()
    lost = pod.replace(
        "name: sample-pod", "name: lost-pod\n  labels: {kueue.x-k8s.io/queue-name: missing}"
    )
    flavor = (
        "apiVersion: kueue.x-k8s.io/v1beta1\nkind: ResourceFlavor\nmetadata: {name: new-flavor}\n"
    )
    code, _, err = await cli(api_, "apply", "-f", "-", stdin=flavor + "---\n" + lost)
    assert code == 1
    assert "Pod default/lost-pod: LocalQueue 'missing' does not exist" in err
    # A tenant may not change queue objects, so nothing of the file is applied.
    code, _, err = await cli(api_, "apply", "-f", "-", stdin=flavor, token="team-a")
    assert code == 1 and "needs the admin scope" in err
    assert await api_.head() == head


async def test_apply_names_an_unreachable_server(api_: Api, tmp_path: Path) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    path = SCENARIOS / "hami" / "sample-pod.yaml"
    out, err = io.StringIO(), io.StringIO()
    with (
        contextlib.redirect_stdout(out),
        contextlib.redirect_stderr(err),
        pytest.raises(SystemExit) as e,
    ):
        main(["apply", "--server", f"http://127.0.0.1:{port}", "-f", str(path)])
    assert e.value.code == 1
    assert f"cannot reach http://127.0.0.1:{port}" in err.getvalue()


async def _submitted(api: Api) -> str:
    lq = LQ.format(name="lq", namespace="team-a")
    job = """apiVersion: batch/v1
kind: Job
metadata: {name: trainer, namespace: team-a, labels: {kueue.x-k8s.io/queue-name: lq}}
spec:
  parallelism: 2
  template:
    spec:
      containers: [{name: c, image: busybox, resources: {requests: {nvidia.com/gpu: 1}}}]
"""
    code, out, err = await cli(api, "apply", "-f", "-", stdin=lq + "---\n" + job)
    assert code == 0, err
    return next(r for r in rows(out) if r[0] == "Job")[1]


async def test_get_in_every_output(api_: Api) -> None:
    await _submitted(api_)
    code, out, _ = await cli(api_, "get", "cq")
    assert code == 0
    header, *lines = out.splitlines()
    assert header.split()[:3] == ["NAME", "COHORT", "STRATEGY"]
    assert lines[0].split()[0] == "cq"
    code, out, _ = await cli(api_, "get", "clusterqueues", "-o", "wide")
    assert "USAGE" in out.splitlines()[0]
    assert "WEIGHTED SHARE" in out.splitlines()[0]  # Kueue's status.fairSharing
    code, out, _ = await cli(api_, "get", "cq", "cq", "-o", "json")
    assert json.loads(out)["status"]["fairSharing"] == {"weightedShare": 0}
    code, out, _ = await cli(api_, "get", "lq", "-A")
    assert out.splitlines()[0].split()[:2] == ["NAMESPACE", "NAME"]
    assert {line.split()[0] for line in out.splitlines()[1:]} == {"team-a", "team-b"}
    code, out, _ = await cli(api_, "get", "workloads", "-n", "team-a", "-o", "json")
    listing = json.loads(out)
    assert listing["kind"] == "List"
    assert [w["name"] for w in listing["items"]] == ["trainer"]
    wid = listing["items"][0]["id"]
    code, out, _ = await cli(api_, "get", "wl", wid, "-o", "yaml")
    assert yaml.safe_load(out)["id"] == wid
    code, out, _ = await cli(api_, "get", "wl", "-n", "team-a", "-o", "wide")
    assert out.splitlines()[0].split()[-5:] == [
        "CLUSTERQUEUE",
        "PRIORITY",
        "PODS",
        "ATTEMPT",
        "MESSAGE",
    ]
    code, out, _ = await cli(api_, "get", "rf", "f", "-o", "json")
    assert json.loads(out)["name"] == "f"
    code, out, err = await cli(api_, "get", "gizmos")
    assert code == 1 and 'resource type "gizmos"' in err
    code, out, err = await cli(api_, "get", "cq", "nope")
    assert code == 1 and "HTTP 404" in err


async def test_a_tenant_sees_only_its_namespaces(api_: Api) -> None:
    await _submitted(api_)
    code, out, _ = await cli(api_, "get", "lq", "-A", token="team-b")
    assert {line.split()[0] for line in out.splitlines()[1:]} == {"team-b"}
    code, _, err = await cli(api_, "get", "wl", "-n", "team-a", token="team-b")
    assert code == 1 and "may not read in namespace team-a" in err
    code, _, err = await cli(api_, "get", "wl", token=None)
    assert code == 1 and "HTTP 401" in err


async def test_describe(api_: Api) -> None:
    await _submitted(api_)
    code, out, _ = await cli(api_, "get", "wl", "-n", "team-a", "-o", "json")
    wid = json.loads(out)["items"][0]["id"]
    for argv in (("describe", "workload", wid), ("describe", wid)):
        code, out, err = await cli(api_, *argv)
        assert code == 0, err
        assert "Name:         trainer" in out and "workload.submitted" in out
    code, out, _ = await cli(api_, "describe", "cq", "cq")
    assert "Spec:" in out and "Pending (first 20" in out and "team-a/trainer" in out
    code, out, _ = await cli(api_, "describe", "lq", "lq", "-n", "team-a")
    assert "pendingWorkloads: 1" in out


async def queue_decides(api: Api) -> None:
    """One decision of the queue's decider over the store, appended as its service would
    (this intake runs alone)."""
    runner = await admin.rebuild(api.store, QueueDecider())
    news = runner.decide()
    await api.store.append(runner.appends(news), producer="queue", recorded_at=time.time())


async def test_explain_now_and_at_a_past_time(api_: Api) -> None:
    """``muster explain --at``: why w2 waited, asked after it was admitted (kueue.md
    §1.3 quota; §1.14 conditions): the shortfall then, with its numbers."""
    ids = {}
    for name, gpus in (("w1", 6), ("w2", 4)):
        body = workload(name, podSets=[{"name": "w", "count": gpus, "requests": {GPU: 1}}])
        resp = await api_.http.post("/v1/workloads", json=body, headers=bearer("team-a"))
        ids[name] = (await resp.json())["id"]
    await queue_decides(api_)  # w1 reserves 6 of 8 GPUs, w2 waits for 2 more
    waited_at = await api_.head()
    moment = (await api_.store.read_all(waited_at - 1))[0].occurred_at
    finish = qev.WorkloadFinished(
        workload_id=ids["w1"], outcome="Succeeded", reason="Succeeded", message="done"
    )
    await api_.store.append(
        runner_free(finish, moment + 5.0), producer="queue", recorded_at=time.time()
    )
    await queue_decides(api_)  # w2 fits now

    code, out, err = await cli(api_, "explain", ids["w2"])
    assert code == 0, err
    assert "Status:        QuotaReserved" in out
    assert ["QuotaReserved", "True", "QuotaReserved"] in [
        line.split()[:3] for line in out.splitlines()
    ]
    for at in (f"@{waited_at}", str(waited_at), rfc3339(moment + 1.0)):
        code, out, err = await cli(api_, "explain", ids["w2"], "--at", at)
        assert code == 0, err
        assert "Status:        Pending" in out and "Reason:        WaitingForQuota" in out
        assert "position 0 in the ClusterQueue" in out
        shortfall = out.split("Quota shortfall:")[1].splitlines()[2].split()
        assert shortfall == [GPU, "f", "4", "8", "6", "2"]
        assert "ClusterQueue None" not in out and "None" not in out
    code, out, err = await cli(api_, "explain", ids["w2"], "--at", f"@{waited_at}", "-o", "json")
    assert json.loads(out)["position"] == waited_at
    code, out, err = await cli(api_, "explain", ids["w2"], "--at", "yesterday")
    assert code == 1 and out == "" and len(err.splitlines()) == 1 and "--at" in err
    code, out, err = await cli(api_, "explain", ids["w2"], "--at", "@999999")
    assert code == 1 and len(err.splitlines()) == 1 and "(at)" in err
    code, out, err = await cli(api_, "explain", ids["w2"], token="team-b")
    assert code == 1 and "may not read in namespace team-a" in err
    # describe shows the same conditions, with absolute times, and no raw None.
    code, out, err = await cli(api_, "describe", ids["w2"])
    assert code == 0, err
    assert "Conditions:" in out and "None" not in out
    assert ["QuotaReserved", "True", "QuotaReserved"] in [
        line.split()[:3] for line in out.splitlines()
    ]
    code, out, err = await cli(api_, "get", "wl", ids["w2"], "-o", "yaml")
    conditions = {c["type"]: c for c in yaml.safe_load(out)["conditions"]}
    assert conditions["QuotaReserved"]["status"] == "True"
    assert conditions["QuotaReserved"]["lastTransitionTime"].endswith("Z")


def runner_free(event: qev.WorkloadFinished, at: float) -> list[Any]:
    """The finish of a workload, as the queue appends it (any version of its stream)."""
    new = NewEvent(
        stream_id=qev.ADMISSION_STREAM,
        event=event,
        occurred_at=at,
        correlation_id=event.workload_id,
    )
    return [StreamAppend(qev.ADMISSION_STREAM, None, [new])]


async def test_delete(api_: Api, tmp_path: Path) -> None:
    await _submitted(api_)
    code, out, _ = await cli(api_, "get", "wl", "-n", "team-a", "-o", "json")
    wid = json.loads(out)["items"][0]["id"]
    code, out, err = await cli(api_, "delete", "wl", wid, token="team-b")
    assert code == 1 and "may not cancel in namespace team-a" in err
    code, out, err = await cli(api_, "delete", "wl", wid, token="team-a")
    assert code == 0, err
    assert f"workload {wid} deleted" in out
    code, out, _ = await cli(api_, "get", "wl", wid, "-o", "json")
    assert json.loads(out)["cancelRequested"] is True
    # delete -f: the workloads a manifest made, found by their namespace/name key.
    path = tmp_path / "jobsets.yaml"
    path.write_text((SCENARIOS / "multislice" / "jobsets.yaml").read_text())
    queue = LQ.format(name="multislice-queue", namespace="default")
    code, out, err = await cli(api_, "apply", "-f", "-", "-f", str(path), stdin=queue)
    assert code == 0, err
    code, out, err = await cli(api_, "delete", "-f", str(path))
    assert code == 0, err
    assert out.count("deleted") == 3 and "JobSet default/multislice-1slice deleted" in out
    code, _, err = await cli(api_, "delete", "cq", "cq")
    assert code == 1 and "cannot be deleted" in err


async def test_provreq_lists_describes_and_deletes(api_: Api) -> None:
    code, _, err = await cli(
        api_, "apply", "-f", str(SCENARIOS / "dws" / "provisioning-request.yaml")
    )
    assert code == 0, err
    code, out, _ = await cli(api_, "provreq")
    assert rows(out)[0][0] == "default"  # NAMESPACE, then the request's name
    assert "pi-request" in out
    # The provisioner's word on it, as its backend appends it: a condition, Kubernetes-style.
    rid = "default/pi-request"
    waiting = pev.ProvisioningWaiting(request_id=rid, reason="Waiting", message="no capacity")
    await _append(api_, pev.request_stream(rid), waiting, time.time())
    code, out, _ = await cli(api_, "provreq", "pi-request")
    assert "Name:         default/pi-request" in out and "Conditions:" in out
    row = next(line.split() for line in out.splitlines() if "Provisioned" in line)
    assert row[:3] == ["Provisioned", "False", "Waiting"] and row[3].endswith("s")  # AGE
    code, out, _ = await cli(api_, "provreq", "default/pi-request", "-o", "json")
    shown = json.loads(out)
    assert shown["id"] == "default/pi-request"
    # Every time in RFC 3339: the conditions' and the request's own (one format, one type).
    (cond,) = shown["conditions"]
    assert cond["lastTransitionTime"].endswith("Z") and shown["createdAt"].endswith("Z")
    assert datetime.fromisoformat(cond["lastTransitionTime"]).timestamp() == pytest.approx(
        time.time(), abs=30
    )
    code, out, _ = await cli(api_, "provreq", "pi-request", "--delete")
    assert code == 0 and "provisioningrequest default/pi-request deleted" in out


async def _append(api: Api, stream: str, event: Any, at: float) -> None:
    """An event as another service would append it (intake folds it from the log)."""
    news = [NewEvent(stream_id=stream, event=event, occurred_at=at)]
    await api.store.append([StreamAppend(stream, None, news)], producer="test", recorded_at=at)


async def test_get_nodes_like_sinfo(api_: Api) -> None:
    """Slurm sinfo -N / kubectl get nodes: pool, zone, state, GPUs used of each model,
    topology; readable by a tenant (cluster-scoped, as Kueue's ResourceFlavors are)."""
    labels = {
        "cloud.google.com/gke-nodepool": "a100-pool",
        "topology.kubernetes.io/zone": "us-a",
        RACK: "r1",
    }
    gpus = tuple(Gpu(uuid=f"GPU-{i}", model="A100", memory_mib=81920, index=i) for i in range(8))
    for name in ("gpu-0", "gpu-1"):
        event = nev.NodeRegistered(
            node=name,
            allocatable={"nvidia.com/gpu": 8, "cpu": 96000, "memory": 680 * 2**30},
            labels=labels,
            gpus=gpus,
        )
        await _append(api_, nev.stream(name), event, time.time())
    await _append(
        api_, nev.stream("gpu-1"), nev.NodeLost(node="gpu-1", message="silent"), time.time()
    )
    # A node the cluster description declares, which no agent has registered yet.
    declared = {
        **CLUSTER,
        "nodes": [{"name": "spare", "allocatable": {GPU: 4}, "labels": {RACK: "r2"}}],
        "topology": {"levels": [RACK, "kubernetes.io/hostname"]},
    }
    await admin.apply_cluster(api_.store, parse.cluster(declared))
    code, out, err = await cli(api_, "get", "nodes", token="team-a")
    assert code == 0, err
    header, *lines = out.splitlines()
    assert header.split() == ["NODE", "POOL", "ZONE", "STATE", "GPUS", "SHARED", "TOPOLOGY"]
    assert lines[0].split() == [
        "gpu-0",
        "a100-pool",
        "us-a",
        "Ready",
        "A100",
        "0/8",
        "-",
        "rack=r1",
    ]
    assert lines[1].split()[3] == "Lost"
    assert lines[2].split() == ["spare", "-", "-", "Declared", GPU, "0/4", "-", "rack=r2"]
    code, out, _ = await cli(api_, "get", "no", "gpu-0", "-o", "yaml")
    node = yaml.safe_load(out)
    assert node["spec"]["allocatable"] == {"cpu": "96", "memory": "680Gi", "nvidia.com/gpu": "8"}
    code, out, _ = await cli(api_, "get", "node", "-o", "wide")
    assert out.splitlines()[0].split()[-3:] == ["INSTANCE-TYPE", "REQUEST", "ALLOCATABLE"]


async def _accounted(api: Api) -> str:
    """A workload of team-a submitted 2 h ago, admitted after 10 min, 2 GPUs for 30 min."""
    t0 = time.time() - 7200
    spec = parse.workload(workload("acct", podSets=[{"count": 2, "requests": {GPU: "1"}}]))
    wid = "acct-1"
    stream = wev.stream(wid)
    await _append(api, stream, wev.WorkloadSubmitted(workload_id=wid, spec=spec), t0)
    reserved = qev.QuotaReserved(
        workload_id=wid,
        cluster_queue="cq",
        flavors={"main": {GPU: "f"}},
        usage={"f": {GPU: 2}},
        node_selectors={},
        attempt=1,
        message="reserved",
    )
    await _append(api, stream, reserved, t0 + 600)
    admitted = qev.WorkloadAdmitted(
        workload_id=wid, cluster_queue="cq", attempt=1, placements={}, message="admitted"
    )
    await _append(api, stream, admitted, t0 + 600)
    done = qev.WorkloadFinished(workload_id=wid, outcome="Succeeded", reason="Done", message="")
    await _append(api, stream, done, t0 + 2400)
    return wid


GPU = "nvidia.com/gpu"
RACK = "topology.example/rack"


async def test_report_in_csv_and_json(api_: Api) -> None:
    """Slurm sacct -o Submit,Start,End,Elapsed --parsable and sreport per account."""
    wid = await _accounted(api_)
    await _submitted(api_)  # team-a's trainer: pending, no GPU-hours yet
    code, out, err = await cli(api_, "report", "-n", "team-a", "-o", "json")
    assert code == 0, err
    found = json.loads(out)
    row = next(r for r in found["workloads"] if r["id"] == wid)
    assert (row["waitSeconds"], row["runSeconds"], row["gpuHours"]) == (600.0, 1800.0, 1.0)
    assert row["startTime"].endswith("Z") and row["status"] == "Succeeded"
    assert found["namespaces"][0]["name"] == "team-a"
    assert found["clusterQueues"][0]["gpuHours"] == 1.0
    code, out, _ = await cli(api_, "report", "-n", "team-a", "-o", "csv")
    table = list(csv.DictReader(out.splitlines()))
    assert {r["name"] for r in table} == {"acct", "trainer"}
    assert next(r for r in table if r["name"] == "acct")["gpuHours"] == "1.0"
    code, out, _ = await cli(api_, "report", "-A", "--by", "namespace", "-o", "csv")
    assert out.splitlines()[0] == "name,workloads,finished,meanWaitSeconds,runSeconds,gpuHours"
    code, out, _ = await cli(api_, "report", "-n", "team-a")
    assert out.splitlines()[0].split()[:2] == ["ID", "NAME"]
    assert "00:30:00" in out and "1.00" in out  # sacct's elapsed, GPU-hours
    # Over the last hour: the workload ended 80 min ago, so it is left out.
    code, out, _ = await cli(api_, "report", "-n", "team-a", "--since=-1h", "-o", "json")
    assert wid not in {r["id"] for r in json.loads(out)["workloads"]}
    code, out, _ = await cli(api_, "report", "-n", "team-a", "--since", "3h", "-o", "json")
    assert wid in {r["id"] for r in json.loads(out)["workloads"]}
    code, _, err = await cli(api_, "report", "-n", "team-b", token="team-a")
    assert code == 1 and "may not read in namespace team-b" in err
    code, _, err = await cli(api_, "report", "--since", "yesterday")
    assert code == 1 and "is not a time" in err and len(err.splitlines()) == 1


async def test_get_workloads_defaults_to_one_namespace_and_takes_any_case(
    api_: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    """kubectl: the current namespace unless -A; statuses in any case."""
    await _submitted(api_)
    code, out, _ = await cli(api_, "get", "wl")
    assert out.strip() == "No resources found."  # namespace default has none
    monkeypatch.setenv("MUSTER_NAMESPACE", "team-a")
    code, out, _ = await cli(api_, "get", "wl")
    assert [line.split()[1] for line in out.splitlines()[1:]] == ["trainer"]
    monkeypatch.delenv("MUSTER_NAMESPACE")
    code, out, _ = await cli(api_, "get", "wl", "-A", "--status", "pending")
    assert code == 0 and out.splitlines()[0].split()[0] == "NAMESPACE"
    assert [line.split()[0] for line in out.splitlines()[1:]] == ["team-a"]
    _, out, _ = await cli(api_, "get", "wl", "-A", "--status", "RUNNING")
    assert out.strip() == "No resources found."


async def test_yaml_shows_fields_and_quantities_as_manifests_write_them(api_: Api) -> None:
    """kubectl get -o yaml: camelCase fields, quantities as written (700, 6Ti)."""
    quota = """apiVersion: v1
kind: ResourceQuota
metadata: {name: compute, namespace: team-a}
spec: {hard: {cpu: "700", memory: 6Ti, nvidia.com/gpu: "4"}}
"""
    code, _, err = await cli(api_, "apply", "-f", "-", stdin=quota)
    assert code == 0, err
    code, out, _ = await cli(api_, "get", "quota", "compute", "-n", "team-a", "-o", "yaml")
    assert yaml.safe_load(out)["spec"]["hard"] == {
        "cpu": "700",
        "memory": "6Ti",
        "nvidia.com/gpu": "4",
    }
    code, out, _ = await cli(api_, "get", "cq", "cq", "-o", "yaml")
    spec = yaml.safe_load(out)["spec"]
    assert spec["queueingStrategy"] == "BestEffortFIFO"
    assert spec["resourceGroups"][0]["flavors"][0]["resources"][0] == {
        "name": GPU,
        "nominalQuota": "8",
    }
    code, out, _ = await cli(api_, "describe", "quota", "compute", "-n", "team-a")
    assert "memory: 6Ti" in out
    code, out, _ = await cli(api_, "get", "quota", "-n", "team-a")
    assert out.splitlines()[1].split()[:2] == ["compute", "cpu=700,memory=6Ti,nvidia.com/gpu=4"]
    await _submitted(api_)
    code, out, _ = await cli(api_, "get", "wl", "-n", "team-a", "-o", "json")
    (item,) = json.loads(out)["items"]
    assert item["submittedAt"].endswith("Z")  # RFC 3339, not seconds since the epoch
