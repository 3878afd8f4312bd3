"""The imperative shell's shared parts: settings, logging, metrics, the service loop."""
