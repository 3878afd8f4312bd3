"""The state file of ``muster up`` and where CLI commands look for a server, a store, a
broker and a token: a flag first, then the environment, then the running stack's state
file, then the old default (docs/operations.md, 'muster up')."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from muster.cli import state
from muster.cli.main import (
    DEFAULT_SERVER,
    broker_for,
    main,
    server_url,
    store_url_for,
    token_for,
)

RUNNING = state.StackState(
    server="http://127.0.0.1:18080",
    grpc="127.0.0.1:19090",
    store_url="sqlite:////data/muster.db",
    broker="127.0.0.1:19092",
    pid=os.getpid(),
    data_dir="/data",
    token="stack-token",
)


def none() -> state.StackState | None:
    return None


def running() -> state.StackState | None:
    return RUNNING


def test_a_flag_wins_over_the_environment_and_the_state_file() -> None:
    env = {
        "MUSTER_SERVER": "http://env:1",
        "MUSTER_STORE_URL": "sqlite:///env.db",
        "MUSTER_TOKEN": "env-token",
        "MUSTER_KAFKA_BOOTSTRAP": "env:9092",
    }
    assert server_url("http://flag:1", running, env) == "http://flag:1"
    assert store_url_for("sqlite:///flag.db", running, env) == "sqlite:///flag.db"
    assert token_for("flag-token", running, env) == "flag-token"
    assert broker_for("flag:9092", RUNNING.store_url, running, env) == "flag:9092"


def test_the_environment_wins_over_the_state_file() -> None:
    env = {
        "MUSTER_SERVER": "http://env:1",
        "MUSTER_STORE_URL": "sqlite:///env.db",
        "MUSTER_TOKEN": "env-token",
        "MUSTER_KAFKA_BOOTSTRAP": "env:9092",
    }
    assert server_url(None, running, env) == "http://env:1"
    assert store_url_for(None, running, env) == "sqlite:///env.db"
    assert token_for(None, running, env) == "env-token"
    assert broker_for(None, RUNNING.store_url, running, env) == "env:9092"


def test_the_state_file_wins_over_the_old_default() -> None:
    assert server_url(None, running, {}) == RUNNING.server
    assert store_url_for(None, running, {}) == RUNNING.store_url
    assert token_for(None, running, {}) == "stack-token"
    assert broker_for(None, RUNNING.store_url, running, {}) == RUNNING.broker


def test_without_a_running_stack_the_old_defaults_hold() -> None:
    assert server_url(None, none, {}) == DEFAULT_SERVER
    assert store_url_for(None, none, {}) is None
    assert token_for(None, none, {}) is None
    assert broker_for(None, None, none, {}) is None


def test_the_state_file_is_not_read_when_a_flag_or_the_environment_answers() -> None:
    def unread() -> state.StackState | None:
        raise AssertionError("the state file was read")

    assert server_url("http://flag:1", unread, {}) == "http://flag:1"
    assert server_url(None, unread, {"MUSTER_SERVER": "http://env:1"}) == "http://env:1"
    assert store_url_for(None, unread, {"MUSTER_STORE_URL": "sqlite:///e.db"}) == "sqlite:///e.db"


def test_the_running_stacks_broker_is_only_told_about_its_own_store() -> None:
    """Writing another store's configuration must not publish it to this stack's broker."""
    assert broker_for(None, "sqlite:///other.db", running, {}) is None


@pytest.fixture
def state_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "state" / "current.json"
    monkeypatch.setenv("MUSTER_STATE", str(path))
    return path


def test_write_then_read_then_remove(state_file: Path, tmp_path: Path) -> None:
    mine = state.StackState(
        server="http://127.0.0.1:1",
        grpc="127.0.0.1:2",
        store_url="sqlite:///x.db",
        broker="127.0.0.1:3",
        pid=os.getpid(),
        data_dir=str(tmp_path / "data"),
    )
    paths = state.write(mine)
    assert paths == [tmp_path / "data" / "muster.json", state_file]
    assert json.loads(paths[0].read_text()) == json.loads(state_file.read_text())
    assert state.read() == mine
    state.remove(mine)
    assert not paths[0].exists() and not state_file.exists()
    assert state.read() is None


def test_remove_leaves_a_newer_stacks_current_file(state_file: Path, tmp_path: Path) -> None:
    """Two stacks on free ports: the first stopping must not hide the second."""
    first = state.StackState(
        server="http://a", grpc="a", store_url="s", broker="b", pid=1, data_dir=str(tmp_path / "1")
    )
    second = state.StackState(
        server="http://b", grpc="b", store_url="s", broker="b", pid=2, data_dir=str(tmp_path / "2")
    )
    state.write(first)
    state.write(second)
    state.remove(first)
    assert not (tmp_path / "1" / "muster.json").exists()
    assert json.loads(state_file.read_text())["pid"] == 2


def _dead_pid() -> int:
    """The pid of a process that has exited (and been reaped)."""
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_a_stale_state_file_is_ignored_with_a_one_line_hint(
    state_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    stale = state.StackState(
        server="http://127.0.0.1:1",
        grpc="g",
        store_url="sqlite:///gone.db",
        broker="b",
        pid=_dead_pid(),
        data_dir=str(state_file.parent),
    )
    state.write(stale)
    assert state.read() is None
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert str(state_file) in err and f"pid {stale.pid}" in err and "muster up" in err


def test_a_stale_state_file_falls_back_to_the_old_default_in_a_command(
    state_file: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``muster replay`` with only a stale file: the hint once, then the usual error."""
    for var in ("MUSTER_SERVER", "MUSTER_STORE_URL", "MUSTER_TOKEN", "MUSTER_KAFKA_BOOTSTRAP"):
        monkeypatch.delenv(var, raising=False)
    state.write(
        state.StackState(
            server="http://127.0.0.1:1",
            grpc="g",
            store_url="sqlite:///gone.db",
            broker="b",
            pid=_dead_pid(),
            data_dir=str(state_file.parent),
        )
    )
    with pytest.raises(SystemExit) as exc:
        main(["replay"])
    assert "give --store-url" in str(exc.value.code)
    assert capsys.readouterr().err.count("is gone") == 1


def test_a_broken_state_file_is_ignored_with_a_one_line_hint(
    state_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state_file.parent.mkdir(parents=True)
    state_file.write_text("{not json")
    assert state.read() is None
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "not a muster state file" in err


def test_the_current_file_follows_xdg_state_home(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MUSTER_STATE", raising=False)
    monkeypatch.setenv("XDG_STATE_HOME", "/xdg")
    assert state.current_path() == Path("/xdg/muster/current.json")
    monkeypatch.delenv("XDG_STATE_HOME")
    assert state.current_path() == Path.home() / ".local" / "state" / "muster" / "current.json"


def test_up_refuses_a_port_in_use_before_starting_anything(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(SystemExit) as exc:
            main(["up", "--port", str(port), "--data-dir", str(tmp_path / "data")])
    assert exc.value.code == 1
    err = capsys.readouterr().err
    assert f"port {port} is in use" in err and "--port 0" in err
    assert not (tmp_path / "data").exists()


def test_hints_name_muster_as_it_was_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Under `make demo` muster is .venv/bin/muster, not on the PATH: the printed
    `muster up ...` must be a command that runs."""
    from muster.cli.up import command_name

    script = tmp_path / ".venv" / "bin" / "muster"
    script.parent.mkdir(parents=True)
    script.write_text("#!/bin/sh\n")
    script.chmod(0o755)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", [str(script)])
    monkeypatch.setenv("PATH", "/nonexistent")
    assert command_name() == ".venv/bin/muster"
    monkeypatch.setenv("PATH", str(script.parent))
    assert command_name() == "muster"
    monkeypatch.setattr(sys, "argv", ["/src/muster/cli/main.py"])
    assert command_name() == "muster"
