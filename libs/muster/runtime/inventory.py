"""What a node agent registers for its own node when the cluster description does not
declare it: the GPUs NVML sees, the ``nvidia.com/gpu`` count (what the NVIDIA device
plugin advertises) and the GPU Feature Discovery labels. Without a driver or a GPU there
is nothing to register (declared nodes are registered by the decider)."""

from __future__ import annotations

import importlib
from collections import Counter
from collections.abc import Mapping, Sequence
from contextlib import suppress
from dataclasses import dataclass
from typing import Any

from muster.core.model.inventory import HOSTNAME, SELF_LINK, Gpu, NodeInventory, asymmetric

GPU = "nvidia.com/gpu"
MIB = 1024 * 1024
# NVML's nvmlGpuTopologyLevel_t (the common ancestor of two GPUs) as nvidia-smi topo -m
# names it: INTERNAL (two GPUs on one board) and SINGLE are behind one bridge (PIX),
# MULTIPLE several (PXB), HOSTBRIDGE (PHB), NODE (was CPU: one NUMA node), SYSTEM (SYS).
TOPOLOGY_LEVELS = {0: "PIX", 10: "PIX", 20: "PXB", 30: "PHB", 40: "NODE", 50: "SYS"}
FEATURE_ENABLED = 1  # NVML_FEATURE_ENABLED: an NVLink that is up
NVLINK_TO_SWITCH = 2  # NVML_NVLINK_DEVICE_TYPE_SWITCH


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
        handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(nvml.nvmlDeviceGetCount())]
        gpus = tuple(_gpu(nvml, handle, i, split) for i, handle in enumerate(handles))
        links = _links(nvml, handles)
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
        links=links,
    )


def _gpu(nvml: Any, handle: Any, index: int, split: int) -> Gpu:
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


@dataclass(frozen=True, slots=True)
class _NvLinks:
    """One GPU's NVLinks that are up: how many go to each peer (by PCI bus id), and how
    many to NVSwitches."""

    peers: Counter[str]
    to_switch: int


def _links(nvml: Any, handles: Sequence[Any]) -> tuple[tuple[str, ...], ...]:
    """The GPU matrix ``nvidia-smi topo -m`` prints, from NVML, or () when NVML cannot
    tell (no topology API on this platform, an unknown level, or links that differ one
    way from the other: HAMi's AsymmetricGPUP2PLink)."""
    if len(handles) < 2:
        return ()
    try:
        buses = [_bus_id(nvml.nvmlDeviceGetPciInfo(h)) for h in handles]
        nvlinks = [_nvlinks(nvml, h) for h in handles]
        rows = tuple(
            tuple(
                SELF_LINK if i == j else _link(nvml, handles, buses, nvlinks, i, j)
                for j in range(len(handles))
            )
            for i in range(len(handles))
        )
    except (nvml.NVMLError, KeyError):
        return ()
    return () if asymmetric(rows) is not None else rows


def _link(
    nvml: Any,
    handles: Sequence[Any],
    buses: Sequence[str],
    nvlinks: Sequence[_NvLinks],
    i: int,
    j: int,
) -> str:
    """NV<n> for n NVLinks between the two (directly, or both through NVSwitches: the
    fewer of their switch links), else the PCIe path (KeyError: a level NVML added)."""
    direct = nvlinks[i].peers[buses[j]]
    if direct:
        return f"NV{direct}"
    if nvlinks[i].to_switch and nvlinks[j].to_switch:
        return f"NV{min(nvlinks[i].to_switch, nvlinks[j].to_switch)}"
    level = nvml.nvmlDeviceGetTopologyCommonAncestor(handles[i], handles[j])
    return TOPOLOGY_LEVELS[int(level)]


def _nvlinks(nvml: Any, handle: Any) -> _NvLinks:
    """Every link NVML may report on (a link a GPU does not have answers NotSupported or
    InvalidArgument: skipped, as NVIDIA's go-gpuallocator does)."""
    peers: Counter[str] = Counter()
    to_switch = 0
    remote_type = getattr(nvml, "nvmlDeviceGetNvLinkRemoteDeviceType", None)
    for link in range(getattr(nvml, "NVML_NVLINK_MAX_LINKS", 18)):
        try:
            if nvml.nvmlDeviceGetNvLinkState(handle, link) != FEATURE_ENABLED:
                continue
            if remote_type is not None and remote_type(handle, link) == NVLINK_TO_SWITCH:
                to_switch += 1
                continue
            peers[_bus_id(nvml.nvmlDeviceGetNvLinkRemotePciInfo(handle, link))] += 1
        except nvml.NVMLError:
            continue
    return _NvLinks(peers, to_switch)


def _bus_id(pci: Any) -> str:
    return _text(pci.busId).lower()
