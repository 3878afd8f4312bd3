"""Typed store errors: callers catch these by type, never by message."""

from __future__ import annotations


class StoreError(Exception):
    retriable = False


class ConcurrencyConflict(StoreError):
    """A stream moved past the expected version: another writer decided first."""

    retriable = True

    def __init__(self, stream_id: str, expected: int, actual: int) -> None:
        super().__init__(f"stream {stream_id}: expected version {expected}, found {actual}")
        self.stream_id = stream_id
        self.expected = expected
        self.actual = actual
