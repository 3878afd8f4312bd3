"""parse.workload / parse.cluster: valid documents build the model; invalid ones are
refused with the exact path of the offending field and a problem that says why."""

from __future__ import annotations

import copy
import math
from collections.abc import Callable
from typing import Any

import pytest

from muster.core.model import parse
from muster.core.model.fields import InvalidInput
from muster.core.model.resources import MAX_QUANTITY

GPU = "nvidia.com/gpu"


def workload_doc(**over: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "name": "train",
        "namespace": "team-a",
        "queueName": "training",
        "podSets": [
            {"name": "worker", "count": 2, "requests": {"cpu": "500m", "memory": "16Gi", GPU: 1}}
        ],
        "runtime": {"durationSeconds": "10m", "exitCode": 0},
    }
    doc.update(over)
    return doc


def cluster_doc() -> dict[str, Any]:
    return {
        "name": "demo",
        "region": "us-central1",
        "zones": ["us-central1-a", "us-central1-b"],
        "bookingSeconds": "10m",
        "nodePools": [
            {
                "name": "a100-pool",
                "machineType": "a2-highgpu-8g",
                "allocatable": {GPU: 8, "cpu": 96, "memory": "680Gi"},
                "labels": {"cloud.google.com/gke-accelerator": "nvidia-tesla-a100"},
                "taints": [{"key": "gpu", "value": "true", "effect": "NoSchedule"}],
                "maxNodes": 20,
                "provisioningDelaySeconds": "90s",
                "capacity": [
                    {"at": "10m", "zones": {"us-central1-b": 4}},
                    {"at": 0, "zones": {"us-central1-a": 3, "us-central1-b": 0}},
                ],
            }
        ],
        "quotas": [{"name": "NVIDIA_A100_GPUS", "resource": GPU, "limit": 16}],
        "resourceFlavors": [
            {
                "name": "a100",
                "nodeLabels": {"cloud.google.com/gke-accelerator": "nvidia-tesla-a100"},
                "nodeTaints": [{"key": "gpu", "value": "true"}],
            }
        ],
        "clusterQueues": [
            {
                "name": "research",
                "queueingStrategy": "StrictFIFO",
                "resourceGroups": [
                    {
                        "coveredResources": [GPU, "cpu", "memory"],
                        "flavors": [
                            {
                                "name": "a100",
                                "resources": [
                                    {"name": GPU, "nominalQuota": 48},
                                    {"name": "cpu", "nominalQuota": "1000"},
                                    {"name": "memory", "nominalQuota": "8Ti"},
                                ],
                            }
                        ],
                    }
                ],
            }
        ],
        "localQueues": [{"namespace": "team-a", "name": "training", "clusterQueue": "research"}],
    }


def refused(build: Callable[[Any], Any], doc: Any) -> InvalidInput:
    with pytest.raises(InvalidInput) as info:
        build(doc)
    err = info.value
    # The message a user sees is "<path>: <problem>".
    assert str(err) == (f"{err.path}: {err.problem}" if err.path else err.problem)
    return err


def edited(doc: dict[str, Any], edit: Callable[[dict[str, Any]], object]) -> dict[str, Any]:
    out = copy.deepcopy(doc)
    edit(out)
    return out


def pod_set(doc: dict[str, Any]) -> dict[str, Any]:
    return doc["podSets"][0]  # type: ignore[no-any-return]


def requests(doc: dict[str, Any]) -> dict[str, Any]:
    return pod_set(doc)["requests"]  # type: ignore[no-any-return]


# -- workloads: accepted -----------------------------------------------------------


def test_valid_workload_builds_the_spec_with_quantities_in_base_units() -> None:
    spec = parse.workload(workload_doc())
    assert (spec.name, spec.namespace, spec.queue_name) == ("train", "team-a", "training")
    (ps,) = spec.pod_sets
    assert ps.name == "worker" and ps.count == 2
    assert ps.requests == {"cpu": 500, "memory": 16 * 2**30, GPU: 1}
    assert spec.runtime.duration_seconds == 600.0
    # Totals scale by the pod count: what the queue charges.
    assert spec.total_requests() == {"cpu": 1000, "memory": 32 * 2**30, GPU: 2}


def test_workload_defaults() -> None:
    spec = parse.workload({"name": "j", "queueName": "q", "podSets": [{"count": 1}]})
    assert spec.namespace == "default"
    assert spec.pod_sets[0].name == "main"
    assert spec.pod_sets[0].requests == {}
    assert spec.priority == 0
    assert spec.runtime.duration_seconds == 60.0 and spec.runtime.exit_code == 0


@pytest.mark.parametrize(
    ("resource", "raw", "expected"),
    [
        ("cpu", "500m", 500),
        ("cpu", 2, 2000),
        ("cpu", "1.5", 1500),
        ("cpu", ".5", 500),
        ("memory", "16Gi", 16 * 2**30),
        ("memory", "1.5Gi", 3 * 2**29),
        ("memory", "1k", 1000),
        ("memory", "2M", 2_000_000),
        (GPU, 4, 4),
        (GPU, "8", 8),
        (GPU, 1.0, 1),
    ],
)
def test_quantities(resource: str, raw: object, expected: int) -> None:
    doc = workload_doc(podSets=[{"name": "w", "count": 1, "requests": {resource: raw}}])
    assert parse.workload(doc).pod_sets[0].requests == {resource: expected}


@pytest.mark.parametrize("raw", ["10m", "600s", 600, "0.1666h", "600000ms"])
def test_durations_in_every_unit(raw: object) -> None:
    spec = parse.workload(workload_doc(runtime={"durationSeconds": raw}))
    expected = 0.1666 * 3600 if raw == "0.1666h" else 600.0
    assert spec.runtime.duration_seconds == pytest.approx(expected)


def test_eight_pod_sets_is_the_maximum_accepted() -> None:
    sets = [{"name": f"p{i}", "count": 1} for i in range(parse.MAX_POD_SETS)]
    assert len(parse.workload(workload_doc(podSets=sets)).pod_sets) == parse.MAX_POD_SETS


# -- workloads: refused, with the field and the problem -----------------------------


@pytest.mark.parametrize(
    ("edit", "path", "problem"),
    [
        (lambda d: d.pop("name"), "name", "is required"),
        (lambda d: d.update(name=None), "name", "is required"),
        (lambda d: d.pop("queueName"), "queueName", "is required"),
        (lambda d: d.pop("podSets"), "podSets", "is required"),
        (lambda d: d.update(podSets=[]), "podSets", "must not be empty"),
        (lambda d: pod_set(d).pop("count"), "podSets[0].count", "is required"),
    ],
)
def test_missing_fields(edit: Callable[[dict[str, Any]], object], path: str, problem: str) -> None:
    err = refused(parse.workload, edited(workload_doc(), edit))
    assert (err.path, err.problem) == (path, problem)


@pytest.mark.parametrize(
    ("edit", "path", "problem"),
    [
        (
            lambda d: pod_set(d).update(count="2"),
            "podSets[0].count",
            "must be an integer, not a string",
        ),
        (
            lambda d: pod_set(d).update(count=2.0),
            "podSets[0].count",
            "must be an integer, not a number",
        ),
        (
            lambda d: pod_set(d).update(count=True),
            "podSets[0].count",
            "must be an integer, not a boolean",
        ),
        (
            lambda d: pod_set(d).update(requests=["cpu", "1"]),
            "podSets[0].requests",
            "must be an object of quantities, not a list",
        ),
        (lambda d: d.update(podSets={"name": "w"}), "podSets", "must be a list, not an object"),
        (lambda d: d.update(name=5), "name", "must be a string, not a number"),
        (lambda d: d.update(runtime="fast"), "runtime", "must be an object, not a string"),
        (lambda d: d.update(priority="high"), "priority", "must be an integer, not a string"),
        (
            lambda d: pod_set(d).update(nodeSelector=["a"]),
            "podSets[0].nodeSelector",
            "must be an object of strings, not a list",
        ),
        (
            lambda d: requests(d).update(cpu=True),
            "podSets[0].requests.cpu",
            "must be a number or a quantity string such as 500m or 16Gi",
        ),
    ],
)
def test_wrong_types(edit: Callable[[dict[str, Any]], object], path: str, problem: str) -> None:
    err = refused(parse.workload, edited(workload_doc(), edit))
    assert (err.path, err.problem) == (path, problem)


def test_not_an_object_at_all() -> None:
    err = refused(parse.workload, ["not", "an", "object"])
    assert (err.path, err.problem) == ("", "must be an object, not a list")
    err = refused(parse.workload, {"name": "j", "queueName": "q", "podSets": ["w"]})
    assert (err.path, err.problem) == ("podSets[0]", "must be an object, not a string")


@pytest.mark.parametrize(
    ("resource", "raw", "problem"),
    [
        ("cpu", -1, "must not be negative, got -1"),
        ("memory", -0.5, "must not be negative, got -0.5"),
        ("cpu", "-1", "'-1' is not a non-negative quantity (e.g. 2, 500m, 16Gi)"),
        ("cpu", 0, "must be greater than zero"),
        ("cpu", "0", "must be greater than zero"),
        (GPU, "0m", "must be greater than zero"),
        ("cpu", "abc", "'abc' is not a non-negative quantity (e.g. 2, 500m, 16Gi)"),
        ("cpu", "", "'' is not a non-negative quantity (e.g. 2, 500m, 16Gi)"),
        ("memory", "16 Gi", "'16 Gi' is not a non-negative quantity (e.g. 2, 500m, 16Gi)"),
        ("memory", "16GB", "'16GB' is not a non-negative quantity (e.g. 2, 500m, 16Gi)"),
        # Absurdly large: beyond any real cluster, whatever way it is written.
        ("memory", "1" + "0" * 30, "'" + "1" + "0" * 30 + "' is absurdly large"),
        ("memory", "999Ei", "'999Ei' is absurdly large"),
        (GPU, str(MAX_QUANTITY + 1), f"'{MAX_QUANTITY + 1}' is absurdly large"),
        ("memory", "1e30", "'1e30' is not a non-negative quantity (e.g. 2, 500m, 16Gi)"),
        ("memory", 1e30, "'1e+30' is not a non-negative quantity (e.g. 2, 500m, 16Gi)"),
        ("memory", math.inf, "'inf' is not a non-negative quantity (e.g. 2, 500m, 16Gi)"),
        ("memory", math.nan, "'nan' is not a non-negative quantity (e.g. 2, 500m, 16Gi)"),
        # Devices are whole: half a GPU is not a thing.
        (GPU, "0.5", "'0.5' is not a whole number of units for nvidia.com/gpu"),
        (GPU, 0.5, "'0.5' is not a whole number of units for nvidia.com/gpu"),
        (GPU, "500m", "'500m' is not a whole number of units for nvidia.com/gpu"),
        ("memory", "500m", "'500m' is not a whole number of units for memory"),
        ("cpu", "0.5m", "'0.5m' is not a whole number of units for cpu"),
    ],
)
def test_bad_quantities(resource: str, raw: object, problem: str) -> None:
    doc = workload_doc(podSets=[{"name": "w", "count": 1, "requests": {resource: raw}}])
    err = refused(parse.workload, doc)
    assert err.path == f"podSets[0].requests.{resource}"
    assert err.problem == problem


def test_largest_allowed_quantity_is_accepted() -> None:
    doc = workload_doc(podSets=[{"name": "w", "count": 1, "requests": {GPU: str(MAX_QUANTITY)}}])
    assert parse.workload(doc).pod_sets[0].requests == {GPU: MAX_QUANTITY}


@pytest.mark.parametrize(
    ("edit", "path"),
    [
        (lambda d: d.update(color="red"), "color"),
        (lambda d: d.update(zzz=1, aaa=2), "aaa"),  # the first unknown, in sorted order
        (lambda d: pod_set(d).update(replicas=3), "podSets[0].replicas"),
        (lambda d: d["runtime"].update(memoryLeak=True), "runtime.memoryLeak"),
        (
            lambda d: pod_set(d).update(tolerations=[{"key": "k", "operater": "Exists"}]),
            "podSets[0].tolerations[0].operater",
        ),
        (
            lambda d: d["podSets"].append({"name": "ps", "count": 1, "extra": {}}),
            "podSets[1].extra",
        ),
    ],
)
def test_unknown_fields_are_refused_not_dropped(
    edit: Callable[[dict[str, Any]], object], path: str
) -> None:
    err = refused(parse.workload, edited(workload_doc(), edit))
    assert (err.path, err.problem) == (path, "unknown field")


BAD_NAME = "is not a valid name (lower-case letters, digits, '-')"


@pytest.mark.parametrize(
    ("edit", "path", "problem"),
    [
        (lambda d: d.update(name="Train"), "name", f"'Train' {BAD_NAME}"),
        (lambda d: d.update(name="train_1"), "name", f"'train_1' {BAD_NAME}"),
        (lambda d: d.update(name="-train"), "name", f"'-train' {BAD_NAME}"),
        (lambda d: d.update(name="train-"), "name", f"'train-' {BAD_NAME}"),
        (lambda d: d.update(name="a.b"), "name", f"'a.b' {BAD_NAME}"),
        (lambda d: d.update(name=""), "name", "must be 1 to 63 characters"),
        (lambda d: d.update(name="a" * 64), "name", "must be 1 to 63 characters"),
        (lambda d: d.update(namespace="Team-A"), "namespace", f"'Team-A' {BAD_NAME}"),
        (lambda d: d.update(queueName="q/1"), "queueName", f"'q/1' {BAD_NAME}"),
        (lambda d: pod_set(d).update(name="Worker"), "podSets[0].name", f"'Worker' {BAD_NAME}"),
    ],
)
def test_bad_names(edit: Callable[[dict[str, Any]], object], path: str, problem: str) -> None:
    err = refused(parse.workload, edited(workload_doc(), edit))
    assert (err.path, err.problem) == (path, problem)


def test_sixty_three_character_name_is_accepted() -> None:
    assert parse.workload(workload_doc(name="a" * 63)).name == "a" * 63


def test_too_many_pod_sets() -> None:
    sets = [{"name": f"p{i}", "count": 1} for i in range(parse.MAX_POD_SETS + 1)]
    err = refused(parse.workload, workload_doc(podSets=sets))
    assert (err.path, err.problem) == ("podSets", "has 9 items; at most 8")


def test_duplicate_pod_set_names() -> None:
    err = refused(
        parse.workload, workload_doc(podSets=[{"name": "w", "count": 1}, {"name": "w", "count": 2}])
    )
    assert (err.path, err.problem) == ("podSets", "pod set names must be unique")


@pytest.mark.parametrize(
    ("count", "problem"),
    [
        (0, "must be at least 1, got 0"),
        (-3, "must be at least 1, got -3"),
        (parse.MAX_PODS + 1, f"must be at most {parse.MAX_PODS}, got {parse.MAX_PODS + 1}"),
    ],
)
def test_pod_count_bounds(count: int, problem: str) -> None:
    err = refused(parse.workload, workload_doc(podSets=[{"name": "w", "count": count}]))
    assert (err.path, err.problem) == ("podSets[0].count", problem)


def test_too_many_pods_across_pod_sets() -> None:
    half = parse.MAX_PODS // 2 + 1
    err = refused(
        parse.workload,
        workload_doc(podSets=[{"name": "a", "count": half}, {"name": "b", "count": half}]),
    )
    assert (err.path, err.problem) == (
        "podSets",
        f"more than {parse.MAX_PODS} pods in one workload",
    )


@pytest.mark.parametrize(
    ("raw", "problem"),
    [
        (-5, "must not be negative"),
        ("-5s", "'-5s' is not a duration such as 30, 90s, 10m or 2h"),
        ("10 minutes", "'10 minutes' is not a duration such as 30, 90s, 10m or 2h"),
        ("1w", "'1w' is not a duration such as 30, 90s, 10m or 2h"),
        (True, "must be a duration such as 30, 90s, 10m or 2h"),
        ([10], "[10] is not a duration such as 30, 90s, 10m or 2h"),
        ("366d", "must be at most 3.1536e+07 seconds"),
        (math.inf, "inf is not a finite duration"),
    ],
)
def test_bad_durations(raw: object, problem: str) -> None:
    err = refused(parse.workload, workload_doc(runtime={"durationSeconds": raw}))
    assert (err.path, err.problem) == ("runtime.durationSeconds", problem)


def test_nan_duration_is_refused() -> None:
    err = refused(parse.workload, workload_doc(runtime={"durationSeconds": math.nan}))
    assert err.path == "runtime.durationSeconds"


@pytest.mark.parametrize(
    ("field", "raw", "problem"),
    [
        ("maxRunDurationSeconds", 0, "must be at least 1, got 0"),
        (
            "maxRunDurationSeconds",
            7 * 86400 + 1,
            f"must be at most {7 * 86400}, got {7 * 86400 + 1}",
        ),
        ("priority", 10**9 + 1, f"must be at most {10**9}, got {10**9 + 1}"),
    ],
)
def test_integer_bounds(field: str, raw: int, problem: str) -> None:
    err = refused(parse.workload, workload_doc(**{field: raw}))
    assert (err.path, err.problem) == (field, problem)


def test_exit_code_bounds() -> None:
    err = refused(parse.workload, workload_doc(runtime={"exitCode": 256}))
    assert (err.path, err.problem) == ("runtime.exitCode", "must be at most 255, got 256")


def test_paths_are_prefixed_inside_a_workload_list() -> None:
    doc = {
        "workloads": [
            {"at": "1s", "workload": workload_doc()},
            {"at": "2s", "workload": workload_doc(podSets=[{"count": "2"}])},
        ]
    }
    err = refused(parse.workload_list, doc)
    assert (err.path, err.problem) == (
        "[1].workload.podSets[0].count",
        "must be an integer, not a string",
    )


def test_workload_list_offsets() -> None:
    items = parse.workload_list(
        [{"at": "1m", "workload": workload_doc()}, {"workload": workload_doc(name="b")}]
    )
    assert [(at, spec.name) for at, spec in items] == [(60.0, "train"), (0.0, "b")]


# -- clusters ------------------------------------------------------------------------


def test_valid_cluster() -> None:
    spec = parse.cluster(cluster_doc())
    assert spec.name == "demo" and spec.region == "us-central1"
    assert spec.zones == ("us-central1-a", "us-central1-b")
    assert spec.booking_seconds == 600.0
    (pool,) = spec.node_pools
    assert pool.allocatable == {GPU: 8, "cpu": 96_000, "memory": 680 * 2**30}
    assert pool.max_nodes == 20
    assert pool.provisioning_delay_seconds == 90.0
    # Steps are kept sorted by time, whatever order the document had.
    assert [(s.at, dict(s.zones)) for s in pool.capacity] == [
        (0.0, {"us-central1-a": 3, "us-central1-b": 0}),
        (600.0, {"us-central1-b": 4}),
    ]
    assert pool.capacity_at(599.0, spec.zones) == {"us-central1-a": 3, "us-central1-b": 0}
    assert pool.capacity_at(600.0, spec.zones) == {"us-central1-a": 3, "us-central1-b": 4}
    (quota,) = spec.quotas
    assert (quota.name, quota.resource, quota.limit) == ("NVIDIA_A100_GPUS", GPU, 16)
    (cq,) = spec.cluster_queues
    assert cq.queueing_strategy == "StrictFIFO"
    quotas = {q.name: q.nominal_quota for q in cq.resource_groups[0].flavors[0].resources}
    assert quotas == {GPU: 48, "cpu": 1_000_000, "memory": 8 * 2**40}
    assert spec.local_queues[0].key == "team-a/training"
    assert spec.resource_flavors[0].node_taints[0].effect == "NoSchedule"


def test_zero_nominal_quota_is_allowed() -> None:
    doc = edited(
        cluster_doc(),
        lambda d: d["clusterQueues"][0]["resourceGroups"][0]["flavors"][0]["resources"][0].update(
            nominalQuota=0
        ),
    )
    cq = parse.cluster(doc).cluster_queues[0]
    assert cq.resource_groups[0].flavors[0].quota(GPU).nominal_quota == 0  # type: ignore[union-attr]


def _pool(d: dict[str, Any]) -> dict[str, Any]:
    return d["nodePools"][0]  # type: ignore[no-any-return]


def _res(d: dict[str, Any]) -> dict[str, Any]:
    return d["clusterQueues"][0]["resourceGroups"][0]["flavors"][0]["resources"][0]  # type: ignore[no-any-return]


RES = "clusterQueues[0].resourceGroups[0].flavors[0].resources[0]"


@pytest.mark.parametrize(
    ("edit", "path", "problem"),
    [
        (lambda d: d.pop("name"), "name", "is required"),
        (lambda d: d.update(zones=[]), "zones", "must name at least one zone"),
        (lambda d: d.update(zones="us-central1-a"), "zones", "must be a list, not a string"),
        (lambda d: d.update(name="Demo"), "name", f"'Demo' {BAD_NAME}"),
        (lambda d: d.update(nodePools={}), "nodePools", "must be a list, not an object"),
        (lambda d: d.update(cloud="gcp"), "cloud", "unknown field"),
        (lambda d: _pool(d).update(gpus=8), "nodePools[0].gpus", "unknown field"),
        (
            lambda d: _pool(d)["capacity"][0].update(zone="x"),
            "nodePools[0].capacity[0].zone",
            "unknown field",
        ),
        (lambda d: _res(d).update(borrow=1), f"{RES}.borrow", "unknown field"),
        (lambda d: d["quotas"][0].update(region="x"), "quotas[0].region", "unknown field"),
        (lambda d: d["localQueues"][0].update(cq="x"), "localQueues[0].cq", "unknown field"),
        (
            lambda d: d["resourceFlavors"][0]["nodeTaints"][0].update(op="x"),
            "resourceFlavors[0].nodeTaints[0].op",
            "unknown field",
        ),
        (
            lambda d: _pool(d).pop("allocatable"),
            "nodePools[0].allocatable",
            "is required: what one node offers",
        ),
        (lambda d: _pool(d).pop("machineType"), "nodePools[0].machineType", "is required"),
        (
            lambda d: _pool(d)["allocatable"].update(cpu=0),
            "nodePools[0].allocatable.cpu",
            "must be greater than zero",
        ),
        (
            lambda d: _pool(d)["allocatable"].update({GPU: "0.5"}),
            f"nodePools[0].allocatable.{GPU}",
            f"'0.5' is not a whole number of units for {GPU}",
        ),
        (
            lambda d: _pool(d).update(maxNodes="20"),
            "nodePools[0].maxNodes",
            "must be an integer, not a string",
        ),
        (
            lambda d: _pool(d).update(maxNodes=-1),
            "nodePools[0].maxNodes",
            "must be at least 0, got -1",
        ),
        (
            lambda d: _pool(d).update(provisioningDelaySeconds="-1s"),
            "nodePools[0].provisioningDelaySeconds",
            "'-1s' is not a duration such as 30, 90s, 10m or 2h",
        ),
        (
            lambda d: _pool(d).update(zones=["us-east1-a"]),
            "nodePools[0].zones",
            "zone 'us-east1-a' is not one of the cluster's zones",
        ),
        (
            lambda d: _pool(d)["capacity"][0]["zones"].update({"us-east1-a": 1}),
            "nodePools[0].capacity[0].zones.us-east1-a",
            "is not one of the cluster's zones",
        ),
        (
            lambda d: _pool(d)["capacity"][0]["zones"].update({"us-central1-b": -1}),
            "nodePools[0].capacity[0].zones.us-central1-b",
            "must be a node count >= 0",
        ),
        (
            lambda d: _pool(d)["capacity"][0]["zones"].update({"us-central1-b": "4"}),
            "nodePools[0].capacity[0].zones.us-central1-b",
            "must be a node count >= 0",
        ),
        (
            lambda d: _pool(d)["capacity"][0].update(at="soon"),
            "nodePools[0].capacity[0].at",
            "'soon' is not a duration such as 30, 90s, 10m or 2h",
        ),
        (
            lambda d: _res(d).update(nominalQuota="-1"),
            f"{RES}.nominalQuota",
            "'-1' is not a non-negative quantity (e.g. 2, 500m, 16Gi)",
        ),
        (
            lambda d: _res(d).update(nominalQuota=-4),
            f"{RES}.nominalQuota",
            "must not be negative, got -4",
        ),
        (
            lambda d: _res(d).update(nominalQuota="lots"),
            f"{RES}.nominalQuota",
            "'lots' is not a non-negative quantity (e.g. 2, 500m, 16Gi)",
        ),
        (
            lambda d: _res(d).update(nominalQuota="9" * 25),
            f"{RES}.nominalQuota",
            f"'{'9' * 25}' is absurdly large",
        ),
        (lambda d: _res(d).pop("nominalQuota"), f"{RES}.nominalQuota", "is required"),
        (lambda d: _res(d).update(name="tpu"), f"{RES}.name", "tpu is not in coveredResources"),
        (
            lambda d: d["quotas"][0].update(limit="1.5"),
            "quotas[0].limit",
            f"'1.5' is not a whole number of units for {GPU}",
        ),
        (
            lambda d: d["clusterQueues"][0].update(queueingStrategy="LIFO"),
            "clusterQueues[0].queueingStrategy",
            "must be one of BestEffortFIFO, StrictFIFO, not 'LIFO'",
        ),
        (
            lambda d: d["clusterQueues"][0]["resourceGroups"][0].update(coveredResources=[]),
            "clusterQueues[0].resourceGroups[0].coveredResources",
            "must name at least one resource",
        ),
        (
            lambda d: d["resourceFlavors"][0].update(nodeLabels={"bad key!": "x"}),
            "resourceFlavors[0].nodeLabels",
            "'bad key!' is not a valid label key",
        ),
        (
            lambda d: d["resourceFlavors"][0]["nodeTaints"][0].update(effect="Sometimes"),
            "resourceFlavors[0].nodeTaints[0].effect",
            "must be one of NoSchedule, PreferNoSchedule, NoExecute",
        ),
        (
            lambda d: d["nodePools"].append(copy.deepcopy(d["nodePools"][0])),
            "nodePools",
            "name 'a100-pool' appears twice",
        ),
        (
            lambda d: d["localQueues"][0].pop("clusterQueue"),
            "localQueues[0].clusterQueue",
            "is required",
        ),
    ],
)
def test_cluster_refusals(
    edit: Callable[[dict[str, Any]], object], path: str, problem: str
) -> None:
    err = refused(parse.cluster, edited(cluster_doc(), edit))
    assert (err.path, err.problem) == (path, problem)


def test_resource_covered_by_two_groups() -> None:
    def edit(d: dict[str, Any]) -> None:
        groups = d["clusterQueues"][0]["resourceGroups"]
        groups.append(
            {
                "coveredResources": ["cpu"],
                "flavors": [{"name": "a100", "resources": [{"name": "cpu", "nominalQuota": 1}]}],
            }
        )

    err = refused(parse.cluster, edited(cluster_doc(), edit))
    assert (err.path, err.problem) == (
        "clusterQueues[0].resourceGroups",
        "a resource is covered by two resource groups",
    )


@pytest.mark.parametrize(
    ("edit", "path"),
    [
        (
            lambda d: _pool(d).update(provisioningDelaySeconds=math.nan),
            "nodePools[0].provisioningDelaySeconds",
        ),
        (
            lambda d: _pool(d).update(provisioningDelaySeconds=math.inf),
            "nodePools[0].provisioningDelaySeconds",
        ),
        (lambda d: _pool(d)["capacity"][0].update(at=math.nan), "nodePools[0].capacity[0].at"),
    ],
    ids=["delay-nan", "delay-inf", "capacity-at-nan"],
)
def test_non_finite_cluster_durations_are_refused(
    edit: Callable[[dict[str, Any]], object], path: str
) -> None:
    err = refused(parse.cluster, edited(cluster_doc(), edit))
    assert err.path == path


def test_zero_booking_seconds_is_kept_or_refused() -> None:
    doc = edited(cluster_doc(), lambda d: d.update(bookingSeconds=0))
    try:
        spec = parse.cluster(doc)
    except InvalidInput as err:
        assert err.path == "bookingSeconds"
    else:
        assert spec.booking_seconds == 0.0
