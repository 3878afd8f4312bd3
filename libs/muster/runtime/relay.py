"""One relay step: publish, in order, what a producer committed past its tracking row."""

from __future__ import annotations

from muster.bus.kafka import Publisher
from muster.store import SqlEventStore, Tracking

RELAY_BATCH = 1000


async def relay_step(
    store: SqlEventStore, publisher: Publisher, producer: str, position: int, *, track: bool = True
) -> tuple[int, int]:
    """Publish up to a batch after ``position``: (new position, events published).

    The tracking row moves only after the broker acknowledged, so a crash in between
    republishes rather than loses (consumers skip what they already applied). ``track``
    False leaves the row where it is (the caller moves it later: ``track_relay``).
    """
    rows = await store.read_rows(position, producer=producer, limit=RELAY_BATCH)
    if not rows:
        return position, 0
    await publisher.publish_rows(rows)
    moved = rows[-1][0]  # the position column
    if track:
        await track_relay(store, producer, moved)
    return moved, len(rows)


async def track_relay(store: SqlEventStore, producer: str, position: int) -> None:
    """Everything of ``producer``'s up to ``position`` is published."""
    await store.set_tracking(Tracking(f"relay:{producer}", position))
