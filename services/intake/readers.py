"""Where an apply's text is read: small bodies inline, large ones in a worker process.

Reading 1 MiB of YAML into manifests costs about a second of CPU. In a thread it would
still hold the GIL against the event loop (another tenant's submission waited up to
0.55 s behind it, bench/hostile_apply.py); in a process of its own it runs beside the
loop. The process starts on the first large apply and serves the ones after it.
"""

from __future__ import annotations

import asyncio
import multiprocessing
from concurrent.futures import ProcessPoolExecutor

from muster.core.intake import applies
from muster.core.intake.refusal import Refusal

INLINE_BYTES = 64 * 1024  # below this, reading is quicker than the hop to the worker


class ManifestReaders:
    def __init__(self) -> None:
        self._pool: ProcessPoolExecutor | None = None

    async def read(self, text: str | bytes) -> applies.Read | Refusal:
        if len(text) <= INLINE_BYTES:
            return applies.read(text)
        if self._pool is None:
            # spawn: a fork of a process running an event loop and threads is not safe.
            self._pool = ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"))
        return await asyncio.get_running_loop().run_in_executor(self._pool, applies.read, text)

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(cancel_futures=True)
            self._pool = None
