"""Every line a service writes to stderr is one JSON object: muster's own structlog events
and the standard library's records (aiokafka, asyncio, warnings, a crash's traceback)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]

# Logs the way a running service's libraries do, after the service's own set-up.
SCRIPT = textwrap.dedent(
    """
    import asyncio, logging, warnings
    from muster.runtime.logging import configure

    log = configure("queue", "debug")
    log.info("started", position=7)
    logging.getLogger("aiokafka.conn").warning("Unable connect to %r: %s", "kafka:9092", "refused")
    logging.getLogger("aiokafka.consumer.group_coordinator").debug("Metadata for topic changed")
    logging.getLogger("aiohttp.access").info('127.0.0.1 "GET /metrics HTTP/1.1" 200')
    try:
        1 / 0
    except ZeroDivisionError:
        logging.getLogger("asyncio").exception("Task exception was never retrieved")
    warnings.warn("something old", DeprecationWarning, stacklevel=1)
    import threading  # a library's worker thread (aiosqlite's) does not see the context
    worker = threading.Thread(target=lambda: logging.getLogger("aiosqlite").debug("in a thread"))
    worker.start()
    worker.join()

    async def main():
        raise RuntimeError("boom")

    asyncio.run(main())
    """
)


def _run(code: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("MUSTER_")}
    base["PYTHONPATH"] = f"{ROOT / 'libs'}{os.pathsep}{ROOT}"
    base["PYTHONWARNINGS"] = "always"
    return subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env={**base, **(env or {})},
        timeout=60,
        cwd=ROOT,
    )


def _lines(stderr: str) -> list[dict[str, Any]]:
    lines = [ln for ln in stderr.splitlines() if ln.strip()]
    assert lines, "nothing was logged"
    parsed = []
    for line in lines:
        try:
            doc = json.loads(line)
        except json.JSONDecodeError:
            raise AssertionError(f"not a JSON line: {line!r}") from None
        assert isinstance(doc, dict), line
        parsed.append(doc)
    return parsed


def test_every_line_is_json_including_the_libraries() -> None:
    done = _run(SCRIPT)
    assert done.returncode == 1  # the uncaught RuntimeError
    lines = _lines(done.stderr)
    by_event = {doc["event"]: doc for doc in lines}

    own = by_event["started"]
    assert (own["service"], own["level"], own["position"]) == ("queue", "info", 7)

    kafka = by_event["Unable connect to 'kafka:9092': refused"]
    assert kafka["logger"] == "aiokafka.conn"
    assert kafka["level"] == "warning"
    assert kafka["service"] == "queue"  # the bound context reaches library lines too
    assert kafka["timestamp"].endswith("Z")
    assert by_event["Metadata for topic changed"]["level"] == "debug"
    assert by_event['127.0.0.1 "GET /metrics HTTP/1.1" 200']["logger"] == "aiohttp.access"

    task = by_event["Task exception was never retrieved"]
    assert task["logger"] == "asyncio"
    assert "ZeroDivisionError" in task["exception"]

    warned = [d for d in lines if d.get("logger") == "py.warnings"]
    assert warned and "something old" in warned[0]["event"]

    assert by_event["in a thread"]["service"] == "queue"

    crash = by_event["uncaught exception"]
    assert crash["level"] == "critical"
    assert "RuntimeError: boom" in crash["exception"]


def test_the_level_filters_library_lines_too() -> None:
    code = SCRIPT.replace('configure("queue", "debug")', 'configure("queue", "warning")')
    lines = _lines(_run(code).stderr)
    events = {doc["event"] for doc in lines}
    assert "started" not in events
    assert "Metadata for topic changed" not in events
    assert "Unable connect to 'kafka:9092': refused" in events


def test_a_service_refusing_its_settings_says_so_in_json() -> None:
    """The first line a service writes (here: a missing MUSTER_STORE_URL) is JSON too."""
    done = _run("import runpy; runpy.run_module('services.queue', run_name='__main__')")
    assert done.returncode == 2
    (line,) = _lines(done.stderr)
    assert line["event"] == "bad settings"
    assert "MUSTER_STORE_URL" in line["error"]
    assert line["service"] == "queue"
