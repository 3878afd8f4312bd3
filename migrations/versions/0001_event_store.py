"""Event store: append-only events, consumer tracking, snapshots.

Revision ID: 0001
Revises:
Create Date: 2026-11-22
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

# One statement each: asyncpg runs prepared statements, which take one at a time.
_PG_GUARD = (
    """CREATE FUNCTION events_append_only() RETURNS trigger AS $$
BEGIN
  RAISE EXCEPTION 'events are append-only: % refused', TG_OP;
END;
$$ LANGUAGE plpgsql""",
    """CREATE TRIGGER events_no_update BEFORE UPDATE OR DELETE ON events
  FOR EACH ROW EXECUTE FUNCTION events_append_only()""",
)


def upgrade() -> None:
    op.create_table(
        "events",
        sa.Column("position", sa.BigInteger, primary_key=True, autoincrement=False),
        sa.Column("event_id", sa.String(64), nullable=False, unique=True),
        sa.Column("stream_id", sa.String(255), nullable=False),
        sa.Column("category", sa.String(64), nullable=False),
        sa.Column("stream_version", sa.Integer, nullable=False),
        sa.Column("type", sa.String(128), nullable=False),
        sa.Column("schema_version", sa.Integer, nullable=False),
        sa.Column("occurred_at", sa.Float, nullable=False),
        sa.Column("recorded_at", sa.Float, nullable=False),
        sa.Column("causation_id", sa.String(64)),
        sa.Column("correlation_id", sa.String(64)),
        sa.Column("producer", sa.String(64), nullable=False),
        sa.Column("payload", sa.Text, nullable=False),
        sa.UniqueConstraint("stream_id", "stream_version", name="uq_events_stream_version"),
    )
    # Services tail the store by category; describe reads a workload's whole history;
    # each service's relay reads back what it wrote.
    op.create_index("ix_events_category_position", "events", ["category", "position"])
    op.create_index("ix_events_correlation", "events", ["correlation_id", "position"])
    op.create_index("ix_events_producer_position", "events", ["producer", "position"])
    op.create_table(
        "tracking",
        sa.Column("consumer", sa.String(128), primary_key=True),
        sa.Column("position", sa.BigInteger, nullable=False),
    )
    op.create_table(
        "snapshots",
        sa.Column("name", sa.String(128), primary_key=True),
        sa.Column("position", sa.BigInteger, nullable=False),
        sa.Column("format", sa.String(64), nullable=False),
        sa.Column("state", sa.LargeBinary, nullable=False),
    )
    bind = op.get_bind()
    if bind.dialect.name == "postgresql":
        for statement in _PG_GUARD:
            op.execute(statement)
    else:
        for action in ("UPDATE", "DELETE"):
            op.execute(
                f"CREATE TRIGGER events_no_{action.lower()} BEFORE {action} ON events "
                f"BEGIN SELECT RAISE(ABORT, 'events are append-only: {action} refused'); END"
            )


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute("DROP TRIGGER IF EXISTS events_no_update ON events")
        op.execute("DROP FUNCTION IF EXISTS events_append_only()")
    op.drop_table("snapshots")
    op.drop_table("tracking")
    op.drop_table("events")
