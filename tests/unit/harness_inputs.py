"""Shared by the core tests: workload documents as harness submissions (id = name)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from muster.core.model import parse
from muster.core.sim.harness import Submission


def submissions(workloads: Iterable[tuple[float, dict[str, Any]]]) -> list[Submission]:
    return [(float(at), doc["name"], parse.workload(doc)) for at, doc in workloads]
