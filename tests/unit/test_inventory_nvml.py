"""Node inventory from NVML (through a fake pynvml: no GPU here) or from the declaration."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from muster.core.model.inventory import HOSTNAME, Gpu
from muster.runtime.inventory import nvml_inventory

A100 = "NVIDIA A100-SXM4-80GB"
A100_BYTES = 81920 * 1024 * 1024
ZONE = "topology.kubernetes.io/zone"


class NVMLError(Exception):
    pass


SWITCH = "switch"
NOT_SUPPORTED = NVMLError("Not Supported")


class FakeNvml:
    """Exactly the pynvml calls the inventory makes, recording init/shutdown.

    Topology: ``levels`` maps a pair of device indexes (either order) to NVML's
    common-ancestor level (without it the call is not supported); ``nvlinks`` gives a
    device's links that are up: the peer's index, or SWITCH for an NVSwitch (a device not
    in it has none: every link answers NotSupported, as on a PCIe card)."""

    NVMLError = NVMLError
    NVML_NVLINK_MAX_LINKS = 18

    def __init__(
        self,
        devices: list[tuple[str, str, int]],
        *,
        as_bytes: bool = False,
        init_fails: bool = False,
        fail_at: int | None = None,
        levels: dict[tuple[int, int], int] | None = None,
        nvlinks: dict[int, list[int | str]] | None = None,
    ) -> None:
        self.devices = devices
        self.as_bytes = as_bytes
        self.init_fails = init_fails
        self.fail_at = fail_at
        self.levels = levels
        self.nvlinks = nvlinks or {}
        self.calls: list[str] = []

    def _out(self, text: str) -> str | bytes:
        return text.encode() if self.as_bytes else text

    def nvmlInit(self) -> None:
        self.calls.append("init")
        if self.init_fails:
            raise NVMLError("Driver Not Loaded")

    def nvmlShutdown(self) -> None:
        self.calls.append("shutdown")

    def nvmlDeviceGetCount(self) -> int:
        return len(self.devices)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        if index == self.fail_at:
            raise NVMLError("GPU is lost")
        return index

    def nvmlDeviceGetUUID(self, handle: int) -> str | bytes:
        return self._out(self.devices[handle][0])

    def nvmlDeviceGetName(self, handle: int) -> str | bytes:
        return self._out(self.devices[handle][1])

    def nvmlDeviceGetMemoryInfo(self, handle: int) -> SimpleNamespace:
        return SimpleNamespace(total=self.devices[handle][2], free=0, used=0)

    def nvmlDeviceGetPciInfo(self, handle: int) -> SimpleNamespace:
        return SimpleNamespace(busId=self._out(f"00000000:{0x10 + handle:02X}:00.0"))

    def nvmlDeviceGetTopologyCommonAncestor(self, a: int, b: int) -> int:
        if self.levels is None:
            raise NOT_SUPPORTED
        return self.levels.get((a, b), self.levels.get((b, a), 50))

    def _remote(self, handle: int, link: int) -> int | str:
        remotes = self.nvlinks.get(handle, [])
        if link >= len(remotes):
            raise NOT_SUPPORTED
        return remotes[link]

    def nvmlDeviceGetNvLinkState(self, handle: int, link: int) -> int:
        self._remote(handle, link)
        return 1  # NVML_FEATURE_ENABLED

    def nvmlDeviceGetNvLinkRemoteDeviceType(self, handle: int, link: int) -> int:
        return 2 if self._remote(handle, link) == SWITCH else 0  # NVML_NVLINK_DEVICE_TYPE_*

    def nvmlDeviceGetNvLinkRemotePciInfo(self, handle: int, link: int) -> SimpleNamespace:
        peer = self._remote(handle, link)
        assert isinstance(peer, int)
        return self.nvmlDeviceGetPciInfo(peer)


def two_a100s(
    *, as_bytes: bool = False, init_fails: bool = False, fail_at: int | None = None
) -> FakeNvml:
    devices = [("GPU-aaa", A100, A100_BYTES), ("GPU-bbb", A100, A100_BYTES)]
    return FakeNvml(devices, as_bytes=as_bytes, init_fails=init_fails, fail_at=fail_at)


@pytest.mark.parametrize("as_bytes", [False, True], ids=["str", "bytes"])
def test_two_a100s(as_bytes: bool) -> None:
    nvml = two_a100s(as_bytes=as_bytes)
    inv = nvml_inventory("n1", labels={ZONE: "z1"}, allocatable={"cpu": 64}, split=4, nvml=nvml)
    assert inv is not None
    assert inv.gpus == (
        Gpu(uuid="GPU-aaa", model=A100, memory_mib=81920, index=0, split=4),
        Gpu(uuid="GPU-bbb", model=A100, memory_mib=81920, index=1, split=4),
    )
    assert inv.allocatable == {"cpu": 64, "nvidia.com/gpu": 2}
    assert inv.labels == {
        ZONE: "z1",
        "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB",
        "nvidia.com/gpu.count": "2",
        "nvidia.com/gpu.memory": "81920",
        "feature.node.kubernetes.io/gpu-model.nvidia.com": "NVIDIA-A100-SXM4-80GB",
        HOSTNAME: "n1",
    }
    assert nvml.calls == ["init", "shutdown"]


def four(**topology: Any) -> FakeNvml:
    devices = [(f"GPU-{i}", A100, A100_BYTES) for i in range(4)]
    return FakeNvml(devices, **topology)


def test_no_topology_api_is_no_link_matrix() -> None:
    """A platform where NVML has no common-ancestor call: the GPUs are still registered."""
    inv = nvml_inventory("n1", nvml=two_a100s())
    assert inv is not None and len(inv.gpus) == 2 and inv.links == ()


@pytest.mark.parametrize("as_bytes", [False, True], ids=["str", "bytes"])
def test_link_matrix_from_nvlinks_and_pcie_levels(as_bytes: bool) -> None:
    """peers.md §3.4 (HAMi reads NVML's P2P levels and NVLink remote PCI ids): two NVLink
    pairs, bonded two links each; the rest through PCIe as NVML's common ancestor says."""
    nvml = four(
        as_bytes=as_bytes,
        nvlinks={0: [1, 1], 1: [0, 0], 2: [3, 3], 3: [2, 2]},
        levels={(0, 2): 40, (0, 3): 50, (1, 2): 10, (1, 3): 20},
    )
    inv = nvml_inventory("n1", nvml=nvml)
    assert inv is not None
    assert inv.links == (
        ("X", "NV2", "NODE", "SYS"),
        ("NV2", "X", "PIX", "PXB"),
        ("NODE", "PIX", "X", "NV2"),
        ("SYS", "PXB", "NV2", "X"),
    )
    assert nvml.calls == ["init", "shutdown"]


def test_nvswitch_links_every_pair() -> None:
    """An NVSwitch system (DGX A100/H100): each GPU's links go to the switch, so every
    pair is NV<the fewer of the two GPUs' switch links>."""
    nvml = four(nvlinks={0: [SWITCH] * 12, 1: [SWITCH] * 12, 2: [SWITCH] * 12, 3: [SWITCH] * 6})
    inv = nvml_inventory("n1", nvml=nvml)
    assert inv is not None
    assert inv.links[0] == ("X", "NV12", "NV12", "NV6")
    assert inv.links[3] == ("NV6", "NV6", "NV6", "X")


def test_asymmetric_or_unknown_links_are_no_matrix() -> None:
    """HAMi raises AsymmetricGPUP2PLink and cannot score such pairs: muster registers
    the GPUs without a matrix (today's device choice) rather than guess."""
    one_way = four(nvlinks={0: [1]}, levels={})
    unknown_level = four(levels={(0, 1): 99})
    for nvml in (one_way, unknown_level):
        inv = nvml_inventory("n1", nvml=nvml)
        assert inv is not None and len(inv.gpus) == 4 and inv.links == ()


def test_tesla_name_keeps_its_prefix() -> None:
    nvml = FakeNvml([("GPU-v", "Tesla V100-SXM2-16GB", 16384 * 1024 * 1024)], as_bytes=True)
    inv = nvml_inventory("n1", nvml=nvml)
    assert inv is not None
    assert inv.labels["nvidia.com/gpu.product"] == "Tesla-V100-SXM2-16GB"
    assert inv.labels["nvidia.com/gpu.memory"] == "16384"


def test_no_driver_is_no_inventory() -> None:
    nvml = two_a100s(init_fails=True)
    assert nvml_inventory("n1", nvml=nvml) is None
    assert nvml.calls == ["init"]  # nothing to shut down


def test_zero_devices_is_no_inventory() -> None:
    nvml = FakeNvml([])
    assert nvml_inventory("n1", nvml=nvml) is None
    assert nvml.calls == ["init", "shutdown"]


def test_failure_mid_enumeration_is_no_inventory_and_still_shuts_down() -> None:
    nvml = two_a100s(fail_at=1)
    assert nvml_inventory("n1", nvml=nvml) is None
    assert nvml.calls == ["init", "shutdown"]


class BrokenNvml(FakeNvml):
    def nvmlDeviceGetMemoryInfo(self, handle: int) -> SimpleNamespace:
        raise RuntimeError("a bug, not an NVML error")


def test_other_errors_propagate_after_shutdown() -> None:
    nvml = BrokenNvml([("GPU-aaa", A100, A100_BYTES)])
    with pytest.raises(RuntimeError):
        nvml_inventory("n1", nvml=nvml)
    assert nvml.calls == ["init", "shutdown"]


def test_real_pynvml_without_a_gpu_is_no_inventory() -> None:
    assert nvml_inventory("x") is None
