"""Stopping a pod's process the way the kubelet does: SIGTERM, then SIGKILL once its grace
period (``terminationGracePeriodSeconds``, the ``grace_seconds`` of ``node.pod_stopped``)
is over, so a trainer that traps SIGTERM can write a checkpoint and exit on its own."""

from __future__ import annotations

import asyncio
from typing import Literal

Stopped = Literal["exited", "terminated", "killed"]


async def stop(process: asyncio.subprocess.Process, grace_seconds: float) -> Stopped:
    """``exited``: it had ended already; ``terminated``: it ended within the grace period
    after SIGTERM; ``killed``: it did not, and was sent SIGKILL."""
    if process.returncode is not None:
        return "exited"
    try:
        process.terminate()
    except ProcessLookupError:  # ended between the check and the signal
        await process.wait()
        return "exited"
    try:
        await asyncio.wait_for(process.wait(), grace_seconds)
        return "terminated"
    except TimeoutError:
        process.kill()
        await process.wait()
        return "killed"
