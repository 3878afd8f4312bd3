"""Readable tables for the terminal, kubectl style, drawn by rich.

Columns are left-aligned and never wrapped (a row stays one line that ``awk`` and tests
can split); on a terminal the header is bold and states are coloured, elsewhere (a pipe,
a file, ``NO_COLOR``) the text is plain.
"""

from __future__ import annotations

import io
import os
import sys
from collections.abc import Sequence

from rich.console import Console
from rich.table import Table
from rich.text import Text

_WIDE = 100_000  # wide enough that no row is ever wrapped
GOOD = frozenset({"Running", "Admitted", "Succeeded", "Ready", "Provisioned", "True", "created"})
WAITING = frozenset({"Pending", "QuotaReserved", "Provisioning", "Accepted", "Declared"})
BAD = frozenset({"Failed", "Rejected", "Lost", "Evicted", "BookingExpired", "CapacityRevoked"})


def _style(cell: str) -> str:
    if cell in GOOD:
        return "green"
    if cell in WAITING:
        return "yellow"
    return "red" if cell in BAD else ""


def table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    colour = sys.stdout.isatty() and not os.environ.get("NO_COLOR")  # no-color.org
    t = Table(
        box=None,
        pad_edge=False,
        padding=(0, 3, 0, 0),
        show_header=True,
        header_style="bold" if colour else "",
    )
    for h in headers:
        t.add_column(str(h), no_wrap=True, overflow="ignore")
    for r in rows:
        cells = ["" if c is None else str(c) for c in r]
        t.add_row(*(Text(c, style=_style(c) if colour else "") for c in cells))
    out = io.StringIO()
    console = Console(
        file=out,
        width=_WIDE,
        force_terminal=colour,
        no_color=not colour,
        highlight=False,
        soft_wrap=False,
    )
    console.print(t)
    return "\n".join(line.rstrip() for line in out.getvalue().rstrip("\n").splitlines())
