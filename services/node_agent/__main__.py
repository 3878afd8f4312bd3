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


def decider(settings: Settings) -> NodeAgentDecider:
    """The node agent of these settings: node-bound with MUSTER_NODE_NAME, else a shard."""
    return NodeAgentDecider(
        settings.node_agent_shard,
        settings.node_agent_shards,
        simulated=settings.node_agent_backend == "simulated",
        # A DaemonSet pod (MUSTER_NODE_NAME from spec.nodeName) acts for its own node only.
        node=settings.node_name,
    )


if __name__ == "__main__":
    main("node-agent", decider, routines=[announce, heartbeats], routines_for=_routines)
