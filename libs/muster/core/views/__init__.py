"""Read models folded from events (no decisions)."""
