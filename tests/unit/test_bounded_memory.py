"""A service that runs for months must not grow with its history: folding twice as many
workloads leaves every structure of the runners and of the queue, provisioner and node
agent states as large as it was (bounds lowered so that a short log reaches them), and
the bounds change no decision: the log is the one the unbounded deciders write."""

from __future__ import annotations

from typing import Any

import pytest

from muster.core import inputs
from muster.core.model import parse
from muster.core.nodes import state as ns
from muster.core.queueing import state as qs
from muster.core.runner import DeciderRunner
from muster.core.sim.harness import Harness, build
from tests.unit.test_core_runner import CLUSTER, GPU


def _run(n: int) -> Harness:
    """``n`` workloads one after another, each on a node provisioned for it, some failing,
    some cancelled."""
    h = build(parse.cluster(CLUSTER), [])
    for i in range(n):
        doc = {
            "name": f"w{i}",
            "queueName": "lq",
            "podSets": [{"name": "w", "count": 1 + i % 2, "requests": {GPU: 8}}],
            "runtime": {"durationSeconds": 5 + i % 3, "exitCode": int(i % 5 == 4)},
        }
        h.schedule(inputs.submission(f"w{i}", parse.workload(doc), 20.0 * i), producer="intake")
        if i % 7 == 6:
            h.schedule(inputs.cancellation(f"w{i}", 20.0 * i + 1), producer="intake")
    h.run()
    return h


def _sizes(h: Harness) -> dict[str, int]:
    """Every sized structure of each runner's state (one level into nested ones), and its
    stream versions."""
    out: dict[str, int] = {}
    for runner in h.runners:
        name = runner.decider.name
        out[f"{name}.versions"] = len(runner.versions)
        for field, value in _fields(runner.state):
            if hasattr(value, "__len__"):
                out[f"{name}.{field}"] = len(value)
            for inner, deeper in _fields(value):
                if hasattr(deeper, "__len__"):
                    out[f"{name}.{field}.{inner}"] = len(deeper)
    return out


def _fields(obj: Any) -> list[tuple[str, Any]]:
    names = getattr(type(obj), "__slots__", ()) or list(getattr(obj, "__dict__", {}))
    return [(n, getattr(obj, n)) for n in names if hasattr(obj, n)]


def _story(h: Harness) -> list[tuple[str, int, str, float]]:
    return [(e.stream_id, e.stream_version, e.type, e.occurred_at) for e in h.log.envelopes]


@pytest.fixture
def low_bounds(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(DeciderRunner, "versions_kept", 8)
    monkeypatch.setattr(qs, "ENDED_KEPT", 4)
    monkeypatch.setattr(ns, "GONE_KEPT", 4)


def test_twice_the_workloads_grow_no_structure(low_bounds: None) -> None:
    n = 40
    once, twice = _run(n), _run(2 * n)
    queue = twice.runners[0].state
    assert sum(queue.ended_counts.values()) == 2 * n  # all counted, the latest 4-8 kept
    assert 4 <= len(queue.ended) <= 8 and not queue.workloads
    small, large = _sizes(once), _sizes(twice)
    versions = {k for k in large if k.endswith(".versions")}  # between 8 and 16, by turns
    grew = {k: (small[k], large[k]) for k in small.keys() - versions if large[k] > small[k]}
    assert not grew, grew
    assert max(large[k] for k in versions) <= 16


def test_the_bounds_change_no_decision(monkeypatch: pytest.MonkeyPatch) -> None:
    unbounded = _run(30)
    monkeypatch.setattr(DeciderRunner, "versions_kept", 2)
    monkeypatch.setattr(qs, "ENDED_KEPT", 1)
    monkeypatch.setattr(ns, "GONE_KEPT", 1)
    bounded = _run(30)
    assert _story(bounded) == _story(unbounded)
    assert sum(1 for e in bounded.log.envelopes if e.type == "node.registered") >= 30
