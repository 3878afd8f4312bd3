"""Intake's other decisions, pure: a cancel, a request's create and delete, an apply's
checks. Each returns the event to append or the refusal the transports answer."""

from __future__ import annotations

from muster.core import inputs
from muster.core.access.tokens import ANONYMOUS_ADMIN, Principal
from muster.core.events.workload import WorkloadCancelRequested
from muster.core.intake import applies, cancellations
from muster.core.intake import requests as provreqs
from muster.core.intake.refusal import Refusal
from muster.core.views.workloads import WorkloadsState, evolve
from tests.unit.harness_inputs import envelope

TEAM = Principal("team", frozenset({"team"}))
QUEUES = """
apiVersion: kueue.x-k8s.io/v1beta1
kind: ResourceFlavor
metadata: {name: default}
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: ClusterQueue
metadata: {name: cq}
spec:
  resourceGroups:
  - coveredResources: [cpu]
    flavors: [{name: default, resources: [{name: cpu, nominalQuota: 8}]}]
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: LocalQueue
metadata: {name: q, namespace: team}
spec: {clusterQueue: cq}
"""
JOB = """
apiVersion: batch/v1
kind: Job
metadata:
  name: train
  namespace: team
  labels: {kueue.x-k8s.io/queue-name: q}
spec:
  template:
    spec:
      containers: [{name: c, resources: {requests: {cpu: 1}}}]
"""
POD_SET = {"name": "w", "count": 1, "requests": {"nvidia.com/gpu": 1}}
REQUEST = {
    "name": "burst",
    "namespace": "team",
    "provisioningClassName": "queued-provisioning.gke.io",
    "podSets": [POD_SET],
}


def _state(*texts: str) -> WorkloadsState:
    """Intake's state after applying ``texts`` as an admin (configuration, workloads)."""
    state = WorkloadsState()
    position = 0
    for text in texts:
        checked = applies.check(ANONYMOUS_ADMIN, _read(text), state)
        assert isinstance(checked, applies.Checked), checked
        news = inputs.queue_configuration(checked.manifests, 1.0)
        news += [inputs.submission(i.workload_id, i.spec, 1.0, i.key) for i in checked.items]
        for new in news:
            position += 1
            state = evolve(state, envelope(new.event, position, 1.0, new.stream_id))
    return state


def _read(text: str) -> applies.Read:
    got = applies.read(text)
    assert not isinstance(got, Refusal), got
    return got


def test_cancel_is_the_owners_and_only_before_the_end() -> None:
    state = _state(QUEUES, JOB)
    [wid] = state.workloads
    view = state.workloads[wid]
    new = cancellations.cancel(TEAM, wid, view, 7.0)
    assert not isinstance(new, Refusal)
    assert isinstance(new.event, WorkloadCancelRequested) and new.occurred_at == 7.0
    stranger = Principal("other", frozenset({"other"}))
    assert getattr(cancellations.cancel(stranger, wid, view, 7.0), "code", "") == "Forbidden"
    assert cancellations.cancel(TEAM, "nope", None, 7.0) == Refusal(
        "NotFound", "workload nope not found"
    )
    view.status = "Succeeded"
    refused = cancellations.cancel(TEAM, wid, view, 7.0)
    assert isinstance(refused, Refusal) and refused.code == "AlreadyFinished"


def test_a_request_is_read_for_its_namespace_and_its_spec_never_changes() -> None:
    spec = provreqs.read(TEAM, REQUEST)
    assert not isinstance(spec, Refusal) and spec.key == "team/burst"
    other = provreqs.read(TEAM, {**REQUEST, "namespace": "other"})
    assert isinstance(other, Refusal) and other.code == "Forbidden"
    bad = provreqs.read(TEAM, {**REQUEST, "podSets": "x"})
    assert isinstance(bad, Refusal) and bad.code == "InvalidField" and bad.field
    assert provreqs.conflict(spec, None) is None
    assert provreqs.conflict(spec, spec) is None
    changed = provreqs.read(TEAM, {**REQUEST, "podSets": [{**POD_SET, "count": 2}]})
    assert not isinstance(changed, Refusal)
    refused = provreqs.conflict(changed, spec)
    assert refused is not None and refused.code == "AlreadyExists"


def test_deleting_a_request_checks_access_before_telling_what_exists() -> None:
    stranger = Principal("other", frozenset({"other"}))
    denied = provreqs.delete(stranger, "team", "burst", None, 1.0)
    assert isinstance(denied, Refusal) and denied.code == "Forbidden"
    missing = provreqs.delete(TEAM, "team", "burst", None, 1.0)
    assert isinstance(missing, Refusal) and missing.code == "NotFound"


def test_an_apply_is_refused_whole_on_access_references_queues_or_a_changed_spec() -> None:
    empty = WorkloadsState()
    forbidden = applies.check(TEAM, _read(QUEUES), empty)
    assert isinstance(forbidden, Refusal) and forbidden.code == "Forbidden"
    no_flavor = QUEUES.split("---", 1)[1]
    refused = applies.check(ANONYMOUS_ADMIN, _read(no_flavor), empty)
    assert isinstance(refused, Refusal) and refused.code == "UnknownFlavor"
    assert refused.field == "ClusterQueue cq.spec.resourceGroups[0].flavors[0].name"
    no_queue = applies.check(TEAM, _read(JOB), empty)
    assert isinstance(no_queue, Refusal) and no_queue.code == "UnknownQueue"
    together = applies.check(ANONYMOUS_ADMIN, _read(QUEUES + "---" + JOB), empty)
    assert isinstance(together, applies.Checked) and len(together.items) == 1
    state = _state(QUEUES, JOB)
    again = applies.check(TEAM, _read(JOB), state)
    assert isinstance(again, applies.Checked)
    assert again.items[0].workload_id in state.workloads  # the same stream: "unchanged"
    changed = applies.check(TEAM, _read(JOB.replace("cpu: 1", "cpu: 2")), state)
    assert isinstance(changed, Refusal) and changed.code == "IdempotencyKeyReused"
