"""Closing Kafka clients is bounded: a stop that never returns (aiokafka #773, a group
consumer waiting on its coordinator) or raises does not hold up the next one or the
shutdown."""

from __future__ import annotations

import asyncio
from typing import Any

from muster.bus.kafka import close


class Client:
    def __init__(self, stop: str) -> None:
        self.how, self.stopped = stop, False

    async def stop(self) -> None:
        if self.how == "hangs":
            await asyncio.Event().wait()
        if self.how == "raises":
            raise RuntimeError("broker gone")
        self.stopped = True


async def test_a_hung_or_failing_stop_does_not_stop_the_others() -> None:
    hung, failing, fine = Client("hangs"), Client("raises"), Client("ok")
    clients: list[Any] = [hung, failing, fine]
    async with asyncio.timeout(5):
        await close(*clients, timeout=0.05)
    assert fine.stopped and not hung.stopped and not failing.stopped


async def test_closing_inside_a_cancelled_task_still_finishes() -> None:
    """As in a routine's ``finally`` after cancellation: the bound still applies and the
    task ends cancelled, not stuck."""
    fine = Client("ok")
    started = asyncio.Event()

    async def routine() -> None:
        try:
            started.set()
            await asyncio.Event().wait()
        finally:
            await close(Client("hangs"), fine, timeout=0.05)  # type: ignore[arg-type]

    task = asyncio.create_task(routine())
    await started.wait()
    task.cancel()
    async with asyncio.timeout(5):
        await asyncio.gather(task, return_exceptions=True)
    assert task.cancelled() and fine.stopped
