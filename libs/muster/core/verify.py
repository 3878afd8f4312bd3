"""Re-derive every decision in a log from the prefix it was based on.

A decision batch is the run of events one decider appended in one step; each
carries as causation the last event the decider had folded. Folding the log up
to that event and calling ``decide`` again must give the same events, byte for
byte: that is what "replaying the store reproduces every decision" means, and it
holds whether the log came from the services or from the harness.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from muster.core.decider import Decider
from muster.core.events import Envelope, NewEvent, encode_payload
from muster.core.runner import DeciderRunner


@dataclass(frozen=True, slots=True)
class Mismatch:
    decider: str
    position: int  # first position of the logged batch
    logged: list[str]
    derived: list[str]


def _key(stream: str, type_: str, payload: Any, at: float) -> str:
    return f"{stream} {type_} @{at!r} {payload}"


def _batches(log: Sequence[Envelope], producer: str) -> list[list[Envelope]]:
    out: list[list[Envelope]] = []
    for env in log:
        if env.producer != producer or env.causation_id is None:
            continue
        if (
            out
            and out[-1][-1].causation_id == env.causation_id
            and out[-1][-1].position == env.position - 1
        ):
            out[-1].append(env)
        else:
            out.append([env])
    return out


def verify_decisions(log: Sequence[Envelope], decider: Decider[Any]) -> tuple[int, list[Mismatch]]:
    """(batches checked, mismatches) for one decider over a whole log in position order."""
    position_of = {env.event_id: i for i, env in enumerate(log)}
    runner: DeciderRunner[Any] = DeciderRunner(decider)
    folded = 0  # index into log
    mismatches: list[Mismatch] = []
    batches = _batches(log, decider.name)
    for batch in batches:
        basis = position_of.get(batch[0].causation_id or "")
        if basis is None:
            mismatches.append(Mismatch(decider.name, batch[0].position, ["unknown causation"], []))
            continue
        runner.fold(log[folded : basis + 1])
        folded = max(folded, basis + 1)
        # Stored order: the runner groups a batch per stream before appending it.
        derived: list[NewEvent] = [n for a in runner.appends(runner.decide()) for n in a.events]
        logged = [_key(e.stream_id, e.type, encode_payload(e.event), e.occurred_at) for e in batch]
        again = [
            _key(n.stream_id, n.event.TYPE, encode_payload(n.event), n.occurred_at) for n in derived
        ]
        if logged != again:
            mismatches.append(Mismatch(decider.name, batch[0].position, logged, again))
    return len(batches), mismatches
