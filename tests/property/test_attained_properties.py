"""Attained-service priority (Tiresias 2D-LAS, NSDI'19 §3-4) composes safely: over random
small clusters, jobs, priority classes, thresholds, starvation factors, preemption for a
place (``preemptForPlacement``), minimum runs and checkpoint intervals,

* a higher priority class is never preempted by a lower one, and within a class only a
  workload at a higher level than its preemptor's (attained service worked out from the
  log here, independently of the queue's fold) is taken, or one of its level and newer
  under ``LowerOrNewerEqualPriority``;
* with tenant fair sharing, a workload of another tenant and of the preemptor's class is
  taken only while its tenant keeps its nominal share (half the quota here: equal weights)
  after it (docs/architecture.md, "Choices": the per-tenant bound);
* a workload evicted ``maxPreemptions`` times (holding ``maxPreemptionsMinDevices`` or
  more) is not preempted by its class again, and
  one preempted ``maxCrossTenantPreemptions`` times by other tenants not by another
  tenant's workload of its class (it ranks as the first level: under
  ``LowerOrNewerEqualPriority`` an older workload of its class may still take it);
* no workload is evicted twice for one preemptor, the harness reaches its fixed point at
  every instant (no livelock) and, without a starvation guard (levels only grow, so
  preemptions are finite), every job finishes;
* replay re-derives every decision of every decider from the log (``verify``).
"""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from muster.core.events import queue as qev
from muster.core.model import parse
from muster.core.model.queues import AttainedService
from muster.core.sim.harness import Harness, build
from muster.core.verify import verify_decisions
from muster.core.views.accounting import devices
from tests.property.test_core_properties import SETTINGS
from tests.property.test_queueing_properties import bounded_rounds
from tests.unit.harness_inputs import GPU

HORIZON = 20_000.0  # virtual seconds: with a starvation guard LAS may time-slice for long


@st.composite
def scenarios(
    draw: st.DrawFn, cross_tenant: bool = False
) -> tuple[dict[str, Any], list[tuple[float, str, Any]]]:
    """``cross_tenant``: ``maxCrossTenantPreemptions: 1`` and more jobs, so that a job is
    often preempted by other tenants more than once without the bound."""
    levels = sorted(set(draw(st.lists(st.sampled_from([50, 200, 800, 3000]), min_size=1))))
    las = {
        "levels": levels,
        "starvationFactor": draw(st.sampled_from([0, 0, 1, 4])),
        "starvationLimitSeconds": draw(st.sampled_from([0, 0, 60])),
        "maxPreemptions": draw(st.sampled_from([0, 0, 1, 2])),
        "maxPreemptionsMinDevices": draw(st.sampled_from([0, 0, 2])),
        "maxCrossTenantPreemptions": draw(st.sampled_from([0, 0, 1, 2])),
        # Preempting for a place (a gang's quota is there, its node is not) takes only
        # lower ranks too, and ends: the invariants below hold with it.
        "preemptForPlacement": draw(st.booleans()),
    }
    if cross_tenant:
        las.update(maxCrossTenantPreemptions=1, maxPreemptions=0)
    preemption = {
        "withinClusterQueue": draw(st.sampled_from(["LowerPriority", "LowerOrNewerEqualPriority"])),
        "minAdmitDuration": draw(st.sampled_from([0, 0, 30, 120])),
    }
    namespaces = ["a", "b"]
    cluster: dict[str, Any] = {
        "name": "las",
        "zones": ["z"],
        "resourceFlavors": [{"name": "gpu"}],
        "nodes": [{"name": "n", "count": draw(st.integers(1, 2)), "allocatable": {GPU: 4}}],
        "clusterQueues": [
            {
                "name": "cq",
                "attainedService": las,
                "preemption": preemption,
                "resourceGroups": [
                    {
                        "coveredResources": [GPU],
                        "flavors": [
                            {"name": "gpu", "resources": [{"name": GPU, "nominalQuota": 8}]}
                        ],
                    }
                ],
                **(
                    {"admissionScope": {"admissionMode": "UsageBasedAdmissionFairSharing"}}
                    if draw(st.booleans())
                    else {}
                ),
            }
        ],
        "localQueues": [{"namespace": ns, "name": "q", "clusterQueue": "cq"} for ns in namespaces],
    }
    if draw(st.booleans()):
        cluster["checkpointing"] = {"intervalSeconds": draw(st.sampled_from([10, 60]))}
    jobs = []
    for i in range(draw(st.integers(5, 9) if cross_tenant else st.integers(2, 7))):
        doc = {
            "name": f"j{i}",
            "namespace": draw(st.sampled_from(namespaces)),
            "queueName": "q",
            "priority": draw(st.sampled_from([0, 0, 5])),
            "podSets": [
                {"name": "w", "count": 1, "requests": {GPU: draw(st.sampled_from([1, 2, 4]))}}
            ],
            "runtime": {"durationSeconds": draw(st.sampled_from([10, 60, 300, 900]))},
        }
        jobs.append((float(draw(st.integers(0, 400))), f"j{i}", parse.workload(doc)))
    return cluster, jobs


def _run(cluster: dict[str, Any], jobs: list[tuple[float, str, Any]]) -> Harness:
    with bounded_rounds():
        h = build(parse.cluster(cluster), jobs)
        h.run(until=HORIZON)
    return h


@settings(SETTINGS, max_examples=60)
@given(scenarios())
def test_attained_service_never_inverts_classes_and_replays(
    sc: tuple[dict[str, Any], list[tuple[float, str, Any]]],
) -> None:
    _check(*sc)


@settings(SETTINGS, max_examples=40)
@given(scenarios(cross_tenant=True))
def test_the_cross_tenant_bound_holds_and_replays(
    sc: tuple[dict[str, Any], list[tuple[float, str, Any]]],
) -> None:
    _check(*sc)


def _check(cluster: dict[str, Any], jobs: list[tuple[float, str, Any]]) -> None:
    h = _run(cluster, jobs)
    spec = parse.cluster(cluster).cluster_queues[0]
    las = spec.attained_service
    assert isinstance(las, AttainedService)
    priority = {wid: s.priority for _, wid, s in jobs}
    newer_too = spec.preemption.within_cluster_queue == "LowerOrNewerEqualPriority"
    service: dict[str, float] = {}  # GPU-seconds of ended attempts
    running: dict[str, tuple[float, int]] = {}  # admitted at, devices
    held: dict[str, int] = {}
    pairs: dict[tuple[str, str], int] = {}
    tenant_of = {wid: s.namespace for _, wid, s in jobs}
    submitted = {wid: at for at, wid, _ in jobs}
    by_tenant: dict[str, int] = {}  # GPUs each tenant holds
    # Each tenant's holdings when a preemptor's evictions began (judged together).
    before: dict[tuple[str, float], dict[str, int]] = {}
    evicted: dict[str, int] = {}  # evictions so far, per workload
    across: dict[str, int] = {}  # of them, by another tenant's preemptor
    tenants_fair = spec.admission_mode == "UsageBasedAdmissionFairSharing"
    nominal = 8 / 2  # the queue's quota over two tenants of weight 1
    for env in h.log.envelopes:
        ev, at = env.event, env.occurred_at
        if isinstance(ev, qev.QuotaReserved):
            held[ev.workload_id] = devices(ev.usage)
            t = tenant_of[ev.workload_id]
            by_tenant[t] = by_tenant.get(t, 0) + held[ev.workload_id]
        elif isinstance(ev, qev.WorkloadFinished) and ev.workload_id in running:
            running.pop(ev.workload_id)
            by_tenant[tenant_of[ev.workload_id]] -= held[ev.workload_id]
        elif isinstance(ev, qev.WorkloadAdmitted):
            running[ev.workload_id] = (at, held[ev.workload_id])
        elif isinstance(ev, qev.WorkloadEvicted):
            wid = ev.workload_id
            start, n = running.pop(wid)
            theirs = tenant_of[wid]
            if ev.preemptor is not None:
                pairs[(ev.preemptor, wid)] = pairs.get((ev.preemptor, wid), 0) + 1
                assert priority[ev.preemptor] >= priority[wid], "a class was inverted"
                # Spent, it ranks as the first level of its class: only newer-and-equal
                # preemption (where the policy has it) may still take it.
                as_newer = newer_too and submitted[wid] >= submitted[ev.preemptor]
                if (
                    priority[ev.preemptor] == priority[wid]
                    and las.max_preemptions
                    and n >= las.max_preemptions_min_devices
                ):
                    assert evicted.get(wid, 0) < las.max_preemptions or as_newer, (
                        f"{wid} preempted again"
                    )
                if (
                    priority[ev.preemptor] == priority[wid]
                    and las.max_cross_tenant_preemptions
                    and tenant_of[ev.preemptor] != theirs
                ):
                    assert across.get(wid, 0) < las.max_cross_tenant_preemptions or as_newer, (
                        f"{wid} preempted again by another tenant"
                    )
                had = before.setdefault((ev.preemptor, at), dict(by_tenant))[theirs]
                if (
                    tenants_fair
                    and tenant_of[ev.preemptor] != theirs
                    and priority[ev.preemptor] == priority[wid]
                ):
                    assert had - n >= nominal, f"{wid} taken below its tenant's nominal share"
                if priority[ev.preemptor] == priority[wid] and not las.starvation_factor:
                    victim = las.level(service.get(wid, 0.0) + n * (at - start))
                    mine = las.level(service.get(ev.preemptor, 0.0))
                    # LowerOrNewerEqualPriority: an older one may take a newer of its level.
                    assert victim > mine or (victim == mine and newer_too), (
                        f"{wid} (level {victim}) taken by a preemptor of level {mine}"
                    )
            service[wid] = service.get(wid, 0.0) + n * (at - start)
            by_tenant[theirs] -= n
            evicted[wid] = evicted.get(wid, 0) + 1
            if ev.preemptor is not None and tenant_of[ev.preemptor] != theirs:
                across[wid] = across.get(wid, 0) + 1
    assert max(pairs.values(), default=0) <= 1
    if not las.starvation_factor:
        finished = {e.event.workload_id for e in h.log.envelopes if e.type == "admission.finished"}
        assert finished == set(priority), "every job finishes"
    for runner in h.runners:
        _, mismatches = verify_decisions(h.log.envelopes, runner.decider)
        assert mismatches == [], mismatches[:1]
