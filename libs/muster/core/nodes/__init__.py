"""Simulated nodes: registration and pods that run for their declared duration (pure)."""
