"""Provisioning requests against the simulated cloud: all nodes in one zone, or none (pure)."""
