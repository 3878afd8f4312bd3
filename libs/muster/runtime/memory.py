"""The cyclic garbage collector, paused while state is rebuilt from the log.

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
