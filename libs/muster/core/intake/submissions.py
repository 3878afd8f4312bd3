"""Submissions and batches, decided purely: read and authorise each item, then plan what
to append against what the store already holds for the items' ids.

A batch is all or nothing by construction: ``plan`` returns every event to append (one
store transaction) or one refusal naming the item, never a part. An item whose
idempotency key was used before with the same body is answered with the original;
with another body (in the store, or earlier in the same batch) the batch is refused.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

from muster.core import inputs
from muster.core.access.policy import Action
from muster.core.access.tokens import Principal
from muster.core.events import NewEvent
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
    """Per item, its new submission, or None where the original answers it."""

    events: list[NewEvent | None]

    @property
    def append(self) -> list[NewEvent]:
        return [e for e in self.events if e is not None]

    @property
    def created(self) -> list[bool]:
        return [e is not None for e in self.events]


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


def plan(items: Sequence[Item], known: Mapping[str, str], now: float) -> Plan | Refusal:
    """What to append for ``items``, given the request digests already stored for some of
    their ids (``known``: workload id -> digest). Items of one id in the batch must carry
    one body; the second is answered like a retry of the first."""
    appended: dict[str, str] = {}  # workload id -> digest, appended by this plan
    events: list[NewEvent | None] = []
    for item in items:
        digest = inputs.digest(item.spec)
        seen = known.get(item.workload_id, appended.get(item.workload_id))
        if seen is None:
            appended[item.workload_id] = digest
            events.append(inputs.submission(item.workload_id, item.spec, now, item.key))
        elif seen == digest:
            events.append(None)
        else:
            return Refusal(
                "IdempotencyKeyReused",
                "this idempotency key was used for a different workload",
                f"{item.field}idempotencyKey" if item.field else None,
            )
    return Plan(events)
