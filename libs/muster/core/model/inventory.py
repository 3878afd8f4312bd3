"""Existing nodes: what a node agent registers (from NVML, or from a declared node
description for simulated nodes) and the topology they sit in.

A node's place in the topology is its labels: one label per level, top to bottom
(Kueue's Topology ``levels``). A Volcano/MetaX HyperNode tree (switchbox -> dragonfly
-> node) is turned into such labels by ``parse.topology``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from muster.core.model.queues import Taint

HOSTNAME = "kubernetes.io/hostname"
# Resources that name whole accelerator devices: on a node that lists its devices they
# are handed out device by device (UUIDs), not as a plain count.
WHOLE_DEVICE = ("nvidia.com/gpu", "metax-tech.com/gpu", "amd.com/gpu")
# Shared-device resources (HAMi / MetaX sGPU / Volcano vGPU): counted per device.
# Whole accelerator devices as a count, whatever the node lists: GPUs and TPU chips (what
# ``get nodes`` shows used of and ``report`` counts GPU-hours of).
ACCELERATORS = (*WHOLE_DEVICE, "google.com/tpu")
SHARED_COUNT = ("metax-tech.com/sgpu", "volcano.sh/vgpu-number")
CORES = ("metax-tech.com/vcore", "nvidia.com/gpucores", "volcano.sh/vgpu-cores")
MEMORY_GIB = ("metax-tech.com/vmemory",)
MEMORY_MIB = ("nvidia.com/gpumem", "volcano.sh/vgpu-memory")
MEMORY_PERCENT = ("nvidia.com/gpumem-percentage",)
DEVICE_RESOURCES = frozenset(
    (*WHOLE_DEVICE, *SHARED_COUNT, *CORES, *MEMORY_GIB, *MEMORY_MIB, *MEMORY_PERCENT)
)
# The interconnect between two GPUs as ``nvidia-smi topo -m`` names it, worst first: across
# NUMA nodes (SYS), across host bridges of one NUMA node (NODE), through a host bridge
# (PHB), through several PCIe bridges (PXB), through at most one (PIX); NV<n>: n bonded
# NVLinks (through an NVSwitch: the links each GPU has to the switch). "X": the GPU itself.
PCIE_LINKS = ("SYS", "NODE", "PHB", "PXB", "PIX")
SELF_LINK = "X"
NVLINK = re.compile(r"^NV([1-9][0-9]?)$")


def bad_link(value: object) -> str | None:
    """Why ``value`` is not a link between two GPUs, or None."""
    if isinstance(value, str) and (value in PCIE_LINKS or NVLINK.match(value)):
        return None
    return f"{value!r} is not a GPU link: one of {', '.join(PCIE_LINKS)} or NV<links>"


def asymmetric(links: tuple[tuple[str, ...], ...]) -> tuple[int, int] | None:
    """The first pair (i, j), i < j, whose link differs from (j, i)'s, or None (HAMi warns
    ``AsymmetricGPUP2PLink`` and cannot score such a pair)."""
    for i, row in enumerate(links):
        for j in range(i + 1, len(row)):
            if j >= len(links) or i >= len(links[j]) or links[j][i] != row[j]:
                return i, j
    return None


@dataclass(frozen=True, slots=True, kw_only=True)
class Gpu:
    """One physical accelerator: HAMi's registration tuple (UUID, split count, memory,
    model)."""

    uuid: str
    model: str
    memory_mib: int
    index: int = 0
    split: int = 10  # how many pods may share it (HAMi deviceSplitCount)


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeInventory:
    name: str
    allocatable: Mapping[str, int]
    labels: Mapping[str, str] = field(default_factory=dict)
    taints: tuple[Taint, ...] = ()
    gpus: tuple[Gpu, ...] = ()
    # The interconnect between each pair of ``gpus`` (row i, column j: gpus[i] and gpus[j];
    # "X" on the diagonal), as ``nvidia-smi topo -m`` prints it; empty: not known.
    links: tuple[tuple[str, ...], ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class TopologySpec:
    """Kueue's Topology: node labels naming the levels, from the top (widest) down.

    The last level may be ``kubernetes.io/hostname`` (single nodes); it is implied."""

    name: str = "default"
    levels: tuple[str, ...] = ()

    def tier(self, n: int) -> str | None:
        """Volcano's tiers count up from the node: tier 1 is the lowest level above it."""
        upper = [lv for lv in self.levels if lv != HOSTNAME]
        if n < 1 or n > len(upper):
            return None
        return upper[len(upper) - n]
