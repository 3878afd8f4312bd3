"""Accounting (``muster report``) over random runs: GPU-hours add up across adjacent
ranges (sreport's totals of consecutive periods sum to the whole), every total is the sum
of its rows, and no workload runs longer than it lived or waits a negative time."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from muster.core.views import accounting
from tests.property.test_core_properties import SETTINGS, Scenario, scenarios


def _hours(found: dict[str, object], section: str) -> dict[str, float]:
    rows = found[section]
    assert isinstance(rows, list)
    return {r["name"]: r["gpuHours"] for r in rows}


@settings(SETTINGS, max_examples=30)
@given(scenarios(), st.floats(0.0, 1.0))
def test_gpu_hours_add_up_over_adjacent_ranges(sc: Scenario, split: float) -> None:
    h = sc.run()
    usage = accounting.fold_all(h.log.envelopes).values()
    now = max((e.occurred_at for e in h.log.envelopes), default=0.0) + 1.0
    cut = now * split
    whole = accounting.report(usage, now)
    before = accounting.report(usage, now, until=cut) if cut > 0 else None
    after = accounting.report(usage, now, since=cut)
    for section in ("namespaces", "clusterQueues"):
        parts = _hours(after, section)
        if before is not None:
            for name, hours in _hours(before, section).items():
                parts[name] = parts.get(name, 0.0) + hours
        for name, hours in _hours(whole, section).items():
            assert parts.get(name, 0.0) == pytest.approx(hours, abs=1e-3)


@settings(SETTINGS, max_examples=30)
@given(scenarios())
def test_totals_are_sums_of_rows_and_times_are_sane(sc: Scenario) -> None:
    h = sc.run()
    now = max((e.occurred_at for e in h.log.envelopes), default=0.0)
    found = accounting.report(accounting.fold_all(h.log.envelopes).values(), now)
    rows = found["workloads"]
    for section, key in (("namespaces", "namespace"), ("clusterQueues", "clusterQueue")):
        for total in found[section]:
            mine = [r for r in rows if (r[key] or "") == total["name"]]
            assert total["workloads"] == len(mine)
            assert total["gpuHours"] == pytest.approx(sum(r["gpuHours"] for r in mine), abs=1e-3)
    for r in rows:
        end = r["endTime"] if r["endTime"] is not None else now
        assert 0.0 <= r["runSeconds"] <= end - r["submitTime"] + 1e-6
        assert r["waitSeconds"] is None or r["waitSeconds"] >= 0.0
