"""queue: admission decisions over quota (the decider is muster.core.queueing)."""
