"""The queue service's loop counts Kueue's admission attempts (kueue.md §1.15,
``kueue_admission_attempts_total{result}``) as it decides over a real store."""

from __future__ import annotations

import time
from pathlib import Path

from prometheus_client import generate_latest

from muster.core import inputs
from muster.core.events import NewEvent, StreamAppend
from muster.core.model import parse
from muster.core.queueing.decider import QueueDecider
from muster.runtime.loop import DeciderLoop
from muster.runtime.metrics import ServiceMetrics
from muster.runtime.settings import load
from muster.store import SqlEventStore
from muster.store.migrate import upgrade_async
from tests.unit.harness_inputs import gpu_job, gpu_node_cluster


async def _append(store: SqlEventStore, news: list[NewEvent]) -> None:
    await store.append(
        [StreamAppend(n.stream_id, None, [n]) for n in news],
        producer="test",
        recorded_at=time.time(),
    )


def _count(metrics: ServiceMetrics, result: str) -> float:
    value = metrics.registry.get_sample_value(
        "muster_admission_attempts_total", {"service": "queue", "result": result}
    )
    return value or 0.0


async def test_the_loop_counts_a_success_then_an_inadmissible_attempt(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'muster.db'}"
    await upgrade_async(url)
    store = SqlEventStore(url)
    try:
        settings = load({}, store_url=url, kafka_bootstrap="unused:9092", poll_seconds=300)
        metrics = ServiceMetrics()
        loop = DeciderLoop(QueueDecider(), store, settings, metrics)
        # A queue of 2 GPUs over a node pool (no existing node to wait for): quota decides.
        doc = gpu_node_cluster("one", nodes=1, gpus=2, nominal=2)
        doc["nodePools"] = [
            {"name": "pool", "machineType": "m", "allocatable": doc["nodes"][0]["allocatable"]}
        ]
        del doc["nodes"]
        cluster = parse.cluster(doc)
        now = time.time()
        await _append(store, list(inputs.configuration(cluster, now)))
        _, wid, spec = gpu_job("a", 0, 1, 2, 600)
        await _append(store, [inputs.submission(wid, spec, now)])
        await loop.step()
        assert _count(metrics, "success") == 1.0
        assert _count(metrics, "inadmissible") == 0.0

        _, wid, spec = gpu_job("b", 0, 1, 2, 600)  # no room left: it waits, with a reason
        await _append(store, [inputs.submission(wid, spec, now)])
        await loop.step()
        assert _count(metrics, "success") == 1.0
        assert _count(metrics, "inadmissible") == 1.0
        text = generate_latest(metrics.registry).decode()
        assert 'muster_admission_attempts_total{result="inadmissible",service="queue"}' in text

        await loop.step()  # nothing new: no cycle judged anything, nothing counted
        assert _count(metrics, "inadmissible") == 1.0
    finally:
        await store.close()
