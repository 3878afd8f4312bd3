"""Building the model from untrusted JSON/YAML documents (the API's and the CLI's shapes).

Field names are camelCase, as in Kubernetes and Kueue; see docs/api.md and
docs/cluster-description.md.
"""

from __future__ import annotations

from dataclasses import replace

from muster.core.model.cluster import (
    CapacityStep,
    Checkpointing,
    ClusterSpec,
    FailureWindow,
    NodePool,
    RegionalQuota,
)
from muster.core.model.fields import NAME, InvalidInput, Obj
from muster.core.model.inventory import (
    HOSTNAME,
    SELF_LINK,
    Gpu,
    NodeInventory,
    TopologySpec,
    asymmetric,
    bad_link,
)
from muster.core.model.queues import (
    DWS_CLASS,
    MAX_RUN_SECONDS,
    PROVISIONING_CONTROLLER,
    AdmissionCheckSpec,
    AttainedService,
    BackfillPolicy,
    BorrowWithinCohort,
    ClusterQueueSpec,
    CohortSpec,
    FairSharingConfig,
    FlavorFungibility,
    FlavorQuotas,
    LocalQueueSpec,
    NamespaceQuotaSpec,
    PreemptionPolicy,
    PriorityClassSpec,
    ProvisioningRequestConfigSpec,
    ResourceFlavorSpec,
    ResourceGroup,
    ResourceQuota,
    RetryStrategy,
    Taint,
    WaitForPodsReady,
)
from muster.core.model.workload import (
    FAILURE_ACTIONS,
    FAILURE_EVENTS,
    GPU_POLICIES,
    SURPLUS,
    DeviceFilter,
    FailurePolicy,
    FailureRule,
    Gang,
    PlacementPolicy,
    PodSet,
    PodSetTopology,
    ProvisioningRequestSpec,
    Runtime,
    Toleration,
    WorkloadSpec,
)

MAX_POD_SETS = 8
MAX_PODS = 100_000
MAX_SIM_RUNTIME = 365 * 86400.0
EFFECTS = ("", "NoSchedule", "PreferNoSchedule", "NoExecute")


def workload(data: object, path: str = "") -> WorkloadSpec:
    o = Obj(data, path)
    pod_sets = tuple(
        _pod_set(item, p) for item, p in o.items("podSets", required=True, max_items=MAX_POD_SETS)
    )
    names = [ps.name for ps in pod_sets]
    if len(set(names)) != len(names):
        raise InvalidInput(o.at("podSets"), "pod set names must be unique")
    if sum(1 for ps in pod_sets if ps.min_count is not None) > 1:
        raise InvalidInput(o.at("podSets"), "only one pod set may have a minCount (Kueue)")
    if sum(ps.count for ps in pod_sets) > MAX_PODS:
        raise InvalidInput(o.at("podSets"), f"more than {MAX_PODS} pods in one workload")
    consumes = o.text("consumesProvisioningRequest", pattern=NAME, max_len=63)
    spec = WorkloadSpec(
        name=o.req_text("name", pattern=NAME, max_len=63),
        namespace=o.text("namespace", default="default", pattern=NAME, max_len=63) or "default",
        queue_name=(
            o.text("queueName", pattern=NAME, max_len=63) or ""
            if consumes
            else o.req_text("queueName", pattern=NAME, max_len=63)
        ),
        pod_sets=pod_sets,
        priority=o.integer("priority", default=0, lo=-(2**31), hi=10**9) or 0,
        priority_class=o.text("priorityClassName", pattern=NAME),
        max_run_duration_seconds=o.integer("maxRunDurationSeconds", lo=1, hi=MAX_RUN_SECONDS),
        runtime=_runtime(o.raw("runtime"), o.at("runtime")),
        labels=o.labels("labels"),
        consumes=consumes,
        gpu_group_size=o.integer("gpuGroupSize", lo=1, hi=1_000_000),
        placement=placement_policy(o.obj("placement")),
        failure_policy=_failure_policy(o.obj("failurePolicy")),
        gang=_gang(o.obj("gang")),
        checkpoint_interval_seconds=_positive_seconds(o, "checkpointIntervalSeconds"),
        termination_grace_seconds=o.number(
            "terminationGracePeriodSeconds", default=30.0, lo=0.0, hi=MAX_RUN_SECONDS
        ),
    )
    o.done()
    _gang_member(spec, o)
    known = {ps.name for ps in pod_sets}
    for i, rule in enumerate(spec.failure_policy.rules):
        for name in rule.pod_sets:
            if name not in known:
                raise InvalidInput(
                    o.at(f"failurePolicy.rules[{i}].podSets"), f"no pod set is named {name!r}"
                )
    if consumes and spec.queue_name:
        raise InvalidInput(
            o.at("queueName"),
            "a workload consuming a ProvisioningRequest runs on its nodes, outside any queue: "
            "give queueName or consumesProvisioningRequest, not both",
        )
    return spec


def _gang(o: Obj | None) -> Gang | None:
    if o is None:
        return None
    gang = Gang(
        name=o.req_text("name", pattern=NAME, max_len=63),
        cardinality=o.req_integer("cardinality", lo=1, hi=MAX_PODS),
    )
    o.done()
    return gang


def _gang_member(spec: WorkloadSpec, o: Obj) -> None:
    """What a member may not carry: its pods start with the whole gang's, and the gang's
    workload is built from its members' pods (``core/intake/gangs.py``)."""
    if spec.gang is None:
        return
    if spec.consumes is not None:
        raise InvalidInput(
            o.at("gang"),
            "a gang member cannot consume a ProvisioningRequest; give one or the other",
        )
    for i, ps in enumerate(spec.pod_sets):
        if ps.min_count is not None:
            raise InvalidInput(
                o.at(f"podSets[{i}].minCount"),
                "a gang member's pods start with the whole gang's: no partial admission",
            )
    if spec.failure_policy.rules:
        raise InvalidInput(
            o.at("failurePolicy.rules"),
            "a gang member cannot name pod sets in rules: the gang's workload merges its "
            "members' pod sets",
        )


def _pod_set(data: object, path: str) -> PodSet:
    o = Obj(data, path)
    count = o.req_integer("count", lo=1, hi=MAX_PODS)
    min_count = o.integer("minCount", lo=1, hi=count)
    surplus = o.choice("surplus", SURPLUS, "Drop")
    if surplus != "Drop" and min_count is None:
        raise InvalidInput(o.at("surplus"), "needs a minCount: only pods above it wait")
    ps = PodSet(
        name=o.text("name", default="main", pattern=NAME, max_len=63) or "main",
        count=count,
        requests=o.quantities("requests"),
        node_selector=o.labels("nodeSelector"),
        tolerations=tuple(_toleration(t, p) for t, p in o.items("tolerations", max_items=64)),
        min_count=min_count,
        surplus="Wait" if surplus == "Wait" else "Drop",
        topology=_pod_set_topology(o.obj("topology"), count),
        devices=_device_filter(o.obj("devices")),
        backoff_limit=o.integer("backoffLimit", default=0, lo=0, hi=10_000) or 0,
    )
    o.done()
    return ps


def _pod_set_topology(o: Obj | None, count: int) -> PodSetTopology | None:
    if o is None:
        return None
    slice_size = o.integer("sliceSize", lo=1, hi=count)
    if slice_size is not None and count % slice_size:
        raise InvalidInput(o.at("sliceSize"), f"must divide the pod count {count}")
    topo = PodSetTopology(
        required=o.text("required"),
        preferred=o.text("preferred"),
        slice_size=slice_size,
        slice_required=o.text("sliceRequired"),
        exclusive=o.text("exclusive"),
        tier=o.integer("highestTierAllowed", lo=1, hi=16),
        tier_soft=o.choice("mode", ("hard", "soft"), "hard") == "soft",
        slice_tier=o.integer("sliceHighestTierAllowed", lo=1, hi=16),
    )
    o.done()
    if topo.required and topo.preferred:
        raise InvalidInput(o.path, "give required or preferred, not both")
    if topo.slice_tier is not None and topo.slice_required:
        raise InvalidInput(
            o.at("sliceHighestTierAllowed"),
            "give sliceRequired or sliceHighestTierAllowed, not both",
        )
    if topo.slice_tier is not None and slice_size is None:
        raise InvalidInput(o.at("sliceHighestTierAllowed"), "needs sliceSize (the pods of a slice)")
    return topo


def _device_filter(o: Obj | None) -> DeviceFilter | None:
    if o is None:
        return None
    f = DeviceFilter(
        use_uuids=o.texts("useUuids"),
        avoid_uuids=o.texts("avoidUuids"),
        use_types=o.texts("useTypes"),
        avoid_types=o.texts("avoidTypes"),
    )
    o.done()
    return f


def placement_policy(o: Obj | None) -> PlacementPolicy | None:
    if o is None:
        return None
    node = o.choice("node", ("binpack", "spread"), "binpack")
    gpu = o.choice("gpu", GPU_POLICIES, "binpack")
    o.done()
    return PlacementPolicy(
        node="spread" if node == "spread" else "binpack",
        gpu="spread"
        if gpu == "spread"
        else "topology-aware"
        if gpu == "topology-aware"
        else "binpack",
    )


def _failure_policy(o: Obj | None) -> FailurePolicy:
    if o is None:
        return FailurePolicy()
    rules = []
    for item, p in o.items("rules", max_items=64):
        r = Obj(item, p)
        rules.append(
            FailureRule(
                event=r.choice("event", FAILURE_EVENTS, "PodFailed"),  # type: ignore[arg-type]
                action=r.choice("action", FAILURE_ACTIONS, "RestartJob"),  # type: ignore[arg-type]
                pod_sets=r.texts("podSets"),
            )
        )
        r.done()
    policy = FailurePolicy(
        max_restarts=o.integer("maxRestarts", lo=0, hi=10_000),
        rules=tuple(rules),
        on_failure=o.choice("onFailure", FAILURE_ACTIONS, "FailJob"),  # type: ignore[arg-type]
    )
    o.done()
    return policy


def _toleration(data: object, path: str) -> Toleration:
    o = Obj(data, path)
    operator = o.text("operator", default="Equal") or "Equal"
    if operator not in ("Equal", "Exists"):
        raise InvalidInput(o.at("operator"), f"must be Equal or Exists, not {operator!r}")
    effect = o.text("effect", default="") if o.raw("effect") != "" else ""
    if effect not in EFFECTS:
        raise InvalidInput(o.at("effect"), f"must be one of {', '.join(EFFECTS[1:])}")
    tol = Toleration(
        key=o.text("key", default="") or "",
        operator=operator,
        value=o.text("value", default="") or "",
        effect=effect or "",
    )
    o.done()
    return tol


def _runtime(data: object, path: str) -> Runtime:
    if data is None:
        return Runtime()
    o = Obj(data, path)
    rt = Runtime(
        duration_seconds=o.duration("durationSeconds", default=60.0, hi=MAX_SIM_RUNTIME) or 0.0,
        exit_code=o.integer("exitCode", default=0, lo=0, hi=255) or 0,
        exit_codes=tuple(_exit_codes(o)),
    )
    o.done()
    return rt


def _exit_codes(o: Obj) -> list[int]:
    raw = o.raw("exitCodes")
    if raw is None:
        return []
    if not isinstance(raw, list) or len(raw) > 100:
        raise InvalidInput(o.at("exitCodes"), "must be a list of at most 100 exit codes")
    for i, code in enumerate(raw):
        if isinstance(code, bool) or not isinstance(code, int) or not 0 <= code <= 255:
            raise InvalidInput(o.at(f"exitCodes[{i}]"), "must be an exit code 0..255")
    return list(raw)


def _taint(data: object, path: str) -> Taint:
    o = Obj(data, path)
    effect = o.text("effect", default="NoSchedule") or "NoSchedule"
    if effect not in EFFECTS[1:]:
        raise InvalidInput(o.at("effect"), f"must be one of {', '.join(EFFECTS[1:])}")
    taint = Taint(key=o.req_text("key"), value=o.text("value", default="") or "", effect=effect)
    o.done()
    return taint


def resource_flavor(data: object, path: str = "") -> ResourceFlavorSpec:
    o = Obj(data, path)
    spec = ResourceFlavorSpec(
        name=o.req_text("name", pattern=NAME),
        node_labels=o.labels("nodeLabels"),
        node_taints=tuple(_taint(t, p) for t, p in o.items("nodeTaints")),
        tolerations=tuple(_toleration(t, p) for t, p in o.items("tolerations")),
    )
    o.done()
    return spec


def cluster_queue(data: object, path: str = "") -> ClusterQueueSpec:
    o = Obj(data, path)
    strategy = o.choice("queueingStrategy", ("BestEffortFIFO", "StrictFIFO"), "BestEffortFIFO")
    groups = _resource_groups(o, required=True)
    cohort = o.text("cohort", pattern=NAME)
    cohort_name = o.text("cohortName", pattern=NAME)
    if cohort and cohort_name and cohort != cohort_name:
        raise InvalidInput(o.at("cohortName"), "cohort and cohortName disagree")
    _accept_any_namespace(o)
    checks, on_flavors = _admission_checks(o)
    spec = ClusterQueueSpec(
        name=o.req_text("name", pattern=NAME),
        resource_groups=groups,
        cohort=cohort or cohort_name,
        queueing_strategy="StrictFIFO" if strategy == "StrictFIFO" else "BestEffortFIFO",
        admission_checks=checks,
        check_flavors=on_flavors,
        preemption=_preemption(o.obj("preemption")),
        flavor_fungibility=_fungibility(o.obj("flavorFungibility")),
        fair_sharing_weight=_weight(o.obj("fairSharing")),
        stop_policy=_stop_policy(o),  # type: ignore[arg-type]
        admission_mode=_admission_mode(o.obj("admissionScope")),  # type: ignore[arg-type]
        placement=placement_policy(o.obj("placement")) or PlacementPolicy(),
        attained_service=_attained_service(o.obj("attainedService")),
        backfill=_backfill(o.obj("backfill")),
    )
    o.done()
    return spec


def _backfill(o: Obj | None) -> BackfillPolicy | None:
    """``backfill: {reserveAfterSeconds, defaultRunSeconds}`` (durations: 90, "10m")."""
    if o is None:
        return None
    after = o.duration("reserveAfterSeconds", default=0.0, hi=MAX_RUN_SECONDS) or 0.0
    default = o.duration("defaultRunSeconds", hi=MAX_RUN_SECONDS)
    if default is not None and default <= 0:
        raise InvalidInput(o.at("defaultRunSeconds"), "must be more than 0 seconds")
    o.done()
    return BackfillPolicy(reserve_after_seconds=after, default_run_seconds=default)


def _admission_checks(o: Obj) -> tuple[tuple[str, ...], dict[str, tuple[str, ...]]]:
    """``admissionChecks`` (names), or Kueue's ``admissionChecksStrategy.admissionChecks``
    (``{name, onFlavors}``, a check running only for workloads assigned one of its flavors);
    not both, as Kueue's validation says."""
    names = o.texts("admissionChecks")
    strategy = o.obj("admissionChecksStrategy")
    if strategy is None:
        return names, {}
    if names:
        raise InvalidInput(
            o.at("admissionChecksStrategy"),
            "admissionChecks and admissionChecksStrategy are mutually exclusive",
        )
    on_flavors: dict[str, tuple[str, ...]] = {}
    for item, at in strategy.items("admissionChecks"):
        rule = Obj(item, at)
        name = rule.req_text("name", pattern=NAME)
        if name in on_flavors:
            raise InvalidInput(rule.at("name"), f"admission check {name} is listed twice")
        on_flavors[name] = rule.texts("onFlavors")
        rule.done()
    strategy.done()
    return tuple(on_flavors), {n: f for n, f in on_flavors.items() if f}


def _resource_groups(o: Obj, *, required: bool) -> tuple[ResourceGroup, ...]:
    groups = tuple(_resource_group(g, p) for g, p in o.items("resourceGroups", required=required))
    covered = [r for g in groups for r in g.covered_resources]
    if len(covered) != len(set(covered)):
        raise InvalidInput(o.at("resourceGroups"), "a resource is covered by two resource groups")
    flavors = [f.name for g in groups for f in g.flavors]
    if len(flavors) != len(set(flavors)):
        raise InvalidInput(o.at("resourceGroups"), "a flavor appears in two resource groups")
    return groups


def _accept_any_namespace(o: Obj) -> None:
    """Kueue's ``namespaceSelector``: only the match-all ``{}`` is supported (LocalQueues route)."""
    selector = o.raw("namespaceSelector")
    if selector not in (None, {}):
        raise InvalidInput(o.at("namespaceSelector"), "only {} (every namespace) is supported")


def _preemption(o: Obj | None) -> PreemptionPolicy:
    if o is None:
        return PreemptionPolicy()
    within = o.choice(
        "withinClusterQueue", ("Never", "LowerPriority", "LowerOrNewerEqualPriority"), "Never"
    )
    reclaim = o.choice("reclaimWithinCohort", ("Never", "LowerPriority", "Any"), "Never")
    borrow = BorrowWithinCohort()
    b = o.obj("borrowWithinCohort")
    if b is not None:
        borrow = BorrowWithinCohort(
            policy=b.choice("policy", ("Never", "LowerPriority"), "Never"),  # type: ignore[arg-type]
            max_priority_threshold=b.integer("maxPriorityThreshold"),
        )
        b.done()
    protect = o.duration("minAdmitDuration", default=0.0, hi=MAX_RUN_SECONDS) or 0.0
    on_preempted = o.choice("onPreempted", ("Requeue", "End"), "Requeue")
    o.done()
    return PreemptionPolicy(
        within_cluster_queue=within,  # type: ignore[arg-type]
        reclaim_within_cohort=reclaim,  # type: ignore[arg-type]
        borrow_within_cohort=borrow,
        min_admit_duration=protect,
        on_preempted=on_preempted,  # type: ignore[arg-type]
    )


def _attained_service(o: Obj | None) -> AttainedService | None:
    """Tiresias' discretised LAS: ``levels`` (GPU-seconds, ascending),
    ``starvationFactor``, ``starvationLimitSeconds``, ``maxPreemptions``,
    ``maxPreemptionsMinDevices``, ``maxCrossTenantPreemptions`` and
    ``preemptForPlacement``."""
    if o is None:
        return None
    levels: list[float] = []
    for value, at in o.items("levels", required=True, max_items=16):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
            raise InvalidInput(at, f"must be a positive number of GPU-seconds, not {value!r}")
        if levels and value <= levels[-1]:
            raise InvalidInput(at, "levels must be in ascending order")
        levels.append(float(value))
    if not levels:
        raise InvalidInput(o.at("levels"), "must name at least one threshold")
    factor = o.number("starvationFactor", default=0.0, lo=0.0, hi=1e6)
    limit = o.duration("starvationLimitSeconds", default=0.0, hi=MAX_RUN_SECONDS) or 0.0
    most = o.integer("maxPreemptions", default=0, lo=0, hi=1_000_000)
    across = o.integer("maxCrossTenantPreemptions", default=0, lo=0, hi=1_000_000)
    least = o.integer("maxPreemptionsMinDevices", default=0, lo=0, hi=1_000_000)
    for_placement = o.flag("preemptForPlacement", False)
    o.done()
    return AttainedService(
        levels=tuple(levels),
        starvation_factor=factor,
        preempt_for_placement=for_placement,
        starvation_limit=limit,
        max_preemptions=most or 0,
        max_cross_tenant_preemptions=across or 0,
        max_preemptions_min_devices=least or 0,
    )


def _fungibility(o: Obj | None) -> FlavorFungibility:
    if o is None:
        return FlavorFungibility()
    stops = ("MayStopSearch", "TryNextFlavor")
    spec = FlavorFungibility(
        when_can_borrow=o.choice("whenCanBorrow", stops, "MayStopSearch"),  # type: ignore[arg-type]
        when_can_preempt=o.choice("whenCanPreempt", stops, "TryNextFlavor"),  # type: ignore[arg-type]
        preference=o.choice(  # type: ignore[arg-type]
            "preference",
            ("BorrowingOverPreemption", "PreemptionOverBorrowing"),
            "BorrowingOverPreemption",
        ),
    )
    o.done()
    return spec


def _weight(o: Obj | None) -> float:
    if o is None:
        return 1.0
    weight = o.number("weight", default=1.0, lo=0.0, hi=1e6)
    o.done()
    return weight


def _stop_policy(o: Obj) -> str:
    return o.choice("stopPolicy", ("None", "Hold", "HoldAndDrain"), "None")


def _admission_mode(o: Obj | None) -> str:
    if o is None:
        return "None"
    mode = o.choice(
        "admissionMode",
        ("NoAdmissionFairSharing", "UsageBasedAdmissionFairSharing"),
        "NoAdmissionFairSharing",
    )
    o.done()
    return "UsageBasedAdmissionFairSharing" if mode == "UsageBasedAdmissionFairSharing" else "None"


def cohort(data: object, path: str = "") -> CohortSpec:
    o = Obj(data, path)
    spec = CohortSpec(
        name=o.req_text("name", pattern=NAME),
        parent=o.text("parentName", pattern=NAME) or o.text("parent", pattern=NAME),
        resource_groups=_resource_groups(o, required=False),
        fair_sharing_weight=_weight(o.obj("fairSharing")),
    )
    o.done()
    if spec.parent == spec.name:
        raise InvalidInput(o.at("parentName"), "a cohort cannot be its own parent")
    return spec


def priority_class(
    data: object, path: str = "", kind: str = "WorkloadPriorityClass"
) -> PriorityClassSpec:
    o = Obj(data, path)
    spec = PriorityClassSpec(
        name=o.req_text("name", pattern=NAME),
        value=o.req_integer("value", lo=-(2**31), hi=10**9),
        kind="PriorityClass" if kind == "PriorityClass" else "WorkloadPriorityClass",
        global_default=o.flag("globalDefault", False),
        preemptible=o.flag("preemptible", True),
        preemption_policy=o.choice(  # type: ignore[arg-type]
            "preemptionPolicy", ("PreemptLowerPriority", "Never"), "PreemptLowerPriority"
        ),
    )
    o.raw("description")
    o.done()
    return spec


def namespace_quota(data: object, path: str = "") -> NamespaceQuotaSpec:
    o = Obj(data, path)
    hard = o.quantities("hard", positive=False)
    if not hard:
        raise InvalidInput(o.at("hard"), "must name at least one resource")
    spec = NamespaceQuotaSpec(
        namespace=o.text("namespace", default="default", pattern=NAME) or "default",
        name=o.req_text("name", pattern=NAME),
        hard={_quota_resource(r): q for r, q in hard.items()},
        enforcement=o.choice("enforcement", ("Wait", "Reject"), "Wait"),  # type: ignore[arg-type]
    )
    o.done()
    return spec


def _quota_resource(name: str) -> str:
    """ResourceQuota writes extended resources as ``requests.nvidia.com/gpu``; plain names too."""
    return name.removeprefix("requests.").removeprefix("limits.")


def wait_for_pods_ready(data: object, path: str = "") -> WaitForPodsReady:
    if data is None:
        return WaitForPodsReady()
    o = Obj(data, path)
    defaults = WaitForPodsReady()
    timeout = o.duration("timeout", default=defaults.timeout_seconds)
    if timeout is None or timeout <= 0:
        raise InvalidInput(o.at("timeout"), "must be a positive duration")
    spec = WaitForPodsReady(
        enable=o.flag("enable", False),
        timeout_seconds=timeout,
        block_admission=o.flag("blockAdmission", False),
    )
    r = o.obj("requeuingStrategy")
    if r is not None:
        base = r.integer("backoffBaseSeconds", default=60, lo=1, hi=86400) or 60
        spec = WaitForPodsReady(
            enable=spec.enable,
            timeout_seconds=spec.timeout_seconds,
            block_admission=spec.block_admission,
            requeue_timestamp=r.choice(  # type: ignore[arg-type]
                "timestamp", ("Eviction", "Creation"), "Eviction"
            ),
            backoff_limit_count=r.integer("backoffLimitCount", lo=0, hi=10_000),
            backoff_base_seconds=float(base),
            backoff_max_seconds=float(
                r.integer("backoffMaxSeconds", default=3600, lo=base, hi=7 * 86400) or 3600
            ),
        )
        r.done()
    o.done()
    return spec


def fair_sharing(data: object, path: str = "") -> FairSharingConfig:
    if data is None:
        return FairSharingConfig()
    o = Obj(data, path)
    strategies = o.texts("preemptionStrategies") or FairSharingConfig().preemption_strategies
    for s in strategies:
        if s not in ("LessThanOrEqualToFinalShare", "LessThanInitialShare"):
            raise InvalidInput(o.at("preemptionStrategies"), f"unknown strategy {s!r}")
    spec = FairSharingConfig(enable=o.flag("enable", False), preemption_strategies=strategies)
    o.done()
    return spec


def _resource_group(data: object, path: str) -> ResourceGroup:
    o = Obj(data, path)
    covered = o.texts("coveredResources")
    if not covered:
        raise InvalidInput(o.at("coveredResources"), "must name at least one resource")
    flavors = tuple(_flavor_quotas(f, p, covered) for f, p in o.items("flavors", required=True))
    o.done()
    return ResourceGroup(covered_resources=covered, flavors=flavors)


def _flavor_quotas(data: object, path: str, covered: tuple[str, ...]) -> FlavorQuotas:
    o = Obj(data, path)
    name = o.req_text("name", pattern=NAME)
    quotas: list[ResourceQuota] = []
    for item, p in o.items("resources", required=True):
        r = Obj(item, p)
        resource = r.req_text("name")
        if resource not in covered:
            raise InvalidInput(r.at("name"), f"{resource} is not in coveredResources")
        nominal = r.quantity("nominalQuota", resource, required=True)
        assert nominal is not None
        quotas.append(
            ResourceQuota(
                name=resource,
                nominal_quota=nominal,
                borrowing_limit=r.quantity("borrowingLimit", resource),
                lending_limit=r.quantity("lendingLimit", resource),
            )
        )
        r.done()
    o.done()
    return FlavorQuotas(name=name, resources=tuple(quotas))


def local_queue(data: object, path: str = "") -> LocalQueueSpec:
    o = Obj(data, path)
    spec = LocalQueueSpec(
        namespace=o.text("namespace", default="default", pattern=NAME) or "default",
        name=o.req_text("name", pattern=NAME),
        cluster_queue=o.req_text("clusterQueue", pattern=NAME),
        stop_policy=_stop_policy(o),  # type: ignore[arg-type]
        fair_sharing_weight=_weight(o.obj("fairSharing")),
    )
    o.done()
    return spec


def _positive_seconds(o: Obj, key: str) -> float | None:
    if o.raw(key) is None:
        return None
    value = o.number(key, default=0.0, lo=0.0, hi=MAX_RUN_SECONDS)
    if value <= 0:
        raise InvalidInput(o.at(key), f"must be a positive number of seconds, got {value:g}")
    return value


def _checkpointing(o: Obj | None) -> Checkpointing:
    """The cluster's checkpoint default and restore overheads (Helios' by default)."""
    if o is None:
        return Checkpointing()
    interval = _positive_seconds(o, "intervalSeconds")
    base = Checkpointing()
    restore = o.obj("restoreSeconds")
    steps = {}
    if restore is not None:
        for key, name in (
            ("singleGPU", "single_gpu_seconds"),
            ("singleNode", "single_node_seconds"),
            ("multiNode", "multi_node_seconds"),
        ):
            steps[name] = restore.number(key, default=getattr(base, name), lo=0.0, hi=86_400.0)
        restore.done()
    o.done()
    return Checkpointing(interval_seconds=interval, **steps)


def cluster(data: object, path: str = "") -> ClusterSpec:
    """The cluster description: see docs/cluster-description.md."""
    o = Obj(data, path)
    zones = o.texts("zones")
    if not zones:
        raise InvalidInput(o.at("zones"), "must name at least one zone")
    spec = ClusterSpec(
        name=o.req_text("name", pattern=NAME),
        region=o.text("region", default="local") or "local",
        zones=zones,
        node_pools=tuple(_node_pool(p, at, zones) for p, at in o.items("nodePools")),
        quotas=tuple(_regional_quota(q, at) for q, at in o.items("quotas")),
        resource_flavors=tuple(resource_flavor(f, at) for f, at in o.items("resourceFlavors")),
        cluster_queues=tuple(cluster_queue(q, at) for q, at in o.items("clusterQueues")),
        local_queues=tuple(local_queue(q, at) for q, at in o.items("localQueues")),
        admission_checks=tuple(admission_check(c, at) for c, at in o.items("admissionChecks")),
        provisioning_configs=tuple(
            provisioning_config(c, at) for c, at in o.items("provisioningRequestConfigs")
        ),
        cohorts=tuple(cohort(c, at) for c, at in o.items("cohorts")),
        priority_classes=tuple(priority_class(c, at) for c, at in o.items("priorityClasses")),
        namespace_quotas=tuple(namespace_quota(q, at) for q, at in o.items("namespaceQuotas")),
        fair_sharing=fair_sharing(o.raw("fairSharing"), o.at("fairSharing")),
        wait_for_pods_ready=wait_for_pods_ready(
            o.raw("waitForPodsReady"), o.at("waitForPodsReady")
        ),
        booking_seconds=_booking(o),
        active_requests=o.integer("activeRequests", default=100, lo=1, hi=100_000) or 100,
        checkpointing=_checkpointing(o.obj("checkpointing")),
    )
    nodes = [n for item, at in o.items("nodes", max_items=10_000) for n in _node_group(item, at)]
    _unique(o.at("nodes"), [n.name for n in nodes])
    topology, nodes = _topology(o.obj("topology"), nodes)
    spec = replace(spec, nodes=tuple(nodes), topology=topology)
    o.done()
    _unique(o.at("nodePools"), [p.name for p in spec.node_pools])
    _unique(o.at("clusterQueues"), [q.name for q in spec.cluster_queues])
    _unique(o.at("resourceFlavors"), [f.name for f in spec.resource_flavors])
    _unique(o.at("cohorts"), [c.name for c in spec.cohorts])
    _unique(o.at("priorityClasses"), [c.name for c in spec.priority_classes])
    _unique(o.at("localQueues"), [q.key for q in spec.local_queues])
    _unique(o.at("admissionChecks"), [c.name for c in spec.admission_checks])
    _unique(o.at("provisioningRequestConfigs"), [c.name for c in spec.provisioning_configs])
    return spec


def admission_check(data: object, path: str = "") -> AdmissionCheckSpec:
    """Kueue's AdmissionCheck (``name`` plus its ``spec``)."""
    o = Obj(data, path)
    controller = o.text("controllerName", default=PROVISIONING_CONTROLLER) or ""
    config: str | None = None
    p = o.obj("parameters")
    if p is not None and controller != PROVISIONING_CONTROLLER:
        raise InvalidInput(
            o.at("parameters"),
            f"belong to the {controller} controller, which reads its own configuration: "
            "muster keeps parameters only for its ProvisioningRequest checks",
        )
    if p is not None:
        p.text("apiGroup")
        kind = p.text("kind", default="ProvisioningRequestConfig")
        if kind != "ProvisioningRequestConfig":
            raise InvalidInput(p.at("kind"), "must be ProvisioningRequestConfig")
        config = p.req_text("name", pattern=NAME)
        p.done()
    spec = AdmissionCheckSpec(
        name=o.req_text("name", pattern=NAME), controller_name=controller, config=config
    )
    o.done()
    return spec


def provisioning_config(data: object, path: str = "") -> ProvisioningRequestConfigSpec:
    """Kueue's ProvisioningRequestConfig (``name`` plus its ``spec``)."""
    o = Obj(data, path)
    retry = RetryStrategy()
    r = o.obj("retryStrategy")
    if r is not None:
        base = r.integer("backoffBaseSeconds", default=60, lo=1, hi=86400) or 60
        retry = RetryStrategy(
            backoff_limit_count=r.integer("backoffLimitCount", default=3, lo=0, hi=1000) or 0,
            backoff_base_seconds=float(base),
            backoff_max_seconds=float(
                r.integer("backoffMaxSeconds", default=1800, lo=base, hi=7 * 86400) or 1800
            ),
        )
        r.done()
    policy = o.choice(
        "podSetMergePolicy",
        ("", "IdenticalPodTemplates", "IdenticalWorkloadSchedulingRequirements"),
        "",
    )
    spec = ProvisioningRequestConfigSpec(
        name=o.req_text("name", pattern=NAME),
        provisioning_class=o.req_text("provisioningClassName"),
        managed_resources=o.texts("managedResources"),
        parameters=provisioning_parameters(o, "parameters"),
        retry=retry,
        pod_set_merge_policy=policy,  # type: ignore[arg-type]
    )
    if o.raw("podSetUpdates") is not None:
        raise InvalidInput(o.at("podSetUpdates"), "is not supported")
    o.done()
    return spec


def provisioning_parameters(o: Obj, key: str) -> dict[str, str]:
    """ProvisioningRequest parameters: at most 100 strings of at most 255 characters; a
    ``maxRunDurationSeconds`` must be a whole number of seconds up to 7 days."""
    raw = o.raw(key)
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise InvalidInput(o.at(key), "must be an object of strings")
    if len(raw) > 100:
        raise InvalidInput(o.at(key), f"has {len(raw)} entries; at most 100")
    out: dict[str, str] = {}
    for name, value in raw.items():
        if isinstance(value, bool) or not isinstance(value, str | int):
            raise InvalidInput(f"{o.at(key)}.{name}", "must be a string")
        text = str(value)
        if len(text) > 255:
            raise InvalidInput(f"{o.at(key)}.{name}", "must be at most 255 characters")
        out[str(name)] = text
    if "maxRunDurationSeconds" in out:
        max_run_seconds(out["maxRunDurationSeconds"], f"{o.at(key)}.maxRunDurationSeconds")
    return out


def max_run_seconds(raw: str, path: str) -> int:
    if not (raw.isascii() and raw.isdigit()) or not 1 <= int(raw) <= MAX_RUN_SECONDS:
        raise InvalidInput(
            path, f"must be a whole number of seconds from 1 to {MAX_RUN_SECONDS} (7 days)"
        )
    return int(raw)


MAX_REQUEST_POD_SETS = 32  # the ProvisioningRequest CRD's limit


def provisioning_request(data: object, path: str = "") -> ProvisioningRequestSpec:
    """A standalone ProvisioningRequest in muster's JSON form (the manifest form resolves its
    PodTemplates into the same pod sets)."""
    o = Obj(data, path)
    pod_sets = tuple(
        _pod_set(item, p)
        for item, p in o.items("podSets", required=True, max_items=MAX_REQUEST_POD_SETS)
    )
    names = [ps.name for ps in pod_sets]
    if len(set(names)) != len(names):
        raise InvalidInput(o.at("podSets"), "pod set names must be unique")
    if any(ps.min_count is not None for ps in pod_sets):
        raise InvalidInput(o.at("podSets"), "a ProvisioningRequest has no minCount")
    spec = ProvisioningRequestSpec(
        name=o.req_text("name", pattern=NAME, max_len=63),
        namespace=o.text("namespace", default="default", pattern=NAME, max_len=63) or "default",
        provisioning_class=o.text("provisioningClassName", default=DWS_CLASS) or DWS_CLASS,
        parameters=provisioning_parameters(o, "parameters"),
        pod_sets=pod_sets,
    )
    o.done()
    return spec


def _booking(o: Obj) -> float:
    seconds = o.duration("bookingSeconds", default=600.0)
    if seconds is None or seconds <= 0:
        raise InvalidInput(o.at("bookingSeconds"), "must be a positive duration")
    return seconds


def _unique(path: str, names: list[str]) -> None:
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise InvalidInput(path, f"name {dupes[0]!r} appears twice")


def _node_pool(data: object, path: str, zones: tuple[str, ...]) -> NodePool:
    o = Obj(data, path)
    pool_zones = o.texts("zones")
    for z in pool_zones:
        if z not in zones:
            raise InvalidInput(o.at("zones"), f"zone {z!r} is not one of the cluster's zones")
    steps = []
    for item, p in o.items("capacity"):
        s = Obj(item, p)
        counts: dict[str, int] = {}
        raw = s.raw("zones", required=True)
        if not isinstance(raw, dict):
            raise InvalidInput(s.at("zones"), "must map zone names to node counts")
        for zone, n in raw.items():
            if zone not in zones:
                raise InvalidInput(f"{s.at('zones')}.{zone}", "is not one of the cluster's zones")
            if isinstance(n, bool) or not isinstance(n, int) or n < 0:
                raise InvalidInput(f"{s.at('zones')}.{zone}", "must be a node count >= 0")
            counts[zone] = n
        steps.append(CapacityStep(at=s.duration("at", default=0.0) or 0.0, zones=counts))
        s.done()
    failures = []
    for item, p in o.items("failures"):
        f = Obj(item, p)
        start = f.duration("at", default=0.0) or 0.0
        until = f.duration("until")
        if until is not None and until <= start:
            raise InvalidInput(f.at("until"), "must be later than at")
        failures.append(
            FailureWindow(
                at=start,
                until=until,
                reason=f.text("reason", default="OutOfResources") or "OutOfResources",
                message=f.text("message", default="") or "",
            )
        )
        f.done()
    allocatable = o.quantities("allocatable")
    if not allocatable:
        raise InvalidInput(o.at("allocatable"), "is required: what one node offers")
    pool = NodePool(
        name=o.req_text("name", pattern=NAME),
        machine_type=o.req_text("machineType"),
        allocatable=allocatable,
        labels=o.labels("labels"),
        taints=tuple(_taint(t, p) for t, p in o.items("taints")),
        accelerator=o.text("accelerator"),
        queued_provisioning=o.flag("queuedProvisioning", True),
        max_nodes=o.integer("maxNodes", default=1000, lo=0, hi=100_000) or 0,
        provisioning_delay_seconds=o.duration("provisioningDelaySeconds", default=0.0) or 0.0,
        zones=pool_zones,
        capacity=tuple(sorted(steps, key=lambda st: st.at)),
        failures=tuple(failures),
    )
    o.done()
    return pool


MAX_NODES = 100_000


def _node_group(data: object, path: str) -> list[NodeInventory]:
    """``count`` identical nodes ``<name>-<i>`` (one node: ``name`` itself)."""
    o = Obj(data, path)
    name = o.req_text("name", pattern=NAME, max_len=50)
    count = o.integer("count", default=1, lo=1, hi=MAX_NODES) or 1
    allocatable = o.quantities("allocatable")
    labels = o.labels("labels")
    taints = tuple(_taint(t, p) for t, p in o.items("taints"))
    g = o.obj("gpus")
    gpus: list[tuple[str, int, int]] = []  # (model, memory MiB, split) per device
    links: tuple[tuple[str, ...], ...] = ()
    if g is not None:
        n = g.req_integer("count", lo=1, hi=64)
        model = g.req_text("model")
        memory = g.quantity("memory", "memory", required=True) or 0
        split = g.integer("split", default=10, lo=1, hi=1000) or 10
        links = _links(g, n)
        g.done()
        gpus = [(model, memory // 2**20, split)] * n
    o.done()
    out = []
    for i in range(count):
        node = name if count == 1 else f"{name}-{i}"
        out.append(
            NodeInventory(
                name=node,
                allocatable=allocatable,
                labels={**labels, HOSTNAME: node},
                taints=taints,
                gpus=tuple(
                    Gpu(uuid=f"GPU-{node}-{j}", model=m, memory_mib=mem, index=j, split=sp)
                    for j, (m, mem, sp) in enumerate(gpus)
                ),
                links=links,
            )
        )
    return out


def _links(g: Obj, n: int) -> tuple[tuple[str, ...], ...]:
    """The GPU matrix of ``nvidia-smi topo -m``: one row per device in index order, each a
    list (or a space-separated string) of its link to every device, ``X`` to itself; a
    link goes both ways, so the matrix is symmetric."""
    at = g.at("links")
    rows = [_link_row(row, p, i, n) for i, (row, p) in enumerate(g.items("links", max_items=64))]
    if rows and len(rows) != n:
        raise InvalidInput(at, f"has {len(rows)} rows; one per device ({n}, the count)")
    pair = asymmetric(tuple(rows))
    if pair is not None:
        i, j = pair
        raise InvalidInput(
            f"{at}[{i}][{j}]",
            f"{rows[i][j]} but {at}[{j}][{i}] is {rows[j][i]}: a link is the same both ways",
        )
    return tuple(rows)


def _link_row(row: object, path: str, i: int, n: int) -> tuple[str, ...]:
    cells = row.split() if isinstance(row, str) else row
    if not isinstance(cells, list) or len(cells) != n:
        raise InvalidInput(path, f"must list {n} links, one per device (the count)")
    for j, cell in enumerate(cells):
        if j == i:
            if cell != SELF_LINK:
                raise InvalidInput(f"{path}[{j}]", f"must be {SELF_LINK}: the device itself")
            continue
        problem = bad_link(cell)
        if problem is not None:
            raise InvalidInput(f"{path}[{j}]", problem)
    return tuple(cells)


HYPERNODE_LABEL = "topology.muster.dev/"


def _topology(
    o: Obj | None, nodes: list[NodeInventory]
) -> tuple[TopologySpec | None, list[NodeInventory]]:
    """Kueue levels (node labels, top down), or a Volcano/MetaX HyperNode tree whose
    kinds become levels ``topology.muster.dev/<kind>`` labelled on the nodes it names."""
    if o is None:
        return None, nodes
    levels = list(o.texts("levels"))
    tree = o.raw("hyperNodes")
    name = o.text("name", default="default", pattern=NAME) or "default"
    o.done()
    if levels and tree is not None:
        raise InvalidInput(o.path, "give levels or hyperNodes, not both")
    if tree is None:
        if not levels:
            raise InvalidInput(o.at("levels"), "must name at least one level (a node label)")
        return TopologySpec(name=name, levels=tuple(levels)), nodes
    by_name = {n.name: n for n in nodes}
    extra: dict[str, dict[str, str]] = {}
    kinds: list[str] = []

    def walk(item: object, at: str, depth: int, path: dict[str, str]) -> None:
        h = Obj(item, at)
        kind = h.req_text("kind", pattern=NAME)
        member = h.req_text("name")
        h.text("status")
        children = list(h.items("child", max_items=MAX_NODES))
        h.done()
        if kind == "node":
            if member not in by_name:
                raise InvalidInput(h.at("name"), f"node {member!r} is not among the nodes")
            if member in extra:
                raise InvalidInput(h.at("name"), f"node {member!r} is in the tree twice")
            extra[member] = dict(path)
            return
        if depth < len(kinds) and kinds[depth] != kind:
            raise InvalidInput(h.at("kind"), f"level {depth} is {kinds[depth]!r} elsewhere")
        if depth == len(kinds):
            kinds.append(kind)
        for child, child_at in children:
            walk(child, child_at, depth + 1, {**path, HYPERNODE_LABEL + kind: member})

    if not isinstance(tree, list):
        raise InvalidInput(o.at("hyperNodes"), "must be a list of hyper nodes")
    for i, item in enumerate(tree):
        walk(item, f"{o.at('hyperNodes')}[{i}]", 0, {})
    out = [
        replace(n, labels={**n.labels, **extra[n.name]}) if n.name in extra else n for n in nodes
    ]
    return TopologySpec(name=name, levels=tuple(HYPERNODE_LABEL + k for k in kinds)), out


def _regional_quota(data: object, path: str) -> RegionalQuota:
    o = Obj(data, path)
    resource = o.req_text("resource")
    limit = o.quantity("limit", resource, required=True)
    assert limit is not None
    quota = RegionalQuota(
        name=o.req_text("name"), resource=resource, limit=limit, node_pools=o.texts("nodePools")
    )
    o.done()
    return quota


def workload_list(data: object, path: str = "") -> list[tuple[float, WorkloadSpec]]:
    """A simulation's workloads: ``[{at: 30s, workload: {...}}, ...]`` (``at`` defaults to 0)."""
    if isinstance(data, dict) and "workloads" in data:
        data = data["workloads"]
    if not isinstance(data, list):
        raise InvalidInput(path, "must be a list of {at, workload} items")
    out: list[tuple[float, WorkloadSpec]] = []
    for i, item in enumerate(data):
        o = Obj(item, f"{path}[{i}]")
        at = o.duration("at", default=0.0) or 0.0
        spec = workload(o.raw("workload", required=True), o.at("workload"))
        o.done()
        out.append((at, spec))
    return out
