"""The cyclic garbage collector: tuned once a service has started, paused while state is
rebuilt from the log.

A rebuild allocates a long-lived object per event folded, and every few hundred of them
the collector walks the young ones, then more and more of the growing state: a third
of a 100,000-event rebuild's time (bench.replay). What a fold allocates is kept or
freed by reference counting; the pause only delays finding cycles to its end.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator


@contextlib.contextmanager
def collection_paused() -> Iterator[None]:
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


# CPython walks the young generation every 700 allocations (net of frees). A service
# allocates hundreds of objects per request or event, so at thousands a second the walks
# ran hundreds of times a second, and what they promote made the older generations' walks
# grow with the state: intake's durable submissions fell from 4,300/s to 2,900/s over a
# 30,000-submission burst, and a fifth of its CPU was the collector (bench.submit_api).
YOUNG_THRESHOLD = 50_000


def settle_collector() -> None:
    """Once start-up is done: what it built (modules, the restored state) lives as long as
    the process, so it is frozen out of the collector's full passes (those took 60 ms pauses
    in intake after a large apply, bench/hostile_apply.py); and the young generation is
    walked every ``YOUNG_THRESHOLD`` allocations. What is freed is still freed at once by
    reference counting; only cycles wait longer (a few MB at most)."""
    gc.freeze()
    gc.set_threshold(YOUNG_THRESHOLD, *gc.get_threshold()[1:])
