"""Every CLI error is one line on standard error and exit status 1, and leaves no trace:
a missing file, a missing or empty store, a document that does not parse."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest


def _muster(*args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "muster.cli.main", *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.mark.parametrize(
    ("args", "stdin", "says"),
    [
        (("submit", "{missing}"), "", "No such file or directory"),
        (("submit", "-"), "a: [", "cannot read standard input: not valid YAML or JSON"),
        (("replay", "--store-url", "sqlite:///{missing}"), "", "no store at"),
        (("replay", "--store-url", "sqlite:///{empty}"), "", "no such table"),
        (("replay", "--store-url", "nonsense://"), "", "muster"),
        (("replay", "--store-url", "sqlite:///{empty}", "--until", "soon"), "", "--until"),
        # Checked before any request: no server listens there.
        (("explain", "w", "--at", "yesterday", "--server", "http://127.0.0.1:9"), "", "--at"),
        (("get", "gizmos"), "", 'resource type "gizmos"'),
        (("get", "wl", "--status", "bogus"), "", "--status 'bogus': one of Pending"),
        (("get", "nodes", "--server", "http://127.0.0.1:9"), "", "cannot reach"),
        (("report", "--server", "http://127.0.0.1:9"), "", "cannot reach"),
    ],
)
def test_an_error_is_one_line(tmp_path: Path, args: tuple[str, ...], stdin: str, says: str) -> None:
    empty = tmp_path / "empty.db"
    empty.touch()
    missing = tmp_path / "missing.db"
    done = _muster(*(a.format(missing=missing, empty=empty) for a in args), stdin=stdin)
    assert done.returncode == 1, done
    assert says in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert not missing.exists()  # reading a store never creates one


@pytest.mark.parametrize(
    ("args", "says"),
    [
        ((), "the following arguments are required: COMMAND"),
        (("get",), "the following arguments are required: TYPE"),
        (("report", "--by", "pod"), "argument --by: invalid choice: 'pod'"),
        (("report", "-o", "xml"), "invalid choice: 'xml'"),
    ],
)
def test_a_usage_error_is_one_line_too(args: tuple[str, ...], says: str) -> None:
    done = _muster(*args)
    assert done.returncode == 2, done
    assert says in done.stderr and "--help" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr


def test_a_relative_time_after_a_time_option_is_its_value() -> None:
    """``--at -5m`` (README, "The CLI"): argparse would read ``-5m`` as an option of its
    own; it is the option's value, for --at, --since and --until alike."""
    from muster.cli.main import _relative_times, build_parser

    assert _relative_times(["explain", "w", "--at", "-5m"]) == ["explain", "w", "--at=-5m"]
    assert build_parser().parse_args(_relative_times(["explain", "w", "--at", "-5m"])).at == "-5m"
    args = build_parser().parse_args(_relative_times(["report", "--since", "-2h", "-A"]))
    assert (args.since, args.all_namespaces) == ("-2h", True)
    # Anything else after an option is left alone.
    assert _relative_times(["get", "wl", "-n", "x", "--at"]) == ["get", "wl", "-n", "x", "--at"]
