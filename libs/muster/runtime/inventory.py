"""What a node agent registers for its own node when the cluster description does not
declare it: the GPUs NVML sees, the ``nvidia.com/gpu`` count (what the NVIDIA device
plugin advertises) and the GPU Feature Discovery labels. Without a driver or a GPU there
is nothing to register (declared nodes are registered by the decider)."""

from __future__ import annotations

import importlib
from collections.abc import Mapping
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
