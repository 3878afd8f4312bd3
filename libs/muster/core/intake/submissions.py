"""Submissions and batches, decided purely: read and authorise each item, then plan what
to append against what the store already holds for the items' ids.

A batch is all or nothing by construction: ``plan`` returns every event to append (one
store transaction) or one refusal naming the item, never a part. An item whose
idempotency key was used before with the same body is answered with the original;
with another body (in the store, or earlier in the same batch) the batch is refused.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field

from muster.core import inputs
from muster.core.access.policy import Action
from muster.core.access.tokens import Principal
from muster.core.events import NewEvent, StreamAppend
from muster.core.intake import gangs
from muster.core.intake.refusal import Refusal, forbidden, invalid
from muster.core.model import parse
from muster.core.model.fields import InvalidInput
from muster.core.model.workload import WorkloadSpec

MAX_KEY = 256


@dataclass(frozen=True, slots=True)
class Item:
    """One submission, read and authorised; ``workload_id`` derives from the key (a retry
    lands on the same stream), or is a fresh id the shell drew."""

    spec: WorkloadSpec
    key: str | None
    workload_id: str
    field: str  # where it sits in the request: "" or "items[3]."


@dataclass(frozen=True, slots=True)
class Plan:
    """Per item, its new submission (a gang member's: its event on the gang's stream), or
    None where the original answers it; then the gangs it completes, as workloads, and the
    version each gang's stream was planned at (appending there expects it)."""

    events: list[NewEvent | None]
    formed: list[NewEvent] = field(default_factory=list)
    versions: Mapping[str, int] = field(default_factory=dict)

    @property
    def append(self) -> list[NewEvent]:
        return [e for e in self.events if e is not None] + self.formed

    @property
    def created(self) -> list[bool]:
        return [e is not None for e in self.events]

    def stream_appends(self) -> list[StreamAppend]:
        """One append per stream: a new stream's at version 0, a gang's at the version it
        was planned against (so concurrent members cannot both complete it)."""
        by_stream: dict[str, list[NewEvent]] = {}
        for new in self.append:
            by_stream.setdefault(new.stream_id, []).append(new)
        return [StreamAppend(s, self.versions.get(s, 0), news) for s, news in by_stream.items()]


def read(
    who: Principal, body: object, field: str = ""
) -> tuple[WorkloadSpec, str | None] | Refusal:
    """Parse one submission (``idempotencyKey`` may ride in the body) and check access."""
    key = None
    if isinstance(body, dict) and "idempotencyKey" in body:
        body = dict(body)
        key = body.pop("idempotencyKey")
        if not isinstance(key, str) or not 0 < len(key) <= MAX_KEY:
            return Refusal(
                "InvalidField",
                f"must be a string of 1 to {MAX_KEY} characters",
                f"{field}idempotencyKey",
            )
    try:
        spec = parse.workload(body, field.rstrip("."))
    except InvalidInput as exc:
        return invalid(exc)
    refused = forbidden(who, Action.SUBMIT, spec.namespace, spec.queue_name or None)
    return refused or (spec, key)


def read_batch(
    who: Principal, items: object, max_batch: int
) -> list[tuple[WorkloadSpec, str | None]] | Refusal:
    """Every item read and authorised, or the first refusal (naming ``items[i]``)."""
    if not isinstance(items, list) or not items:
        return Refusal("InvalidField", "must be a non-empty list of workloads", "items")
    if len(items) > max_batch:
        return Refusal(
            "BatchTooLarge", f"a batch of {len(items)} exceeds the limit of {max_batch}", "items"
        )
    out = []
    for i, body in enumerate(items):
        got = read(who, body, f"items[{i}].")
        if isinstance(got, Refusal):
            return got
        out.append(got)
    return out


def unknown_queue(spec: WorkloadSpec, local_queues: Collection[str], field: str) -> Refusal | None:
    """The LocalQueue a submission names must exist (a consumer runs on its request's
    nodes, not through a queue)."""
    if spec.consumes is not None or f"{spec.namespace}/{spec.queue_name}" in local_queues:
        return None
    return Refusal(
        "UnknownQueue",
        f"LocalQueue {spec.queue_name!r} does not exist in namespace {spec.namespace!r}",
        f"{field}queueName",
    )


def gang_streams(items: Sequence[Item]) -> list[str]:
    """The streams of the gangs ``items`` join (their states are ``plan``'s ``gangs``)."""
    streams = {gangs.stream_of(i.spec.namespace, i.spec.gang) for i in items if i.spec.gang}
    return sorted(streams)


def plan(
    items: Sequence[Item],
    known: Mapping[str, str],
    now: float,
    gang_states: Mapping[str, gangs.GangState] | None = None,
) -> Plan | Refusal:
    """What to append for ``items``, given the request digests already stored for some of
    their ids (``known``: workload id -> digest) and the gangs their members join, as
    stored (by stream; one not given is new). Items of one id in the batch must carry one
    body; the second is answered like a retry of the first."""
    appended: dict[str, str] = {}  # workload id -> digest, appended by this plan
    events: list[NewEvent | None] = []
    formed: list[NewEvent] = []
    planned = {s: g.copy() for s, g in (gang_states or {}).items()}
    for item in items:
        digest = inputs.digest(item.spec)
        seen = known.get(item.workload_id, appended.get(item.workload_id))
        if seen is not None and seen != digest:
            return Refusal(
                "IdempotencyKeyReused",
                "this idempotency key was used for a different workload",
                f"{item.field}idempotencyKey" if item.field else None,
            )
        if seen is not None:
            events.append(None)
        elif item.spec.gang is not None:
            stream = gangs.stream_of(item.spec.namespace, item.spec.gang)
            gang = planned.setdefault(stream, gangs.GangState(stream))
            joined = gangs.join(
                gang, item.workload_id, item.spec, item.key, digest, item.field, now
            )
            if isinstance(joined, Refusal):
                return joined
            events.append(joined.event)
            formed += [joined.formed] if joined.formed is not None else []
            if joined.event is not None:
                appended[item.workload_id] = digest
        else:
            appended[item.workload_id] = digest
            events.append(inputs.submission(item.workload_id, item.spec, now, item.key, digest))
    versions = {s: g.version for s, g in planned.items()}
    return Plan(events, formed, versions)
