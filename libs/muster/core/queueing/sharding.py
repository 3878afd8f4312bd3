"""A queue split between deciders: one active decider per cohort tree.

Borrowing, reclaiming and preemption cross the ClusterQueues of one cohort tree, so a
tree (a "group": ``cohort/<root>``, or ``queue/<name>`` for a ClusterQueue alone) is
decided by one decider at a time. The unsplit queue (the decider named ``queue``) decides
for every tree on the one ``admission-cluster`` stream, as always. A split decider
(``queue-<id>``):

* claims a tree (``GroupClaimed`` on the tree's own stream, ``admission-<group>``) when it
  prefers it (``QueueShardStarted``) and nobody holds it, when nobody prefers it and it
  has run a claim's length (so that a decider starting a moment later gets its own), or
  when the holder has not renewed for a claim's length past its end (it died: the trees
  are taken over);
* renews its claims half way through;
* decides only for the trees it holds, on their streams: its decisions and a new
  owner's claim share the stream, so the decision of an owner that lost its tree (paused
  past its claim) conflicts on append, and it re-reads.

Decisions for a workload in no tree (its LocalQueue names no ClusterQueue) may come
from any decider, on ``admission-cluster``; the stream's version keeps one.

What it needs of the configuration: trees that share nothing else. Each decider judges
every tree on its own fold and keeps its own trees' decisions, so two trees deciding at
once must not compete for the same nodes (placement on existing nodes), namespace quota
or ProvisioningRequest limits (docs/architecture.md).

Time is the decider's clock (the events'), so claims, renewals and takeovers replay.
"""

from __future__ import annotations

from dataclasses import replace

from muster.core.events import NewEvent
from muster.core.events import queue as qev
from muster.core.queueing.cycle import admission_cycle
from muster.core.queueing.settle import settle
from muster.core.queueing.state import QueueState, root_of

UNSPLIT = "queue"


def decide(state: QueueState, me: str) -> list[NewEvent]:
    """A split decider's decisions: its claims first, then what settle and the cycle say
    of the trees it holds."""
    claims = claim(state, me)
    if claims:
        return claims
    settled = keep(state, me, settle(state))
    if settled:
        return settled
    return keep(state, me, admission_cycle(state))


def claim(state: QueueState, me: str) -> list[NewEvent]:
    started = state.sharding.started.get(me)
    if started is None:
        return []  # its start is not folded yet: it claims nothing before it says so
    since, ttl = started
    now = state.now
    out = []
    for group in groups(state):
        owner, until = state.sharding.claims.get(group, ("", 0.0))
        if owner == me:
            due = until - now <= ttl / 2
        elif not owner:
            preferred = preferred_owner(state, group)
            due = preferred == me or (preferred is None and now >= since + ttl)
        else:
            due = now >= until + ttl
        if due:
            out.append(
                NewEvent(
                    stream_id=qev.group_stream(group),
                    event=qev.GroupClaimed(group=group, owner=me, until=now + ttl),
                    occurred_at=now,
                )
            )
    return out


def keep(state: QueueState, me: str, news: list[NewEvent]) -> list[NewEvent]:
    """The decisions for the trees ``me`` holds now, on their streams (and those for no
    tree, on the cluster's)."""
    out = []
    for new in news:
        group = group_of(state, getattr(new.event, "workload_id", None))
        if group is None:
            out.append(new)
            continue
        owner, until = state.sharding.claims.get(group, ("", 0.0))
        if owner == me and until > state.now:
            out.append(replace(new, stream_id=qev.group_stream(group)))
    return out


def next_deadline(state: QueueState, me: str) -> float | None:
    """When a claim of ``me`` is due for renewal, another's may be taken over, or an
    unpreferred tree may be claimed."""
    started = state.sharding.started.get(me)
    if started is None:
        return None
    since, ttl = started
    times = []
    for group in groups(state):
        owner, until = state.sharding.claims.get(group, ("", 0.0))
        if owner == me:
            times.append(until - ttl / 2)
        elif owner:
            times.append(until + ttl)
        elif preferred_owner(state, group) is None:
            times.append(since + ttl)
    return min((t for t in times if t > state.now), default=None)


def groups(state: QueueState) -> list[str]:
    return sorted({root_of(state, cq) for cq in state.cluster_queues})


def group_of(state: QueueState, workload_id: str | None) -> str | None:
    wl = state.workloads.get(workload_id or "")
    if wl is None:
        return None
    cq = wl.run.cluster_queue or state.cluster_queue_of(wl.spec)
    if cq is None or cq not in state.cluster_queues:
        return None
    return root_of(state, cq)


def preferred_owner(state: QueueState, group: str) -> str | None:
    """The decider that prefers this tree: named by its root cohort or ClusterQueue."""
    return state.sharding.prefers.get(group.split("/", 1)[1])
