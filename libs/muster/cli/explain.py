"""``muster explain WORKLOAD [--at TIME]``: intake's explanation, printed for people.

The CLI decides nothing: intake rebuilds the state and explains it
(``GET /v1/workloads/{id}/explain``); ``--at`` is only checked here so that a typo is
one line naming ``--at`` before any request.
"""

from __future__ import annotations

import json
import time
import urllib.parse
from collections.abc import Sequence
from typing import Any

import yaml

from muster.cli.resources import ResourceError, call, conditions_table, indent
from muster.cli.tables import table
from muster.core.model.fields import InvalidInput
from muster.core.timepoint import parse_at


def explain(server: str, wid: str, at: str | None, output: str) -> int:
    if at is not None:
        try:
            parse_at(at, time.time(), "--at")
        except InvalidInput as exc:
            raise ResourceError(str(exc)) from None
    query = f"?{urllib.parse.urlencode({'at': at})}" if at is not None else ""
    body = call("GET", f"{server}/v1/workloads/{urllib.parse.quote(wid, safe='')}/explain{query}")
    if output == "json":
        print(json.dumps(body, indent=2, sort_keys=True))
    elif output == "yaml":
        print(yaml.safe_dump(body, sort_keys=True).rstrip())
    else:
        print(render(body))
    return 0


def render(x: dict[str, Any]) -> str:
    """The explanation as a kubectl-describe-like text: the why first, then the details."""
    lines = [
        _field(
            "Workload", f"{x['namespace']}/{x['name']} (id {x['id']})" if x["name"] else x["id"]
        ),
        _field("At", f"{x['time']} (log position {x['position']})"),
        _field("Status", x["status"]),
        _field("Reason", x["reason"]),
        _field("Message", x["message"]),
    ]
    if x["name"]:
        lines.append(_field("Queue", _queues(x)))
    if x.get("submittedAt"):
        lines.append(_field("Submitted", x["submittedAt"]))
    if x["flavorsTried"]:
        lines.append(_field("Flavors tried", ", ".join(x["flavorsTried"])))
    if x["flavors"]:
        lines.append(_field("Flavors", _flavors(x["flavors"])))
    if x["victims"]:
        lines.append(_field("Would preempt", ", ".join(x["victims"])))
    lines += _sections(x)
    return "\n".join(lines)


def _sections(x: dict[str, Any]) -> list[str]:
    out: list[str] = []
    rows: list[Sequence[Any]]
    if x["shortfall"]:
        rows = [
            (s["resource"], s["flavor"], s["requested"], s["nominalQuota"], s["used"], s["missing"])
            for s in x["shortfall"]
        ]
        out += ["Quota shortfall:", indent(table(SHORTFALL, rows))]
    if x["nodes"]:
        rows = sorted(x["nodes"].items())
        out += ["Nodes:", indent(table(["POD", "NODE"], rows))]
    if x["admissionChecks"]:
        rows = [
            (c["name"], c["state"], c["lastTransitionTime"], c["message"])
            for c in x["admissionChecks"]
        ]
        out += ["Admission checks:", indent(table(["CHECK", "STATE", "SINCE", "MESSAGE"], rows))]
    if req := x.get("provisioningRequest"):
        rows = [
            (c["type"], c["status"], c["reason"], c["lastTransitionTime"], c["message"])
            for c in req["conditions"]
        ]
        out += [
            f"ProvisioningRequest {req['id']} ({req['status']}):",
            indent(table(["TYPE", "STATUS", "REASON", "SINCE", "MESSAGE"], rows)),
        ]
    if x["evictions"]:
        rows = [
            (e["time"], e["kind"], e["preemptionReason"] or e["reason"], _by(e), e["message"])
            for e in x["evictions"]
        ]
        out += ["Evictions:", indent(table(["TIME", "KIND", "REASON", "BY", "MESSAGE"], rows))]
    if x["conditions"]:
        out += ["Conditions:", indent(conditions_table(x["conditions"]))]
    return out


SHORTFALL = ["RESOURCE", "FLAVOR", "REQUESTED", "NOMINAL", "USED", "MISSING"]


def _field(label: str, value: Any) -> str:
    return f"{label + ':':<15}{value}"


def _queues(x: dict[str, Any]) -> str:
    where = f"LocalQueue {x['localQueue']} -> ClusterQueue {x['clusterQueue'] or '(none)'}"
    queue = x.get("queue")
    if queue:
        where += (
            f"; position {queue['positionInClusterQueue']} in the ClusterQueue, "
            f"{queue['positionInLocalQueue']} in the LocalQueue"
        )
    return where


def _flavors(flavors: dict[str, dict[str, str]]) -> str:
    return "; ".join(
        f"{pod_set}: " + ", ".join(f"{r}={f}" for r, f in sorted(m.items()))
        for pod_set, m in sorted(flavors.items())
    )


def _by(e: dict[str, Any]) -> str:
    return e.get("preemptorName") or e.get("preemptor") or ""
