"""Test doubles for the systems muster talks to (a fake Kubernetes API server)."""
