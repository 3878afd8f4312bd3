"""An in-memory event log with the store's contract: positions, versions, conflicts."""

from __future__ import annotations

from collections.abc import Sequence

from muster.core.events import Envelope, StreamAppend
from muster.core.events.base import round_trip


class VersionConflict(RuntimeError):
    pass


class MemoryLog:
    def __init__(self) -> None:
        self.envelopes: list[Envelope] = []
        self.versions: dict[str, int] = {}
        self.ends: dict[str, int] = {}  # stream -> position of its last event

    @property
    def head(self) -> int:
        return len(self.envelopes)

    def after(self, position: int) -> list[Envelope]:
        return self.envelopes[position:]

    def append(
        self, batch: Sequence[StreamAppend], *, producer: str, recorded_at: float
    ) -> list[Envelope]:
        for item in batch:
            current = self.versions.get(item.stream_id, 0)
            if item.expected_version is not None and item.expected_version != current:
                raise VersionConflict(
                    f"{item.stream_id}: expected {item.expected_version}, at {current}"
                )
            end = self.ends.get(item.stream_id, 0)
            if item.folded_to is not None and end > item.folded_to:
                raise VersionConflict(f"{item.stream_id}: moved at {end}, past {item.folded_to}")
        out = []
        for item in batch:
            for new in item.events:
                version = self.versions.get(item.stream_id, 0) + 1
                self.versions[item.stream_id] = version
                position = self.ends[item.stream_id] = len(self.envelopes) + 1
                # Round-trip the payload, as the store does, so the harness sees what services see.
                event = round_trip(new.event)
                env = Envelope(
                    position=position,
                    event_id=f"sim-{position}",
                    stream_id=item.stream_id,
                    stream_version=version,
                    type=new.event.TYPE,
                    schema_version=new.event.VERSION,
                    occurred_at=new.occurred_at,
                    recorded_at=recorded_at,
                    causation_id=new.causation_id,
                    correlation_id=new.correlation_id,
                    producer=producer,
                    event=event,
                )
                self.envelopes.append(env)
                out.append(env)
        return out
