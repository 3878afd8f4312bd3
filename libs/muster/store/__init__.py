"""The append-only SQL event store (SQLite embedded, PostgreSQL in production)."""

from muster.store import bell
from muster.store.errors import ConcurrencyConflict, Overtaken, StoreError, unavailable
from muster.store.sql import SqlEventStore, StreamAppend, Tracking

__all__ = [
    "ConcurrencyConflict",
    "Overtaken",
    "SqlEventStore",
    "StoreError",
    "StreamAppend",
    "Tracking",
    "bell",
    "unavailable",
]
