"""``muster up``: the embedded stack in the foreground until Ctrl-C, findable by every
other command through its state file (``muster.cli.state``)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import shutil
import signal
import socket
import sys
from collections.abc import Iterator
from pathlib import Path
from types import FrameType
from typing import Any

from muster.cli import commands, state
from muster.runtime import admin

DEFAULT_PORT = 8080  # intake's HTTP port, where the CLI looks when nothing says otherwise
DEFAULT_GRPC_PORT = 9090


def add_parsers(sub: Any) -> None:
    """``muster up`` (registered on its own to keep main.py's parser easy to merge)."""
    up = sub.add_parser(
        "up",
        help="start the embedded stack in the foreground and keep it running (Ctrl-C stops it)",
        description="Starts a Tansu broker, a SQLite store and the four services (with the "
        "simulated cloud's nodes), applies the cluster description, prints where "
        "everything is and runs until SIGINT/SIGTERM. While it runs, every command finds "
        "its server, store and broker without flags through the state file "
        "($MUSTER_STATE, else $XDG_STATE_HOME/muster/current.json, else "
        "~/.local/state/muster/current.json; docs/operations.md). The data directory's "
        "store is kept across runs (--fresh starts empty).",
    )
    up.add_argument(
        "--cluster",
        type=Path,
        default=commands.EXAMPLES / "cluster.yaml",
        metavar="FILE",
        help="cluster description to apply (default examples/cluster.yaml)",
    )
    up.add_argument("--data-dir", type=Path, default=Path(".muster"), metavar="DIR")
    up.add_argument(
        "--port",
        type=int,
        default=DEFAULT_PORT,
        help="intake's HTTP port (default %(default)s; 0: a free one)",
    )
    up.add_argument(
        "--grpc-port",
        type=int,
        default=DEFAULT_GRPC_PORT,
        help="intake's gRPC port (default %(default)s; 0: a free one)",
    )
    up.add_argument(
        "-f",
        "--filename",
        dest="filenames",
        action="append",
        default=[],
        metavar="FILE",
        help="Kubernetes manifests to apply once the stack is up (repeatable)",
    )
    up.add_argument("--fresh", action="store_true", help="remove the data directory's store first")


def run(args: argparse.Namespace) -> int:
    from muster.runtime.stack import Stack

    spec = commands.load_cluster(args.cluster)  # a bad file fails before anything starts
    for port, flag in ((args.port, "--port"), (args.grpc_port, "--grpc-port")):
        _check_free(port, flag)
    data_dir: Path = args.data_dir
    data_dir.mkdir(parents=True, exist_ok=True)
    if args.fresh:
        for old in data_dir.glob("muster.db*"):
            old.unlink()
    stack = Stack(
        data_dir,
        ports={"intake": args.port} if args.port else None,
        grpc_port=args.grpc_port or None,
    )
    print(f"muster up: starting a broker, a SQLite store and four services; logs in {data_dir}/")
    serving = False
    try:
        with _stop_signals_interrupt():
            stack.start()
            appended = asyncio.run(admin.configure(stack.store_url, spec, stack.broker.bootstrap))
            print(f"  cluster {spec.name}: {len(appended)} configuration change(s) applied")
            if args.filenames and commands.apply(
                stack.store_url, None, args.filenames, stack.broker.bootstrap, stack.url()
            ):
                raise commands.CliError("the manifests were not all applied")
            serving = True
            serve(stack)
    except KeyboardInterrupt:  # while starting, or a second Ctrl-C as serve returned
        print("muster up: stopping" if serving else "muster up: interrupted while starting")
    finally:
        with _signals_ignored():
            stack.stop()
    print("muster up: stopped")
    return 0


def serve(stack: Any, hints: tuple[str, ...] = ()) -> None:
    """Write the state file, say where everything is, and wait for SIGINT or SIGTERM; the
    state file is gone when this returns (the caller stops the stack)."""
    found = state.StackState(
        server=stack.url(),
        grpc=stack.grpc_target,
        store_url=stack.store_url,
        broker=stack.broker.bootstrap,
        pid=os.getpid(),
        data_dir=str(stack.data_dir),
    )
    paths = state.write(found)
    try:
        print(where(stack, paths))
        for line in hints:
            print(line)
        print("running; Ctrl-C stops it", flush=True)
        with _stop_signals_interrupt(), contextlib.suppress(KeyboardInterrupt):
            while True:
                signal.pause()
        print("\nstopping ...", flush=True)
    finally:
        state.remove(found)


def where(stack: Any, state_paths: list[Path]) -> str:
    """The block that says where everything is."""
    api = stack.url()
    rows = [
        ("API", f"{api}  (OpenAPI {api}/openapi.json)"),
        ("gRPC", stack.grpc_target),
        ("UI", f"{api}/ui/"),
        *(
            ("metrics" if i == 0 else "", f"{stack.url(name)}/metrics  ({name})")
            for i, name in enumerate(stack.services)
        ),
        ("store", stack.store_url),
        ("broker", stack.broker.bootstrap),
        ("logs", f"{stack.data_dir}/"),
        ("state", "  ".join(str(p) for p in state_paths)),
    ]
    lines = ["", "muster is up:"]
    lines += [f"  {label:<8} {value}" for label, value in rows]
    lines += [
        "",
        "every muster command now finds this stack without flags, e.g.:",
        f"  {command_name()} get cq",
        f"  {command_name()} get workloads -A",
        f"  {command_name()} apply -f examples/dws-demo.yaml",
        "",
    ]
    return "\n".join(lines)


def command_name() -> str:
    """How to run muster again from here: ``muster`` when that is what is on the PATH,
    else the path it was run by (``.venv/bin/muster`` under ``make demo``)."""
    arg0 = sys.argv[0]
    if Path(arg0).name != "muster":  # python -m muster.cli.main, a test
        return "muster"
    on_path = shutil.which("muster")
    if on_path and os.path.samefile(on_path, arg0):
        return "muster"
    return os.path.relpath(os.path.abspath(arg0))


def _check_free(port: int, flag: str) -> None:
    if not port:
        return
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            raise commands.CliError(
                f"port {port} is in use (another `muster up`?); give {flag} 0 for a free one"
            ) from None


@contextlib.contextmanager
def _stop_signals_interrupt() -> Iterator[None]:
    """SIGINT and SIGTERM both raise KeyboardInterrupt, so both end the same clean way;
    SIGINT explicitly too, since a shell starts background jobs with it ignored."""

    def interrupt(_sig: int, _frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    stops = (signal.SIGINT, signal.SIGTERM)
    previous = {s: signal.signal(s, interrupt) for s in stops}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


@contextlib.contextmanager
def _signals_ignored() -> Iterator[None]:
    """While stopping: a second Ctrl-C must not leave processes behind half-stopped."""
    previous = {s: signal.signal(s, signal.SIG_IGN) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
