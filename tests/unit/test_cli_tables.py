"""The CLI's tables (rich): one line per row whatever its length, plain text off a
terminal or under NO_COLOR (no-color.org), bold headers and coloured states on one."""

from __future__ import annotations

import io

import pytest

from muster.cli.tables import table


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_plain_and_unwrapped_off_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("sys.stdout", io.StringIO())
    out = table(["NAME", "STATUS", "MESSAGE"], [("a", "Running", "x" * 500), ("bb", None, "")])
    assert out.splitlines() == ["NAME   STATUS    MESSAGE", f"a      Running   {'x' * 500}", "bb"]
    assert "\x1b" not in out


def test_coloured_on_a_terminal_unless_no_color(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("sys.stdout", _Terminal())
    monkeypatch.delenv("NO_COLOR", raising=False)
    out = table(["NAME", "STATE"], [("n1", "Ready"), ("n2", "Lost")])
    assert "\x1b[1mNAME" in out  # bold header
    assert "\x1b[32mReady" in out and "\x1b[31mLost" in out
    monkeypatch.setenv("NO_COLOR", "1")
    assert "\x1b" not in table(["NAME", "STATE"], [("n1", "Ready")])
