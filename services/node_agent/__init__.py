"""node-agent: simulated nodes that register and run pods (muster.core.nodes)."""
