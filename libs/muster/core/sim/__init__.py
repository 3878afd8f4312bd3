"""The in-process harness: every decider over one in-memory log, in virtual time."""
