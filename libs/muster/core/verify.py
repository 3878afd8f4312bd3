"""Re-derive every decision in a log from the prefix it was based on.

A decision batch is the run of events one decider appended in one step; each
carries as causation the last event the decider had folded. Folding the log up
to that event and calling ``decide`` again must give the same events, byte for
byte: that is what "replaying the store reproduces every decision" means, and it
holds whether the log came from the services or from the harness.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
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
    # How an older version of the decider logged the same decisions, where their form
    # changed (e.g. the provisioner's ``as_logged_before``); None: it never did.
    older: Callable[[list[NewEvent]], list[NewEvent]] | None = getattr(
        decider, "as_logged_before", None
    )
    # What an older version of the decider decided in the same state, where what it decides
    # changed (e.g. the provisioner's ``decided_before``); None: it never did.
    decided_before: Callable[[Any], list[NewEvent]] | None = getattr(
        decider, "decided_before", None
    )
    for i, batch in enumerate(batches):
        basis = position_of.get(batch[0].causation_id or "")
        if basis is None:
            mismatches.append(Mismatch(decider.name, batch[0].position, ["unknown causation"], []))
            continue
        runner.fold(log[folded : basis + 1])
        folded = max(folded, basis + 1)
        # Stored order: the runner groups a batch per stream before appending it.
        derived: list[NewEvent] = [n for a in runner.appends(runner.decide()) for n in a.events]
        logged = [_key(e.stream_id, e.type, encode_payload(e.event), e.occurred_at) for e in batch]
        again = _keys(derived)
        if logged == again or _split(logged, again, batch, batches[i + 1 :]):
            continue
        forms = [derived]
        if decided_before is not None:  # a log written before the decisions changed
            before = decided_before(runner.state)
            forms.append([n for a in runner.appends(before) for n in a.events])
        if _matches(logged, forms, older, batch, batches[i + 1 :]):
            continue
        mismatches.append(Mismatch(decider.name, batch[0].position, logged, again))
    return len(batches), mismatches


def _matches(
    logged: list[str],
    forms: list[list[NewEvent]],
    older: Callable[[list[NewEvent]], list[NewEvent]] | None,
    batch: list[Envelope],
    following: list[list[Envelope]],
) -> bool:
    """Whether the logged batch is one of ``forms`` (the decision derived now first, the one
    checked above), or its older form (``older``: a log written before the decider's events
    changed form), whole or in several steps (``_split``)."""
    for i, news in enumerate(forms):
        keys = _keys(news)
        if i and (logged == keys or _split(logged, keys, batch, following)):
            return True
        if _by_stream(logged) == _by_stream(keys):
            # The same events of each stream, its streams in another order: a log written
            # before the provisioner put a decision's deletions first.
            return True
        if older is not None:
            before = _keys(older(news))
            if logged == before or _split(logged, before, batch, following):
                return True
    return False


def _by_stream(keys: list[str]) -> dict[str, list[str]]:
    """Each stream's keys in order (a key starts with its stream, ``_key``)."""
    out: dict[str, list[str]] = {}
    for key in keys:
        out.setdefault(key.split(" ", 1)[0], []).append(key)
    return out


def _keys(news: list[NewEvent]) -> list[str]:
    return [_key(n.stream_id, n.event.TYPE, encode_payload(n.event), n.occurred_at) for n in news]


def _split(
    logged: list[str], derived: list[str], batch: list[Envelope], following: list[list[Envelope]]
) -> bool:
    """A decision made in several steps by an older version of the decider: the batch is
    part of what is derived now (in order), and the rest was logged by the decider's very
    next steps, each caused by the previous batch's last event (it had folded nothing but
    its own appends). E.g. the queue's admission on existing nodes, once a batch after its
    quota reservation, is now in the same batch (queueing/verdicts.py); the provisioner's
    acceptance, node creation and Provisioned, once three steps, are now one. Those next
    batches are checked on their own."""
    if len(derived) <= len(logged) or not following:
        return False
    rest: list[str] = []
    todo = iter(logged)
    want = next(todo, None)
    for key in derived:  # ``logged`` must be a subsequence of ``derived``
        if key == want:
            want = next(todo, None)
        else:
            rest.append(key)
    if want is not None:
        return False
    later: set[str] = set()
    cause = batch[-1].event_id
    for after in following:
        if after[0].causation_id != cause:
            break
        later.update(
            _key(e.stream_id, e.type, encode_payload(e.event), e.occurred_at) for e in after
        )
        cause = after[-1].event_id
        if all(key in later for key in rest):
            return True
    return False
