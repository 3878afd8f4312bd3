"""A decider's state at a past point of the log, fast: from the newest history snapshot at
or before it, then the log's events up to it (the queue's for ``explain --at``, intake's
read model for the web UI's time slider).

The snapshots come from two places: the queue service keeps one history row each time
it snapshots (``DeciderLoop``), and a fold here that passes ``SNAPSHOT_EVERY`` events
past the last one writes one (a cache: the first question about a long log pays for the
later ones). They are an optimisation only: the state is that of a fold from the start
(``admin.rebuild``), which the tests check.

The fold and the restore run in a worker thread: the state is this call's alone, and the
service calling it (intake) keeps answering between the batches.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from muster.core.decider import Decider
from muster.core.queueing.decider import QueueDecider
from muster.core.runner import DeciderRunner
from muster.core.timepoint import At
from muster.runtime.memory import collection_paused
from muster.store import SqlEventStore

# Events folded between two history snapshots this fold writes (and the queue service's
# spacing): an explain --at folds fewer than this after its snapshot, ~0.2 s at 10,000
# (bench/README.md, explain); also its read batch, so they land where asked.
SNAPSHOT_EVERY = 10_000
KEEP = 500  # history snapshots kept per name (the oldest go first)


@dataclass(slots=True)
class Rebuilt:
    runner: DeciderRunner[Any]
    from_snapshot: int | None  # the snapshot's position it started from (None: the start)
    folded: int  # events folded after it
    reused: bool = False  # it went on from the ``kept`` state it was given


def reusable(kept: DeciderRunner[Any] | None, at: At) -> bool:
    """Whether folding on from ``kept`` reaches ``at`` (nothing folded is past it)."""
    if kept is None:
        return False
    if at.position is not None:
        return kept.position <= at.position
    assert at.time is not None
    return bool(kept.state.now <= at.time)


async def state_at(
    store: SqlEventStore,
    at: At,
    *,
    decider: Decider[Any] | None = None,
    snapshots: bool = True,
    every: int = SNAPSHOT_EVERY,
    batch: int = SNAPSHOT_EVERY,
    kept: DeciderRunner[Any] | None = None,
) -> Rebuilt:
    """``decider``'s state (the queue's by default) at ``at``: every event up to its
    position, or (a time) up to the first event that occurred after it, as ``replay
    --until`` cuts. ``snapshots``: start
    from and write history snapshots (False: fold from the start, write nothing).
    ``kept``: a state this caller rebuilt before (a time slider moving forward); it goes
    on from it, changing it, when it is before ``at`` and no snapshot is nearer."""
    decider = decider or QueueDecider()
    runner: DeciderRunner[Any] = DeciderRunner(decider)
    start = None
    found = None
    if snapshots:
        found = await store.load_history_snapshot(
            decider.name, decider.snapshot_format, position=at.position, at=at.time
        )
    # The collector paused for the restore too: unpickling makes a few objects per byte,
    # all kept, and its walks over them took longer than the restore itself.
    with collection_paused():
        if kept is not None and reusable(kept, at) and (found is None or found[0] <= kept.position):
            runner, found = kept, None
        elif found is not None:
            await asyncio.to_thread(runner.restore, found[1])
            start = found[0]
        every = every if snapshots else 0
        # Read no more than a snapshot's spacing at a time: snapshots land where asked.
        folded = await _fold_to(store, runner, at, every, min(batch, every or batch))
    return Rebuilt(runner, start, folded, reused=runner is kept)


async def _fold_to(
    store: SqlEventStore, runner: DeciderRunner[Any], at: At, every: int, batch: int
) -> int:
    folded = 0
    saved = runner.position
    while True:
        envs = await store.read_all(
            runner.position, categories=runner.categories, limit=batch, until=at.position
        )
        if at.time is not None:
            cut = next((i for i, e in enumerate(envs) if e.occurred_at > at.time), None)
            if cut is not None:
                folded += await asyncio.to_thread(runner.fold, envs[:cut])
                return folded
        folded += await asyncio.to_thread(runner.fold, envs)
        if every and runner.position - saved >= every:
            await save(store, runner)
            saved = runner.position
        if len(envs) < batch:
            return folded


async def save(store: SqlEventStore, runner: DeciderRunner[Any]) -> None:
    """A history row of the runner's state, at its position and logical time."""
    decider = runner.decider
    # Pickled in the worker thread, as the fold: a backlog's state takes a tenth of a
    # second or more, which the loop (intake's) would otherwise wait out. Nothing else
    # changes this runner meanwhile: its fold awaits this.
    data = await asyncio.to_thread(runner.snapshot)
    await store.save_history_snapshot(
        decider.name, runner.position, runner.state.now, decider.snapshot_format, data, keep=KEEP
    )
