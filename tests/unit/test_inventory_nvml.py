"""Node inventory from NVML (through a fake pynvml: no GPU here) or from the declaration."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from muster.core.model.inventory import HOSTNAME, Gpu
from muster.runtime.inventory import nvml_inventory

A100 = "NVIDIA A100-SXM4-80GB"
A100_BYTES = 81920 * 1024 * 1024
ZONE = "topology.kubernetes.io/zone"


class NVMLError(Exception):
    pass


class FakeNvml:
    """Exactly the pynvml calls the inventory makes, recording init/shutdown."""

    NVMLError = NVMLError

    def __init__(
        self,
        devices: list[tuple[str, str, int]],
        *,
        as_bytes: bool = False,
        init_fails: bool = False,
        fail_at: int | None = None,
    ) -> None:
        self.devices = devices
        self.as_bytes = as_bytes
        self.init_fails = init_fails
        self.fail_at = fail_at
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
