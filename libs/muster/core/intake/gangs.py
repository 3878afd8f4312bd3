"""Gangs whose members are submitted one by one (Armada's gangId and gangCardinality, a
PodGroup's minMember, Kueue's plain pod groups), decided purely.

As Kueue does for a plain pod group, the gang becomes ONE workload once ``cardinality``
members exist: quota, placement, preemption and all-or-nothing start then work for it as
for any workload. Until then its members wait on the gang's own stream (that of the
workload it becomes), so a member is planned against the stream's version and two
members that would both complete the gang cannot both append (the store refuses the
second; it is planned again, and finds the gang formed).

A member arriving after the gang formed is a workload of its own (Volcano runs pods beyond
``minMember`` as room allows, outside the gang); a member of a gang cancelled before it
formed is refused.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, replace

from muster.core import inputs
from muster.core.events import Envelope, NewEvent
from muster.core.events import workload as wev
from muster.core.intake.refusal import Refusal
from muster.core.model.parse import MAX_POD_SETS, MAX_PODS
from muster.core.model.workload import Gang, PodSet, WorkloadSpec


@dataclass(slots=True)
class GangState:
    """A gang's stream as it stands: its members in arrival order (id -> spec, digest)."""

    stream_id: str
    version: int = 0
    members: dict[str, tuple[WorkloadSpec, str]] = field(default_factory=dict)
    formed: bool = False
    cancelled: bool = False

    def copy(self) -> GangState:
        return replace(self, members=dict(self.members))


@dataclass(frozen=True, slots=True)
class Joined:
    """A member's event (None: a retry, answered with the original) and, when it
    completes the gang, the gang's submission."""

    event: NewEvent | None
    formed: NewEvent | None = None


def stream_of(namespace: str, gang: Gang) -> str:
    return wev.stream(inputs.gang_workload_id(namespace, gang.name))


def fold(stream_id: str, envelopes: Iterable[Envelope]) -> GangState:
    """The gang as its stream's events tell it."""
    state = GangState(stream_id)
    for env in envelopes:
        record(state, env.event)
        state.version = env.stream_version
    return state


def record(state: GangState, event: object) -> None:
    """One more event of the gang's stream."""
    state.version += 1
    if isinstance(event, wev.GangMemberSubmitted):
        state.members[event.member_id] = (event.spec, event.request_digest or "")
    elif isinstance(event, wev.WorkloadSubmitted):
        state.formed = True
    elif isinstance(event, wev.WorkloadCancelRequested):
        state.cancelled = True


def join(
    gang: GangState,
    wid: str,
    spec: WorkloadSpec,
    key: str | None,
    digest: str,
    field: str,
    now: float,
) -> Joined | Refusal:
    """Member ``wid`` joins ``gang`` (which this updates, as the planner's copy)."""
    assert spec.gang is not None
    if wid in gang.members:
        if gang.members[wid][1] == digest:
            return Joined(None)
        return Refusal(
            "IdempotencyKeyReused",
            "this idempotency key was used for a different workload",
            f"{field}idempotencyKey" if field else None,
        )
    if gang.formed:  # beyond the gang: a workload of its own
        return Joined(inputs.submission(wid, spec, now, key))
    if gang.cancelled:
        return Refusal(
            "GangCancelled",
            f"gang {spec.gang.name} was cancelled before it was complete",
            f"{field}gang.name",
        )
    refused = _disagrees(gang, spec, field) or _too_big(gang, spec, field)
    if refused is not None:
        return refused
    gang.members[wid] = (spec, digest)
    gid = inputs.gang_workload_id(spec.namespace, spec.gang.name)
    member = NewEvent(
        stream_id=gang.stream_id,
        event=wev.GangMemberSubmitted(
            workload_id=gid, member_id=wid, spec=spec, idempotency_key=key, request_digest=digest
        ),
        occurred_at=now,
        correlation_id=gid,
    )
    if len(gang.members) < spec.gang.cardinality:
        return Joined(member)
    gang.formed = True  # this member completes it: the gang is one workload from now on
    group = group_spec([s for s, _ in gang.members.values()])
    return Joined(member, inputs.submission(gid, group, now))


def _agreed(spec: WorkloadSpec) -> list[tuple[str, object]]:
    """What every member of a gang must say alike (the gang's workload has one of each),
    by its field in the submission."""
    assert spec.gang is not None
    return [
        ("queueName", spec.queue_name),
        ("priority", spec.priority),
        ("priorityClassName", spec.priority_class),
        ("gang.cardinality", spec.gang.cardinality),
        ("maxRunDurationSeconds", spec.max_run_duration_seconds),
        ("gpuGroupSize", spec.gpu_group_size),
        ("placement", spec.placement),
        ("failurePolicy", spec.failure_policy),
    ]


def _disagrees(gang: GangState, spec: WorkloadSpec, field: str) -> Refusal | None:
    first = next(iter(gang.members.values()), None)
    if first is None:
        return None
    for (name, mine), (_, theirs) in zip(_agreed(spec), _agreed(first[0]), strict=True):
        if mine != theirs:
            return Refusal(
                "GangMismatch",
                f"gang {gang_name(spec)}: {name} {mine!r} differs from its members' {theirs!r}",
                f"{field}{name}",
            )
    return None


def _too_big(gang: GangState, spec: WorkloadSpec, field: str) -> Refusal | None:
    """The gang's workload must be a valid workload: at most MAX_POD_SETS pod shapes and
    MAX_PODS pods."""
    members = [s for s, _ in gang.members.values()] + [spec]
    if len(_shapes(members)) > MAX_POD_SETS:
        return Refusal(
            "GangTooLarge",
            f"gang {gang_name(spec)}: its members' pods would have more than {MAX_POD_SETS} "
            "different shapes (requests, selectors, tolerations)",
            f"{field}podSets",
        )
    if sum(m.pod_count for m in members) > MAX_PODS:
        return Refusal(
            "GangTooLarge", f"gang {gang_name(spec)}: more than {MAX_PODS} pods", f"{field}podSets"
        )
    return None


def gang_name(spec: WorkloadSpec) -> str:
    return spec.gang.name if spec.gang is not None else spec.name


# A pod set's shape (its name and count blanked) -> (count, its first name): pods of one
# shape in any member make one pod set of the gang, as Kueue merges a pod group's identical
# pods into one pod set.
def _shapes(members: Iterable[WorkloadSpec]) -> list[tuple[PodSet, int, str]]:
    shapes: list[tuple[PodSet, int, str]] = []
    for member in members:
        for ps in member.pod_sets:
            shape = replace(ps, name="", count=1)
            i = next((i for i, (s, _, _) in enumerate(shapes) if s == shape), None)
            if i is None:
                shapes.append((shape, ps.count, ps.name))
            else:
                s, n, name = shapes[i]
                shapes[i] = (s, n + ps.count, name)
    return shapes


def group_spec(members: list[WorkloadSpec]) -> WorkloadSpec:
    """The gang's workload: its members' pods, one pod set per shape; what members agree
    on (``_agreed``) from the first; the longest-running member's simulated runtime."""
    first = members[0]
    assert first.gang is not None
    pod_sets: list[PodSet] = []
    for shape, count, name in _shapes(members):
        taken = {ps.name for ps in pod_sets}
        unique, n = name, 1
        while unique in taken:
            n += 1
            unique = f"{name[:58]}-{n}"
        pod_sets.append(replace(shape, name=unique, count=count))
    labels: dict[str, str] = {}
    for member in reversed(members):  # the first member's value wins
        labels.update(member.labels)
    return replace(
        first,
        name=first.gang.name,
        pod_sets=tuple(pod_sets),
        runtime=max((m.runtime for m in members), key=lambda r: r.duration_seconds),
        labels=labels,
        gang=None,
    )
