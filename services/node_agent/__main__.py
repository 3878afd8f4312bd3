"""``python -m services.node_agent``: run the pods placed on its nodes, and beat for them.

``MUSTER_NODE_AGENT_BACKEND=simulated`` (default): the decider runs each pod for its declared
duration. ``kubernetes``: the decider starts and ends no pod; the ``services.node_agent.kube``
routine reports what the cluster's pods do.
"""

from collections.abc import Sequence

from muster.core.nodes.decider import NodeAgentDecider
from muster.runtime.agent_start import announce
from muster.runtime.heartbeats import heartbeats
from muster.runtime.service import Routine, main
from muster.runtime.settings import Settings
from services.node_agent.kube import kube_pods


def _routines(settings: Settings) -> Sequence[Routine]:
    return [kube_pods] if settings.node_agent_backend == "kubernetes" else []


def _decider(settings: Settings) -> NodeAgentDecider:
    return NodeAgentDecider(
        settings.node_agent_shard,
        settings.node_agent_shards,
        simulated=settings.node_agent_backend == "simulated",
    )


if __name__ == "__main__":
    main("node-agent", _decider, routines=[announce, heartbeats], routines_for=_routines)
