"""Kubernetes manifests -> muster's model: the seed scenarios' manifests load as they are,
the conversion rules (PodRequests, limits as requests, ``sleep N``, counts, selectors) hold,
and refusals name the document and the field."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from muster.cli.commands import _to_api
from muster.core import inputs
from muster.core.model import manifests, parse, workload_fields
from muster.core.model.fields import InvalidInput
from muster.core.model.manifests import Manifests, WorkloadSource
from muster.core.model.queues import LocalQueueSpec, NamespaceQuotaSpec, PriorityClassSpec
from muster.core.model.workload import (
    DeviceFilter,
    FailureAction,
    FailurePolicy,
    FailureRule,
    PlacementPolicy,
    PodSet,
    PodSetTopology,
    Runtime,
    Toleration,
)

TPU = "google.com/tpu"
GPU = "nvidia.com/gpu"
METAX = "metax-tech.com/gpu"
TPU_SELECTOR = {
    "cloud.google.com/gke-tpu-accelerator": "tpu-v5-lite-podslice",
    "cloud.google.com/gke-tpu-topology": "2x4",
}
# The seed scenarios' manifests, verbatim, as the repository keeps them.
SCENARIOS = Path(__file__).resolve().parents[2] / "examples" / "scenarios"
SEEDS: dict[str, str] = {
    name: (SCENARIOS / name).read_text()
    for name in (
        "multislice/kueue.yaml",
        "multislice/jobsets.yaml",
        "multislice/preemption.yaml",
        "gpu-operator/priority-and-quota.yaml",
        "gpu-operator/model-affinity-pod.yaml",
        "dws/queues.yaml",
        "dws/job.yaml",
        "dws/provisioning-request.yaml",
        "hami/sample-pod.yaml",
        "volcano/job-regular.yaml",
        "volcano/job-supernode.yaml",
    )
}


def docs(name: str) -> list[Any]:
    return list(yaml.safe_load_all(SEEDS[name]))


def load(*names: str) -> Manifests:
    return manifests.combine(*(manifests.read(docs(n)) for n in names))


def refused(documents: list[Any]) -> InvalidInput:
    with pytest.raises(InvalidInput) as info:
        manifests.read(documents)
    return info.value


def pod(spec: dict[str, Any], **metadata: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", **metadata},
        "spec": spec,
    }


def container(**fields: Any) -> dict[str, Any]:
    return {"name": "c", "image": "busybox", **fields}


def one_pod(spec: dict[str, Any], **metadata: Any) -> Any:
    (wl,) = manifests.read([pod(spec, **metadata)]).workloads
    return wl


# -- the seed manifests ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "counts", "skipped"),
    [
        (
            "multislice/kueue.yaml",
            {"resource_flavors": 1, "cluster_queues": 1, "local_queues": 1},
            0,
        ),
        ("multislice/jobsets.yaml", {"workloads": 3}, 0),
        (
            "multislice/preemption.yaml",
            {"cluster_queues": 1, "priority_classes": 1, "workloads": 1},
            0,
        ),
        (
            "gpu-operator/priority-and-quota.yaml",
            {"priority_classes": 1, "workloads": 1, "namespace_quotas": 1},
            0,
        ),
        ("gpu-operator/model-affinity-pod.yaml", {"workloads": 1}, 0),
        (
            "dws/queues.yaml",
            {
                "resource_flavors": 1,
                "cluster_queues": 1,
                "local_queues": 1,
                "admission_checks": 1,
                "provisioning_configs": 1,
            },
            0,
        ),
        ("dws/provisioning-request.yaml", {"pod_templates": 1, "request_sources": 1}, 0),
        ("dws/job.yaml", {"workloads": 1}, 0),
        ("hami/sample-pod.yaml", {"workloads": 1}, 0),
        ("volcano/job-regular.yaml", {"workloads": 1}, 0),
        ("volcano/job-supernode.yaml", {"workloads": 1}, 0),
    ],
)
def test_every_seed_manifest_loads(name: str, counts: dict[str, int], skipped: int) -> None:
    m = manifests.read(docs(name))
    fields = (
        "resource_flavors",
        "cluster_queues",
        "local_queues",
        "cohorts",
        "priority_classes",
        "namespace_quotas",
        "admission_checks",
        "provisioning_configs",
        "workloads",
        "pod_templates",
        "request_sources",
    )
    assert {f: len(getattr(m, f)) for f in fields if getattr(m, f)} == counts
    assert len(m.skipped) == skipped
    assert len(m.sources) == len(m.workloads)


def test_multislice_jobsets_are_one_slice_pod_set_each() -> None:
    m = load("multislice/jobsets.yaml")
    assert [w.name for w in m.workloads] == [
        "multislice-1slice",
        "multislice-2slice",
        "multislice-3slice",
    ]
    for wl, slices in zip(m.workloads, (1, 2, 3), strict=True):
        assert wl.namespace == "default"
        assert wl.queue_name == "multislice-queue"
        assert wl.priority_class is None
        # replicas x parallelism pods, each asking for its TPU limit of 4 chips; each child
        # Job (a slice of 2 pods) on a node pool of its own (exclusive-topology).
        assert wl.pod_sets == (
            PodSet(
                name="slice",
                count=2 * slices,
                requests={TPU: 4},
                node_selector=TPU_SELECTOR,
                topology=PodSetTopology(exclusive="cloud.google.com/gke-nodepool", slice_size=2),
                backoff_limit=0,
            ),
        )
        assert wl.total_requests() == {TPU: 8 * slices}
        assert wl.runtime == Runtime(duration_seconds=60.0)  # bash -c "sleep 60"
        assert wl.labels == {"kueue.x-k8s.io/queue-name": "multislice-queue"}
        # failurePolicy.maxRestarts; a JobSet restarts when no rule matches.
        assert wl.failure_policy == FailurePolicy(max_restarts=4, on_failure="RestartJob")
    assert m.sources == (WorkloadSource(kind="JobSet", at=0.0),) * 3


def test_multislice_queues() -> None:
    m = load("multislice/kueue.yaml")
    (flavor,) = m.resource_flavors
    assert (flavor.name, dict(flavor.node_labels)) == ("vlp-24", TPU_SELECTOR)
    (cq,) = m.cluster_queues
    assert cq.name == "cluster-queue"
    assert cq.queueing_strategy == "BestEffortFIFO"
    (group,) = cq.resource_groups
    assert group.covered_resources == (TPU,)
    assert [(f.name, [(r.name, r.nominal_quota) for r in f.resources]) for f in group.flavors] == [
        ("vlp-24", [(TPU, 24)])
    ]
    assert m.local_queues == (
        LocalQueueSpec(namespace="default", name="multislice-queue", cluster_queue="cluster-queue"),
    )
    assert m.skipped == ()


def test_preemption_seed_names_its_priority_class() -> None:
    m = load("multislice/preemption.yaml")
    assert m.priority_classes == (
        PriorityClassSpec(name="low-priority", value=100, kind="PriorityClass"),
    )
    (wl,) = m.workloads
    # The pod template's priorityClassName names the class the same manifests define.
    assert wl.priority_class == "low-priority"
    assert wl.priority_class in {c.name for c in m.priority_classes}
    (cq,) = m.cluster_queues
    assert cq.preemption.within_cluster_queue == "LowerPriority"
    assert cq.preemption.reclaim_within_cohort == "Any"


def test_priority_and_quota_seed() -> None:
    m = load("gpu-operator/priority-and-quota.yaml")
    assert m.priority_classes == (
        PriorityClassSpec(name="high-priority", value=1_000_000, kind="PriorityClass"),
    )
    assert m.namespace_quotas == (
        NamespaceQuotaSpec(namespace="default", name="gpu-quota", hard={GPU: 4}),
    )
    (wl,) = m.workloads
    assert (wl.name, wl.namespace, wl.queue_name) == ("high-priority-pod", "default", "default")
    assert wl.priority_class == "high-priority"
    assert wl.pod_sets == (PodSet(name="main", count=1, requests={GPU: 1}),)
    assert m.sources == (WorkloadSource(kind="Pod"),)


def test_model_affinity_pod_keeps_its_node_selector() -> None:
    (wl,) = load("gpu-operator/model-affinity-pod.yaml").workloads
    assert dict(wl.pod_sets[0].node_selector) == {
        "feature.node.kubernetes.io/gpu-model.nvidia.com": "Tesla-V100"
    }


def test_dws_queues_read_the_admission_check_and_its_config() -> None:
    m = load("dws/queues.yaml")
    assert m.skipped == ()
    (check,) = m.admission_checks
    assert (check.name, check.controller_name, check.config) == (
        "dws-prov",
        "kueue.x-k8s.io/provisioning-request",
        "dws-config",
    )
    (config,) = m.provisioning_configs
    assert (config.name, config.provisioning_class, config.managed_resources) == (
        "dws-config",
        "queued-provisioning.gke.io",
        (GPU,),
    )
    # Kueue's default retry strategy.
    assert (
        config.retry.backoff_limit_count,
        config.retry.backoff_base_seconds,
        config.retry.backoff_max_seconds,
    ) == (3, 60.0, 1800.0)
    (cq,) = m.cluster_queues
    assert cq.admission_checks == ("dws-prov",)
    quotas = {r.name: r.nominal_quota for r in cq.resource_groups[0].flavors[0].resources}
    assert quotas == {"cpu": 10_000_000, "memory": 10_000 * 2**30, GPU: 10_000}


def test_dws_job() -> None:
    (wl,) = load("dws/job.yaml").workloads
    assert (wl.name, wl.namespace, wl.queue_name) == ("sample-job", "default", "dws-local-queue")
    assert wl.pod_sets == (
        PodSet(
            name="main",
            count=1,
            requests={"cpu": 100, "memory": 100 * 2**20, GPU: 1},
            node_selector={"cloud.google.com/gke-nodepool": "dws-pool"},
            tolerations=(Toleration(key=GPU, operator="Exists", effect="NoSchedule"),),
            backoff_limit=6,  # Kubernetes' default
        ),
    )
    # Kueue's own annotation for the DWS run limit, and the sleep image's argument.
    assert wl.max_run_duration_seconds == 600
    assert wl.runtime.duration_seconds == 120.0


def test_hami_pod_sleeping_forever_gets_the_default_runtime() -> None:
    (wl,) = load("hami/sample-pod.yaml").workloads
    assert dict(wl.pod_sets[0].requests) == {
        "metax-tech.com/sgpu": 1,
        "metax-tech.com/vcore": 60,
        "metax-tech.com/vmemory": 4,
    }
    assert wl.runtime == Runtime()


def test_volcano_regular_job() -> None:
    m = load("volcano/job-regular.yaml")
    assert m.skipped == ()
    (wl,) = m.workloads
    assert (wl.name, wl.namespace, wl.queue_name) == ("job-demo", "default", "default")
    # minAvailable 1 of one task's 2 replicas: it starts with 1 pod, the other waits.
    assert wl.pod_sets == (
        PodSet(name="gpu-vectoradd", count=2, requests={METAX: 2}, min_count=1, surplus="Wait"),
    )
    assert wl.failure_policy == FailurePolicy(
        max_restarts=2, rules=(FailureRule(event="PodEvicted", action="RestartJob"),)
    )
    assert wl.runtime == Runtime(duration_seconds=10.0)  # args: ["sleep 10s"]
    assert m.sources == (WorkloadSource(kind="Job"),)


def test_volcano_supernode_job() -> None:
    (wl,) = load("volcano/job-supernode.yaml").workloads
    assert [(ps.name, ps.count, dict(ps.requests), ps.min_count) for ps in wl.pod_sets] == [
        ("master", 1, {METAX: 8}, None),
        ("worker", 7, {METAX: 8}, None),
    ]
    # The master's template annotation asks for all 64 GPUs in one supernode.
    assert wl.gpu_group_size == 64
    # The master task's own policy; maxRetry is Volcano's default 3.
    assert wl.failure_policy == FailurePolicy(
        max_restarts=3,
        rules=(FailureRule(event="TaskCompleted", action="CompleteJob", pod_sets=("master",)),),
    )
    assert wl.failure_policy.action("TaskCompleted", "master") == "CompleteJob"
    assert wl.failure_policy.action("TaskCompleted", "worker") is None
    assert wl.failure_policy.action("PodFailed", "worker") == "FailJob"


def test_every_seed_workload_survives_the_intake_api_shape() -> None:
    """``muster apply -f`` posts ``_to_api(spec)``: intake must parse back the same spec."""
    workloads = [w for name in SEEDS for w in manifests.read(docs(name)).workloads]
    assert len(workloads) == 10
    for wl in workloads:
        assert parse.workload(_to_api(wl)) == wl


# -- conversion rules -------------------------------------------------------------------


def test_pod_requests_take_the_larger_of_containers_sum_and_largest_init_container() -> None:
    wl = one_pod(
        {
            "initContainers": [
                container(resources={"requests": {"cpu": "4", "memory": "1Gi"}}),
                container(resources={"requests": {"cpu": "500m", "memory": "8Gi"}}),
            ],
            "containers": [
                container(resources={"requests": {"cpu": "1", "memory": "2Gi"}}),
                container(resources={"requests": {"cpu": "1500m", "memory": "2Gi", GPU: 1}}),
            ],
        }
    )
    # cpu: containers 2.5 < init 4; memory: containers 4Gi < init 8Gi; gpu only in containers.
    assert dict(wl.pod_sets[0].requests) == {"cpu": 4000, "memory": 8 * 2**30, GPU: 1}


def test_a_limit_without_a_request_is_the_request() -> None:
    wl = one_pod(
        {
            "containers": [
                container(
                    resources={
                        "requests": {"cpu": "250m"},
                        "limits": {"cpu": "2", "memory": "1Gi", GPU: 2},
                    }
                ),
                container(resources={"limits": {"cpu": "1"}}),
            ]
        }
    )
    # cpu: the first container's request (250m), not its limit, plus the second's limit.
    assert dict(wl.pod_sets[0].requests) == {"cpu": 1250, "memory": 2**30, GPU: 2}


def test_zero_requests_are_dropped() -> None:
    wl = one_pod({"containers": [container(resources={"requests": {"cpu": 0, GPU: 1}})]})
    assert dict(wl.pod_sets[0].requests) == {GPU: 1}


@pytest.mark.parametrize(
    ("fields", "seconds"),
    [
        ({"command": ["bash", "-c", "sleep 60"]}, 60.0),
        ({"command": ["sh", "-c"], "args": ["sleep 10s"]}, 10.0),
        ({"command": ["sleep"], "args": ["90"]}, 90.0),
        ({"command": ["sh", "-c", "echo hi; sleep 2m && sleep 30"]}, 150.0),
        ({"image": "gcr.io/k8s-staging-perf-tests/sleep:v0.0.3", "args": ["120s"]}, 120.0),
        ({"command": ["sh", "-c"], "args": ["sleep infinity"]}, Runtime().duration_seconds),
        ({"command": ["python", "train.py", "--sleep", "5"]}, Runtime().duration_seconds),
        ({"command": ["nosleep 30"]}, Runtime().duration_seconds),
        ({}, Runtime().duration_seconds),
    ],
)
def test_sleep_n_in_the_command_line_is_the_runtime(fields: dict[str, Any], seconds: float) -> None:
    assert one_pod({"containers": [container(**fields)]}).runtime.duration_seconds == seconds


def test_the_longest_container_sleep_after_the_init_sleeps() -> None:
    wl = one_pod(
        {
            "initContainers": [container(command=["sleep", "5"])],
            "containers": [container(command=["sleep", "20"]), container(command=["sleep", "30"])],
        }
    )
    assert wl.runtime.duration_seconds == 35.0


def test_the_runtime_annotation_wins_over_sleep() -> None:
    wl = one_pod(
        {"containers": [container(command=["sleep", "20"])]},
        annotations={"muster.dev/runtime-seconds": "300"},
    )
    assert wl.runtime.duration_seconds == 300.0


def test_labels_annotations_and_node_affinity() -> None:
    wl = one_pod(
        {
            "containers": [container()],
            "priorityClassName": "pod-class",
            "nodeSelector": {"zone": "a"},
            "affinity": {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [
                            {
                                "matchExpressions": [
                                    {"key": "gpu", "operator": "In", "values": ["a100"]},
                                ]
                            }
                        ]
                    }
                }
            },
            "tolerations": [{"key": "k", "operator": "Exists", "tolerationSeconds": 30}],
        },
        namespace="team-a",
        labels={
            "kueue.x-k8s.io/queue-name": "training",
            "kueue.x-k8s.io/priority-class": "wl-class",
            "team": "nlp",
        },
        annotations={
            "muster.dev/max-run-duration-seconds": "3600",
            "provreq.kueue.x-k8s.io/maxRunDurationSeconds": "60",
        },
    )
    assert (wl.namespace, wl.queue_name) == ("team-a", "training")
    # The Kueue label (a WorkloadPriorityClass) wins over the pod's priorityClassName.
    assert wl.priority_class == "wl-class"
    assert wl.max_run_duration_seconds == 3600
    assert wl.labels["team"] == "nlp"
    ps = wl.pod_sets[0]
    assert dict(ps.node_selector) == {"zone": "a", "gpu": "a100"}
    assert ps.tolerations == (Toleration(key="k", operator="Exists"),)


IN_A100 = {"key": "gpu", "operator": "In", "values": ["a100"]}
AFFINITY_AT = "doc[0] (Pod p).spec.affinity"
REQUIRED_AT = f"{AFFINITY_AT}.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"


def required_affinity(*terms: dict[str, Any]) -> dict[str, Any]:
    return {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": list(terms)}
        }
    }


@pytest.mark.parametrize(
    ("affinity", "path"),
    [
        # Alternatives (OR), which one node selector cannot say.
        (
            required_affinity({"matchExpressions": [IN_A100]}, {"matchExpressions": [IN_A100]}),
            f"{REQUIRED_AT}.nodeSelectorTerms[1]",
        ),
        (
            required_affinity({"matchExpressions": [{**IN_A100, "operator": "NotIn"}]}),
            f"{REQUIRED_AT}.nodeSelectorTerms[0].matchExpressions[0].operator",
        ),
        (
            required_affinity({"matchExpressions": [{"key": "gpu", "operator": "Exists"}]}),
            f"{REQUIRED_AT}.nodeSelectorTerms[0].matchExpressions[0].operator",
        ),
        (
            required_affinity({"matchExpressions": [{**IN_A100, "values": ["a100", "h100"]}]}),
            f"{REQUIRED_AT}.nodeSelectorTerms[0].matchExpressions[0].values",
        ),
        (
            required_affinity({"matchFields": [{"key": "metadata.name", "operator": "In"}]}),
            f"{REQUIRED_AT}.nodeSelectorTerms[0].matchFields",
        ),
        (
            {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 1}]}},
            f"{AFFINITY_AT}.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution",
        ),
        ({"podAffinity": {"x": 1}}, f"{AFFINITY_AT}.podAffinity"),
        ({"podAntiAffinity": {"x": 1}}, f"{AFFINITY_AT}.podAntiAffinity"),
    ],
)
def test_node_affinity_a_selector_cannot_say_is_refused_by_name(
    affinity: dict[str, Any], path: str
) -> None:
    """Kubernetes' affinity beyond one term of single-value In expressions would change
    where the pods go: refused, naming the field, never dropped (issue 17, item 4c)."""
    exc = refused([pod({"containers": [container()], "affinity": affinity})])
    assert exc.path == path
    assert exc.problem.startswith("is not supported by muster")


def test_node_affinity_and_node_selector_must_agree() -> None:
    spec = {
        "containers": [container()],
        "nodeSelector": {"gpu": "h100"},
        "affinity": required_affinity({"matchExpressions": [IN_A100]}),
    }
    exc = refused([pod(spec)])
    assert exc.path == AFFINITY_AT
    assert "no node can match both" in exc.problem


def job(spec: dict[str, Any], **metadata: Any) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "j", **metadata},
        "spec": {"template": {"spec": {"containers": [container()]}}, **spec},
    }


@pytest.mark.parametrize(
    ("spec", "count"),
    [
        ({}, 1),
        ({"parallelism": 4}, 4),
        ({"parallelism": 4, "completions": 2}, 2),
        ({"parallelism": 2, "completions": 10}, 2),
    ],
)
def test_job_pods_at_once(spec: dict[str, Any], count: int) -> None:
    (wl,) = manifests.read([job(spec)]).workloads
    assert [(ps.name, ps.count) for ps in wl.pod_sets] == [("main", count)]
    assert wl.queue_name == "default"


def test_job_min_parallelism_is_the_min_count() -> None:
    doc = job({"parallelism": 4}, annotations={"kueue.x-k8s.io/job-min-parallelism": "2"})
    (wl,) = manifests.read([doc]).workloads
    assert wl.pod_sets[0].min_count == 2


def test_jobset_with_two_replicated_jobs() -> None:
    def replicated(name: str, replicas: int, parallelism: int, gpus: int) -> dict[str, Any]:
        pod_spec = {"containers": [container(resources={"limits": {GPU: gpus}})]}
        return {
            "name": name,
            "replicas": replicas,
            "template": {"spec": {"parallelism": parallelism, "template": {"spec": pod_spec}}},
        }

    doc = {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": "train", "annotations": {"muster.dev/submit-at": "90s"}},
        "spec": {"replicatedJobs": [replicated("driver", 1, 1, 1), replicated("workers", 3, 2, 8)]},
    }
    m = manifests.read([doc])
    (wl,) = m.workloads
    assert [(ps.name, ps.count, dict(ps.requests)) for ps in wl.pod_sets] == [
        ("driver", 1, {GPU: 1}),
        ("workers", 6, {GPU: 8}),
    ]
    assert m.submissions() == [(90.0, wl)]


def volcano(spec: dict[str, Any], **metadata: Any) -> dict[str, Any]:
    return {
        "apiVersion": "batch.volcano.sh/v1alpha1",
        "kind": "Job",
        "metadata": {"name": "vj", **metadata},
        "spec": spec,
    }


def task(name: str | None, replicas: int, **fields: Any) -> dict[str, Any]:
    pod_spec = {"containers": [container(resources={"limits": {METAX: 1}})]}
    out = {"replicas": replicas, "template": {"spec": pod_spec}, **fields}
    if name is not None:
        out["name"] = name
    return out


def one_volcano(spec: dict[str, Any], **metadata: Any) -> Any:
    (wl,) = manifests.read([volcano(spec, **metadata)]).workloads
    return wl


def test_volcano_queue_priority_and_defaults() -> None:
    wl = one_volcano(
        {
            "queue": "research",
            "priorityClassName": "high",
            "schedulerName": "volcano",
            "plugins": {"ssh": []},
            "ttlSecondsAfterFinished": 60,
            "tasks": [task(None, 2), task(None, 1)],
        }
    )
    assert wl.queue_name == "research"
    assert wl.priority_class == "high"
    # Unnamed tasks are named as Volcano's webhook names them.
    assert [ps.name for ps in wl.pod_sets] == ["default0", "default1"]
    # No policies: maxRetry 3, a failed pod fails the job, an evicted one restarts it.
    assert wl.failure_policy == FailurePolicy(max_restarts=3)
    assert [ps.backoff_limit for ps in wl.pod_sets] == [0, 0]


def test_volcano_kueue_labels_win() -> None:
    wl = one_volcano(
        {"queue": "research", "priorityClassName": "high", "tasks": [task("t", 1)]},
        labels={manifests.QUEUE_LABEL: "training", manifests.PRIORITY_LABEL: "urgent"},
    )
    assert (wl.queue_name, wl.priority_class) == ("training", "urgent")


@pytest.mark.parametrize(
    ("min_available", "tasks", "min_counts"),
    [
        (None, [task("a", 4)], [None]),
        (4, [task("a", 4)], [None]),
        (3, [task("a", 4)], [3]),
        # Several tasks at their total: the gang is all pods.
        (4, [task("a", 2), task("b", 2)], [None, None]),
    ],
)
def test_volcano_min_available(
    min_available: int | None, tasks: list[Any], min_counts: list[int | None]
) -> None:
    spec: dict[str, Any] = {"tasks": tasks}
    if min_available is not None:
        spec["minAvailable"] = min_available
    assert [ps.min_count for ps in one_volcano(spec).pod_sets] == min_counts


def test_volcano_min_available_below_several_tasks_is_refused() -> None:
    """Issue 17: never accepted and ignored. With several tasks only the whole job is a gang
    (only one pod set may have a minimum), so a minimum below the total is refused by name
    rather than read as all pods (Volcano would start the job with that many)."""
    with pytest.raises(InvalidInput) as refused:
        one_volcano({"minAvailable": 2, "tasks": [task("a", 2), task("b", 2)]})
    assert refused.value.path.endswith("spec.minAvailable")
    assert "not supported by muster" in str(refused.value)


def test_volcano_min_available_keeps_the_other_pods_waiting() -> None:
    """peers.md §2.4: Volcano starts the job once minAvailable pods can run and keeps the
    others pending (``surplus: Wait``), unlike Kueue's partial admission which drops them."""
    (ps,) = one_volcano({"minAvailable": 3, "tasks": [task("a", 4)]}).pod_sets
    assert (ps.min_count, ps.surplus) == (3, "Wait")


def test_volcano_policies_task_rules_first_and_any_event() -> None:
    wl = one_volcano(
        {
            "maxRetry": 5,
            "policies": [
                {"event": "*", "action": "AbortJob"},
                {"events": ["PodEvicted", "PodFailed"], "action": "RestartJob"},
            ],
            "tasks": [
                task("a", 1, policies=[{"event": "PodFailed", "action": "RestartTask"}]),
                task("b", 1, policies=[{"event": "TaskCompleted", "action": "CompleteJob"}]),
            ],
        }
    )
    assert wl.failure_policy == FailurePolicy(
        max_restarts=5,
        rules=(
            FailureRule(event="PodFailed", action="RestartJob", pod_sets=("a",)),
            FailureRule(event="TaskCompleted", action="CompleteJob", pod_sets=("b",)),
            FailureRule(event="PodFailed", action="FailJob"),
            FailureRule(event="PodEvicted", action="FailJob"),
            FailureRule(event="TaskCompleted", action="FailJob"),
            FailureRule(event="PodEvicted", action="RestartJob"),
            FailureRule(event="PodFailed", action="RestartJob"),
        ),
    )
    assert wl.failure_policy.action("PodFailed", "a") == "RestartJob"
    assert wl.failure_policy.action("PodFailed", "b") == "FailJob"


@pytest.mark.parametrize(
    ("action", "expected"),
    [
        ("RestartJob", "RestartJob"),
        ("RestartTask", "RestartJob"),
        ("RestartPod", "RestartJob"),
        ("AbortJob", "FailJob"),
        ("TerminateJob", "FailJob"),
        ("CompleteJob", "CompleteJob"),
    ],
)
def test_volcano_actions(action: str, expected: FailureAction) -> None:
    wl = one_volcano(
        {"policies": [{"event": "PodFailed", "action": action}], "tasks": [task("t", 1)]}
    )
    assert wl.failure_policy.rules == (FailureRule(event="PodFailed", action=expected),)


def test_volcano_network_topology_applies_to_every_task() -> None:
    wl = one_volcano(
        {
            "networkTopology": {"mode": "soft", "highestTierAllowed": 2},
            "tasks": [task("a", 1), task("b", 2)],
        }
    )
    assert [ps.topology for ps in wl.pod_sets] == [PodSetTopology(tier=2, tier_soft=True)] * 2


def test_volcano_partition_policy_is_the_pod_sets_slices() -> None:
    """peers.md §2.7, Volcano partitionPolicy: partitionSize pods per partition, each in
    one HyperNode of the partition's tier; the job's own tier still bounds the task."""
    partition = {
        "totalPartitions": 2,
        "partitionSize": 4,
        "networkTopology": {"mode": "hard", "highestTierAllowed": 1},
    }
    wl = one_volcano(
        {
            "networkTopology": {"highestTierAllowed": 2},
            "tasks": [task("a", 8, partitionPolicy=partition), task("b", 1)],
        }
    )
    assert [ps.topology for ps in wl.pod_sets] == [
        PodSetTopology(tier=2, slice_size=4, slice_tier=1),
        PodSetTopology(tier=2),
    ]
    # ``muster apply -f`` posts it to intake as the API's JSON: the same spec comes back.
    assert parse.workload(_to_api(wl)) == wl
    # Without a tier: groups of 4 with no placement of their own (the gang is the job).
    wl = one_volcano(
        {"tasks": [task("a", 8, partitionPolicy={**partition, "networkTopology": None})]}
    )
    assert wl.pod_sets[0].topology == PodSetTopology(slice_size=4)


PARTITION_AT = "doc[0] (Job vj).spec.tasks[0].partitionPolicy"


@pytest.mark.parametrize(
    ("policy", "path", "problem"),
    [
        ({"totalPartitions": 3, "partitionSize": 4}, PARTITION_AT, "3 x 4 = 12"),
        ({"partitionSize": 8}, f"{PARTITION_AT}.totalPartitions", "is required"),
        ({"totalPartitions": 1}, f"{PARTITION_AT}.partitionSize", "is required"),
        (
            {"totalPartitions": 0, "partitionSize": 8},
            f"{PARTITION_AT}.totalPartitions",
            "at least 1",
        ),
        (
            {"totalPartitions": 2, "partitionSize": 4, "networkTopology": {"mode": "soft"}},
            f"{PARTITION_AT}.networkTopology.mode",
            "not supported by muster",
        ),
        (
            {"totalPartitions": 2, "partitionSize": 4, "networkTopology": {"highestTierName": "s"}},
            f"{PARTITION_AT}.networkTopology.highestTierName",
            "not supported by muster",
        ),
        (
            {
                "totalPartitions": 2,
                "partitionSize": 4,
                "networkTopology": {"highestTierAllowed": 0},
            },
            f"{PARTITION_AT}.networkTopology.highestTierAllowed",
            "at least 1",
        ),
        (
            {"totalPartitions": 2, "partitionSize": 4, "spread": 1},
            f"{PARTITION_AT}.spread",
            "unknown",
        ),
    ],
)
def test_volcano_partition_policy_refusals(policy: dict[str, Any], path: str, problem: str) -> None:
    exc = refused([volcano({"tasks": [task("a", 8, partitionPolicy=policy)]})])
    assert exc.path == path
    assert problem in exc.problem


def test_volcano_job_tier_name_is_refused_by_name() -> None:
    exc = refused(
        [volcano({"networkTopology": {"highestTierName": "spine"}, "tasks": [task("a", 1)]})]
    )
    assert exc.path == "doc[0] (Job vj).spec.networkTopology.highestTierName"
    assert "not supported by muster" in exc.problem


def replicated(name: str, replicas: int, parallelism: int, **job: Any) -> dict[str, Any]:
    pod_spec = {"containers": [container(resources={"limits": {TPU: 4}})]}
    return {
        "name": name,
        "replicas": replicas,
        "template": {"spec": {"parallelism": parallelism, "template": {"spec": pod_spec}, **job}},
    }


def jobset(spec: dict[str, Any], **metadata: Any) -> dict[str, Any]:
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": "js", **metadata},
        "spec": spec,
    }


def test_jobset_exclusive_topology_on_one_replicated_job() -> None:
    driver = replicated("driver", 1, 1)
    workers = replicated("workers", 3, 4, completions=4, backoffLimit=2)
    workers["template"]["metadata"] = {"annotations": {manifests.EXCLUSIVE: "rack"}}
    (wl,) = manifests.read([jobset({"replicatedJobs": [driver, workers]})]).workloads
    assert [(ps.name, ps.count, ps.topology, ps.backoff_limit) for ps in wl.pod_sets] == [
        ("driver", 1, None, 6),  # Kubernetes' default backoffLimit
        ("workers", 12, PodSetTopology(exclusive="rack", slice_size=4), 2),
    ]
    # No failurePolicy: JobSet's maxRestarts 0, so the first failure fails it.
    assert wl.failure_policy == FailurePolicy(max_restarts=0, on_failure="RestartJob")


def test_jobset_replicated_job_annotation_wins_over_the_jobset_one() -> None:
    a, b = replicated("a", 2, 2), replicated("b", 1, 2)
    b["template"]["metadata"] = {"annotations": {manifests.EXCLUSIVE: "rack"}}
    doc = jobset({"replicatedJobs": [a, b]}, annotations={manifests.EXCLUSIVE: "pool"})
    (wl,) = manifests.read([doc]).workloads
    assert [ps.topology for ps in wl.pod_sets] == [
        PodSetTopology(exclusive="pool", slice_size=2),
        PodSetTopology(exclusive="rack", slice_size=2),
    ]


def test_jobset_failure_policy_rules() -> None:
    actions = [
        "FailJobSet",
        "RestartJobSet",
        "RestartJobSetAndIgnoreMaxRestarts",
        "RestartJob",
        "RestartJobAndIgnoreMaxRestarts",
    ]
    rules: list[dict[str, Any]] = [
        {"name": f"r{i}", "action": a, "onJobFailureReasons": ["BackoffLimitExceeded"]}
        for i, a in enumerate(actions)
    ]
    rules[0]["targetReplicatedJobs"] = ["driver"]
    rules[1].pop("onJobFailureReasons")
    # Never matches in muster: a child Job fails only by its backoffLimit.
    rules.insert(1, {"action": "FailJobSet", "onJobFailureReasons": ["DeadlineExceeded"]})
    spec = {
        "failurePolicy": {"maxRestarts": 2, "restartStrategy": "BlockingRecreate", "rules": rules},
        "replicatedJobs": [replicated("driver", 1, 1), replicated("workers", 2, 2)],
    }
    (wl,) = manifests.read([jobset(spec)]).workloads
    assert wl.failure_policy == FailurePolicy(
        max_restarts=2,
        rules=(
            FailureRule(event="PodFailed", action="FailJob", pod_sets=("driver",)),
            FailureRule(event="PodFailed", action="RestartJob"),
            FailureRule(event="PodFailed", action="RestartJobIgnoreMax"),
            FailureRule(event="PodFailed", action="RestartJob"),
            FailureRule(event="PodFailed", action="RestartJobIgnoreMax"),
        ),
        on_failure="RestartJob",
    )


def test_job_backoff_limit() -> None:
    (default,) = manifests.read([job({})]).workloads
    (given,) = manifests.read([job({"backoffLimit": 0})]).workloads
    assert (default.pod_sets[0].backoff_limit, given.pod_sets[0].backoff_limit) == (6, 0)
    # A bare Pod is not retried.
    assert one_pod({"containers": [container()]}).pod_sets[0].backoff_limit == 0


def test_hami_pinning_annotations_on_a_pod() -> None:
    wl = one_pod(
        {"containers": [container(resources={"limits": {GPU: 1}})]},
        annotations={
            "nvidia.com/use-gpuuuid": "GPU-a, GPU-b,",
            "nvidia.com/nouse-gpuuuid": "GPU-c",
            "nvidia.com/use-gputype": "A100",
            "nvidia.com/nouse-gputype": " ",  # empty: no constraint
        },
    )
    assert wl.pod_sets[0].devices == DeviceFilter(
        use_uuids=("GPU-a", "GPU-b"), avoid_uuids=("GPU-c",), use_types=("A100",)
    )
    assert wl.placement is None


def test_annotations_on_a_job_pod_template() -> None:
    doc = job(
        {"parallelism": 4},
        annotations={"muster.dev/exit-codes": "1, 1,0"},
    )
    doc["spec"]["template"]["metadata"] = {
        "annotations": {
            "nvidia.com/nouse-gputype": "T4,V100",
            "hami.io/node-scheduler-policy": "spread",
            "hami.io/gpu-scheduler-policy": "binpack,topology-aware",
            "kueue.x-k8s.io/podset-preferred-topology": "rack",
            "kueue.x-k8s.io/podset-slice-required-topology": "host",
            "kueue.x-k8s.io/podset-slice-size": "2",
            "metax-tech.com/gpu-group-size": "32",
        }
    }
    (wl,) = manifests.read([doc]).workloads
    ps = wl.pod_sets[0]
    assert ps.devices == DeviceFilter(avoid_types=("T4", "V100"))
    assert ps.topology == PodSetTopology(preferred="rack", slice_required="host", slice_size=2)
    assert wl.placement == PlacementPolicy(node="spread", gpu="binpack")
    assert wl.gpu_group_size == 32
    assert wl.runtime.exit_codes == (1, 1, 0)


@pytest.mark.parametrize(
    ("annotations", "placement"),
    [
        # The level left out is the HAMi scheduler's default: binpack nodes, spread GPUs.
        ({"hami.io/node-scheduler-policy": "spread"}, PlacementPolicy(node="spread", gpu="spread")),
        (
            {"hami.io/gpu-scheduler-policy": "binpack"},
            PlacementPolicy(node="binpack", gpu="binpack"),
        ),
        ({"hami.io/gpu-scheduler-policy": " spread , numa"}, PlacementPolicy(gpu="spread")),
        # peers.md §3.4: topology-aware picks whole GPUs by their links.
        (
            {"hami.io/gpu-scheduler-policy": "topology-aware"},
            PlacementPolicy(gpu="topology-aware"),
        ),
    ],
)
def test_hami_scheduler_policies(annotations: dict[str, str], placement: PlacementPolicy) -> None:
    assert one_pod({"containers": [container()]}, annotations=annotations).placement == placement


def test_kueue_required_topology_on_a_pod() -> None:
    wl = one_pod(
        {"containers": [container()]},
        annotations={
            "kueue.x-k8s.io/podset-required-topology": "cloud.google.com/gce-topology-block"
        },
    )
    assert wl.pod_sets[0].topology == PodSetTopology(required="cloud.google.com/gce-topology-block")


def test_enforcement_annotation_on_a_resource_quota() -> None:
    doc = {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {
            "name": "gpus",
            "namespace": "team-a",
            "annotations": {"muster.dev/enforcement": "Reject"},
        },
        "spec": {"hard": {"requests.nvidia.com/gpu": "8"}},
    }
    (quota,) = manifests.read([doc]).namespace_quotas
    assert quota == NamespaceQuotaSpec(
        namespace="team-a", name="gpus", hard={GPU: 8}, enforcement="Reject"
    )


def test_workload_priority_class_and_cohort_in_v1beta2() -> None:
    m = manifests.read(
        [
            {
                "apiVersion": "kueue.x-k8s.io/v1beta2",
                "kind": "WorkloadPriorityClass",
                "metadata": {"name": "urgent"},
                "value": 1000,
                "description": "now",
            },
            None,
            {
                "apiVersion": "kueue.x-k8s.io/v1beta2",
                "kind": "Cohort",
                "metadata": {"name": "lab"},
                "spec": {"parentName": "org"},
            },
        ]
    )
    assert m.priority_classes == (PriorityClassSpec(name="urgent", value=1000),)
    assert [(c.name, c.parent) for c in m.cohorts] == [("lab", "org")]


# -- refusals name the document and the field ---------------------------------------------


def kueue_docs() -> list[Any]:
    return docs("multislice/kueue.yaml")


def jobset_docs() -> list[Any]:
    return docs("multislice/jobsets.yaml")


def volcano_docs() -> list[Any]:
    return docs("volcano/job-regular.yaml")


def annotated_pod(annotations: dict[str, Any]) -> dict[str, Any]:
    return pod({"containers": [container()]}, annotations=annotations)


def annotated_job(annotations: dict[str, Any], **spec: Any) -> dict[str, Any]:
    doc = job(spec)
    doc["spec"]["template"]["metadata"] = {"annotations": annotations}
    return doc


SUPERNODE_ANNOTATIONS: list[Any] = ["spec", "tasks", 0, "template", "metadata", "annotations"]


POD_SPEC = "spec.replicatedJobs[0].template.spec.template.spec"
POD_KEYS: list[Any] = ["spec", "replicatedJobs", 0, "template", "spec", "template", "spec"]
LIMIT_KEYS: list[Any] = [*POD_KEYS, "containers", 0, "resources", "limits", TPU]
QUOTA = "spec.resourceGroups[0].flavors[0].resources[0]"
QUOTA_KEYS: list[Any] = ["spec", "resourceGroups", 0, "flavors", 0, "resources", 0]


@pytest.mark.parametrize(
    ("build", "path", "problem"),
    [
        (
            lambda: [
                *kueue_docs(),
                {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"}},
            ],
            "doc[3] (Deployment web).kind",
            "Deployment (apps/v1) is not supported; supported kinds: ",
        ),
        (
            lambda: [{**kueue_docs()[0], "metadata": {}}],
            "doc[0] (ResourceFlavor).metadata.name",
            "is required",
        ),
        (
            lambda: [{**kueue_docs()[2], "metadata": {"namespace": "default"}}],
            "doc[0] (LocalQueue).metadata.name",
            "is required",
        ),
        (
            lambda: [{**jobset_docs()[0], "metadata": {"labels": {}}}],
            "doc[0] (JobSet).metadata.name",
            "is required",
        ),
        (
            lambda: _edit(kueue_docs(), 1, [*QUOTA_KEYS, "nominalQuota"], -3),
            f"doc[1] (ClusterQueue cluster-queue).{QUOTA}.nominalQuota",
            "must not be negative, got -3",
        ),
        (
            lambda: _edit(kueue_docs(), 1, QUOTA_KEYS[:4], {"name": "vlp-24"}),
            "doc[1] (ClusterQueue cluster-queue).spec.resourceGroups[0].flavors",
            "must be a list, not an object",
        ),
        (
            lambda: _edit(kueue_docs(), 1, ["spec", "bogus"], True),
            "doc[1] (ClusterQueue cluster-queue).spec.bogus",
            "unknown field",
        ),
        (
            lambda: _edit(kueue_docs(), 1, ["apiVersion"], "kueue.x-k8s.io/v1"),
            "doc[1] (ClusterQueue cluster-queue).apiVersion",
            "ClusterQueue is read from kueue.x-k8s.io/v1beta1 or v1beta2, not kueue.x-k8s.io/v1",
        ),
        (
            lambda: _edit(jobset_docs(), 2, LIMIT_KEYS, -4),
            f"doc[2] (JobSet multislice-3slice).{POD_SPEC}.containers[0].resources.limits.{TPU}",
            "must not be negative, got -4",
        ),
        (
            lambda: _edit(jobset_docs(), 1, LIMIT_KEYS, "-4"),
            f"doc[1] (JobSet multislice-2slice).{POD_SPEC}.containers[0].resources.limits.{TPU}",
            "'-4' is not a non-negative quantity (e.g. 2, 500m, 16Gi)",
        ),
        (
            lambda: _edit(jobset_docs(), 0, [*POD_KEYS[:3], "replicas"], "two"),
            "doc[0] (JobSet multislice-1slice).spec.replicatedJobs[0].replicas",
            "must be an integer, not a string",
        ),
        (
            lambda: _edit(jobset_docs(), 0, [*POD_KEYS, "tolerations"], [{"operator": "Maybe"}]),
            f"doc[0] (JobSet multislice-1slice).{POD_SPEC}.tolerations[0].operator",
            "must be Equal or Exists, not 'Maybe'",
        ),
        (
            lambda: _edit(jobset_docs(), 0, [*POD_KEYS, "nodeSelector"], {"zone": 3}),
            f"doc[0] (JobSet multislice-1slice).{POD_SPEC}.nodeSelector.zone",
            "must be a string of at most 63 characters",
        ),
        (
            lambda: _edit(jobset_docs(), 0, ["metadata", "labels", manifests.QUEUE_LABEL], "Q!"),
            "doc[0] (JobSet multislice-1slice).metadata.labels.kueue.x-k8s.io/queue-name",
            "'Q!' is not a valid name (lower-case letters, digits, '-')",
        ),
        (
            lambda: _edit(jobset_docs(), 0, [*POD_KEYS[:3], "name"], "Slice"),
            "doc[0] (JobSet multislice-1slice).spec.replicatedJobs[0].name",
            "'Slice' is not a valid name (lower-case letters, digits, '-')",
        ),
        (
            lambda: _edit(jobset_docs(), 0, [*POD_KEYS, "containers"], []),
            f"doc[0] (JobSet multislice-1slice).{POD_SPEC}.containers",
            "must not be empty",
        ),
        (
            lambda: [
                job({"parallelism": 2}, annotations={"kueue.x-k8s.io/job-min-parallelism": "3"})
            ],
            "doc[0] (Job j).metadata.annotations.kueue.x-k8s.io/job-min-parallelism",
            "must be at most 2, got 3",
        ),
        (
            lambda: [
                pod(
                    {"containers": [container()]},
                    annotations={"muster.dev/runtime-seconds": "forever"},
                )
            ],
            "doc[0] (Pod p).metadata.annotations.muster.dev/runtime-seconds",
            "'forever' is not a duration such as 30, 90s, 10m or 2h",
        ),
        (
            lambda: [None, "text"],
            "doc[1]",
            "must be an object with apiVersion, kind, metadata",
        ),
        (
            lambda: [{"apiVersion": "v1", "metadata": {"name": "x"}}],
            "doc[0].kind",
            "is required: a string such as ClusterQueue or Job",
        ),
        (
            lambda: [{**pod({"containers": [container()]}), "extra": 1}],
            "doc[0] (Pod p).extra",
            "unknown field",
        ),
        (
            lambda: [
                {
                    "apiVersion": "scheduling.k8s.io/v1",
                    "kind": "PriorityClass",
                    "metadata": {"name": "high"},
                    "value": "high",
                }
            ],
            "doc[0] (PriorityClass high).value",
            "must be an integer, not a string",
        ),
        (
            lambda: _edit(volcano_docs(), 0, ["spec", "policies", 0, "event"], "Unknown"),
            "doc[0] (Job job-demo).spec.policies[0].event",
            "event Unknown is not supported (PodFailed, PodEvicted, TaskCompleted, *)",
        ),
        (
            lambda: _edit(
                volcano_docs(),
                0,
                ["spec", "policies", 0],
                {"events": ["PodFailed", "PodPending"], "action": "RestartJob"},
            ),
            "doc[0] (Job job-demo).spec.policies[0].events[1]",
            "event PodPending is not supported (PodFailed, PodEvicted, TaskCompleted, *)",
        ),
        (
            lambda: _edit(
                volcano_docs(),
                0,
                ["spec", "tasks", 0, "policies"],
                [{"event": "PodRunning", "action": "RestartJob"}],
            ),
            "doc[0] (Job job-demo).spec.tasks[0].policies[0].event",
            "event PodRunning is not supported",
        ),
        (
            lambda: _edit(volcano_docs(), 0, ["spec", "policies", 0, "action"], "SyncJob"),
            "doc[0] (Job job-demo).spec.policies[0].action",
            "action SyncJob is not supported (RestartJob, RestartTask, RestartPod, AbortJob, "
            "TerminateJob, CompleteJob)",
        ),
        (
            lambda: _edit(
                volcano_docs(), 0, ["spec", "policies", 0], {"exitCode": 3, "action": "AbortJob"}
            ),
            "doc[0] (Job job-demo).spec.policies[0].exitCode",
            "is not supported by muster: exit-code policies",
        ),
        (
            lambda: _edit(volcano_docs(), 0, ["spec", "maxRetry"], -1),
            "doc[0] (Job job-demo).spec.maxRetry",
            "must be at least 0, got -1",
        ),
        (
            lambda: _edit(volcano_docs(), 0, ["spec", "minAvailable"], 3),
            "doc[0] (Job job-demo).spec.minAvailable",
            "must be at most the tasks' 2 pods, got 3",
        ),
        (
            lambda: _edit(volcano_docs(), 0, ["spec", "queue"], "Q!"),
            "doc[0] (Job job-demo).spec.queue",
            "'Q!' is not a valid name",
        ),
        (
            lambda: _edit(volcano_docs(), 0, ["spec", "tasks", 0, "replicas"], 0),
            "doc[0] (Job job-demo).spec.tasks[0].replicas",
            "must be at least 1, got 0",
        ),
        (
            lambda: _edit(volcano_docs(), 0, ["spec", "networkTopology"], {"mode": "strict"}),
            "doc[0] (Job job-demo).spec.networkTopology.mode",
            "must be one of hard, soft, not 'strict'",
        ),
        (
            lambda: _edit(
                docs("volcano/job-supernode.yaml"),
                0,
                ["spec", "tasks", 1, "template", "metadata"],
                {"annotations": {"metax-tech.com/gpu-group-size": "32"}},
            ),
            "doc[0] (Job pytorch-demo).spec.tasks[1].template.metadata.annotations"
            ".metax-tech.com/gpu-group-size",
            "is 32 but spec.tasks[0].template.metadata.annotations.metax-tech.com/gpu-group-size "
            "is 64: one value per workload",
        ),
        (
            lambda: _edit(
                docs("volcano/job-supernode.yaml"),
                0,
                [*SUPERNODE_ANNOTATIONS, "metax-tech.com/gpu-group-size"],
                "many",
            ),
            "doc[0] (Job pytorch-demo).spec.tasks[0].template.metadata.annotations"
            ".metax-tech.com/gpu-group-size",
            "must be a whole number, not 'many'",
        ),
        (
            lambda: [annotated_pod({"hami.io/node-scheduler-policy": "random"})],
            "doc[0] (Pod p).metadata.annotations.hami.io/node-scheduler-policy",
            "must be binpack or spread, not 'random'",
        ),
        (
            lambda: [annotated_pod({"hami.io/gpu-scheduler-policy": "mutex,spread"})],
            "doc[0] (Pod p).metadata.annotations.hami.io/gpu-scheduler-policy",
            "must be binpack, spread or topology-aware (the first of a comma-separated list), "
            "not 'mutex,spread'",
        ),
        (
            lambda: [annotated_job({"hami.io/node-scheduler-policy": "pack"})],
            "doc[0] (Job j).spec.template.metadata.annotations.hami.io/node-scheduler-policy",
            "must be binpack or spread, not 'pack'",
        ),
        (
            lambda: [annotated_pod({"nvidia.com/use-gpuuuid": 3})],
            "doc[0] (Pod p).metadata.annotations.nvidia.com/use-gpuuuid",
            "must be a comma-separated string, not 3",
        ),
        (
            lambda: [
                annotated_pod(
                    {
                        "kueue.x-k8s.io/podset-required-topology": "rack",
                        "kueue.x-k8s.io/podset-preferred-topology": "block",
                    }
                )
            ],
            "doc[0] (Pod p).metadata.annotations",
            "give required or preferred, not both",
        ),
        (
            lambda: [annotated_job({"kueue.x-k8s.io/podset-slice-size": "3"}, parallelism=4)],
            "doc[0] (Job j).spec.template.metadata.annotations.kueue.x-k8s.io/podset-slice-size",
            "must divide the pod count 4",
        ),
        (
            lambda: [
                pod({"containers": [container()]}, annotations={"muster.dev/exit-codes": "1,x"})
            ],
            "doc[0] (Pod p).metadata.annotations.muster.dev/exit-codes",
            "must be exit codes separated by commas, such as 1,1,0, not '1,x'",
        ),
        (
            lambda: [
                pod({"containers": [container()]}, annotations={"muster.dev/exit-codes": "0,300"})
            ],
            "doc[0] (Pod p).metadata.annotations.muster.dev/exit-codes[1]",
            "must be an exit code 0..255",
        ),
        (
            lambda: _edit(
                jobset_docs(), 0, ["spec", "failurePolicy", "rules"], [{"action": "Ignore"}]
            ),
            "doc[0] (JobSet multislice-1slice).spec.failurePolicy.rules[0].action",
            "action Ignore is not supported (FailJobSet, RestartJobSet, ",
        ),
        (
            lambda: _edit(
                jobset_docs(),
                0,
                ["spec", "failurePolicy", "rules"],
                [{"action": "FailJobSet", "targetReplicatedJobs": ["nope"]}],
            ),
            "doc[0] (JobSet multislice-1slice).spec.failurePolicy.rules[0].targetReplicatedJobs",
            "no pod set is named 'nope'",
        ),
        (
            lambda: _edit(jobset_docs(), 0, ["spec", "failurePolicy", "maxRestarts"], "four"),
            "doc[0] (JobSet multislice-1slice).spec.failurePolicy.maxRestarts",
            "must be an integer, not a string",
        ),
        (
            lambda: _edit(jobset_docs(), 0, [*POD_KEYS[:5], "backoffLimit"], -1),
            "doc[0] (JobSet multislice-1slice).spec.replicatedJobs[0].template.spec.backoffLimit",
            "must be at least 0, got -1",
        ),
        (
            lambda: [{**job({}), "apiVersion": "example.com/v1"}],
            "doc[0] (Job j).apiVersion",
            "Job is read from batch/v1 or batch.volcano.sh/v1alpha1, not example.com/v1",
        ),
        (
            lambda: _edit(volcano_docs(), 0, ["apiVersion"], "batch.volcano.sh/v1beta1"),
            "doc[0] (Job job-demo).apiVersion",
            "Job is read from batch.volcano.sh/v1alpha1, not batch.volcano.sh/v1beta1",
        ),
    ],
)
def test_refusals_name_the_document_and_the_field(build: Any, path: str, problem: str) -> None:
    err = refused(build())
    assert err.path == path
    assert err.problem.startswith(problem)
    assert str(err) == f"{err.path}: {err.problem}"


def test_unknown_kind_lists_the_supported_kinds() -> None:
    err = refused([{"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "w"}}])
    for kind in (
        "ResourceFlavor",
        "ClusterQueue",
        "LocalQueue",
        "Cohort",
        "WorkloadPriorityClass",
        "PriorityClass",
        "ResourceQuota",
        "JobSet",
        "Job",
        "Pod",
    ):
        assert f"{kind} (" in err.problem


def _edit(documents: list[Any], index: int, keys: list[Any], value: Any) -> list[Any]:
    """A deep copy with ``value`` set at ``keys`` (strings for fields, ints for list items)."""
    out = copy.deepcopy(documents)
    node: Any = out[index]
    for key in keys[:-1]:
        node = node[key]
    node[keys[-1]] = value
    return out


# -- combining, merging, configuration events ---------------------------------------------


def small_cluster() -> Any:
    return parse.cluster(
        {
            "name": "demo",
            "zones": ["z-a"],
            "resourceFlavors": [{"name": "vlp-24"}, {"name": "other"}],
            "clusterQueues": [
                {
                    "name": "cluster-queue",
                    "resourceGroups": [
                        {
                            "coveredResources": [TPU],
                            "flavors": [
                                {"name": "vlp-24", "resources": [{"name": TPU, "nominalQuota": 8}]}
                            ],
                        }
                    ],
                }
            ],
            "localQueues": [
                {"namespace": "team-a", "name": "multislice-queue", "clusterQueue": "x"},
                {"namespace": "default", "name": "multislice-queue", "clusterQueue": "x"},
            ],
            "fairSharing": {"enable": True},
        }
    )


def test_merge_replaces_same_named_objects_and_adds_new_ones() -> None:
    cluster = small_cluster()
    merged = manifests.merge(cluster, load("multislice/kueue.yaml", "multislice/preemption.yaml"))
    assert [f.name for f in merged.resource_flavors] == ["vlp-24", "other"]
    assert dict(merged.resource_flavors[0].node_labels) == TPU_SELECTOR
    (cq,) = merged.cluster_queues
    assert cq.resource_groups[0].flavors[0].resources[0].nominal_quota == 24
    # The later file (preemption.yaml) replaced kueue.yaml's queue.
    assert cq.preemption.within_cluster_queue == "LowerPriority"
    # Local queues are keyed by namespace and name: only default/multislice-queue changed.
    assert [(q.key, q.cluster_queue) for q in merged.local_queues] == [
        ("team-a/multislice-queue", "x"),
        ("default/multislice-queue", "cluster-queue"),
    ]
    assert [c.name for c in merged.priority_classes] == ["low-priority"]
    assert (merged.name, merged.zones, merged.fair_sharing) == (
        cluster.name,
        cluster.zones,
        cluster.fair_sharing,
    )
    assert cluster.cluster_queues[0].preemption.within_cluster_queue == "Never"  # not mutated


def test_later_documents_replace_earlier_ones_in_one_read() -> None:
    first, second = kueue_docs()[1], copy.deepcopy(kueue_docs()[1])
    second["spec"]["queueingStrategy"] = "StrictFIFO"
    m = manifests.read([first, second])
    assert [(q.name, q.queueing_strategy) for q in m.cluster_queues] == [
        ("cluster-queue", "StrictFIFO")
    ]


def test_queue_configuration_uses_the_cluster_description_streams() -> None:
    m = load("dws/queues.yaml", "gpu-operator/priority-and-quota.yaml", "dws/job.yaml")
    events = inputs.queue_configuration(m, 5.0)
    assert [(e.stream_id, type(e.event).__name__) for e in events] == [
        ("config-flavor-default-flavor", "ResourceFlavorConfigured"),
        ("config-clusterqueue-dws-cluster-queue", "ClusterQueueConfigured"),
        ("config-localqueue-default.dws-local-queue", "LocalQueueConfigured"),
        ("config-priorityclass-high-priority", "PriorityClassConfigured"),
        ("config-namespacequota-default.gpu-quota", "NamespaceQuotaConfigured"),
        ("config-admissioncheck-dws-prov", "AdmissionCheckConfigured"),
        ("config-provisioningrequestconfig-dws-config", "ProvisioningRequestConfigConfigured"),
    ]
    assert {e.occurred_at for e in events} == {5.0}
    # The same objects in a cluster description give the same events on the same streams.
    cluster = manifests.merge(parse.cluster({"name": "c", "zones": ["z"]}), m)
    described = inputs.configuration(cluster, 5.0)
    assert [(e.stream_id, e.event) for e in described[1:-2]] == [
        (e.stream_id, e.event) for e in events
    ]
    assert type(described[0].event).__name__ == "CloudConfigured"
    assert [type(e.event).__name__ for e in described[-2:]] == [
        "FairSharingConfigured",
        "WaitForPodsReadyConfigured",
    ]


def test_manifests_need_one_source_per_workload() -> None:
    (wl,) = load("hami/sample-pod.yaml").workloads
    with pytest.raises(ValueError, match="one source per workload"):
        Manifests(workloads=(wl,))


def test_is_manifests() -> None:
    assert manifests.is_manifests([None, {"kind": "Pod"}])
    assert not manifests.is_manifests([{"workloads": []}])
    assert not manifests.is_manifests([])


# -- issue 17, 4c: no workload field silently dropped (workload_fields) --------------------


def test_pod_overhead_counts_with_the_requests() -> None:
    """Kubernetes' PodRequests add the pod's overhead (its RuntimeClass's cost)."""
    spec = {
        "containers": [container(resources={"requests": {"cpu": "1"}})],
        "overhead": {"cpu": "250m", "memory": "64Mi"},
    }
    assert dict(one_pod(spec).pod_sets[0].requests) == {"cpu": 1250, "memory": 64 * 2**20}


def test_sidecar_init_containers_add_to_the_requests() -> None:
    """Kubernetes' sidecars (init containers with restartPolicy: Always) keep running:
    their requests add to the containers' and to the later init containers' peak."""
    spec = {
        "initContainers": [
            container(restartPolicy="Always", resources={"requests": {"cpu": "1"}}),
            container(resources={"requests": {"cpu": "4"}}),
        ],
        "containers": [container(resources={"requests": {"cpu": "2"}})],
    }
    # max(2 + 1 sidecar, 4 + 1 sidecar while the second init container runs)
    assert dict(one_pod(spec).pod_sets[0].requests) == {"cpu": 5000}
    spec["initContainers"][1]["resources"]["requests"]["cpu"] = "1"
    assert dict(one_pod(spec).pod_sets[0].requests) == {"cpu": 3000}


POD_AT = "doc[0] (Pod p).spec"
JOB_AT = "doc[0] (Job j).spec"
VOLCANO_AT = "doc[0] (Job vj).spec"
JOBSET_AT = "doc[0] (JobSet js).spec"


@pytest.mark.parametrize(
    ("doc", "path"),
    [
        (pod({"containers": [container()], "nodeName": "n1"}), f"{POD_AT}.nodeName"),
        (
            pod({"containers": [container()], "topologySpreadConstraints": [{"maxSkew": 1}]}),
            f"{POD_AT}.topologySpreadConstraints",
        ),
        (
            pod({"containers": [container()], "schedulingGates": [{"name": "g"}]}),
            f"{POD_AT}.schedulingGates",
        ),
        (pod({"containers": [container()], "hostNetwork": True}), f"{POD_AT}.hostNetwork"),
        (
            pod({"containers": [container(ports=[{"containerPort": 80, "hostPort": 80}])]}),
            f"{POD_AT}.containers[0].ports[0].hostPort",
        ),
        (
            pod({"containers": [container(resources={"claims": [{"name": "gpu"}]})]}),
            f"{POD_AT}.containers[0].resources.claims",
        ),
        (pod({"containers": [container()], "priority": 10}), f"{POD_AT}.priority"),
        (job({"activeDeadlineSeconds": 60}), f"{JOB_AT}.activeDeadlineSeconds"),
        (job({"podFailurePolicy": {"rules": []}}), f"{JOB_AT}.podFailurePolicy"),
        (job({"successPolicy": {"rules": []}}), f"{JOB_AT}.successPolicy"),
        (volcano({"minSuccess": 1, "tasks": [task("a", 2)]}), f"{VOLCANO_AT}.minSuccess"),
        (
            volcano({"tasks": [task("a", 2, dependsOn={"name": ["b"]})]}),
            f"{VOLCANO_AT}.tasks[0].dependsOn",
        ),
        (
            volcano({"tasks": [task("a", 2, topologyPolicy="single-numa-node")]}),
            f"{VOLCANO_AT}.tasks[0].topologyPolicy",
        ),
        (volcano({"tasks": [task("a", 2, minAvailable=1)]}), f"{VOLCANO_AT}.tasks[0].minAvailable"),
        (volcano({"tasks": [task("a", 2, maxRetry=1)]}), f"{VOLCANO_AT}.tasks[0].maxRetry"),
        (
            jobset(
                {
                    "startupPolicy": {"startupPolicyOrder": "InOrder"},
                    "replicatedJobs": [replicated("a", 1, 1)],
                }
            ),
            f"{JOBSET_AT}.startupPolicy.startupPolicyOrder",
        ),
        (
            jobset(
                {
                    "successPolicy": {"operator": "Any", "targetReplicatedJobs": ["a"]},
                    "replicatedJobs": [replicated("a", 1, 1)],
                }
            ),
            f"{JOBSET_AT}.successPolicy",
        ),
        (
            jobset(
                {
                    "failurePolicy": {"restartStrategy": "InPlaceRestart"},
                    "replicatedJobs": [replicated("a", 1, 1)],
                }
            ),
            f"{JOBSET_AT}.failurePolicy.restartStrategy",
        ),
    ],
)
def test_scheduling_fields_muster_does_not_model_are_refused_by_name(
    doc: dict[str, Any], path: str
) -> None:
    """Each would change scheduling in the peer (Kubernetes, Volcano, JobSet): refused at
    its path, "not supported by muster", never accepted and ignored (issue 17, 4c)."""
    exc = refused([doc])
    assert exc.path == path
    assert exc.problem.startswith("is not supported by muster: ")


def test_the_values_that_ask_for_nothing_are_accepted() -> None:
    """Kubernetes' defaults of refused fields change nothing: accepted."""
    base = one_pod({"containers": [container()]})
    spec = {
        "containers": [container(ports=[{"containerPort": 80, "hostPort": 0}])],
        "hostNetwork": False,
        "schedulingGates": [],
        "topologySpreadConstraints": [],
        "preemptionPolicy": "PreemptLowerPriority",
        "schedulerName": "volcano",
        "volumes": [{"name": "data", "emptyDir": {}}],
    }
    assert one_pod(spec) == base
    rjs = [replicated("a", 1, 1)]
    plain = manifests.read([jobset({"replicatedJobs": rjs})])
    harmless = {
        "replicatedJobs": rjs,
        "startupPolicy": {"startupPolicyOrder": "AnyOrder"},
        "successPolicy": {"operator": "All"},
        "network": {"enableDNSHostnames": True},
        "suspend": True,
    }
    assert manifests.read([jobset(harmless)]) == plain


def test_a_field_kubernetes_does_not_know_is_refused_in_a_workload() -> None:
    """Strict field validation, as kubectl apply's: a misspelt field is not ignored."""
    exc = refused([pod({"containers": [container()], "nodeSelecter": {"zone": "a"}})])
    assert (exc.path, exc.problem) == (f"{POD_AT}.nodeSelecter", "unknown field")
    exc = refused([job({"paralellism": 4})])
    assert (exc.path, exc.problem) == (f"{JOB_AT}.paralellism", "unknown field")


@pytest.mark.parametrize("key", sorted(workload_fields.REFUSED_ANNOTATIONS))
def test_annotations_that_change_scheduling_in_the_peer_are_refused(key: str) -> None:
    """Kueue's pod set groups and max execution time, Volcano's preemptable, JobSet's
    node-selector strategy: refused by name on the workload and on its templates, as a
    label or an annotation; any other label or annotation passes through."""
    exc = refused([annotated_job({key: "true"})])
    assert exc.path == f"{JOB_AT}.template.metadata.annotations.{key}"
    assert exc.problem.startswith("is not supported by muster: ")
    exc = refused([job({}, labels={key: "true"})])
    assert exc.path == f"doc[0] (Job j).metadata.labels.{key}"
    exc = refused([volcano({"tasks": [task("a", 1)]}, annotations={key: "1"})])
    assert exc.path == f"doc[0] (Job vj).metadata.annotations.{key}"
    plain = manifests.read([annotated_job({})])
    assert manifests.read([annotated_job({"example.com/anything": "x"})]) == plain


DUMPED_JOB = """
apiVersion: batch/v1
kind: Job
metadata:
  annotations: {batch.kubernetes.io/job-tracking: ""}
  creationTimestamp: "2025-01-01T00:00:00Z"
  generation: 1
  labels: {kueue.x-k8s.io/queue-name: user-queue}
  name: sample-job
  namespace: default
  resourceVersion: "123"
  uid: 0b4e8a47-2c1f-4a4e-9d61-1c2b3d4e5f60
spec:
  backoffLimit: 6
  completionMode: NonIndexed
  completions: 3
  manualSelector: false
  parallelism: 3
  podReplacementPolicy: TerminatingOrFailed
  selector: {matchLabels: {batch.kubernetes.io/controller-uid: 0b4e8a47}}
  suspend: true
  template:
    metadata:
      creationTimestamp: null
      labels: {batch.kubernetes.io/job-name: sample-job, job-name: sample-job}
    spec:
      containers:
      - args: ["30s"]
        image: gcr.io/k8s-staging-perf-tests/sleep:v0.1.0
        imagePullPolicy: IfNotPresent
        name: dummy-job
        resources:
          requests: {cpu: "1", memory: 200Mi}
        terminationMessagePath: /dev/termination-log
        terminationMessagePolicy: File
      dnsPolicy: ClusterFirst
      enableServiceLinks: true
      preemptionPolicy: PreemptLowerPriority
      priority: 0
      restartPolicy: Never
      schedulerName: default-scheduler
      securityContext: {}
      terminationGracePeriodSeconds: 30
status: {ready: 0, terminating: 0, uncountedTerminatedPods: {}}
"""


def test_a_job_as_kubectl_get_prints_it_is_read() -> None:
    """Strict reading still takes what a cluster prints back (kubectl get -o yaml): its
    defaults are passed through or ask for nothing."""
    (wl,) = manifests.read([yaml.safe_load(DUMPED_JOB)]).workloads
    assert (wl.queue_name, wl.pod_sets[0].count) == ("user-queue", 3)
    assert dict(wl.pod_sets[0].requests) == {"cpu": 1000, "memory": 200 * 2**20}
    assert wl.runtime.duration_seconds == 30.0


def test_a_jobs_grace_period_and_checkpoint_interval_are_read() -> None:
    """Kubernetes' terminationGracePeriodSeconds is how long a stopped pod has between
    SIGTERM and SIGKILL; the checkpoint interval is muster's annotation (issue 19)."""
    template = {"spec": {"containers": [container()], "terminationGracePeriodSeconds": 120}}
    doc = job(
        {"template": template},
        annotations={"muster.dev/checkpoint-interval-seconds": "600"},
    )
    (wl,) = manifests.read([doc]).workloads
    assert (wl.termination_grace_seconds, wl.checkpoint_interval_seconds) == (120, 600)
    (plain,) = manifests.read([job({})]).workloads
    assert (plain.termination_grace_seconds, plain.checkpoint_interval_seconds) == (30, None)


def test_a_bad_checkpoint_annotation_names_it() -> None:
    doc = job({}, annotations={"muster.dev/checkpoint-interval-seconds": "often"})
    with pytest.raises(InvalidInput) as err:
        manifests.read([doc])
    assert "metadata.annotations.muster.dev/checkpoint-interval-seconds" in str(err.value)
