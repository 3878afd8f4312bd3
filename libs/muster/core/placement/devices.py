"""What one pod asks of a node's accelerators, and whether a device can give it.

HAMi / MetaX sGPU semantics (shared/reference/peers.md §3): a shared request names a
device count, a percentage of each device's cores and an amount of its memory; pods
share a device while the cores stay <= 100 %, the memory within the device's and the
pods within its split count. 100 % cores means exclusive: only on an unused device,
and nothing joins it. A request of whole devices (``nvidia.com/gpu: 8`` with no core or
memory figure) takes devices nobody uses.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from muster.core.model.inventory import (
    CORES,
    MEMORY_GIB,
    MEMORY_MIB,
    MEMORY_PERCENT,
    SHARED_COUNT,
    WHOLE_DEVICE,
    Gpu,
)
from muster.core.model.workload import DeviceFilter
from muster.core.pickling import compact


@dataclass(frozen=True, slots=True)
class DeviceAsk:
    count: int  # devices, each a different one
    cores: int  # percent of each device; 100: exclusive
    memory_mib: int | None  # of each device; None: all of it
    memory_percent: int | None = None
    filter: DeviceFilter | None = None

    @property
    def whole(self) -> bool:
        return self.cores >= 100 and self.memory_mib is None and self.memory_percent is None

    def memory_of(self, gpu: Gpu) -> int:
        if self.memory_mib is not None:
            return self.memory_mib
        if self.memory_percent is not None:
            return gpu.memory_mib * self.memory_percent // 100
        return gpu.memory_mib


@dataclass(slots=True)
class DeviceUse:
    """What the pods placed on one device use of it."""

    cores: int = 0
    memory_mib: int = 0
    pods: int = 0
    exclusive: bool = False


@compact
@dataclass(frozen=True, slots=True)
class DeviceShare:
    """A pod's part of one device (HAMi's ``<UUID>,<type>,<memMiB>,<cores>``)."""

    uuid: str
    cores: int
    memory_mib: int


def device_ask(requests: Mapping[str, int], filter: DeviceFilter | None = None) -> DeviceAsk | None:
    """The pod's device request, or None when it asks for no accelerator."""
    count = next((requests[r] for r in (*WHOLE_DEVICE, *SHARED_COUNT) if requests.get(r)), 0)
    cores = next((requests[r] for r in CORES if r in requests), None)
    gib = next((requests[r] for r in MEMORY_GIB if r in requests), None)
    mib = next((requests[r] for r in MEMORY_MIB if r in requests), None)
    percent = next((requests[r] for r in MEMORY_PERCENT if r in requests), None)
    memory = gib * 1024 if gib is not None else mib
    shared = cores is not None or memory is not None or percent is not None
    if count == 0:
        if not shared:
            return None
        count = 1  # a core or memory figure alone means one device
    if not shared:
        return DeviceAsk(count=count, cores=100, memory_mib=None, filter=filter)
    whole_memory = memory is None and (percent is None or percent >= 100)
    # HAMi: an unset core figure is 0 (fits wherever memory does), or 100 when the pod
    # takes all of the memory.
    core_pct = min(cores, 100) if cores is not None else (100 if whole_memory else 0)
    return DeviceAsk(
        count=count,
        cores=core_pct,
        memory_mib=memory,
        memory_percent=percent if memory is None and percent is not None else None,
        filter=filter,
    )


def allowed(gpu: Gpu, f: DeviceFilter | None) -> bool:
    """HAMi's use-/nouse- UUID (exact) and type (case-insensitive substring) lists."""
    if f is None:
        return True
    model = gpu.model.lower()
    if f.use_uuids and gpu.uuid not in f.use_uuids:
        return False
    if gpu.uuid in f.avoid_uuids:
        return False
    if f.use_types and not any(t.lower() in model for t in f.use_types):
        return False
    return not any(t.lower() in model for t in f.avoid_types)


def mismatch(f: DeviceFilter | None) -> str:
    """HAMi's reason for a device its type or UUID lists rule out."""
    return "CardTypeMismatch" if f and (f.use_types or f.avoid_types) else "CardUUIDMismatch"


def why_not(gpu: Gpu, use: DeviceUse, ask: DeviceAsk) -> str | None:
    """HAMi's filter reason for this device, or None when the pod fits on it."""
    if not allowed(gpu, ask.filter):
        return mismatch(ask.filter)
    if use.exclusive or (ask.cores >= 100 and use.pods > 0):
        return "ExclusiveDeviceAllocateConflict"
    if use.pods >= gpu.split:
        return "CardTimeSlicingExhausted"
    if ask.cores == 0 and use.cores >= 100:
        return "CardComputeUnitsExhausted"  # a core-less share on a card whose cores are all taken
    if use.cores + ask.cores > 100:
        return "CardInsufficientCore"
    if use.memory_mib + ask.memory_of(gpu) > gpu.memory_mib:
        return "CardInsufficientMemory"
    return None


def pods_fitting(gpu: Gpu, use: DeviceUse, ask: DeviceAsk) -> int:
    """How many more pods of this ask one device takes (each wanting one share of it)."""
    if why_not(gpu, use, ask) is not None:
        return 0
    if ask.cores >= 100:
        return 1
    n = gpu.split - use.pods
    if ask.cores > 0:
        n = min(n, (100 - use.cores) // ask.cores)
    memory = ask.memory_of(gpu)
    if memory > 0:
        n = min(n, (gpu.memory_mib - use.memory_mib) // memory)
    return max(n, 0)


def share_of(gpu: Gpu, ask: DeviceAsk) -> DeviceShare:
    return DeviceShare(uuid=gpu.uuid, cores=ask.cores, memory_mib=ask.memory_of(gpu))


def add(use: DeviceUse, share: DeviceShare) -> None:
    use.cores += share.cores
    use.memory_mib += share.memory_mib
    use.pods += 1
    use.exclusive = use.exclusive or share.cores >= 100


def give_back(use: DeviceUse, share: DeviceShare) -> None:
    use.cores -= share.cores
    use.memory_mib -= share.memory_mib
    use.pods -= 1
    if share.cores >= 100:
        use.exclusive = False
