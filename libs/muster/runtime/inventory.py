"""What a node agent registers for its own node: the GPUs NVML sees, or a declared node.

On a GPU node the hardware is the truth, so NVML decides the devices, the
``nvidia.com/gpu`` count (what the NVIDIA device plugin advertises) and the GPU
Feature Discovery labels; a declared description of the same node still supplies what
NVML cannot know (topology labels, cpu/memory, taints). Without a driver or a GPU the
declared description is all there is.
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Mapping, Sequence
from contextlib import suppress
from typing import Any

from muster.core.model.inventory import HOSTNAME, Gpu, NodeInventory

GPU = "nvidia.com/gpu"
MIB = 1024 * 1024


def nvml_inventory(
    node: str,
    *,
    labels: Mapping[str, str] | None = None,
    allocatable: Mapping[str, int] | None = None,
    split: int = 10,
    nvml: Any = None,
) -> NodeInventory | None:
    """The node's GPUs from NVML, or None when NVML has none to report.

    ``nvml`` is the ``pynvml`` module (imported only when needed, so nodes without the
    package still start) or a stand-in with the same functions. No package, no driver,
    no device or an NVML error while listing devices all mean "no GPU inventory": the
    caller falls back to the declared node. Other errors are bugs and propagate.
    Detected values win over the given ``labels``/``allocatable``.
    """
    if nvml is None:
        try:
            nvml = importlib.import_module("pynvml")
        except ImportError:
            return None
    try:
        nvml.nvmlInit()
    except nvml.NVMLError:
        return None
    try:
        gpus = tuple(_gpu(nvml, i, split) for i in range(nvml.nvmlDeviceGetCount()))
    except nvml.NVMLError:
        return None
    finally:
        with suppress(nvml.NVMLError):  # a failed shutdown must not lose the inventory
            nvml.nvmlShutdown()
    if not gpus:
        return None
    first = gpus[0]  # GFD labels describe one model; a mixed node reports its first
    product = first.model.replace(" ", "-")
    return NodeInventory(
        name=node,
        allocatable={**(allocatable or {}), GPU: len(gpus)},
        labels={
            **(labels or {}),
            "nvidia.com/gpu.product": product,
            "nvidia.com/gpu.count": str(len(gpus)),
            "nvidia.com/gpu.memory": str(first.memory_mib),
            "feature.node.kubernetes.io/gpu-model.nvidia.com": product,
            HOSTNAME: node,
        },
        gpus=gpus,
    )


def local_inventory(
    node: str, declared: Sequence[NodeInventory], *, nvml: Any = None
) -> NodeInventory | None:
    """NVML's view of ``node`` merged with its declared entry, else the declared entry.

    None when neither exists: the agent has nothing to register."""
    entry = next((d for d in declared if d.name == node), None)
    if entry is None:
        return nvml_inventory(node, nvml=nvml)
    found = nvml_inventory(
        node,
        labels=entry.labels,
        allocatable=entry.allocatable,
        split=entry.gpus[0].split if entry.gpus else 10,
        nvml=nvml,
    )
    return entry if found is None else dataclasses.replace(found, taints=entry.taints)


def _gpu(nvml: Any, index: int, split: int) -> Gpu:
    handle = nvml.nvmlDeviceGetHandleByIndex(index)
    return Gpu(
        uuid=_text(nvml.nvmlDeviceGetUUID(handle)),
        model=_text(nvml.nvmlDeviceGetName(handle)),
        memory_mib=int(nvml.nvmlDeviceGetMemoryInfo(handle).total) // MIB,
        index=index,
        split=split,
    )


def _text(value: str | bytes) -> str:
    """Older pynvml returns names and UUIDs as bytes, newer as str."""
    return value.decode() if isinstance(value, bytes) else value
