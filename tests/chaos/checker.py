"""An independent checker of a muster store after a chaos run.

It imports nothing of muster: it reads the ``events`` table with the database's own
driver (sqlite3, asyncpg) and the payloads as plain JSON, and checks what the system
promises, whatever happened to its processes:

* every accepted submission is stored exactly once, and nothing else is;
* no workload holds quota twice at once (no double admission);
* no ClusterQueue's usage exceeds its nominal quota at any log position (queues
  without a cohort: what the chaos cluster uses);
* every workload reached an end (finished, cancelled or rejected);
* every node registered was removed or lost by the end (the nodes of ended requests), or
  deleted with no pod running and nothing of it after (the agent logs no removal then).
"""

from __future__ import annotations

import asyncio
import json
import re
import sqlite3
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit, urlunsplit

RELEASES = ("admission.finished", "admission.cancelled", "admission.rejected", "admission.evicted")
ENDS = ("admission.finished", "admission.cancelled", "admission.rejected")
POD_ENDS = ("node.pod_succeeded", "node.pod_failed", "node.pod_stopped")


@dataclass(frozen=True, slots=True)
class Row:
    position: int
    type: str
    payload: dict[str, Any]
    stream: str = ""
    producer: str = ""


@dataclass
class Report:
    stored: int = 0  # workloads submitted in the store
    lost: list[str] = field(default_factory=list)  # accepted, not stored
    unexpected: list[str] = field(default_factory=list)  # stored, never accepted
    duplicated: list[str] = field(default_factory=list)  # stored more than once
    double_admissions: list[str] = field(default_factory=list)
    quota_violations: list[str] = field(default_factory=list)
    unfinished: list[str] = field(default_factory=list)
    nodes_left: list[str] = field(default_factory=list)

    def problems(self) -> dict[str, list[str]]:
        found = {
            "lost": self.lost,
            "unexpected": self.unexpected,
            "duplicated": self.duplicated,
            "double admissions": self.double_admissions,
            "quota violations": self.quota_violations,
            "unfinished": self.unfinished,
            "nodes left": self.nodes_left,
        }
        return {k: v for k, v in found.items() if v}


def check(rows: Iterable[Row], accepted: Iterable[str]) -> Report:
    rows = sorted(rows, key=lambda r: r.position)
    report = Report()
    submitted = Counter(r.payload["workload_id"] for r in rows if r.type == "workload.submitted")
    accepted = set(accepted)
    report.stored = len(submitted)
    report.lost = sorted(accepted - set(submitted))
    report.unexpected = sorted(set(submitted) - accepted)
    report.duplicated = sorted(w for w, n in submitted.items() if n > 1)
    _holding(rows, _nominal(rows), report)
    ended = {r.payload["workload_id"] for r in rows if r.type in ENDS}
    report.unfinished = sorted(set(submitted) - ended)
    registered = {r.payload["node"] for r in rows if r.type == "node.registered"}
    registered |= {  # created Ready: registered by the Provisioned that names them
        n["name"]
        for r in rows
        if r.type == "provisioning.provisioned" and r.payload.get("created")
        for n in r.payload.get("nodes", ())
    }
    gone = {r.payload["node"] for r in rows if r.type in ("node.removed", "node.lost")}
    gone |= _deleted_idle(rows)
    report.nodes_left = sorted(registered - gone)
    return report


def _deleted_idle(rows: list[Row]) -> set[str]:
    """Nodes a deletion removed at once (the node agent logs no ``node.removed`` for them):
    no pod of theirs running when deleted, and no event of theirs after it."""
    running: dict[str, set[tuple[Any, ...]]] = {}  # node -> pods started, not yet ended
    deleted: dict[str, int] = {}  # node -> position of its deletion, when idle then
    last: dict[str, int] = {}  # node -> position of its last event
    for r in rows:
        node = r.payload.get("node") if r.type.startswith("node.") else None
        if node is not None:
            last[node] = r.position
            pod = (r.payload.get("workload_id"), r.payload.get("attempt"), r.payload.get("pod"))
            if r.type == "node.pod_started":
                running.setdefault(node, set()).add(pod)
            elif r.type in POD_ENDS:
                running.get(node, set()).discard(pod)
        elif r.type == "provisioning.nodes_deleted":
            deleted |= {n: r.position for n in r.payload["nodes"] if not running.get(n)}
    return {n for n, at in deleted.items() if last.get(n, 0) < at}


def _nominal(rows: list[Row]) -> dict[str, dict[tuple[str, str], int]]:
    """Per ClusterQueue without a cohort, (flavor, resource) -> nominal, as last configured."""
    out: dict[str, dict[tuple[str, str], int]] = {}
    for r in rows:
        if r.type != "config.cluster_queue_configured":
            continue
        spec = r.payload["spec"]
        if spec.get("cohort"):
            out.pop(spec["name"], None)
            continue
        out[spec["name"]] = {
            (f["name"], res["name"]): res["nominal_quota"]
            for group in spec["resource_groups"]
            for f in group["flavors"]
            for res in f["resources"]
        }
    return out


def _holding(
    rows: list[Row], nominal: Mapping[str, Mapping[tuple[str, str], int]], report: Report
) -> None:
    held: dict[str, tuple[str, dict[tuple[str, str], int]]] = {}  # workload -> (cq, usage)
    used: dict[str, Counter[tuple[str, str]]] = {}
    for r in rows:
        p = r.payload
        if r.type == "admission.quota_reserved":
            wid = p["workload_id"]
            if wid in held:
                report.double_admissions.append(f"position {r.position}: {wid} reserved twice")
                _release(held, used, wid)
            usage = {(f, res): q for f, rs in p["usage"].items() for res, q in rs.items()}
            held[wid] = (p["cluster_queue"], usage)
            used.setdefault(p["cluster_queue"], Counter()).update(usage)
        elif r.type in ("admission.shrunk", "admission.grown") and p["workload_id"] in held:
            cq = held[p["workload_id"]][0]
            _release(held, used, p["workload_id"])
            usage = {(f, res): q for f, rs in p["usage"].items() for res, q in rs.items()}
            held[p["workload_id"]] = (cq, usage)
            used[cq].update(usage)
        elif r.type in RELEASES and p["workload_id"] in held:
            _release(held, used, p["workload_id"])
        else:
            continue
        for cq, limits in nominal.items():
            for pair, q in used.get(cq, Counter()).items():
                limit = limits.get(pair, 0)
                if q > limit:
                    report.quota_violations.append(
                        f"position {r.position}: {cq} uses {q} of {pair}, nominal {limit}"
                    )


def _release(held: dict[str, Any], used: dict[str, Counter[tuple[str, str]]], wid: str) -> None:
    cq, usage = held.pop(wid)
    used[cq].subtract(usage)


def read_rows(store_url: str, after: int = 0) -> list[Row]:
    """The store's events after a position (``sqlite:///path`` or ``postgresql://...``)."""
    got = _query(
        store_url,
        "SELECT position, type, payload, stream_id, producer FROM events "
        "WHERE position > $1 ORDER BY position",
        after,
    )
    return [Row(p, t, json.loads(body), s, by) for p, t, body, s, by in got]


def head(store_url: str) -> int:
    """The store's last position (0 when empty)."""
    return int(_query(store_url, "SELECT coalesce(max(position), 0) FROM events")[0][0])


def _query(store_url: str, sql: str, *args: Any) -> list[tuple[Any, ...]]:
    """Rows of one query, with the database's own driver ($1, ... as parameters)."""
    parts = urlsplit(store_url)
    scheme = parts.scheme.split("+")[0]
    if scheme == "sqlite":
        path = parts.path[1:] if parts.path.startswith("//") else parts.path
        with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as conn:
            return list(conn.execute(re.sub(r"\$\d+", "?", sql), args))
    if scheme in ("postgresql", "postgres"):
        url = urlunsplit(parts._replace(scheme="postgresql"))
        return asyncio.run(_query_postgres(url, sql, args))
    raise ValueError(f"no reader for {scheme!r} stores")


async def _query_postgres(url: str, sql: str, args: tuple[Any, ...]) -> list[tuple[Any, ...]]:
    import asyncpg

    conn = await asyncpg.connect(url)
    try:
        return [tuple(r) for r in await conn.fetch(sql, *args)]
    finally:
        await conn.close()
