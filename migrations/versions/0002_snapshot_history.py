"""Snapshot history: a decider's state at several positions, for ``explain --at``.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-26
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Keyed by (name, position); ``at`` is the state's logical time, so a time can find the
    # newest snapshot that holds nothing after it.
    op.create_table(
        "snapshot_history",
        sa.Column("name", sa.String(128), primary_key=True),
        sa.Column("position", sa.BigInteger, primary_key=True, autoincrement=False),
        sa.Column("at", sa.Float, nullable=False),
        sa.Column("format", sa.String(64), nullable=False),
        sa.Column("state", sa.LargeBinary, nullable=False),
    )
    op.create_index("ix_snapshot_history_at", "snapshot_history", ["name", "at"])


def downgrade() -> None:
    op.drop_index("ix_snapshot_history_at", "snapshot_history")
    op.drop_table("snapshot_history")
