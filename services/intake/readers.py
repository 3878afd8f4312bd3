"""Where an apply's text is read: small bodies inline, large ones in a worker process.

Reading 1 MiB of YAML into manifests costs about a second of CPU. In a thread it would
still hold the GIL against the event loop (another tenant's submission waited up to
0.55 s behind it, bench/hostile_apply.py); in a process of its own it runs beside the
loop. The process starts on the first large apply and serves the ones after it.

Its answer comes back in parts: unpickling 5,000 workload specs at once held the loop
for ~130 ms, so the workloads come in chunks, unpickled with a turn of the loop between.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import pickle
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace

from muster.core.intake import applies
from muster.core.intake.refusal import Refusal

INLINE_BYTES = 64 * 1024  # below this, reading is quicker than the hop to the worker
CHUNK = 200  # workloads a part: a few milliseconds of unpickling
NICE = 10  # the worker yields the CPU to the services' own work (a 1 MiB read is ~1 s)


class ManifestReaders:
    def __init__(self) -> None:
        self._pool: ProcessPoolExecutor | None = None

    async def read(self, text: str | bytes) -> applies.Read | Refusal:
        if len(text) <= INLINE_BYTES:
            return applies.read(text)
        if self._pool is None:
            # spawn: a fork of a process running an event loop and threads is not safe.
            self._pool = ProcessPoolExecutor(
                1,
                mp_context=multiprocessing.get_context("spawn"),
                initializer=os.nice,
                initargs=(NICE,),
            )
        parts = await asyncio.get_running_loop().run_in_executor(self._pool, read_parts, text)
        return parts if isinstance(parts, Refusal) else await assemble(parts)

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(cancel_futures=True)
            self._pool = None


def read_parts(text: str | bytes) -> list[bytes] | Refusal:
    """(In the worker.) The read manifests without their workloads, then the workloads
    and their sources in chunks, each pickled."""
    got = applies.read(text)
    if isinstance(got, Refusal):
        return got
    m, requests = got
    head = pickle.dumps((replace(m, workloads=(), sources=()), requests))
    chunks = range(0, len(m.workloads), CHUNK)
    return [head] + [
        pickle.dumps((m.workloads[i : i + CHUNK], m.sources[i : i + CHUNK])) for i in chunks
    ]


async def assemble(parts: list[bytes]) -> applies.Read:
    m, requests = pickle.loads(parts[0])
    workloads: list[object] = []
    sources: list[object] = []
    for part in parts[1:]:
        await asyncio.sleep(0)  # another request's turn
        w, s = pickle.loads(part)
        workloads += w
        sources += s
    return replace(m, workloads=tuple(workloads), sources=tuple(sources)), requests
