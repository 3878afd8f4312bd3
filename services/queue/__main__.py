"""``python -m services.queue``: settle and admit workloads against ClusterQueue quota."""

from muster.core.queueing.decider import QueueDecider
from muster.core.queueing.figures import figures
from muster.runtime.figures import FiguresCollector
from muster.runtime.loop import DeciderLoop
from muster.runtime.node_monitor import node_monitor
from muster.runtime.queue_start import announce_shard
from muster.runtime.service import main


def _collector(loop: DeciderLoop) -> FiguresCollector:
    return FiguresCollector(lambda: figures(loop.runner.state))


if __name__ == "__main__":
    main(
        "queue",
        lambda settings: QueueDecider(settings.queue_name),
        collectors=[_collector],
        routines=[node_monitor, announce_shard],
    )
