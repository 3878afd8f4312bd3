"""Rows of the ``events`` table: planning an append's rows (pure), and an envelope from a
row's values in ``COLUMNS`` order (the table's own column order, as both drivers return
them)."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import msgspec

from muster.core.events import (
    BareEnvelope,
    Envelope,
    Event,
    FoldEnvelope,
    NewEvent,
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


def planned_rows(
    batch: Sequence[StreamAppend],
    head: int,
    versions: dict[str, int],
    producer: str,
    recorded_at: float,
) -> list[dict[str, Any]]:
    """Rows to insert after the store's ``head``, once every stream's expected version is
    checked against ``versions`` (a stream's current version; absent: new)."""
    versions = dict(versions)
    rows: list[dict[str, Any]] = []
    for item in batch:
        version = versions.get(item.stream_id, 0)
        if item.expected_version is not None and item.expected_version != version:
            raise ConcurrencyConflict(item.stream_id, item.expected_version, version)
        for new in item.events:
            version += 1
            head += 1
            rows.append(_row(new, item.stream_id, version, head, producer, recorded_at))
        versions[item.stream_id] = version  # a stream may appear twice in one batch
    return rows


def _row(
    new: NewEvent, stream_id: str, version: int, position: int, producer: str, recorded_at: float
) -> dict[str, Any]:
    return {
        "position": position,
        "event_id": str(uuid.uuid4()),
        "stream_id": stream_id,
        "category": category_of(stream_id),
        "stream_version": version,
        "type": new.event.TYPE,
        "schema_version": new.event.VERSION,
        "occurred_at": new.occurred_at,
        "recorded_at": recorded_at,
        "causation_id": new.causation_id,
        "correlation_id": new.correlation_id,
        "producer": producer,
        "payload": encode_json(new.event).decode(),
    }


def values_of(row: Mapping[str, Any]) -> tuple[Any, ...]:
    """A planned row as the driver stores and returns it: its values in ``COLUMNS`` order."""
    return tuple(row[c] for c in COLUMNS)


def envelope(values: Sequence[Any]) -> Envelope:
    """From a row's values in ``COLUMNS`` order. Appended rows are decoded from their JSON
    too: what a service folds from its own append is exactly what a replay reads back."""
    position, event_id, stream_id, _, stream_version, wire_type, schema_version = values[:7]
    occurred_at, recorded_at, causation_id, correlation_id, producer, payload = values[7:]
    event = decode_json(wire_type, schema_version, payload)
    return Envelope(
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


def fold_items(rows: Iterable[Sequence[Any]]) -> list[FoldEnvelope | BareEnvelope]:
    """From rows in ``FOLD_COLUMNS`` order: what a fold reads of each, bare where the
    payload was left out (NULL: the column itself is never NULL). Each type's decoder is
    looked up once a call (``typed_decoder``); a row of another schema version, or one
    it refuses, is decoded by ``decode_json`` (upcast, or the error names the field)."""
    out: list[FoldEnvelope | BareEnvelope] = []
    append = out.append
    decoders: dict[str, tuple[int, Callable[[bytes | str], Event]]] = {}
    for position, event_id, stream_id, stream_version, wire_type, version, at, payload in rows:
        if payload is None:
            append(BareEnvelope(position, event_id, stream_id, stream_version, wire_type, at))
            continue
        typed = decoders.get(wire_type)
        if typed is None:
            typed = decoders[wire_type] = typed_decoder(wire_type)
        if version == typed[0]:
            try:
                event = typed[1](payload)
            except msgspec.ValidationError:
                event = decode_json(wire_type, version, payload)
        else:
            event = decode_json(wire_type, version, payload)
        append(FoldEnvelope(position, event_id, stream_id, stream_version, wire_type, at, event))
    return out
