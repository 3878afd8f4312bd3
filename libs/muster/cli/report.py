"""``muster report``: accounting as Slurm's ``sacct``/``sreport`` give it, from intake's
``GET /v1/report`` (``core/views/accounting.py`` says what each figure counts)."""

from __future__ import annotations

import csv
import io
import json
import urllib.parse
from typing import Any

from muster.cli.resources import ResourceError, call
from muster.cli.tables import table

OUTPUTS = ("table", "csv", "json")
BY = ("workload", "namespace", "clusterqueue")
_SECTION = {"workload": "workloads", "namespace": "namespaces", "clusterqueue": "clusterQueues"}
# (header, field) per section; csv and json keep seconds, the table shows HH:MM:SS.
_WORKLOAD = [
    ("ID", "id"),
    ("NAME", "name"),
    ("QUEUE", "queueName"),
    ("CLUSTERQUEUE", "clusterQueue"),
    ("STATUS", "status"),
    ("SUBMIT", "submitTime"),
    ("START", "startTime"),
    ("END", "endTime"),
    ("WAIT", "waitSeconds"),
    ("RUN", "runSeconds"),
    ("GPU-HOURS", "gpuHours"),
]
_TOTAL = [
    ("WORKLOADS", "workloads"),
    ("FINISHED", "finished"),
    ("MEAN WAIT", "meanWaitSeconds"),
    ("RUN", "runSeconds"),
    ("GPU-HOURS", "gpuHours"),
]


def fetch(
    server: str, since: str | None, until: str | None, namespace: str | None
) -> dict[str, Any]:
    query = {k: v for k, v in (("since", since), ("until", until), ("namespace", namespace)) if v}
    found: dict[str, Any] = call("GET", f"{server}/v1/report?{urllib.parse.urlencode(query)}")
    return found


def report(
    server: str,
    since: str | None,
    until: str | None,
    namespace: str | None,
    by: str,
    output: str,
) -> int:
    """``namespace`` None: every namespace the caller may read (``-A``)."""
    if by not in BY:
        raise ResourceError(f"--by {by!r}: one of {', '.join(BY)}")
    found = fetch(server, since, until, namespace)
    if output == "json":
        print(json.dumps(found, indent=2, sort_keys=True))
        return 0
    columns = _columns(by, all_namespaces=namespace is None)
    items = found[_SECTION[by]]
    if output == "csv":
        print(_csv(columns, items), end="")
        return 0
    if not items:
        print("No workloads in the range.")
        return 0
    rows = [[_cell(field, item.get(field)) for _, field in columns] for item in items]
    print(table([h for h, _ in columns], rows))
    return 0


def _columns(by: str, all_namespaces: bool) -> list[tuple[str, str]]:
    if by == "workload":
        return [("NAMESPACE", "namespace"), *_WORKLOAD] if all_namespaces else _WORKLOAD
    return [(by.upper(), "name"), *_TOTAL]


def _csv(columns: list[tuple[str, str]], items: list[dict[str, Any]]) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow([field for _, field in columns])
    for item in items:
        writer.writerow(["" if item.get(f) is None else item[f] for _, f in columns])
    return out.getvalue()


def _cell(field: str, value: Any) -> str:
    if value is None:
        return "-"
    if field.endswith("Seconds"):
        return hms(float(value))
    if field == "gpuHours":
        return f"{value:.2f}"
    return str(value)


def hms(seconds: float) -> str:
    """sacct's elapsed time: ``[D-]HH:MM:SS``."""
    whole = round(seconds)
    days, rest = divmod(whole, 86400)
    h, rest = divmod(rest, 3600)
    m, s = divmod(rest, 60)
    return f"{days}-{h:02}:{m:02}:{s:02}" if days else f"{h:02}:{m:02}:{s:02}"
