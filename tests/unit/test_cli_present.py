"""``get -o yaml`` shows objects as manifests write them (kubectl): camelCase fields,
quantities as Kubernetes prints them, RFC 3339 times, unset fields left out; names users
chose (labels, resources, flavors) untouched."""

from __future__ import annotations

from muster.cli.present import quantities, shown


def test_a_cluster_queue_spec_reads_like_its_manifest() -> None:
    spec = {
        "queueing_strategy": "BestEffortFIFO",
        "cohort": None,
        "resource_groups": [
            {
                "covered_resources": ["cpu", "memory"],
                "flavors": [
                    {
                        "name": "default-flavor",
                        "resources": [
                            {"name": "cpu", "nominal_quota": 700_000, "borrowing_limit": None},
                            {"name": "memory", "nominal_quota": 6 * 2**40, "lending_limit": 0},
                        ],
                    }
                ],
            }
        ],
    }
    assert shown(spec) == {
        "queueingStrategy": "BestEffortFIFO",
        "resourceGroups": [
            {
                "coveredResources": ["cpu", "memory"],
                "flavors": [
                    {
                        "name": "default-flavor",
                        "resources": [
                            {"name": "cpu", "nominalQuota": "700"},
                            {"name": "memory", "nominalQuota": "6Ti", "lendingLimit": "0"},
                        ],
                    }
                ],
            }
        ],
    }


def test_maps_of_names_keep_their_keys_and_times_read_as_rfc3339() -> None:
    obj = {
        "node_labels": {"my_label": "x", "cloud.google.com/gke-nodepool": "p"},
        "allocatable": {"cpu": 96_000, "memory": 80 * 2**30, "nvidia.com/gpu": 8},
        "usage": {"a100": {"cpu": 500}},
        "submittedAt": 1_800_000_000.0,
        "status": {"lastTransitionTime": 1_800_000_000},
    }
    assert shown(obj) == {
        "nodeLabels": {"my_label": "x", "cloud.google.com/gke-nodepool": "p"},
        "allocatable": {"cpu": "96", "memory": "80Gi", "nvidia.com/gpu": "8"},
        "usage": {"a100": {"cpu": "500m"}},
        "submittedAt": "2027-01-15T08:00:00Z",
        "status": {"lastTransitionTime": "2027-01-15T08:00:00Z"},
    }
    assert quantities({"memory": 2**30, "cpu": 1500}) == "cpu=1500m,memory=1Gi"
