"""bench.traces' ``las`` configuration per trace cluster: Tiresias (Gu et al., NSDI'19
§4.1) sets the K queues' thresholds from a cluster's distribution of attained service and
its STARVELIMIT (§4.2) per cluster; each trace's cluster here names its own."""

from __future__ import annotations

from bench.traces import ITP_LAS, LAS_LEVELS, LAS_STARVATION, TRACE_SET, cluster_doc
from muster.core.model import parse
from muster.core.model.queues import AttainedService


def _attained(trace: str, config: str = "las") -> AttainedService:
    t = TRACE_SET[trace]
    tenants = ["vc1"] if t.tenant else [t.name]
    spec = parse.cluster(cluster_doc(config, tenants, dict.fromkeys(tenants, 8), t.nodes, t.las))
    (cq,) = spec.cluster_queues
    assert cq.attained_service is not None
    return cq.attained_service


def _las(trace: str) -> tuple[tuple[float, ...], float, bool]:
    las = _attained(trace)
    return las.levels, las.starvation_factor, las.preempt_for_placement


def test_philly_keeps_two_levels_and_the_starvation_guard() -> None:
    assert _las("philly") == (LAS_LEVELS, LAS_STARVATION, True)
    assert LAS_STARVATION > 0  # its tenants' waits against FIFO's are a target


def test_only_phillys_shared_cluster_bounds_the_preemptions_of_whole_node_work() -> None:
    """Philly's eleven VCs share the queue: whole-node workloads (8 GPUs and more) are
    preempted for their level at most 4 times (its per-tenant target); ITP's cluster has
    one tenant and no guard. A variant's guard replaces the cluster's: ``las-unbounded``
    has none, ``las-max3`` binds every workload at 3."""
    philly = _attained("philly")
    assert (philly.max_preemptions, philly.max_preemptions_min_devices) == (4, 8)
    itp = _attained("itp")
    assert (itp.max_preemptions, itp.max_preemptions_min_devices) == (0, 0)
    plain = _attained("philly", "las-unbounded")
    assert (plain.max_preemptions, plain.max_preemptions_min_devices) == (0, 0)
    three = _attained("philly", "las-max3")
    assert (three.max_preemptions, three.max_preemptions_min_devices) == (3, 0)


def test_itp_sorts_week_long_jobs_below_day_long_ones_with_a_looser_guard() -> None:
    """ITP cluster 6 (one tenant, half its jobs past 36,000 GPU-s): a third threshold a
    decade above the second, and a starvation factor looser than Philly's
    (bench/README.md: 0.78x besteffort's avg JCT; 0.82x with a factor of 10)."""
    levels, factor, _ = _las("itp")
    assert (levels, factor, True, ()) == ITP_LAS
    assert levels[:2] == LAS_LEVELS and levels[2] == 10 * levels[1]
    assert factor > LAS_STARVATION
