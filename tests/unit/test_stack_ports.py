"""The embedded stack gives every service its own port. A CI run (2026-11-27) failed when a
service's health check was answered in HTTP/2 frames, a gRPC server's: intake's on the
same port, or another stack's running beside it (the OS may hand a port just released to
the next ``bind`` to port 0). Within a stack that can no longer happen; across stacks the
check now waits, and a service that cannot bind exits and is restarted, then named."""

from __future__ import annotations

from pathlib import Path

import pytest

from muster.runtime import stack as stack_module
from muster.runtime.stack import Stack


def test_ports_handed_out_twice_are_drawn_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    handed = iter([41001, 41001, 41002, 41001, 41002, 41003, 41004, 41004, 41005, 41006])
    monkeypatch.setattr(stack_module, "free_port", lambda: next(handed))
    s = Stack(tmp_path, ports={"queue": 41003})
    ports = [*s.ports.values(), s.grpc_port, s.broker.port]
    assert len(set(ports)) == len(ports), ports
    assert s.ports["queue"] == 41003  # a fixed port is kept, and never handed out again
