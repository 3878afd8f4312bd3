"""What a split queue's decider says when it starts: the cohort trees it prefers and how
long its claims last (core/queueing/sharding.py). The unsplit queue says nothing."""

from __future__ import annotations

import time

from muster.core import inputs
from muster.core.events import StreamAppend
from muster.core.queueing.sharding import UNSPLIT
from muster.runtime.loop import DeciderLoop
from muster.runtime.settings import Settings


async def announce_shard(loop: DeciderLoop, settings: Settings) -> None:
    """Appended once per start; then the routine ends."""
    if loop.name == UNSPLIT:
        return
    await loop.step()
    now = max(time.time(), loop.runner.state.now)
    prefers = [name.strip() for name in settings.queue_prefers.split(",") if name.strip()]
    new = inputs.queue_shard_started(loop.name, prefers, settings.queue_claim_seconds, now)
    await loop.store.append(
        [StreamAppend(new.stream_id, None, [new])], producer=loop.name, recorded_at=time.time()
    )
    loop.appended()
