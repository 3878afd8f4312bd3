"""bench.traces' target check (issue 19, "Must reach") on hand-made figures: what is met,
what is missed, and the tenant ratio against StrictFIFO's waits."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from bench import trace_report
from bench.trace_report import check, tenant_ratios


def row(jct: float, jain: float = 1.0, lost: float = 0.0, **waits: float) -> dict[str, Any]:
    return {
        "jct_seconds": {"mean": jct},
        "wait_seconds": {"mean": 0.0, "p99": 0.0},
        "utilisation": 0.5,
        "jain_slowdown_of_means": jain,
        "jain_slowdown": 0.1,
        "evictions": 0,
        "preemption_lost_share": lost,
        "namespaces": {
            ns: {"jobs": 1, "mean_wait": w, "slowdown": 1.0, "slowdown_of_means": 1.0}
            for ns, w in waits.items()
        },
        "wall": 1.0,
        "events": 10,
    }


def test_a_tenants_wait_is_compared_with_its_strict_fifo_wait() -> None:
    rows = {"strict": row(30_000, a=100, b=0, c=0), "x": row(1, a=250, b=0, c=5)}
    assert tenant_ratios(rows, "x") == {"a": 2.5, "b": 1.0, "c": float("inf")}
    assert tenant_ratios({"x": rows["x"]}, "x") == {}  # no strict row: no ratio


def test_a_preempted_tenants_waits_after_its_first_admission_count_too() -> None:
    """Under a preemptive policy the first wait can be 0 while the job waits again after
    each preemption: the ratio is over the time pending (JCT less the time holding quota)."""
    rows = {"strict": row(30_000, a=100), "las": row(1, a=0)}
    rows["las"]["namespaces"]["a"]["mean_pending"] = 300.0
    assert tenant_ratios(rows, "las") == {"a": 3.0}


def test_philly_is_met_only_by_a_configuration_meeting_all_four() -> None:
    rows = {
        "oracle-sjf": row(13_954, a=3_000),
        "strict": row(34_000, a=20_000, b=1_000),
        "fast-unfair": row(12_000, jain=0.5, a=100, b=100),
        "fast-lossy": row(12_500, lost=0.03, a=100, b=100),
        "starves-b": row(12_800, a=100, b=2_001),
        "fair": row(14_000, a=100, b=100),
    }
    lines = check({"philly": rows})
    assert lines[-1] == "philly: MISSED (no configuration meets all four)"
    assert "oracle-sjf" not in lines[1]  # references are not candidates
    rows["good"] = row(12_999, jain=0.9, lost=0.02, a=100, b=2_000)
    assert check({"philly": rows})[-1] == "philly: met by good"


@pytest.mark.parametrize(("jct", "verdict"), [(800.0, "itp: met"), (801.0, "itp: MISSED")])
def test_itp_compares_the_best_configuration_with_besteffort(jct: float, verdict: str) -> None:
    rows = {"oracle-sjf": row(10, x=0), "besteffort": row(1_000, x=0), "y": row(jct, x=0)}
    lines = check({"itp": rows})
    assert lines[-1] == verdict
    assert "best configuration y" in lines[0]


def test_tables_flag_a_tenant_waiting_over_twice_its_fifo_wait() -> None:
    rows = {"strict": row(30_000, a=100), "x": row(1, a=201)}
    assert "2.01x a !" in trace_report.table(rows)
    assert "201 (2.01x!) / 1.00" in trace_report.tenant_table(rows)


def test_a_trace_job_the_cluster_can_never_hold_is_refused_and_counted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ITP's columns, no tenant column: every job is the trace's one tenant. On 2 nodes,
    24 GPUs (over the cluster) and 12 (over one node, not whole nodes) are refused."""
    from bench import traces

    (tmp_path / "t.csv").write_text(
        "job_id,submission_time,duration,num_gpu\n"
        "a,0,10,1\nb,1,10,16\nc,2,10,24\nd,3,10,12\n"
    )
    monkeypatch.setattr(traces, "TRACES", tmp_path)
    trace = traces.Trace("t", "t.csv", 2, 100.0, traces.TRACE_SET["itp"].columns, None)
    jobs, refused = traces.read(trace, None)
    assert refused == 2
    kept = [(j["job_id"], j["num_gpus"], j["vc"]) for j in jobs]
    assert kept == [("a", "1", "t"), ("b", "16", "t")]
    assert traces.read(trace, 1) == ([jobs[0]], 0)
