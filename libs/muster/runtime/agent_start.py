"""What a node agent says when it starts: that it is back (it registers again the
declared nodes it owns that were declared lost) and, on a GPU host, its own node as
NVML sees it."""

from __future__ import annotations

import time

import structlog

from muster.core import inputs
from muster.core.events import NewEvent, StreamAppend
from muster.core.events import node as nev
from muster.core.model.inventory import NodeInventory
from muster.core.nodes.state import NodeAgentState
from muster.runtime.inventory import nvml_inventory
from muster.runtime.loop import DeciderLoop
from muster.runtime.settings import Settings

log = structlog.get_logger()


def registration(inv: NodeInventory, agent: str, at: float) -> NewEvent:
    return NewEvent(
        stream_id=nev.stream(inv.name),
        event=nev.NodeRegistered.of(inv, agent),
        occurred_at=at,
    )


async def announce(loop: DeciderLoop, settings: Settings) -> None:
    """Appended once per start; then the routine ends."""
    await loop.step()
    state: NodeAgentState = loop.runner.state
    now = max(time.time(), state.now)
    news = [inputs.agent_started(loop.name, settings.node_agent_shard, now)]
    if settings.node_name and settings.node_name not in state.declared:
        inv = nvml_inventory(settings.node_name)
        if inv is None:
            log.warning("no GPU found through NVML; not registering", node=settings.node_name)
        else:
            news.append(registration(inv, loop.name, now))
            log.info("registering from NVML", node=inv.name, gpus=len(inv.gpus))
    await loop.store.append(
        [StreamAppend(n.stream_id, None, [n]) for n in news],
        producer=loop.name,
        recorded_at=time.time(),
    )
    loop.appended()
