"""A queue split between deciders: one active decider per cohort tree (or group of them).

Borrowing, reclaiming and preemption cross the ClusterQueues of one cohort tree, so a
tree (``cohort/<root>``, or ``queue/<name>`` for a ClusterQueue alone) is decided by one
decider at a time; so are trees that could compete for anything else the queue decides
on, which form one group (``groups``): trees naming the same ResourceFlavor, or flavors
whose node labels could select the same node, LocalQueues of one namespace under a
namespace quota, or all of them under waitForPodsReady's blockAdmission. A group is
named after its first tree. The unsplit queue (the decider named ``queue``) decides for
every tree on the one ``admission-cluster`` stream, as always. A split decider
(``queue-<id>``):

* claims a group (``GroupClaimed`` on the group's own stream, ``admission-<group>``)
  when it prefers a tree of it (``QueueShardStarted``) and nobody holds it, when nobody
  prefers it and the decider has run a claim's length (so that a decider starting a
  moment later gets its own), or when the holder has not renewed for a claim's length
  past its end (it died: the group is taken over);
* renews its claims half way through;
* decides only for the groups it holds, on their streams: its decisions and a new
  owner's claim share the stream, so the decision of an owner that lost its group
  (paused past its claim) conflicts on append, and it re-reads.

Decisions for a workload in no tree (its LocalQueue names no ClusterQueue) may come
from any decider, on ``admission-cluster``; the stream's version keeps one.

Each decider judges every tree on its own fold and keeps its own groups' decisions,
which is sound because groups compete for nothing the queue decides on. (What the
provisioner decides, a region's quota and its active ProvisioningRequests, it decides
per request.)

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
    return sorted(set(tree_groups(state).values()))


def group_of(state: QueueState, workload_id: str | None) -> str | None:
    wl = state.workloads.get(workload_id or "")
    if wl is None:
        return None
    cq = wl.run.cluster_queue or state.cluster_queue_of(wl.spec)
    if cq is None or cq not in state.cluster_queues:
        return None
    return tree_groups(state)[root_of(state, cq)]


def tree_groups(state: QueueState) -> dict[str, str]:
    """Each cohort tree's group: the trees linked by what they could compete for, named
    after the first of them."""
    version, found = state.sharding.groups
    if version == state.config_version and found:
        return found
    trees: dict[str, set[str]] = {}  # tree -> the flavors its ClusterQueues name
    for name, cq in state.cluster_queues.items():
        flavors = {fq.name for group in cq.resource_groups for fq in group.flavors}
        trees.setdefault(root_of(state, name), set()).update(flavors)
    group = {tree: tree for tree in trees}

    def find(tree: str) -> str:
        while group[tree] != tree:
            tree = group[tree]
        return tree

    def link(a: str, b: str) -> None:
        first, second = sorted((find(a), find(b)))
        group[second] = first

    ordered = sorted(trees)
    for i, a in enumerate(ordered):
        for b in ordered[i + 1 :]:
            if _compete(state, trees[a], trees[b]):
                link(a, b)
    for namespace in sorted({quota.namespace for quota in state.namespace_quotas.values()}):
        under = sorted(
            {root_of(state, lq.cluster_queue) for lq in state.local_queues.values()
             if lq.namespace == namespace and lq.cluster_queue in state.cluster_queues}
        )  # fmt: skip
        for tree in under[1:]:
            link(under[0], tree)
    pods_ready = state.wait_for_pods_ready
    if pods_ready.enable and pods_ready.block_admission:  # one admission at a time, anywhere
        for tree in ordered[1:]:
            link(ordered[0], tree)
    found = {tree: find(tree) for tree in trees}
    state.sharding.groups = (state.config_version, found)
    return found


def _compete(state: QueueState, a: set[str], b: set[str]) -> bool:
    """Whether flavors of two trees could hold the same node: one flavor, or node labels
    that do not contradict each other (a flavor without labels selects any node)."""
    if a & b:
        return True
    for x in a:
        for y in b:
            fx, fy = state.flavors.get(x), state.flavors.get(y)
            if fx is None or fy is None:
                continue
            shared = fx.node_labels.keys() & fy.node_labels.keys()
            if all(fx.node_labels[k] == fy.node_labels[k] for k in shared):
                return True
    return False


def preferred_owner(state: QueueState, group: str) -> str | None:
    """The decider that prefers a tree of this group (named by its root cohort or
    ClusterQueue), the group's first such tree."""
    members = sorted(t for t, g in tree_groups(state).items() if g == group)
    for tree in members:
        owner = state.sharding.prefers.get(tree.split("/", 1)[1])
        if owner is not None:
            return owner
    return None
