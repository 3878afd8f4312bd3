"""Rows of the ``events`` table: planning an append's rows (pure), and an envelope from a
row's values in ``COLUMNS`` order (the table's own column order, as both drivers return
them)."""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import msgspec

from muster.core.events import (
    BareEnvelope,
    Envelope,
    Event,
    FoldEnvelope,
    StreamAppend,
    category_of,
    decode_json,
    encode_json,
    typed_decoder,
)
from muster.store.errors import ConcurrencyConflict

COLUMNS = (
    "position",
    "event_id",
    "stream_id",
    "category",
    "stream_version",
    "type",
    "schema_version",
    "occurred_at",
    "recorded_at",
    "causation_id",
    "correlation_id",
    "producer",
    "payload",
)

Row = tuple[Any, ...]  # a row's values in ``COLUMNS`` order

# What a fold reads of a row (``read_folding``, a ``FoldEnvelope``), the payload last.
FOLD_COLUMNS = (
    "position",
    "event_id",
    "stream_id",
    "stream_version",
    "type",
    "schema_version",
    "occurred_at",
    "payload",
)


class EventIds:
    """Event ids in a UUID's form: 74 random bits drawn once (a version 4 UUID's first
    five groups but the last), then a counter from a random start in the last 48 bits.
    Unique as ``uuid4`` is for any practical count, at a tenth of its cost (a system call
    and a 128-bit integer's formatting per event: ~2-6 us, paid for every event by every
    service that appends). Drawn afresh in a forked child, and before the counter wraps."""

    def __init__(self) -> None:
        self._draw()

    def _draw(self) -> None:
        text = str(uuid.uuid4())
        self._prefix, self._next = text[:24], int(text[24:], 16)

    def __call__(self) -> str:
        n = self._next
        if n > 0xFFFFFFFFFFFF:
            self._draw()
            n = self._next
        self._next = n + 1
        return f"{self._prefix}{n:012x}"


new_event_id = EventIds()
os.register_at_fork(after_in_child=new_event_id._draw)


def planned_rows(
    batch: Sequence[StreamAppend],
    head: int,
    versions: dict[str, int],
    producer: str,
    recorded_at: float,
    ends: Mapping[str, int] | None = None,
) -> list[Row]:
    """Rows to insert after the store's ``head``, each its values in ``COLUMNS`` order (as
    the driver stores and returns them: no dict a row to read back), once every stream's
    expected version is checked against ``versions`` (a stream's current version; absent:
    new), and every ``folded_to`` against ``ends`` (the position of the last event of each
    stream ``guarded`` names)."""
    versions = dict(versions)
    rows: list[Row] = []
    append = rows.append
    for item in batch:
        stream_id = item.stream_id
        version = versions.get(stream_id, 0)
        if item.expected_version is not None and item.expected_version != version:
            raise ConcurrencyConflict(stream_id, item.expected_version, version)
        if item.folded_to is not None and ends and ends.get(stream_id, 0) > item.folded_to:
            raise ConcurrencyConflict(stream_id, None, version)
        category = category_of(stream_id)  # once a stream, not a row
        for new in item.events:
            version += 1
            head += 1
            event = new.event
            append(
                (
                    head,
                    new_event_id(),
                    stream_id,
                    category,
                    version,
                    event.TYPE,
                    event.VERSION,
                    new.occurred_at,
                    recorded_at,
                    new.causation_id,
                    new.correlation_id,
                    producer,
                    encode_json(event).decode(),
                )
            )
        versions[stream_id] = version  # a stream may appear twice in one batch
    return rows


def guarded(batch: Sequence[StreamAppend], versions: Mapping[str, int]) -> list[str]:
    """The streams whose last event's position ``planned_rows`` checks: those appended
    ``folded_to`` a position that have events (a new stream has nothing past it)."""
    return [
        item.stream_id
        for item in batch
        if item.folded_to is not None and versions.get(item.stream_id, 0)
    ]


def as_mappings(rows: Iterable[Row]) -> list[dict[str, Any]]:
    """Planned rows as SQLAlchemy's insert takes them (PostgreSQL, and an in-memory
    SQLite): each a dict by column name."""
    return [dict(zip(COLUMNS, row, strict=True)) for row in rows]


def envelopes(rows: Iterable[Sequence[Any]]) -> list[Envelope]:
    """From rows' values in ``COLUMNS`` order, each type's decoder looked up once a call
    (``fold_items``). Appended rows are decoded from their JSON too: what a service folds
    from its own append is exactly what a replay reads back."""
    out: list[Envelope] = []
    append = out.append
    decoded = _decoding()
    for (
        position,
        event_id,
        stream_id,
        _,
        stream_version,
        wire_type,
        version,
        occurred_at,
        recorded_at,
        causation_id,
        correlation_id,
        producer,
        payload,
    ) in rows:
        event = decoded(wire_type, version, payload)
        append(
            Envelope(
                position=position,
                event_id=event_id,
                stream_id=stream_id,
                stream_version=stream_version,
                type=wire_type,
                schema_version=event.VERSION,
                occurred_at=occurred_at,
                recorded_at=recorded_at,
                causation_id=causation_id,
                correlation_id=correlation_id,
                producer=producer,
                event=event,
            )
        )
    return out


def fold_items(rows: Iterable[Sequence[Any]]) -> list[FoldEnvelope | BareEnvelope]:
    """From rows in ``FOLD_COLUMNS`` order: what a fold reads of each, bare where the
    payload was left out (NULL: the column itself is never NULL). Each type's decoder is
    looked up once a call (``typed_decoder``); a row of another schema version, or one
    it refuses, is decoded by ``decode_json`` (upcast, or the error names the field)."""
    out: list[FoldEnvelope | BareEnvelope] = []
    append = out.append
    decoded = _decoding()
    for position, event_id, stream_id, stream_version, wire_type, version, at, payload in rows:
        if payload is None:
            append(BareEnvelope(position, event_id, stream_id, stream_version, wire_type, at))
            continue
        event = decoded(wire_type, version, payload)
        append(FoldEnvelope(position, event_id, stream_id, stream_version, wire_type, at, event))
    return out


def _decoding() -> Callable[[str, int, bytes | str], Event]:
    """A payload's event, each type's typed decoder (``typed_decoder``) looked up once in a
    call of ``envelopes`` or ``fold_items``; a row of another schema version, or one the
    typed decoder refuses, goes through ``decode_json`` (upcast, or the error names the
    field)."""
    decoders: dict[str, tuple[int, Callable[[bytes | str], Event]]] = {}

    def decoded(wire_type: str, version: int, payload: bytes | str) -> Event:
        typed = decoders.get(wire_type)
        if typed is None:
            typed = decoders[wire_type] = typed_decoder(wire_type)
        if version == typed[0]:
            try:
                return typed[1](payload)
            except msgspec.ValidationError:
                pass
        return decode_json(wire_type, version, payload)

    return decoded
