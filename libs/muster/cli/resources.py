"""``muster get``, ``describe``, ``delete`` and ``apply -f``: kubectl's verbs over intake's API.

Types are named as kubectl names them (singular, plural or short: ``wl``, ``cq``, ``lq``,
``rf``, ``pc``, ``quota``, ``provreq``); ``-o json|yaml`` prints the objects (a list as
``kind: List``), ``-o wide`` adds columns.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import yaml
from rich.console import Console
from rich.status import Status

from muster.cli import http, nodes
from muster.cli.http import client, split_url
from muster.cli.present import quantities, shown
from muster.cli.tables import table
from muster.core import inputs
from muster.core.model import kinds, manifests
from muster.core.model.documents import FILE_DOCUMENTS, DocumentError, load_documents
from muster.core.model.fields import InvalidInput
from muster.core.model.resources import format_quantity
from muster.core.views.conditions import rfc3339
from muster.core.views.workloads import STATUSES, status_named
from muster_client import ApiError, Workload

OUTPUTS = ("table", "wide", "json", "yaml")


class ResourceError(RuntimeError):
    pass


@dataclass(frozen=True, slots=True)
class Kind(kinds.ResourceKind):
    """A kind and its table columns: (header, value) pairs, more of them when wide."""

    columns: Callable[[dict[str, Any], bool], list[tuple[str, Any]]] = lambda o, wide: []


def _age(at: float | str | None) -> str:
    """How long ago, as kubectl's AGE; ``at`` in seconds or RFC 3339, as the API gives it."""
    if not at:
        return ""
    if isinstance(at, str):
        at = datetime.fromisoformat(at).timestamp()
    seconds = max(0, int(time.time() - at))
    if seconds >= 86400:
        return f"{seconds // 86400}d"
    if seconds >= 3600:
        return f"{seconds // 3600}h"
    return f"{seconds // 60}m{seconds % 60}s" if seconds >= 60 else f"{seconds}s"


def _workload_columns(w: dict[str, Any], wide: bool) -> list[tuple[str, Any]]:
    cols = [
        ("ID", w["id"]),
        ("NAME", w["name"]),
        ("QUEUE", w["queueName"]),
        ("STATUS", w["status"]),
        ("REASON", w["reason"]),
        ("AGE", _age(w.get("submittedAt"))),
    ]
    if wide:
        cols += [
            ("CLUSTERQUEUE", w.get("clusterQueue") or ""),
            ("PRIORITY", w["priority"]),
            ("PODS", w["pods"]),
            ("ATTEMPT", w["attempt"]),
            ("MESSAGE", w["message"]),
        ]
    return cols


def _request_columns(v: dict[str, Any], wide: bool) -> list[tuple[str, Any]]:
    c = {x["type"]: x for x in v.get("conditions", [])}
    cols = [
        ("NAME", v["id"].partition("/")[2] or v["id"]),
        ("ACCEPTED", c.get("Accepted", {}).get("status", "")),
        ("PROVISIONED", c.get("Provisioned", {}).get("status", "")),
        ("FAILED", c.get("Failed", {}).get("status", "")),
        ("STATUS", v["status"]),
    ]
    if wide:
        cols += [("ZONE", v.get("zone") or ""), ("NODES", len(v.get("nodes", [])))]
    return cols


def _usage(status: dict[str, Any]) -> str:
    parts = []
    for flavor, resources in sorted((status.get("usage") or {}).items()):
        for resource, amount in sorted(resources.items()):
            parts.append(f"{flavor}/{resource}={format_quantity(resource, amount)}")
    return ",".join(parts)


def _cq_columns(o: dict[str, Any], wide: bool) -> list[tuple[str, Any]]:
    s, st = o["spec"], o["status"]
    cols = [
        ("NAME", o["name"]),
        ("COHORT", s.get("cohort") or ""),
        ("STRATEGY", s.get("queueing_strategy", "")),
        ("PENDING WORKLOADS", st.get("pendingWorkloads", 0)),
        ("ADMITTED WORKLOADS", st.get("admittedWorkloads", 0)),
    ]
    if wide:
        cols.append(("WEIGHTED SHARE", st.get("fairSharing", {}).get("weightedShare", "")))
        cols.append(("USAGE", _usage(st)))
    return cols


def _lq_columns(o: dict[str, Any], wide: bool) -> list[tuple[str, Any]]:
    return [
        ("NAME", o["name"]),
        ("CLUSTERQUEUE", o["spec"].get("cluster_queue", "")),
        ("PENDING WORKLOADS", o["status"].get("pendingWorkloads", 0)),
        ("ADMITTED WORKLOADS", o["status"].get("admittedWorkloads", 0)),
    ]


def _flavor_columns(o: dict[str, Any], wide: bool) -> list[tuple[str, Any]]:
    labels = o["spec"].get("node_labels") or {}
    cols = [("NAME", o["name"]), ("NODE LABELS", ",".join(f"{k}={v}" for k, v in labels.items()))]
    if wide:
        cols.append(("TAINTS", len(o["spec"].get("node_taints") or [])))
    return cols


def _priority_columns(o: dict[str, Any], wide: bool) -> list[tuple[str, Any]]:
    return [("NAME", o["name"]), ("KIND", o["kind"]), ("VALUE", o["spec"].get("value"))]


def _quota_columns(o: dict[str, Any], wide: bool) -> list[tuple[str, Any]]:
    spec = o["spec"]
    return [
        ("NAME", o["name"]),
        ("HARD", quantities(spec.get("hard") or {})),
        ("ENFORCEMENT", spec.get("enforcement", "")),
    ]


def _named(o: dict[str, Any], wide: bool) -> list[tuple[str, Any]]:
    cols: list[tuple[str, Any]] = [("NAME", o["name"])]
    if wide:
        cols.append(("SPEC", json.dumps(shown(o["spec"]), sort_keys=True)[:120]))
    return cols


COLUMNS: dict[str, Callable[[dict[str, Any], bool], list[tuple[str, Any]]]] = {
    "Workload": _workload_columns,
    "ClusterQueue": _cq_columns,
    "LocalQueue": _lq_columns,
    "ResourceFlavor": _flavor_columns,
    "PriorityClass": _priority_columns,
    "ProvisioningRequest": _request_columns,
    "Node": nodes.columns,
    "ResourceQuota": _quota_columns,
}


def kind_of(name: str) -> Kind:
    k = kinds.resource_kind(name)
    if k is None:
        raise ResourceError(
            f'the server doesn\'t have a resource type "{name}"; known: {kinds.known()}'
        )
    return Kind(k.kind, k.plural, k.short, k.namespaced, COLUMNS.get(k.kind, _named))


def call(
    method: str, url: str, *, raw: bytes | None = None, content_type: str = "application/json"
) -> Any:
    """``method url`` through the client, a refusal or an unreachable server as the
    command's one-line error."""
    with _reached(split_url(url)[0]):
        return http.call(method, url, raw=raw, content_type=content_type)


def _cancel(server: str, workload_id: str) -> Workload:
    with _reached(server), client(server) as c:
        return c.cancel(workload_id)


@contextlib.contextmanager
def _reached(server: str) -> Iterator[None]:
    """A refusal, or a server that cannot be reached, as the command's one-line error."""
    try:
        yield
    except ApiError as exc:
        raise ResourceError(str(exc)) from None
    except OSError as exc:
        raise ResourceError(f"cannot reach {server}: {exc}") from None


def fetch(
    server: str,
    k: Kind,
    name: str | None,
    namespace: str | None,
    status: str | None = None,
) -> list[dict[str, Any]]:
    """The objects ``get`` shows: one by name, or every one (following ``next`` pages)."""
    ns = namespace
    if k.kind == "Workload":
        if name:
            return [call("GET", f"{server}/v1/workloads/{name}")]
        query = "&".join(f"{q}={v}" for q, v in (("namespace", ns), ("status", status)) if v)
        return _pages(f"{server}/v1/workloads?limit=1000&{query}")
    if k.kind == "ProvisioningRequest":
        if name:
            where = f"namespaces/{ns or current_namespace()}"
            return [call("GET", f"{server}/v1/{where}/provisioningrequests/{name}")]
        return _pages(f"{server}/v1/provisioningrequests?limit=1000&namespace={ns or ''}")
    if name:
        where = f"/namespaces/{ns or current_namespace()}" if k.namespaced else ""
        return [call("GET", f"{server}/v1{where}/{k.plural}/{name}")]
    where = f"/namespaces/{ns}" if k.namespaced and ns else ""
    return _pages(f"{server}/v1{where}/{k.plural}?limit=1000")


def _pages(url: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    after: str | None = None
    err = Console(stderr=True)
    # A spinner with a count on a terminal (it vanishes when done); nothing in a pipe.
    spinner: AbstractContextManager[Status | None] = (
        err.status("fetching...") if err.is_terminal else nullcontext()
    )
    with spinner as status:
        while True:
            page = call("GET", url + (f"&after={after}" if after else ""))
            items += page["items"]
            after = page.get("next")
            if not after:
                return items
            if status is not None:
                status.update(f"fetched {len(items)}...")


def render(k: Kind, items: Sequence[dict[str, Any]], output: str, one: bool, all_ns: bool) -> str:
    if output in ("json", "yaml"):
        objs = [shown(i) for i in items]
        doc: Any = objs[0] if one else {"apiVersion": "v1", "kind": "List", "items": objs}
        if output == "json":
            return json.dumps(doc, indent=2, sort_keys=True)
        return yaml.safe_dump(doc, sort_keys=True).rstrip()
    if not items:
        return "No resources found."
    wide = output == "wide"
    rows = []
    headers: list[str] = []
    for item in items:
        cols = k.columns(item, wide)
        if k.namespaced and all_ns:
            namespace = item.get("namespace") or item.get("id", "").partition("/")[0]
            cols = [("NAMESPACE", namespace), *cols]
        headers = [h for h, _ in cols]
        rows.append([v for _, v in cols])
    return table(headers, rows)


def current_namespace() -> str:
    """kubectl's current namespace: ``$MUSTER_NAMESPACE``, else ``default``."""
    return os.environ.get("MUSTER_NAMESPACE") or "default"


def status_of(raw: str) -> str:
    """A status as the API names it, from any case (``pending``, ``quotareserved``)."""
    found = status_named(raw)
    if found is None:
        raise ResourceError(f"--status {raw!r}: one of {', '.join(STATUSES)} (any case)")
    return found


def get(
    server: str,
    type_name: str,
    name: str | None,
    namespace: str | None,
    all_namespaces: bool,
    status: str | None,
    output: str,
) -> int:
    k = kind_of(type_name)
    ns = None if all_namespaces else namespace or current_namespace()
    wanted = status_of(status) if status else None
    items = fetch(server, k, name, ns if (k.namespaced or k.kind == "Workload") else None, wanted)
    print(render(k, items, output, one=name is not None, all_ns=not name and ns is None))
    return 0


# -- describe ---------------------------------------------------------------------------


def describe(server: str, type_name: str, name: str | None, namespace: str | None) -> int:
    """``describe TYPE NAME``; ``describe ID`` alone is a workload, as before."""
    if name is None:
        type_name, name = "workload", type_name
    k = kind_of(type_name)
    obj = fetch(server, k, name, namespace)[0]
    if k.kind == "Workload":
        _describe_workload(server, obj)
    elif k.kind == "ProvisioningRequest":
        print_request(obj)
    else:
        _describe_object(server, k, obj)
    return 0


def _field(label: str, value: Any) -> None:
    print(f"{label + ':':<14}{'<none>' if value is None else value}")  # kubectl's unset


def conditions_table(conditions: list[dict[str, Any]]) -> str:
    """Kueue's status.conditions (describe, explain)."""
    rows = [
        (c["type"], c["status"], c["reason"], c["lastTransitionTime"], c["message"])
        for c in conditions
    ]
    return table(["TYPE", "STATUS", "REASON", "LAST TRANSITION", "MESSAGE"], rows)


def _describe_workload(server: str, view: dict[str, Any]) -> None:
    history = call("GET", f"{server}/v1/workloads/{view['id']}/events")["events"]
    for label, key in (
        ("Name", "name"),
        ("Namespace", "namespace"),
        ("ID", "id"),
        ("Queue", "queueName"),
        ("ClusterQueue", "clusterQueue"),
        ("Priority", "priority"),
        ("Submitted", "submittedTime"),
        ("Status", "status"),
        ("Reason", "reason"),
        ("Message", "message"),
    ):
        value = view.get(key)
        # Not yet admitted anywhere: say so rather than print None.
        _field(label, "(not admitted yet)" if value is None and key == "clusterQueue" else value)
    queue = view.get("queue")
    if queue:
        # Computed now by a dry run of the admission cycle: the numbers are current.
        _field(
            "Position",
            f"{queue['positionInClusterQueue']} in ClusterQueue, "
            f"{queue['positionInLocalQueue']} in LocalQueue",
        )
        _field("Now", f"{queue['reason']}: {queue['message']}")
    if view.get("conditions"):
        print("Conditions:")
        print(indent(conditions_table(view["conditions"])))
    print("Events:")
    start = history[0]["time"] if history else 0.0
    rows = [
        (
            f"{rfc3339(e['time'])} (+{e['time'] - start:.1f}s)",
            e["type"],
            e["reason"] or "",
            e["producer"],
            e["message"] or "",
        )
        for e in history
    ]
    print(indent(table(["TIME", "TYPE", "REASON", "FROM", "MESSAGE"], rows)))


def _describe_object(server: str, k: Kind, obj: dict[str, Any]) -> None:
    _field("Name", obj["name"])
    if obj.get("namespace"):
        _field("Namespace", obj["namespace"])
    _field("Kind", obj["kind"])
    print("Spec:")
    print(indent(yaml.safe_dump(shown(obj["spec"]), sort_keys=True).rstrip()))
    if obj.get("status"):
        print("Status:")
        print(indent(yaml.safe_dump(shown(obj["status"]), sort_keys=True).rstrip()))
    if k.kind in ("ClusterQueue", "LocalQueue"):
        url = (
            f"{server}/v1/clusterqueues/{obj['name']}/pendingworkloads?limit=20"
            if k.kind == "ClusterQueue"
            else f"{server}/v1/namespaces/{obj['namespace']}/localqueues/{obj['name']}"
            "/pendingworkloads?limit=20"
        )
        items = call("GET", url)["items"]
        print("Pending (first 20, in admission order):")
        rows = [
            (
                i["positionInClusterQueue"],
                f"{i['namespace']}/{i['name']}",
                i["reason"],
                i["message"],
            )
            for i in items
        ]
        print(indent(table(["#", "WORKLOAD", "REASON", "MESSAGE"], rows) if rows else "<none>"))


def print_request(view: dict[str, Any]) -> None:
    _field("Name", view["id"])
    _field("Status", view["status"])
    if view.get("provisioningClassName"):
        _field("Class", view["provisioningClassName"])
    if view.get("workload"):
        _field("Workload", view["workload"])
    _field("Zone", view.get("zone") or "-")
    removed = f" (removed: {view['nodesRemoved']})" if view.get("nodesRemoved") else ""
    _field("Nodes", f"{len(view['nodes'])}{removed}")
    rows = [
        (c["type"], c["status"], c["reason"], _age(c["lastTransitionTime"]), c["message"])
        for c in view["conditions"]
    ]
    print("Conditions:")
    print(indent(table(["TYPE", "STATUS", "REASON", "AGE", "MESSAGE"], rows)))


def indent(text: str) -> str:
    return "\n".join("  " + line for line in text.splitlines())


# -- delete -----------------------------------------------------------------------------


def delete(
    server: str, type_name: str | None, names: list[str], namespace: str | None, files: list[str]
) -> int:
    """``delete TYPE NAME...`` or ``delete -f FILE``: workloads are cancelled (their quota and
    nodes are given back), ProvisioningRequests deleted. Queue objects cannot be deleted:
    the log keeps them; change them with apply."""
    targets: list[tuple[Kind, str, str | None]] = []
    if files:
        m = read_manifests(files)[1]
        for wl, src in zip(m.workloads, m.sources, strict=True):
            wid = inputs.workload_id(wl.namespace, f"{wl.namespace}/{wl.name}")
            targets.append((kind_of("workload"), wid, f"{src.kind} {wl.namespace}/{wl.name}"))
        for req in m.request_sources:
            targets.append((kind_of("provreq"), str(req.flat["name"]), req.namespace))
    else:
        if type_name is None or not names:
            raise ResourceError("give TYPE NAME... or -f FILE")
        k = kind_of(type_name)
        targets = [(k, n, namespace) for n in names]
    failed = False
    for k, name, extra in targets:
        try:
            if k.kind == "Workload":
                cancelled = _cancel(server, name)
                label = extra if extra and files else f"workload {name}"
                print(f"{label} deleted (cancel requested; status {cancelled.status})")
            elif k.kind == "ProvisioningRequest":
                ns = extra or "default"
                view = call("DELETE", f"{server}/v1/namespaces/{ns}/provisioningrequests/{name}")
                print(f"provisioningrequest {ns}/{name} deleted (status {view['status']})")
            else:
                raise ResourceError(
                    f"{k.plural} cannot be deleted: the event log keeps queue configuration; "
                    "apply a changed object instead (for instance stopPolicy: HoldAndDrain)"
                )
        except ResourceError as exc:
            failed = True
            print(f"{k.kind} {name}: {exc}", file=sys.stderr)
    return 1 if failed else 0


# -- apply ---------------------------------------------------------------------------------


def read_manifests(files: list[str]) -> tuple[str, manifests.Manifests]:
    """The files' text (``-``: standard input), joined as one multi-document YAML, and what
    it holds, checked here so that a mistake names its file."""
    texts, parts = [], []
    for f in files:
        try:
            text = sys.stdin.read() if f == "-" else Path(f).read_text()
            docs = load_documents(text, max_documents=FILE_DOCUMENTS)
        except (OSError, DocumentError) as exc:
            raise ResourceError(f"cannot read {f}: {exc}") from None
        if not manifests.is_manifests(docs):
            raise ResourceError(
                f"{f}: no document has a kind, so these are not Kubernetes manifests "
                "(a cluster description goes to --cluster)"
            )
        try:
            parts.append(manifests.read(docs))
        except InvalidInput as exc:
            raise ResourceError(f"{f}: {exc}") from None
        texts.append(text)
    return "\n---\n".join(texts), manifests.combine(*parts)


def apply(server: str, files: list[str]) -> int:
    """Send the manifests to intake, which checks all of them before it appends anything."""
    text, _ = read_manifests(files)
    rows = call("POST", f"{server}/v1/apply", raw=text.encode(), content_type="application/yaml")
    items = rows["items"]
    print(table(["KIND", "NAME", "RESULT"], [(r["kind"], r["name"], r["result"]) for r in items]))
    return 0
