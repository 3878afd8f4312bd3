"""Event types, the envelope, and (de)serialisation with upcasting."""

from muster.core.events import node, provisioning, queue, timer, workload
from muster.core.events.base import (
    BareEnvelope,
    Envelope,
    Event,
    NewEvent,
    StreamAppend,
    UnknownEventType,
    category_of,
    decode_json,
    decode_payload,
    encode_json,
    encode_payload,
    event_class,
    registered_types,
    upcaster,
)

__all__ = [
    "BareEnvelope",
    "Envelope",
    "Event",
    "NewEvent",
    "StreamAppend",
    "UnknownEventType",
    "category_of",
    "decode_json",
    "decode_payload",
    "encode_json",
    "encode_payload",
    "event_class",
    "node",
    "provisioning",
    "queue",
    "registered_types",
    "timer",
    "upcaster",
    "workload",
]
