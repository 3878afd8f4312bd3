"""A decider with its folded state: the bookkeeping both drivers share.

The services (over the SQL store and Kafka) and the simulation harness (over an
in-memory log with a virtual clock) drive the same ``DeciderRunner``: fold every
event of the decider's categories in global position order, and decide only when
caught up. Each decision records, as its causation, the last event folded before
it, so any decision can be re-derived from the log prefix ending there
(``muster replay --decisions``).
"""

from __future__ import annotations

import pickle
from collections.abc import Iterable, Sequence
from operator import attrgetter
from typing import Any, Generic, TypeVar

from muster.core.bounded import keep_latest
from muster.core.decider import Decider, bare_fold
from muster.core.events import BareEnvelope, Folded, NewEvent, StreamAppend, category_of
from muster.core.events import timer as tev

S = TypeVar("S")

_STREAM_ID = attrgetter("stream_id")
_STREAM_VERSION = attrgetter("stream_version")

# The stream versions a runner keeps: at most twice this many, those first folded last
# (``keep_latest``). They only guard its appends, and a stream it let go of is appended to
# as of its position (``StreamAppend.folded_to``), which the store refuses exactly when it
# would refuse the version: when the stream moved since. Kept all, they grew with every
# workload ever seen (~4 streams each: 21,000 on a 5,000-workload log), in memory and in
# every snapshot.
VERSIONS_KEPT = 2048


class DeciderRunner(Generic[S]):
    versions_kept = VERSIONS_KEPT

    def __init__(self, decider: Decider[S]) -> None:
        self.decider = decider
        self.state: S = decider.initial()
        self.position = 0  # global position folded up to (events of other categories skipped)
        # stream -> version, for the streams folded (the latest ``versions_kept`` or more)
        self.versions: dict[str, int] = {}
        self.last_event_id: str | None = None
        # Whether decide could say anything new: it said nothing, and nothing was folded
        # since. decide is a function of the state, so asking again would say nothing again.
        self.quiet = False

    @property
    def categories(self) -> frozenset[str]:
        return self.decider.categories

    def fold(self, envelopes: Iterable[Folded | BareEnvelope], *, ours: bool = False) -> int:
        """Fold events past ``position``; already-applied positions are skipped (idempotent).
        ``ours``: every envelope is of the decider's categories, in position order (a store
        read of only those): none is looked up to be skipped, and the bookkeeping is taken
        per batch (``_fold_read``).
        A ``BareEnvelope`` (a type the decider names ``clock_only``) is folded as its
        ``evolve`` folds such an event (``bare_fold``: moves the clock, and applies what
        time made due)

        The loop keeps its bookkeeping in locals (a replay runs it a million times) and
        stores it on the way out, also when ``evolve`` raises: as of the last event folded."""
        if ours:
            return self._fold_read(envelopes if isinstance(envelopes, list) else list(envelopes))
        applied = 0
        categories, evolve = self.decider.categories, self.decider.evolve
        fold_bare = bare_fold(self.decider)
        versions = self.versions  # holds only streams of its categories: a cheap first check
        state, position, last = self.state, self.position, self.last_event_id
        try:
            for env in envelopes:
                if env.position <= position:
                    continue
                if env.stream_id in versions or env.category in categories:
                    if type(env) is BareEnvelope:  # not isinstance: see _fold_read
                        fold_bare(state, env)
                    else:  # ``type() is`` narrows only the branch it holds in
                        state = evolve(state, env)  # type: ignore[arg-type]
                    versions[env.stream_id] = env.stream_version
                    last = env.event_id
                    applied += 1
                position = env.position
        finally:
            self.state, self.position, self.last_event_id = state, position, last
            self._let_go()
        if applied:
            self.quiet = False
        return applied

    def _fold_read(self, envelopes: list[Folded | BareEnvelope]) -> int:
        """``fold(ours=True)`` of one read: the decider's events in position order (as
        the store returns them), so the loop only folds, and the position, stream
        versions and last event id are taken per batch, in C (``dict.update`` over
        attribute getters: the per-event bookkeeping was ~15 % of a replay's fold). As
        ``fold``, as of the last event folded also when ``evolve`` raises."""
        position = self.position
        if envelopes and envelopes[0].position <= position:  # overlaps what was folded
            envelopes = [env for env in envelopes if env.position > position]
        evolve, fold_bare = self.decider.evolve, bare_fold(self.decider)
        state, done = self.state, len(envelopes)
        env: Folded | BareEnvelope | None = None
        try:
            # No count kept per event (``enumerate``'s tuple and a store, a million times):
            # when one raises, the events before it are found by identity (a read's
            # envelopes are distinct objects).
            for env in envelopes:
                # Not isinstance: on a msgspec Struct class (a metaclass of its own) that
                # calls ``__instancecheck__`` for every envelope that is not one.
                if type(env) is BareEnvelope:
                    fold_bare(state, env)
                else:  # ``type() is`` narrows only the branch it holds in
                    state = evolve(state, env)  # type: ignore[arg-type]
        except BaseException:
            done = next((i for i, e in enumerate(envelopes) if e is env), 0)
            raise
        finally:
            self.state = state
            if done:
                folded = envelopes[:done] if done < len(envelopes) else envelopes
                self.versions.update(
                    zip(map(_STREAM_ID, folded), map(_STREAM_VERSION, folded), strict=True)
                )
                self.position = folded[-1].position
                self.last_event_id = folded[-1].event_id
                self.quiet = False
                self._let_go()
        return done

    def _let_go(self) -> None:
        keep_latest(self.versions, self.versions_kept)

    def decide(self) -> list[NewEvent]:
        """The decider's events, stamped with what caused them."""
        last = self.last_event_id
        # Built directly, not by ``dataclasses.replace`` (~3 us a decision), and only for
        # those with no causation of their own.
        news = [
            new
            if new.causation_id or (last is None and new.causation_id is None)
            else NewEvent(
                stream_id=new.stream_id,
                event=new.event,
                occurred_at=new.occurred_at,
                causation_id=last,
                correlation_id=new.correlation_id,
            )
            for new in self.decider.decide(self.state)
        ]
        self.quiet = not news
        return news

    def appends(self, news: list[NewEvent]) -> list[StreamAppend]:
        """Group decisions by stream, each guarded by the version this runner has folded."""
        by_stream: dict[str, list[NewEvent]] = {}
        for new in news:
            by_stream.setdefault(new.stream_id, []).append(new)
        return [self.guarded(stream, events) for stream, events in by_stream.items()]

    def guarded(self, stream: str, events: Sequence[NewEvent]) -> StreamAppend:
        """``events`` appended to ``stream`` unless it moved past what this runner folded."""
        version = self.versions.get(stream)
        if version is not None:
            return StreamAppend(stream, version, events)
        if category_of(stream) in self.decider.categories:
            # Never folded or let go of (``VERSIONS_KEPT``): nothing of it past the position
            # (a new stream: none at all, as version 0 says).
            return StreamAppend(stream, None, events, folded_to=self.position)
        return StreamAppend(stream, 0, events)  # a category it does not fold: a new stream

    def next_deadline(self) -> float | None:
        return self.decider.next_deadline(self.state)

    def timer_event(self, deadline: float) -> NewEvent:
        """The explicit event a timer appends when ``deadline`` has passed."""
        return NewEvent(
            stream_id=tev.stream(self.decider.name),
            event=tev.TimerFired(owner=self.decider.name, deadline=deadline),
            occurred_at=deadline,
        )

    # -- snapshots: an optimisation only; deleting them changes no result ----------

    def snapshot(self) -> bytes:
        return pickle.dumps(
            (self.state, self.position, self.versions, self.last_event_id),
            protocol=pickle.HIGHEST_PROTOCOL,
        )

    def restore(self, data: bytes) -> None:
        loaded: Any = pickle.loads(data)
        self.state, self.position, self.versions, self.last_event_id = loaded
        self.quiet = False
