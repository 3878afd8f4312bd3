"""``muster sim --summary`` and the trace figures (JCT, waits, utilisation, fairness,
preemption), on small runs whose figures can be worked out by hand."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from muster.cli.main import main
from muster.core.model import parse
from muster.core.sim.figures import Job, figures, job_figures
from muster.core.sim.harness import Submission, build
from tests.unit.harness_inputs import GPU, gpu_job, gpu_node_cluster

REPRO = Path(__file__).parents[2] / ".." / "shared" / "repro" / "preemption-livelock"


def _cluster() -> dict[str, object]:
    return gpu_node_cluster("two", nodes=1, gpus=2, nominal=2, namespaces=("a", "b"))


def _job(name: str, ns: str, at: float, gpus: int, seconds: float) -> Submission:
    return gpu_job(name, at, 1, gpus, seconds, namespace=ns)


def test_figures_of_a_run_worked_out_by_hand() -> None:
    # a: 2 GPUs for 10 s from t=0. b: 2 GPUs for 10 s, submitted at t=0, waits until 10.
    # c: 1 GPU for 10 s, submitted at 20: alone. Arrival window 0..20 on 2 GPUs: 40 GPU-s,
    # of which a holds 20, b 20 (10..20): 100 %.
    h = build(
        parse.cluster(_cluster()),
        [_job("a", "a", 0, 2, 10), _job("b", "b", 0, 2, 10), _job("c", "b", 20, 1, 10)],
    )
    h.run()
    found = figures(h.log.envelopes)
    assert (found["jobs"], found["finished"]) == (3, 3)
    assert found["wait_seconds"]["mean"] == pytest.approx(10 / 3, abs=0.1)
    assert found["jct_seconds"]["p99"] == 20.0
    assert found["utilisation"] == 1.0
    assert found["namespaces"]["a"] == {
        "jobs": 1,
        "mean_wait": 0.0,
        "mean_jct": 10.0,
        "slowdown": 1.0,
        "slowdown_of_means": 1.0,
        "mean_pending": 0.0,
    }
    assert found["namespaces"]["b"]["slowdown"] == 1.5  # (20/10 + 10/10) / 2
    assert found["jain_slowdown"] == pytest.approx(2.5**2 / (2 * (1 + 1.5**2)), abs=0.001)
    assert found["evictions"] == 0
    assert (found["gpu_seconds"], found["preemption_lost_share"]) == (50.0, 0.0)
    # Over a fixed horizon of 0..40 the same 50 GPU-s are 50 / 80.
    assert figures(h.log.envelopes, horizon=(0, 40))["utilisation"] == 0.625


def test_job_figures_of_a_replay_made_outside_the_harness() -> None:
    """The same figures from jobs' own times (what bench/oracle.py's replays give): one
    job never admitted counts in the jobs, not in the waits or JCTs."""
    jobs = [
        Job("a", submitted=0, admitted=0, finished=10, ran=10),
        Job("b", submitted=0, admitted=10, finished=20, ran=10),
        Job("b", submitted=5, admitted=None, finished=None, ran=0),
    ]
    found = job_figures(jobs, [(0, 10, 2), (10, 20, 1)], capacity=2, horizon=(0, 20))
    assert (found["jobs"], found["finished"]) == (3, 2)
    assert (found["wait_seconds"]["mean"], found["jct_seconds"]["mean"]) == (5.0, 15.0)
    assert (found["utilisation"], found["gpu_seconds"]) == (0.75, 30.0)
    b = {"jobs": 2, "mean_wait": 10.0, "mean_jct": 20.0, "slowdown": 2.0}
    assert found["namespaces"]["b"] == b | {"slowdown_of_means": 2.0, "mean_pending": 10.0}
    assert found["pending_seconds"]["mean"] == 5.0  # (0 + 10) / 2: JCT less time held
    assert found["jain_slowdown"] == pytest.approx(9 / (2 * 5), abs=0.001)


def test_a_namespaces_slowdown_of_means_weighs_jobs_by_their_run_time() -> None:
    """Issue 19 measured Jain over each VC's mean JCT / mean run time: a 1-second job that
    waited 99 s makes the mean slowdown 50.5, the slowdown of means 55 / 5.5 = 10."""
    jobs = [Job("c", 0, 99, 100, 1), Job("c", 0, 0, 10, 10), Job("d", 0, 0, 10, 10)]
    found = job_figures(jobs, [], capacity=0)
    assert found["namespaces"]["c"]["slowdown"] == 50.5
    assert found["namespaces"]["c"]["slowdown_of_means"] == 10.0
    assert found["jain_slowdown_of_means"] == pytest.approx(11**2 / (2 * 101), abs=0.001)


def test_sim_summary_prints_figures_and_no_event_log(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["sim", "--summary", "--cluster", str(REPRO / "cluster.yaml")]
    argv += ["--workloads", str(REPRO / "workloads.yaml")]
    with pytest.raises(SystemExit) as info:
        main(argv)
    out, _ = capsys.readouterr()
    assert info.value.code in (0, None)
    assert "admission.quota_reserved" not in out  # no event log
    assert "job completion (s)" in out and "queueing delay (s)" in out
    assert "evictions 2" in out and "at most 1 per victim per preemptor" in out
    assert "NAMESPACE" in out and "small" in out

    with pytest.raises(SystemExit):
        main([*argv, "--json"])
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 1
    report = json.loads(lines[0])
    assert report["figures"]["evictions"] == 2
    assert report["summary"]["outcomes"] == {"Succeeded": 6}


def test_sim_reads_a_json_workload_list(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "c.json").write_text(json.dumps(_cluster()))
    items = [
        {
            "at": 0,
            "workload": {
                "name": "j",
                "namespace": "a",
                "queueName": "q",
                "podSets": [{"name": "w", "count": 1, "requests": {GPU: 1}}],
            },
        }
    ]
    (tmp_path / "w.json").write_text(json.dumps({"workloads": items}))
    with pytest.raises(SystemExit):
        main(
            [
                "sim",
                "--summary",
                "--json",
                "--cluster",
                str(tmp_path / "c.json"),
                "--workloads",
                str(tmp_path / "w.json"),
            ]
        )
    assert json.loads(capsys.readouterr().out)["summary"]["outcomes"] == {"Succeeded": 1}
    (tmp_path / "bad.json").write_text("{")
    with pytest.raises(SystemExit) as info:
        main(
            [
                "sim",
                "--cluster",
                str(tmp_path / "c.json"),
                "--workloads",
                str(tmp_path / "bad.json"),
            ]
        )
    assert info.value.code == 1
    assert "cannot read" in capsys.readouterr().err


def test_sim_summary_shows_each_cluster_queues_weighted_share(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Kueue's status.fairSharing.weightedShare, at the end of the run (--until: then)."""

    def queue(name: str) -> dict[str, object]:
        quota = [{"name": "f", "resources": [{"name": GPU, "nominalQuota": 4}]}]
        groups = [{"coveredResources": [GPU], "flavors": quota}]
        return {"name": name, "cohort": "co", "resourceGroups": groups}

    cluster = {
        "name": "c",
        "zones": ["z"],
        "nodes": [{"name": "n", "count": 1, "allocatable": {GPU: 8}}],
        "resourceFlavors": [{"name": "f"}],
        "clusterQueues": [queue("a"), queue("b")],
        "localQueues": [{"namespace": "ns", "name": "q", "clusterQueue": "a"}],
    }
    job: dict[str, object] = {
        "name": "j",
        "namespace": "ns",
        "queueName": "q",
        "podSets": [{"count": 1, "requests": {GPU: 6}}],
    }
    job["runtime"] = {"durationSeconds": 1000}
    (tmp_path / "c.json").write_text(json.dumps(cluster))
    (tmp_path / "w.json").write_text(json.dumps({"workloads": [{"at": 0, "workload": job}]}))
    argv = ["sim", "--summary", "--cluster", str(tmp_path / "c.json")]
    argv += ["--workloads", str(tmp_path / "w.json"), "--until", "100s"]
    with pytest.raises(SystemExit):
        main([*argv, "--json"])
    # a borrows 2 of the 8 GPUs its cohort could lend: 250 per mille.
    summary = json.loads(capsys.readouterr().out)["summary"]
    assert summary["weighted_shares"] == {"a": 250, "b": 0}
    with pytest.raises(SystemExit):
        main(argv)
    assert "weighted share (DRS, per mille) per ClusterQueue at the end: a 250, b 0" in (
        capsys.readouterr().out
    )
