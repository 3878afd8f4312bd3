"""``python -m services.queue``: settle and admit workloads against ClusterQueue quota."""

from muster.core.queueing.decider import QueueDecider
from muster.runtime.service import main

if __name__ == "__main__":
    main("queue", lambda settings: QueueDecider())
