"""``python -m services.queue``: settle and admit workloads against ClusterQueue quota."""

from muster.core.queueing.decider import QueueDecider
from muster.runtime.loop import DeciderLoop
from muster.runtime.queue_metrics import QueueCollector
from muster.runtime.service import main


def _collector(loop: DeciderLoop) -> QueueCollector:
    return QueueCollector(lambda: loop.runner.state)


if __name__ == "__main__":
    main("queue", lambda settings: QueueDecider(), collectors=[_collector])
