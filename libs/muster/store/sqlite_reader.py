"""A replay's reader: a child process that runs a fold's SELECT batch after batch on a
SQLite store and hands the rows on, msgpack-framed, through its stdout.

Why a process: on SQLite a replay's read is the stdlib driver's per-row work (~2 us a
row of ``FOLD_COLUMNS``: a value object per column, SQLite's mutex and the GIL around
every step), a third of a rebuild, and the GIL keeps a thread from doing it beside the
fold. In a process of its own it runs on the other core while the replay folds the batch
before; the replay then pays only msgpack's decoding of each batch (~0.5 us a row).

Run as a script (``python sqlite_reader.py SPEC``), not as part of the package: it
imports only the standard library and msgspec, so it starts in tens of milliseconds.
SPEC is JSON: ``path``, ``sql`` (the SELECT with its ``LIMIT``), ``params``, ``after``
(the index in ``params`` of the position to read after, moved on after each batch) and
``limit``. Each frame is a 4-byte big-endian length and a msgpack array of rows; a
length of 0 ends the stream. An error goes to stderr with a non-zero exit, and no end
frame: the reader's parent raises then.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import sqlite3
import struct
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from types import TracebackType
from typing import IO, Any, BinaryIO

import msgspec

FRAME = struct.Struct(">I")
PIPE_BYTES = 1 << 20
READ_WAIT_MS = 1000  # as the loop's reader: it waits only while a writer recovers the WAL


class ReaderFailed(Exception):
    """The child reader ended without its end frame (its stderr says why)."""


class ChildReader:
    """The parent's end: the child's batches as the rows ``read_folding`` returns (lists,
    not tuples: msgpack keeps every value's type, so a fold sees equal values).

        with ChildReader(spec) as reader:
            for rows in reader.batches(): ...

    Leaving the block early ends the child."""

    def __init__(self, spec: dict[str, Any]) -> None:
        self.spec = spec
        self._proc: subprocess.Popen[bytes] | None = None
        self._err: IO[bytes] | None = None

    def __enter__(self) -> ChildReader:
        if self._proc is None:
            self.start()
        return self

    def start(self) -> None:
        """Start the child (``__enter__`` does, if not yet); OSError: it could not be."""
        # Its stderr to a file, not a pipe: a child that wrote more than a pipe holds
        # there would wait for a reader while its parent waits for its next frame.
        self._err = tempfile.TemporaryFile()  # noqa: SIM115 (closed in __exit__)
        try:
            self._proc = subprocess.Popen(
                [sys.executable, __file__, json.dumps(self.spec)],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=self._err,
            )
        except OSError:
            self._err.close()
            self._err = None
            raise
        _widen(self._proc.stdout)

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        proc, self._proc = self._proc, None
        if proc is not None:
            if proc.poll() is None:
                proc.kill()  # left early: what it read ahead is not wanted
            if proc.stdout is not None:
                proc.stdout.close()
            proc.wait()
        if self._err is not None:
            self._err.close()
            self._err = None

    def batches(self) -> Iterator[list[Any]]:
        assert self._proc is not None and self._proc.stdout is not None, "use it in a with"
        read, decode = self._proc.stdout.read, msgspec.msgpack.Decoder().decode
        while True:
            head = read(FRAME.size)
            size = FRAME.unpack(head)[0] if len(head) == FRAME.size else None
            if size == 0:
                return
            data = read(size) if size is not None else b""
            if size is None or len(data) < size:
                raise self._failed()
            yield decode(data)

    def _failed(self) -> ReaderFailed:
        assert self._proc is not None and self._err is not None
        self._proc.wait()  # its stdout is at its end: it has exited, or is exiting
        self._err.seek(0)
        tail = self._err.read().decode(errors="replace").strip().splitlines()[-3:]
        return ReaderFailed(
            f"the store's reader process ended (exit {self._proc.returncode}) "
            f"before the end of its reads: {' / '.join(tail) or 'no message'}"
        )


def _widen(pipe: IO[bytes] | None) -> None:
    """A pipe of 1 MiB, not 64 KiB (Linux; as far as ``pipe-max-size`` lets an unprivileged
    process): a 4 MB batch then crosses in a few reads, not sixty context switches."""
    size = getattr(fcntl, "F_SETPIPE_SZ", None)
    if pipe is None or size is None:
        return
    with contextlib.suppress(OSError):
        fcntl.fcntl(pipe.fileno(), size, PIPE_BYTES)


def stream(spec: dict[str, Any], out: BinaryIO) -> None:
    """Every batch the SELECT gives, from ``params[after]`` on, until one is short."""
    conn = sqlite3.connect(spec["path"], isolation_level=None)
    conn.execute(f"PRAGMA busy_timeout={READ_WAIT_MS}")
    encode = msgspec.msgpack.Encoder().encode
    params, after, limit = list(spec["params"]), int(spec["after"]), int(spec["limit"])
    try:
        while True:
            rows = conn.execute(spec["sql"], params).fetchall()
            if rows:
                data = encode(rows)
                out.write(FRAME.pack(len(data)))
                out.write(data)
                params[after] = rows[-1][0]
            if len(rows) < limit:
                break
        out.write(FRAME.pack(0))
        out.flush()
    finally:
        conn.close()


if __name__ == "__main__":
    stream(json.loads(sys.argv[1]), sys.stdout.buffer)
