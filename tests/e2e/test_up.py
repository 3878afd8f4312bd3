"""``muster up`` as a user runs it: a process in the foreground, found by every other
command through its state file (no --server, --store-url or environment), stopped by
Ctrl-C (SIGINT) or SIGTERM cleanly, its state file gone with it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
START_SECONDS = 120.0  # the broker, a migration and four services on a loaded machine
STOP_SECONDS = 60.0


def _env(tmp_path: Path) -> dict[str, str]:
    """The CLI's environment with nothing that names a server, store, broker or token."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("MUSTER_SERVER", "MUSTER_STORE_URL", "MUSTER_TOKEN", "MUSTER_KAFKA_BOOTSTRAP")
    }
    env["MUSTER_STATE"] = str(tmp_path / "state" / "current.json")
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "libs"), str(ROOT)])
    return env


def muster(env: dict[str, str], *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "muster.cli.main", *argv],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )


def _wait_for(path: Path, proc: subprocess.Popen[str], timeout: float) -> dict[str, object]:
    """The state file's content once ``muster up`` wrote it (a bounded poll)."""
    deadline = time.monotonic() + timeout
    while not path.exists():
        if proc.poll() is not None:
            out, err = proc.communicate()
            raise AssertionError(f"muster up exited with {proc.returncode}:\n{out}\n{err}")
        if time.monotonic() > deadline:
            raise TimeoutError(f"no {path} after {timeout}s")
        time.sleep(0.1)
    return dict(json.loads(path.read_text()))


@pytest.fixture
def up(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[str], dict[str, str]]]:
    env = _env(tmp_path)
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "muster.cli.main",
            "up",
            "--port",
            "0",
            "--grpc-port",
            "0",
            "--data-dir",
            str(tmp_path / "data"),
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
        cwd=ROOT,
    )
    try:
        yield proc, env
    finally:
        if proc.poll() is None:
            proc.terminate()
            proc.communicate(timeout=STOP_SECONDS)


def test_up_is_found_without_flags_and_stops_cleanly_on_ctrl_c(
    up: tuple[subprocess.Popen[str], dict[str, str]], tmp_path: Path
) -> None:
    proc, env = up
    current = Path(env["MUSTER_STATE"])
    found = _wait_for(current, proc, START_SECONDS)
    assert found["pid"] == proc.pid
    assert (tmp_path / "data" / "muster.json").read_text() == current.read_text()

    cqs = muster(env, "get", "cq")
    assert cqs.returncode == 0, cqs.stderr
    assert {"research", "urgent"} <= {line.split()[0] for line in cqs.stdout.splitlines()[1:]}

    # a workload submitted without --server, then listed without it
    wl = tmp_path / "wl.yaml"
    wl.write_text(
        "name: probe\nnamespace: team-a\nqueueName: training\n"
        "podSets: [{count: 1, requests: {nvidia.com/gpu: 1}}]\n"
        "runtime: {durationSeconds: 1}\n"
    )
    submitted = muster(env, "submit", str(wl))
    assert submitted.returncode == 0, submitted.stderr
    listed = muster(env, "get", "workloads", "-A")
    assert listed.returncode == 0, listed.stderr
    assert "probe" in listed.stdout

    # the store (replay) and the store plus broker (apply --cluster) without flags either
    replayed = muster(env, "replay")
    assert replayed.returncode == 0, replayed.stderr
    assert "research" in replayed.stdout
    applied = muster(env, "apply", "--cluster", str(ROOT / "examples" / "cluster.yaml"))
    assert applied.returncode == 0, applied.stderr
    assert "0 configuration change(s) applied" in applied.stdout

    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=STOP_SECONDS)
    assert proc.returncode == 0, err
    assert "Traceback" not in out + err
    assert "muster up: stopped" in out
    assert "UI       http://127.0.0.1:" in out and "/ui/" in out
    assert not current.exists() and not (tmp_path / "data" / "muster.json").exists()

    # with the stack gone, commands go back to the old default (no stale file to hint at)
    after = muster(env, "get", "cq")
    assert "is gone" not in after.stderr


def test_sigterm_stops_it_the_same_way(
    up: tuple[subprocess.Popen[str], dict[str, str]],
) -> None:
    proc, env = up
    current = Path(env["MUSTER_STATE"])
    _wait_for(current, proc, START_SECONDS)
    proc.terminate()
    out, err = proc.communicate(timeout=STOP_SECONDS)
    assert proc.returncode == 0, err
    assert "Traceback" not in out + err
    assert not current.exists()
