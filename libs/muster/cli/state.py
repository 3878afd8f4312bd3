"""The state file of a running ``muster up``: where its server, store and broker are.

``muster up`` writes ``<data-dir>/muster.json`` and the same content to the current-stack
file (``$MUSTER_STATE``, else ``$XDG_STATE_HOME/muster/current.json``, else
``~/.local/state/muster/current.json``), and removes both when it stops. Every CLI command
that needs a server, a store or a broker reads the current-stack file when neither a flag
nor an environment variable names one. A file whose process is gone (a stack killed
without a chance to clean up) is ignored with a one-line hint on standard error.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

FILE_NAME = "muster.json"


@dataclass(frozen=True)
class StackState:
    server: str  # intake's HTTP API
    grpc: str  # intake's gRPC API, host:port
    store_url: str
    broker: str  # Kafka bootstrap, host:port
    pid: int  # of the ``muster up`` process
    data_dir: str
    token: str | None = None  # an admin token, when the stack made one


def current_path() -> Path:
    """Where the current stack's state is read from and written to."""
    if explicit := os.environ.get("MUSTER_STATE"):
        return Path(explicit)
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "muster" / "current.json"


def write(state: StackState) -> list[Path]:
    """Write the data directory's state file and the current-stack file; both paths."""
    text = json.dumps(asdict(state), indent=2) + "\n"
    paths = [Path(state.data_dir) / FILE_NAME, current_path()]
    for path in paths:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}")
        tmp.write_text(text)
        tmp.replace(path)  # atomic: a reader never sees half a file
    return paths


def remove(state: StackState) -> None:
    """Remove the files ``write`` made; the current-stack file only while it is still
    ours (another ``muster up`` may have started since and taken it over)."""
    with contextlib.suppress(FileNotFoundError):
        (Path(state.data_dir) / FILE_NAME).unlink()
    current = current_path()
    found = _load(current)
    if found is not None and found.pid == state.pid:
        with contextlib.suppress(FileNotFoundError):
            current.unlink()


def read() -> StackState | None:
    """The running stack's state, or None: no file, an unreadable one, or a stale one
    (its process is gone; a one-line hint says so)."""
    path = current_path()
    found = _load(path)
    if found is None:
        return None
    if not _alive(found.pid):
        print(
            f"muster: ignoring {path}: the stack that wrote it (pid {found.pid}) is gone; "
            "`muster up` starts one",
            file=sys.stderr,
        )
        return None
    return found


def _load(path: Path) -> StackState | None:
    try:
        raw = json.loads(path.read_text())
        return StackState(
            server=str(raw["server"]),
            grpc=str(raw["grpc"]),
            store_url=str(raw["store_url"]),
            broker=str(raw["broker"]),
            pid=int(raw["pid"]),
            data_dir=str(raw["data_dir"]),
            token=raw.get("token") or None,
        )
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError) as exc:
        print(f"muster: ignoring {path}: not a muster state file ({exc})", file=sys.stderr)
        return None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process: it exists
        return True
    return True
