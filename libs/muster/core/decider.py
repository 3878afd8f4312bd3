"""The shape every service's core has: fold events into state, decide, name a deadline.

``evolve`` is total (it never re-checks rules, so replay always succeeds) and
mutates the state it owns; ``decide`` is pure: it reads the state, including the
logical time ``state.now``, and returns the events to append. The same deciders
run in the services (over the store and Kafka) and in the simulation harness
(over an in-memory log with a virtual clock).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Protocol, TypeVar

from muster.core.events import BareEnvelope, Event, Folded, NewEvent, registered_types

S = TypeVar("S")


class Clocked(Protocol):
    now: float


class Decider(Protocol[S]):
    name: str  # producer name, and owner of the ``timer-<name>`` stream
    categories: frozenset[str]  # stream categories this decider folds
    snapshot_format: str  # bump when the state's shape changes: old snapshots are ignored

    def initial(self) -> S: ...

    def evolve(self, state: S, envelope: Folded) -> S: ...

    def decide(self, state: S) -> list[NewEvent]: ...

    def next_deadline(self, state: S) -> float | None:
        """The earliest logical time after ``state.now`` at which ``decide`` would act."""
        ...

    def summary(self, state: S) -> dict[str, Any]:
        """A JSON-able digest of the state: served at /state, compared by replay --verify."""
        ...


def clock_only(decider: Decider[Any]) -> frozenset[str]:
    """Wire types on which the decider's ``evolve`` does nothing but ``advance``: a replay
    folds them from their row alone (``BareEnvelope``), without decoding the payload. A
    decider names them in an attribute ``clock_only`` (derived from its own dispatch, as
    ``queueing.state.clock_only_types``); none by default."""
    found: frozenset[str] = getattr(decider, "clock_only", frozenset())
    return found


def clock_only_when(decider: Decider[Any]) -> Mapping[str, str]:
    """Wire types the decider's ``evolve`` only moves the clock on when one field of their
    payload is set (not empty): type -> that field's JSON name. A replay reads those rows
    without payload too (the store looks at the field); none by default."""
    found: Mapping[str, str] = getattr(decider, "clock_only_when", {})
    return found


def wakes_later(decider: Decider[Any]) -> frozenset[str]:
    """Wire types whose fold records what a later event acts on but that never make a
    decision due by themselves (the provisioner's and node agent's ``workload.submitted``:
    a spec kept for the reservation or admission that follows): a service's loop is not
    woken by a commit of only these; it folds them, in order, at its next wake-up. A decider
    names them in an attribute ``wakes_later``; none by default."""
    found: frozenset[str] = getattr(decider, "wakes_later", frozenset())
    return found


def bare_fold(decider: Decider[Any]) -> Callable[[Any, BareEnvelope], None]:
    """How the decider folds an event it reads bare (``clock_only``): what its ``evolve``
    does for such an event, which is more than ``advance`` when time alone makes
    something due (the queue's attained-service levels). ``advance`` by default."""
    found: Callable[[Any, BareEnvelope], None] = getattr(decider, "fold_bare", advance)
    return found


def unhandled_types(apply: Callable[..., Any]) -> frozenset[str]:
    """Wire types a ``singledispatch`` fold (``apply(event, state)``) has no handler of
    their own for: where a decider's ``evolve`` is ``advance`` then ``apply``, its
    ``clock_only`` (a service's catch-up and a replay read them without their payload)."""
    handler = own_handlers(apply)
    return frozenset(t for t, cls in registered_types().items() if handler(cls) is None)


def own_handlers(apply: Callable[..., Any]) -> Callable[[type], Callable[..., None] | None]:
    """A lookup of a ``singledispatch`` fold's own handler for an event type, None where it
    has none (its default for ``Event``), each type's looked up once: a caller folding
    many events (intake's view, on every event) skips singledispatch's lookup and the
    folds that ignore the type. Every handler is registered at import, before any lookup."""
    dispatch: Callable[[type], Any] = apply.dispatch  # type: ignore[attr-defined]
    default = dispatch(Event)
    found: dict[type, Callable[..., None] | None] = {}

    def handler(kind: type) -> Callable[..., None] | None:
        try:
            return found[kind]
        except KeyError:
            own = dispatch(kind)
            found[kind] = None if own is default else own
            return found[kind]

    return handler


def advance(state: Clocked, envelope: Folded | BareEnvelope) -> None:
    """Logical time only moves forward, carried by the events themselves."""
    if envelope.occurred_at > state.now:
        state.now = envelope.occurred_at
