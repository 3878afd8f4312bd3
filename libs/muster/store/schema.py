"""Table definitions. The schema itself is created only by the Alembic migrations."""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Column,
    Float,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Table,
    Text,
    UniqueConstraint,
)

metadata = MetaData()

events = Table(
    "events",
    metadata,
    # SQLite: exactly INTEGER PRIMARY KEY, the table's rowid (migration 0003): no separate
    # primary-key index, and a read by position walks the table itself. Both are 64 bits.
    Column(
        "position",
        BigInteger().with_variant(Integer, "sqlite"),
        primary_key=True,
        autoincrement=False,
    ),
    Column("event_id", String(64), nullable=False, unique=True),
    Column("stream_id", String(255), nullable=False),
    Column("category", String(64), nullable=False),
    Column("stream_version", Integer, nullable=False),
    Column("type", String(128), nullable=False),
    Column("schema_version", Integer, nullable=False),
    Column("occurred_at", Float, nullable=False),
    Column("recorded_at", Float, nullable=False),
    Column("causation_id", String(64)),
    Column("correlation_id", String(64)),
    Column("producer", String(64), nullable=False),
    Column("payload", Text, nullable=False),
    UniqueConstraint("stream_id", "stream_version", name="uq_events_stream_version"),
)

tracking = Table(
    "tracking",
    metadata,
    Column("consumer", String(128), primary_key=True),
    Column("position", BigInteger, nullable=False),
)

snapshots = Table(
    "snapshots",
    metadata,
    Column("name", String(128), primary_key=True),
    Column("position", BigInteger, nullable=False),
    Column("format", String(64), nullable=False),
    Column("state", LargeBinary, nullable=False),
)

# A decider's state at several positions (``explain --at`` starts from the newest one at
# or before its target): an optimisation, deleting rows changes no result.
snapshot_history = Table(
    "snapshot_history",
    metadata,
    Column("name", String(128), primary_key=True),
    Column("position", BigInteger, primary_key=True, autoincrement=False),
    Column("at", Float, nullable=False),
    Column("format", String(64), nullable=False),
    Column("state", LargeBinary, nullable=False),
)
