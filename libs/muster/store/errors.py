"""Typed store errors: callers catch these by type, never by message."""

from __future__ import annotations

from asyncpg import exceptions as pg
from sqlalchemy import exc as sa


class StoreError(Exception):
    retriable = False


class ConcurrencyConflict(StoreError):
    """A stream moved past the expected version: another writer decided first."""

    retriable = True

    def __init__(self, stream_id: str, expected: int | None, actual: int) -> None:
        # expected None: appended as of a position (``StreamAppend.folded_to``) it moved past
        super().__init__(f"stream {stream_id}: expected version {expected}, found {actual}")
        self.stream_id = stream_id
        self.expected = expected
        self.actual = actual


class ReadOnlyStore(StoreError):
    """A write on a store opened read-only."""


# Errors that say the database cannot be reached right now (not that a request is wrong).
_AWAY = (
    OSError,  # refused, reset
    sa.OperationalError,
    sa.InterfaceError,
    sa.DisconnectionError,
    sa.TimeoutError,  # the pool waited for a connection in vain
    pg.PostgresConnectionError,  # class 08: connection exceptions
    pg.CannotConnectNowError,  # the server is starting up
    pg.OperatorInterventionError,  # class 57: admin shutdown, crash shutdown
    pg.InterfaceError,  # the connection is closed
)


def unavailable(exc: BaseException) -> bool:
    """Whether ``exc`` (or what caused it) says the database cannot be reached right now:
    refused or dropped connections, a server shutting down or starting up, a pool that
    timed out. The caller waits and tries again; anything else is a bug to surface."""
    seen: BaseException | None = exc
    for _ in range(8):  # the chain of causes is short; a cycle must not hang us
        if seen is None:
            return False
        if isinstance(seen, _AWAY):
            return True
        if isinstance(seen, sa.DBAPIError) and seen.connection_invalidated:
            return True
        seen = seen.__cause__ or seen.__context__
    return False
