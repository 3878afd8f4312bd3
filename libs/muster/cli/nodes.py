"""``muster get nodes``: one line per node, like ``sinfo -N`` and ``kubectl get nodes``."""

from __future__ import annotations

from typing import Any

from muster.cli.present import quantities


def gpus(status: dict[str, Any]) -> str:
    """``NVIDIA-A100 6/8``: devices in use of each model (``-`` when it has none)."""
    parts = [f"{a['model']} {a['used']}/{a['total']}" for a in status.get("accelerators", [])]
    return ",".join(parts) or "-"


def shared(status: dict[str, Any]) -> str:
    """Pods holding part of a GPU / the GPUs they share (HAMi slices); ``-``: none."""
    s = status.get("sharedSlices") or {}
    return f"{s['pods']}/{s['devices']}" if s.get("pods") else "-"


def topology(status: dict[str, Any]) -> str:
    """``block=b1,rack=r1``: the node's value at each topology level, top down."""
    levels = status.get("topology") or {}
    return ",".join(f"{k.rsplit('/', 1)[-1]}={v}" for k, v in levels.items()) or "-"


def columns(o: dict[str, Any], wide: bool) -> list[tuple[str, Any]]:
    spec, status = o["spec"], o["status"]
    cols: list[tuple[str, Any]] = [
        ("NODE", o["name"]),
        ("POOL", spec.get("pool") or "-"),
        ("ZONE", spec.get("zone") or "-"),
        ("STATE", status.get("state", "")),
        ("GPUS", gpus(status)),
        ("SHARED", shared(status)),
        ("TOPOLOGY", topology(status)),
    ]
    if wide:
        labels = spec.get("labels") or {}
        cols += [
            ("PODS", status.get("pods", 0)),
            ("INSTANCE-TYPE", labels.get("node.kubernetes.io/instance-type", "-")),
            ("REQUEST", spec.get("provisioningRequest") or "-"),
            ("ALLOCATABLE", quantities(spec.get("allocatable") or {})),
        ]
    return cols
