"""One relay step: publish, in order, what a producer committed past its tracking row."""

from __future__ import annotations

from muster.bus.kafka import Publisher
from muster.store import SqlEventStore, Tracking

RELAY_BATCH = 1000


async def relay_step(
    store: SqlEventStore, publisher: Publisher, producer: str, position: int
) -> tuple[int, int]:
    """Publish up to a batch after ``position``: (new position, events published).

    The tracking row moves only after the broker acknowledged, so a crash in between
    republishes rather than loses (consumers skip what they already applied).
    """
    envs = await store.read_all(position, producer=producer, limit=RELAY_BATCH)
    if not envs:
        return position, 0
    await publisher.publish(envs)
    await store.set_tracking(Tracking(f"relay:{producer}", envs[-1].position))
    return envs[-1].position, len(envs)
