"""Quota accounting and the admission cycle (pure)."""
