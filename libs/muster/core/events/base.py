"""The event envelope, the type registry and versioned (de)serialisation.

Every event class is a frozen dataclass registered under a stable wire type and
a schema version. A stored type is never renamed in place: a new version gets
an upcaster that rewrites the old payload, so old logs always decode.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol, TypeVar

import msgspec

from muster.core.codec import from_plain, to_plain

E = TypeVar("E", bound="Event")
Upcaster = Callable[[dict[str, Any]], dict[str, Any]]


class UnknownEventType(LookupError):
    """A stored event's type is not registered in this build."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Event:
    """Base of all domain events: past-tense facts, never changed once stored."""

    TYPE: ClassVar[str] = ""
    VERSION: ClassVar[int] = 1


_TYPES: dict[str, type[Event]] = {}
_UPCASTERS: dict[tuple[str, int], Upcaster] = {}


def event_class(wire_type: str, version: int = 1) -> Callable[[type[E]], type[E]]:
    """Register an event class under its wire type (``category.name``)."""

    def register(cls: type[E]) -> type[E]:
        if wire_type in _TYPES:
            raise ValueError(f"event type {wire_type} registered twice")
        cls.TYPE = wire_type
        cls.VERSION = version
        _TYPES[wire_type] = cls
        return cls

    return register


def upcaster(wire_type: str, from_version: int) -> Callable[[Upcaster], Upcaster]:
    """Register a function turning a ``from_version`` payload into the next version's."""

    def register(fn: Upcaster) -> Upcaster:
        _UPCASTERS[(wire_type, from_version)] = fn
        return fn

    return register


def registered_types() -> dict[str, type[Event]]:
    return dict(_TYPES)


def encode_payload(event: Event) -> dict[str, Any]:
    return to_plain(event)


def round_trip(event: Event) -> Event:
    """The event as a store gives it back: through its JSON form (msgspec's, in C, which
    writes what ``encode_payload`` writes; the simulator's log pays this per event)."""
    return msgspec.json.decode(msgspec.json.encode(event), type=type(event))


def encode_json(event: Event) -> bytes:
    """The payload's JSON (what ``encode_payload`` gives, written by msgspec in C)."""
    return _ENCODER.encode(event)


def decode_json(wire_type: str, schema_version: int, payload: bytes | str) -> Event:
    """An event from its stored JSON: parsed and typed in one pass by a decoder built once
    per class (replay and every fold decode each event; ~1 us instead of a parse and a
    conversion). An older schema version is upcast through ``decode_payload``, and so is a
    payload the typed decoder refuses, so that the error names the field."""
    cls = _TYPES.get(wire_type)
    if cls is None:
        raise UnknownEventType(wire_type)
    if schema_version == cls.VERSION:
        try:
            return _decoder(wire_type, cls).decode(payload)
        except msgspec.ValidationError:
            pass
    return decode_payload(wire_type, schema_version, msgspec.json.decode(payload))


def typed_decoder(wire_type: str) -> tuple[int, Callable[[bytes | str], Event]]:
    """The schema version ``wire_type``'s typed decoder reads, and the decoder (what
    ``decode_json`` uses for a payload of that version): a reader of many rows looks it up
    once per type, not per row. A payload it refuses (``msgspec.ValidationError``) or one
    of another version goes to ``decode_json``, which upcasts or names the field."""
    cls = _TYPES.get(wire_type)
    if cls is None:
        raise UnknownEventType(wire_type)
    return cls.VERSION, _decoder(wire_type, cls).decode


_ENCODER = msgspec.json.Encoder()


_DECODERS: dict[str, msgspec.json.Decoder[Any]] = {}


def _decoder(wire_type: str, cls: type[Event]) -> msgspec.json.Decoder[Any]:
    decoder = _DECODERS.get(wire_type)
    if decoder is None:
        decoder = _DECODERS[wire_type] = msgspec.json.Decoder(cls)
    return decoder


def decode_payload(wire_type: str, schema_version: int, payload: dict[str, Any]) -> Event:
    cls = _TYPES.get(wire_type)
    if cls is None:
        raise UnknownEventType(wire_type)
    version = schema_version
    while version < cls.VERSION:
        payload = _UPCASTERS[(wire_type, version)](payload)
        version += 1
    return from_plain(cls, payload)


def category_of(stream_id: str) -> str:
    """Streams are named ``<category>-<id>``; the category picks the Kafka topic."""
    return stream_id.split("-", 1)[0]


@dataclass(frozen=True, slots=True, kw_only=True)
class NewEvent:
    """An event a decision wants appended, before the store gives it a position."""

    stream_id: str
    event: Event
    occurred_at: float
    causation_id: str | None = None
    correlation_id: str | None = None


@dataclass(frozen=True, slots=True)
class StreamAppend:
    """Events for one stream; ``expected_version`` is its current version (0: new), None: any.
    ``folded_to``: refused as well if the stream has an event past this position (a decider
    that let go of the stream's version, ``DeciderRunner.versions``: the version it folded
    is the current one exactly when nothing came after what it folded)."""

    stream_id: str
    expected_version: int | None
    events: Sequence[NewEvent]
    folded_to: int | None = None


class Envelope(msgspec.Struct, frozen=True, kw_only=True):
    """A stored event with everything the store knows about it. A msgspec Struct, not a
    dataclass: every fold of every service builds one per event, and a frozen dataclass's
    ``__init__`` (a ``object.__setattr__`` per field) cost 1.4 us of it, this 0.3 us."""

    position: int
    event_id: str
    stream_id: str
    stream_version: int
    type: str
    schema_version: int
    occurred_at: float
    recorded_at: float
    causation_id: str | None
    correlation_id: str | None
    producer: str
    event: Event

    @property
    def category(self) -> str:
        return category_of(self.stream_id)

    def to_wire(self) -> dict[str, Any]:
        data = {name: getattr(self, name) for name in self.__struct_fields__ if name != "event"}
        data["payload"] = encode_payload(self.event)
        return data

    @classmethod
    def from_wire(cls, data: dict[str, Any]) -> Envelope:
        fields = {k: v for k, v in data.items() if k != "payload"}
        event = decode_payload(data["type"], data["schema_version"], data["payload"])
        fields["schema_version"] = event.VERSION
        return cls(event=event, **fields)


class Folded(Protocol):
    """What a decider's ``evolve`` (and the runner around it) may read of a stored event:
    an ``Envelope`` has it all; a replay builds a ``FoldEnvelope``, which has only this,
    and reads no more of the row (not when it was recorded, by whom, caused by what)."""

    @property
    def position(self) -> int: ...

    @property
    def event_id(self) -> str: ...

    @property
    def stream_id(self) -> str: ...

    @property
    def stream_version(self) -> int: ...

    @property
    def type(self) -> str: ...

    @property
    def occurred_at(self) -> float: ...

    @property
    def event(self) -> Event: ...

    @property
    def category(self) -> str: ...


class FoldEnvelope(msgspec.Struct, frozen=True, gc=False):
    """A stored event as a replay folds it (``Folded``): a third of an envelope's columns
    fewer to read and build, for a million events. Built by position too (a replay builds
    a million: positional arguments cost half of keywords). Not tracked by the cyclic
    collector (``gc=False``: it holds an event, plain data, never itself): cheaper to
    make and free."""

    position: int
    event_id: str
    stream_id: str
    stream_version: int
    type: str
    occurred_at: float
    event: Event

    @property
    def category(self) -> str:
        return category_of(self.stream_id)


class BareEnvelope(msgspec.Struct, frozen=True, gc=False):
    """A stored event a replay folds without reading its payload: one of the types a
    decider's ``evolve`` only moves the clock on (``Decider.clock_only``). Built by
    position and untracked, as ``FoldEnvelope``."""

    position: int
    event_id: str
    stream_id: str
    stream_version: int
    type: str
    occurred_at: float

    @classmethod
    def of(cls, env: Folded) -> BareEnvelope:
        """``env`` as a read without its payload gives it."""
        return cls(
            position=env.position,
            event_id=env.event_id,
            stream_id=env.stream_id,
            stream_version=env.stream_version,
            type=env.type,
            occurred_at=env.occurred_at,
        )

    @property
    def category(self) -> str:
        return category_of(self.stream_id)
