"""The core takes time, ids and randomness as inputs: nothing under libs/muster/core reads them."""

from __future__ import annotations

import re
from pathlib import Path

CORE = Path(__file__).resolve().parents[2] / "libs" / "muster" / "core"
FORBIDDEN = re.compile(
    r"datetime\.now|datetime\.utcnow|time\.time\(|time\.monotonic|uuid\.uuid[14]|uuid4\(|"
    r"\bimport random\b|from random import|\bimport asyncio\b|\bimport socket\b|open\("
)


def test_core_reads_no_clock_randomness_or_io() -> None:
    offenders = [
        f"{path.relative_to(CORE)}:{n}: {line.strip()}"
        for path in sorted(CORE.rglob("*.py"))
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if FORBIDDEN.search(line)
    ]
    assert offenders == []


def test_the_scan_would_catch_a_clock_read() -> None:
    assert FORBIDDEN.search("    now = time.time()")
    assert FORBIDDEN.search("wid = uuid.uuid4().hex")
