"""``python -m services.node_agent``: run the pods placed on its nodes, and beat for them."""

from muster.core.nodes.decider import NodeAgentDecider
from muster.runtime.agent_start import announce
from muster.runtime.heartbeats import heartbeats
from muster.runtime.service import main

if __name__ == "__main__":
    main(
        "node-agent",
        lambda s: NodeAgentDecider(s.node_agent_shard, s.node_agent_shards),
        routines=[announce, heartbeats],
    )
