"""SQLite: ``events`` keyed by its rowid, and only the indexes a query uses.

On SQLite only a column declared exactly ``INTEGER PRIMARY KEY`` is the table's rowid;
0001's ``position BIGINT ... PRIMARY KEY (position)`` was not, so every row went into the
table and into a separate primary-key index, and a read by position went through that
index and then the table. Here ``events`` is rebuilt with ``position INTEGER PRIMARY KEY``
(the same 64-bit integers: a rowid is one), every row copied, in one transaction.

What each index of the rebuilt table is for (an index costs every append a b-tree
insert and its pages in the WAL):

* the rowid (``position``): every read of the log's tail or a range (``position > ?``),
  in position order, and the append's ``max(position)``;
* ``uq_events_stream_version`` (stream, version), unique: optimistic concurrency (two
  appends can never hold one stream version; a retried submission lands on the same
  stream at version 1, which is what makes submissions idempotent), the append's version
  check (``max(stream_version)`` by stream), ``read_stream`` and ``first_events``;
* ``uq_events_event_id``, unique: an event id names one event (a decision's causation
  refers to it); kept as the guard it was, though no query reads by it;
* ``ix_events_correlation`` (correlation id): a workload's history (``describe``,
  ``explain``, a workload's events watch), ``correlation_id = ? AND position > ?``;
* ``ix_events_producer_position`` (producer): the relays' read-back,
  ``producer = ? AND position > ?`` (a relay whose producer is quiet would otherwise scan
  everything after its last own event on every wake-up).

On SQLite an index entry ends with the rowid, which is now the position, so the two
indexes above are on the one column and are still in position order within it (0001's
``(x, position)`` stored the position twice). ``ix_events_category_position`` is
dropped: on SQLite every tail read names several categories and is made to scan by
position (``store/sqlite_fast.py``: the index made SQLite sort everything after the
position before the LIMIT), so no query used it.

PostgreSQL is unchanged: ``BIGINT`` is its primary key's right type, and its planner may
use the category index.
"""

from __future__ import annotations

from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

_COLUMNS = (
    "position, event_id, stream_id, category, stream_version, type, schema_version, "
    "occurred_at, recorded_at, causation_id, correlation_id, producer, payload"
)
_TABLE = """CREATE TABLE events_new (
    position {position},
    event_id VARCHAR(64) NOT NULL,
    stream_id VARCHAR(255) NOT NULL,
    category VARCHAR(64) NOT NULL,
    stream_version INTEGER NOT NULL,
    type VARCHAR(128) NOT NULL,
    schema_version INTEGER NOT NULL,
    occurred_at FLOAT NOT NULL,
    recorded_at FLOAT NOT NULL,
    causation_id VARCHAR(64),
    correlation_id VARCHAR(64),
    producer VARCHAR(64) NOT NULL,
    payload TEXT NOT NULL{primary_key}
)"""
_GUARDS = tuple(
    f"CREATE TRIGGER events_no_{action.lower()} BEFORE {action} ON events "
    f"BEGIN SELECT RAISE(ABORT, 'events are append-only: {action} refused'); END"
    for action in ("UPDATE", "DELETE")
)


def upgrade() -> None:
    if op.get_bind().dialect.name != "sqlite":
        return
    _rebuild(
        _TABLE.format(position="INTEGER PRIMARY KEY", primary_key=""),
        (
            "CREATE UNIQUE INDEX uq_events_stream_version ON events (stream_id, stream_version)",
            "CREATE UNIQUE INDEX uq_events_event_id ON events (event_id)",
            "CREATE INDEX ix_events_correlation ON events (correlation_id)",
            "CREATE INDEX ix_events_producer_position ON events (producer)",
        ),
    )


def downgrade() -> None:
    if op.get_bind().dialect.name != "sqlite":
        return
    _rebuild(
        _TABLE.format(
            position="BIGINT NOT NULL",
            primary_key=(
                ",\n    PRIMARY KEY (position),\n"
                "    CONSTRAINT uq_events_stream_version UNIQUE (stream_id, stream_version),\n"
                "    UNIQUE (event_id)"
            ),
        ),
        (
            "CREATE INDEX ix_events_category_position ON events (category, position)",
            "CREATE INDEX ix_events_correlation ON events (correlation_id, position)",
            "CREATE INDEX ix_events_producer_position ON events (producer, position)",
        ),
    )


def _rebuild(create: str, indexes: tuple[str, ...]) -> None:
    """SQLite's way to change a table: a new one, every row copied, the old one dropped.

    The stdlib driver opens a transaction before the first INSERT only (DDL before it runs
    on its own), and Alembic commits after stamping the revision. So nothing touches
    ``events`` before the copy has begun the transaction: a failure anywhere leaves the
    table as it was (and at most an empty ``events_new``, dropped on the next attempt).
    """
    op.execute("DROP TABLE IF EXISTS events_new")
    op.execute(create)
    op.execute(f"INSERT INTO events_new ({_COLUMNS}) SELECT {_COLUMNS} FROM events")
    op.execute("DROP TABLE events")  # its indexes and triggers go with it
    op.execute("ALTER TABLE events_new RENAME TO events")
    # Built after the copy: one sort each, not a b-tree insert per row copied.
    for statement in (*indexes, *_GUARDS):
        op.execute(statement)
