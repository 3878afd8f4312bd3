"""The append-only SQL event store (SQLite embedded, PostgreSQL in production)."""

from muster.store import bell
from muster.store.errors import ConcurrencyConflict, StoreError, unavailable
from muster.store.sql import SqlEventStore, StreamAppend, Tracking

__all__ = [
    "ConcurrencyConflict",
    "SqlEventStore",
    "StoreError",
    "StreamAppend",
    "Tracking",
    "bell",
    "unavailable",
]
