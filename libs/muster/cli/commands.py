"""What each ``muster`` sub-command does (the parser lives in main.py)."""

from __future__ import annotations

import asyncio
import json
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson

from muster.cli import resources
from muster.cli.http import client
from muster.cli.tables import table
from muster.core.decider import Decider
from muster.core.events import queue as qev
from muster.core.model import manifests, parse
from muster.core.model.cluster import ClusterSpec
from muster.core.model.documents import FILE_DOCUMENTS, DocumentError, load_documents
from muster.core.model.fields import InvalidInput, parse_duration
from muster.core.model.resources import format_quantity
from muster.core.model.workload import (
    FailurePolicy,
    PodSet,
    ProvisioningRequestSpec,
    WorkloadSpec,
)
from muster.core.queueing import quota as qt
from muster.core.queueing.decider import QueueDecider
from muster.core.queueing.state import status_counts
from muster.core.sim import figures as sim_figures
from muster.core.sim import harness as sim_harness
from muster.core.sim.summary import summarize
from muster.core.timepoint import parse_at
from muster.core.verify import verify_decisions
from muster.core.views.conditions import rfc3339
from muster.runtime import admin
from muster.store import SqlEventStore
from muster_client import ApiError, AsyncClient

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
TERMINAL = {"Succeeded", "Failed", "Cancelled", "Rejected"}


class CliError(RuntimeError):
    pass


def deciders() -> dict[str, Decider[Any]]:
    return {d.name: d for d in sim_harness.default_deciders()}


def load_yaml(path: Path) -> Any:
    """The one document of a YAML or JSON file (None if it is empty)."""
    docs = load_docs(path)
    if len(docs) > 1:
        raise CliError(f"cannot read {path}: expected a single document, found {len(docs)}")
    return docs[0] if docs else None


def load_cluster(path: Path) -> Any:
    try:
        return parse.cluster(load_yaml(path))
    except InvalidInput as exc:
        raise CliError(f"{path}: {exc}") from None


def load_docs(path: Path) -> list[Any]:
    """Every document of a YAML (or JSON) file, empty ones as None so that positions
    match the ``doc[N]`` of error messages."""
    try:
        text = path.read_bytes()
        if path.suffix == ".json":
            return [orjson.loads(text)]  # JSON is YAML, but read directly it is 10x faster
        return load_documents(text, max_documents=FILE_DOCUMENTS)
    except (OSError, DocumentError, orjson.JSONDecodeError) as exc:
        raise CliError(f"cannot read {path}: {exc}") from None


def load_manifests(path: Path) -> manifests.Manifests:
    docs = load_docs(path)
    if not manifests.is_manifests(docs):
        raise CliError(
            f"{path}: no document has a kind, so these are not Kubernetes manifests "
            "(a cluster description goes to --cluster)"
        )
    try:
        return manifests.read(docs)
    except InvalidInput as exc:
        raise CliError(f"{path}: {exc}") from None


@dataclass
class SimInputs:
    spec: ClusterSpec
    workloads: list[tuple[float, WorkloadSpec]] = field(default_factory=list)
    requests: list[tuple[float, ProvisioningRequestSpec]] = field(default_factory=list)
    deletions: list[tuple[float, str]] = field(default_factory=list)  # request id
    skipped: list[str] = field(default_factory=list)


def load_sim_inputs(spec: ClusterSpec, paths: list[Path]) -> SimInputs:
    """Workload lists and Kubernetes manifests (a document with a ``kind``), in order:
    the manifests' queue objects are merged into the cluster, their JobSets, Jobs, Pods and
    ProvisioningRequests submitted at their ``muster.dev/submit-at`` (default 0), requests
    deleted at their ``muster.dev/delete-at``. Also: what was skipped."""
    out = SimInputs(spec)
    parts: list[manifests.Manifests] = []
    for path in paths:
        docs = load_docs(path)
        if manifests.is_manifests(docs):
            m = load_manifests(path)
            parts.append(m)
            out.spec = manifests.merge(out.spec, m)
            out.workloads += m.submissions()
            out.skipped += [f"{path}: {line}" for line in m.skipped]
            continue
        present = [d for d in docs if d is not None]
        if len(present) != 1:
            raise CliError(
                f"{path}: expected one workload list, or Kubernetes manifests "
                f"(documents with a kind); found {len(present)} documents"
            )
        try:
            out.workloads += parse.workload_list(present[0])
        except InvalidInput as exc:
            raise CliError(f"{path}: {exc}") from None
    everything = manifests.combine(*parts)
    try:
        out.requests = [(at, r) for at, r, _ in everything.provisioning_requests()]
    except InvalidInput as exc:
        raise CliError(str(exc)) from None
    out.deletions = [
        (gone, f"{r.namespace}/{r.name}")
        for _, r, gone in everything.provisioning_requests()
        if gone is not None
    ]
    return out


def load_workloads(paths: list[Path]) -> list[tuple[float, Any]]:
    out = []
    for path in paths:
        try:
            out += parse.workload_list(load_yaml(path))
        except InvalidInput as exc:
            raise CliError(f"{path}: {exc}") from None
    return out


# -- talking to intake --------------------------------------------------------------


def submit(server: str, doc: Any, key: str | None) -> int:
    try:
        with client(server) as c:
            done = c.submit(doc, idempotency_key=key)
    except ApiError as exc:
        raise CliError(str(exc)) from None
    except OSError as exc:
        raise CliError(f"cannot reach {server}: {exc}") from None
    view = done.workload
    again = "" if done.created else " (already submitted under this idempotency key)"
    print(f"workload {view.id} submitted ({view.namespace}/{view.name}){again}")
    return 0


def pending(
    server: str, cluster_queue: str | None, local_queue: str | None, limit: int, output: str
) -> int:
    """Kueue's pending-workloads visibility: positions and current reasons."""
    if bool(cluster_queue) == bool(local_queue):
        raise CliError("name one of --cluster-queue or --local-queue NAMESPACE/NAME")
    if cluster_queue:
        path = f"/v1/clusterqueues/{cluster_queue}/pendingworkloads"
    else:
        ns, _, name = (local_queue or "").partition("/")
        if not ns or not name:
            raise CliError("--local-queue takes NAMESPACE/NAME")
        path = f"/v1/namespaces/{ns}/localqueues/{name}/pendingworkloads"
    try:
        with client(server) as c:
            items = c.request("GET", path, params={"limit": limit})["items"]
    except ApiError as exc:
        raise CliError(str(exc)) from None
    except OSError as exc:
        raise CliError(f"cannot reach {server}: {exc}") from None
    if output == "json":
        print(json.dumps(items, indent=2))
        return 0
    rows = [
        (
            str(i["positionInClusterQueue"]),
            str(i["positionInLocalQueue"]),
            f"{i['namespace']}/{i['name']}",
            str(i["priority"]),
            i["reason"],
            i["message"],
        )
        for i in items
    ]
    print(table(["CQ#", "LQ#", "WORKLOAD", "PRIORITY", "REASON", "MESSAGE"], rows))
    return 0


# -- the store ----------------------------------------------------------------------


def apply(
    store_url: str | None,
    cluster_path: Path | None,
    manifest_paths: list[str],
    kafka: str | None,
    server: str,
) -> int:
    """A cluster description into the store (the operator's bootstrap), then Kubernetes
    manifests through intake, which checks them all before appending anything."""
    if cluster_path is None and not manifest_paths:
        raise CliError("give --cluster FILE (a cluster description) and/or -f FILE (manifests)")
    if cluster_path is not None:
        if not store_url:
            raise CliError("--cluster writes the store: give --store-url or set MUSTER_STORE_URL")
        spec = load_cluster(cluster_path)
        appended = asyncio.run(admin.configure(store_url, spec, kafka))
        print(f"cluster {spec.name}: {len(appended)} configuration change(s) applied")
    if not manifest_paths:
        return 0
    try:
        return resources.apply(server, manifest_paths)
    except resources.ResourceError as exc:
        raise CliError(str(exc)) from None


def provreq(server: str, name: str | None, delete: bool, everything: bool, output: str) -> int:
    """``get``/``describe``/``delete provreq`` in one command: list the standalone requests
    (``--all``: those of queued workloads too), show one with its conditions, delete one."""
    ns, _, n = (name or "").rpartition("/")
    ns = ns or "default"
    try:
        if delete:
            if not n:
                raise CliError("--delete needs NAMESPACE/NAME")
            return resources.delete(server, "provreq", [n], ns, [])
        if n and output == "table":
            return resources.describe(server, "provreq", n, ns)
        kind = resources.kind_of("provreq")
        items = resources.fetch(server, kind, n or None, ns if n else None)
        if not n and not everything:
            items = [v for v in items if not v.get("workload")]
        print(resources.render(kind, items, output, one=bool(n), all_ns=not n))
    except resources.ResourceError as exc:
        raise CliError(str(exc)) from None
    return 0


async def replay(
    store_url: str, until: str | None, verify: list[str] | None, decisions: bool
) -> int:
    store = SqlEventStore(store_url, read_only=True)  # reads the log alone
    try:
        until_pos, until_time = _until(until)
        started = time.perf_counter()
        runner = await admin.rebuild(
            store, QueueDecider(), until_position=until_pos, until_time=until_time
        )
        took = time.perf_counter() - started
        _print_usage(runner.state, runner.position, took)
        ok = True
        for url in verify or []:
            ok &= await _verify_service(store, url)
        if decisions:
            ok &= _verify_decisions(await store.read_all(0))
    finally:
        await store.close()
    return 0 if ok else 1


def _until(raw: str | None) -> tuple[int | None, float | None]:
    if raw is None:
        return None, None
    try:
        value = float(raw)
    except ValueError:
        # As explain --at takes it: RFC 3339, relative (-5m) or @position.
        try:
            at = parse_at(raw, time.time(), "--until")
        except InvalidInput as exc:
            raise CliError(str(exc)) from None
        return at.position, at.time
    return (int(value), None) if value.is_integer() and value < 1e9 else (None, value)


def _print_usage(state: Any, position: int, took: float) -> None:
    rows = []
    for cq_name, cq in sorted(state.cluster_queues.items()):
        for group in cq.resource_groups:
            for fq in group.flavors:
                for rq in fq.resources:
                    used = state.usage.get(cq_name, {}).get(fq.name, {}).get(rq.name, 0)
                    rows.append(
                        (
                            cq_name,
                            fq.name,
                            rq.name,
                            format_quantity(rq.name, used),
                            format_quantity(rq.name, rq.nominal_quota),
                        )
                    )
    print(f"replayed to position {position} (time {rfc3339(state.now)}) in {took:.3f}s")
    print(table(["CLUSTERQUEUE", "FLAVOR", "RESOURCE", "USED", "NOMINAL"], rows))
    print(table(["STATUS", "WORKLOADS"], sorted(status_counts(state).items())))


async def _verify_service(store: SqlEventStore, url: str) -> bool:
    try:
        async with AsyncClient(url) as c:  # /state needs no token
            live = await c.request("GET", "/state", params={"fresh": 1})
    except (ApiError, OSError) as exc:
        raise CliError(f"cannot read {url}/state: {exc}") from None
    decider = deciders().get(live["service"])
    if decider is None:
        print(f"{url}: service {live['service']} keeps no decision state; skipped")
        return True
    runner = await admin.rebuild(store, decider, until_position=live["position"])
    rebuilt = json.loads(json.dumps(decider.summary(runner.state)))
    same = rebuilt == live["summary"]
    print(
        f"verify {live['service']} at position {live['position']}: "
        f"{'identical' if same else 'DIFFERENT'}"
    )
    if not same:
        print(f"  live:    {json.dumps(live['summary'], sort_keys=True)}")
        print(f"  rebuilt: {json.dumps(rebuilt, sort_keys=True)}")
    return same


def _verify_decisions(log: list[Any]) -> bool:
    ok = True
    # A split queue's deciders, as they announced themselves in the log.
    shards = {e.event.owner for e in log if isinstance(e.event, qev.QueueShardStarted)}
    every = {**deciders(), **{name: QueueDecider(name) for name in sorted(shards)}}
    for name, decider in every.items():
        checked, mismatches = verify_decisions(log, decider)
        print(f"decisions of {name}: {checked} re-derived, {len(mismatches)} different")
        for m in mismatches[:3]:
            print(f"  at position {m.position}:\n    logged  {m.logged}\n    derived {m.derived}")
        ok &= not mismatches
    return ok


# -- simulation ---------------------------------------------------------------------


def sim(
    cluster_path: Path,
    workload_paths: list[Path],
    until: str | None,
    as_json: bool,
    summary_only: bool = False,
) -> int:
    loaded = load_sim_inputs(load_cluster(cluster_path), workload_paths)
    for line in loaded.skipped:
        print(f"muster sim: {line}", file=sys.stderr)
    try:
        horizon = parse_duration(until, "--until") if until else None
    except InvalidInput as exc:
        raise CliError(str(exc)) from None
    harness = build_harness(
        loaded.spec, loaded.workloads, requests=loaded.requests, deletions=loaded.deletions
    )
    started = time.perf_counter()
    harness.run(until=horizon)
    took = time.perf_counter() - started
    summary = summarize(harness.log.envelopes)
    queue = next(r.state for r in harness.runners if isinstance(r.decider, QueueDecider))
    summary["weighted_shares"] = qt.weighted_shares(
        queue.cluster_queues, queue.cohorts, queue.usage
    )
    summary["wall_seconds"] = round(took, 3)
    found = sim_figures.figures(harness.log.envelopes)
    if as_json:
        if not summary_only:
            for env in harness.log.envelopes:
                sys.stdout.write(json.dumps(env.to_wire(), sort_keys=True) + "\n")
        sys.stdout.write(json.dumps({"summary": summary, "figures": found}, sort_keys=True) + "\n")
        return 0
    if not summary_only:
        for env in harness.log.envelopes:
            ev = env.event
            note = getattr(ev, "message", None) or getattr(ev, "reason", "") or ""
            print(
                f"{env.position:>6} {env.occurred_at:>10.1f}s  {env.type:<34} "
                f"{env.stream_id:<44} {note}"
            )
    print_summary(summary)
    print_figures(found, took)
    return 0


def print_figures(found: dict[str, Any], took: float) -> None:
    """JCT, waits, utilisation, preemption and a line per namespace (``muster sim``)."""
    jct, wait = found["jct_seconds"], found["wait_seconds"]
    rows = [
        ["job completion (s)", jct["mean"], jct["p50"], jct["p90"], jct["p99"]],
        ["queueing delay (s)", wait["mean"], wait["p50"], wait["p90"], wait["p99"]],
    ]
    print()
    print(table(["FIGURE", "MEAN", "P50", "P90", "P99"], rows))
    util = found["utilisation"]
    print(
        f"\nutilisation {'-' if util is None else f'{util:.1%}'} of the nodes' GPUs over the "
        f"arrival window; evictions {found['evictions']} "
        f"({found['preemption_lost_gpu_seconds']:g} GPU-s lost to preemption, at most "
        f"{found['max_evictions_per_victim_per_preemptor']} per victim per preemptor); "
        f"Jain's index of namespace slowdowns {found['jain_slowdown']}; "
        f"simulated in {took:.1f}s"
    )
    ns_rows = [
        [ns, f["jobs"], f["mean_wait"], f["mean_jct"], f["slowdown"]]
        for ns, f in found["namespaces"].items()
    ]
    print()
    print(table(["NAMESPACE", "JOBS", "MEAN WAIT (s)", "MEAN JCT (s)", "SLOWDOWN"], ns_rows))


def build_harness(
    spec: Any,
    workloads: list[tuple[float, Any]],
    *,
    requests: Sequence[tuple[float, ProvisioningRequestSpec]] = (),
    deletions: Sequence[tuple[float, str]] = (),
) -> sim_harness.Harness:
    """Workload ids are ``<name>-<index in the file>``: names need not be unique."""
    subs = [(at, f"{wl.name}-{i}", wl) for i, (at, wl) in enumerate(workloads)]
    return sim_harness.build(spec, subs, requests=requests, deletions=deletions)


def print_summary(summary: dict[str, Any]) -> None:
    print()
    print(table(["OUTCOME", "WORKLOADS"], list(summary["outcomes"].items())))
    w = summary["wait_seconds"]
    print(
        f"\nworkloads {summary['workloads']}, admitted {summary['admitted']}, "
        f"events {summary['events']}, nodes provisioned {summary['nodes_provisioned']} "
        f"{summary['nodes_by_zone']}"
    )
    print(
        f"wait to admission: mean {w['mean']}s, p50 {w['p50']}s, p99 {w['p99']}s; "
        f"makespan {summary['makespan_seconds']}s"
    )
    if shares := summary.get("weighted_shares"):
        at_end = ", ".join(f"{cq} {share}" for cq, share in shares.items())
        print(f"weighted share (DRS, per mille) per ClusterQueue at the end: {at_end}")


# -- the demo -----------------------------------------------------------------------


def demo(
    data_dir: Path,
    cluster_path: Path,
    workloads_path: Path,
    manifest_paths: list[Path],
    stay: bool = False,
) -> int:
    """The demo, narrated from the store as it runs; then, with ``stay``, the stack keeps
    running as ``muster up`` does; otherwise the last lines say how to start one over the
    demo's store."""
    from muster.cli import story, up
    from muster.runtime.stack import Stack

    spec = load_cluster(cluster_path)
    workloads = load_workloads([workloads_path])
    extra = manifests.combine(*(load_manifests(p) for p in manifest_paths))
    data_dir.mkdir(parents=True, exist_ok=True)
    for old in data_dir.glob("muster.db*"):
        old.unlink()
    print(f"muster demo: broker, SQLite store and four services; logs in {data_dir}/")
    with Stack(data_dir) as stack:
        print(
            f"  intake {stack.url()}  queue {stack.url('queue')}  broker {stack.broker.bootstrap}"
        )
        narrator = story.Narrator(stack.store_url)
        narrator.start()
        try:
            asyncio.run(admin.configure(stack.store_url, spec, stack.broker.bootstrap))
            if manifest_paths:
                print(f"  applying {', '.join(str(p) for p in manifest_paths)}")
                paths = [str(p) for p in manifest_paths]
                if apply(stack.store_url, None, paths, stack.broker.bootstrap, stack.url()):
                    raise CliError("the demo's manifests were not all applied")
            ids = _submit_all(stack.url(), workloads)
            ids += _ids_of(stack.url(), [(w.namespace, w.name) for w in extra.workloads])
            _wait_all(stack.url(), ids)
        finally:
            narrator.stop()
        asyncio.run(_demo_report(stack))
        print("\nthe story:")
        for line in narrator.story.recap():
            print(f"  {line}")
        if extra.request_sources:
            print()
            provreq(stack.url(), None, False, False, "table")
        ok = asyncio.run(
            replay(stack.store_url, None, [stack.url("queue"), stack.url("provisioner")], True)
        )
        print(f"\nat {datetime.now(UTC):%H:%M:%S} UTC: demo {'passed' if ok == 0 else 'FAILED'}")
        if stay:
            up.serve(stack, _explore_hints(narrator.story.preempted or ids))
    if not stay:
        _print_explore(data_dir, cluster_path, narrator.story.preempted or ids)
    return ok


def _explore_hints(ids: list[str]) -> tuple[str, ...]:
    """What to look at in what the demo left (every command finds the stack by itself):
    ``ids[0]`` is the workload described, the first preempted one when there was one."""
    from muster.cli.up import command_name

    muster = command_name()
    return (
        "to look at what the demo did:",
        f"  {muster} describe {ids[0]}",
        f"  {muster} get workloads -A",
        f"  {muster} replay --decisions",
    )


def _print_explore(data_dir: Path, cluster_path: Path, ids: list[str]) -> None:
    from muster.cli.up import command_name

    cluster = "" if cluster_path == EXAMPLES / "cluster.yaml" else f" --cluster {cluster_path}"
    print(
        "\nthe stack has stopped; to explore what the demo left, start it again over the "
        "same store (Ctrl-C stops it):"
    )
    print(f"  {command_name()} up --data-dir {data_dir}{cluster}")
    print("then, in another terminal:")
    print("\n".join(_explore_hints(ids)[1:]))


def _submit_all(server: str, workloads: list[tuple[float, Any]]) -> list[str]:
    """Submit at the workloads' ``at`` offsets from now (the demo runs in real time)."""
    start = time.time()
    ids = []
    with client(server) as c:
        for i, (at, wl) in enumerate(sorted(workloads, key=lambda x: x[0])):
            time.sleep(max(0.0, start + at - time.time()))
            ids.append(c.submit(_to_api(wl), idempotency_key=f"demo-{i}").workload.id)
            if len(ids) % 8 == 0 or len(ids) == len(workloads):
                _progress(f"submitted {len(ids)}/{len(workloads)}")
    print()
    return ids


def _to_api(wl: WorkloadSpec) -> dict[str, Any]:
    """The intake API's shape of a workload (docs/api.md); optional fields only when set."""
    body: dict[str, Any] = {
        "name": wl.name,
        "namespace": wl.namespace,
        "priority": wl.priority,
        "podSets": [_pod_set_to_api(ps) for ps in wl.pod_sets],
        "runtime": {
            "durationSeconds": wl.runtime.duration_seconds,
            "exitCode": wl.runtime.exit_code,
        },
    }
    if wl.runtime.exit_codes:
        body["runtime"]["exitCodes"] = list(wl.runtime.exit_codes)
    if wl.gpu_group_size is not None:
        body["gpuGroupSize"] = wl.gpu_group_size
    if wl.placement is not None:
        body["placement"] = {"node": wl.placement.node, "gpu": wl.placement.gpu}
    policy = wl.failure_policy
    if policy != FailurePolicy():
        body["failurePolicy"] = _drop_none(
            {
                "maxRestarts": policy.max_restarts,
                "onFailure": policy.on_failure,
                "rules": [
                    {"event": r.event, "action": r.action, "podSets": list(r.pod_sets)}
                    for r in policy.rules
                ],
            }
        )
    if wl.queue_name:
        body["queueName"] = wl.queue_name
    if wl.consumes is not None:
        body["consumesProvisioningRequest"] = wl.consumes
    if wl.priority_class is not None:
        body["priorityClassName"] = wl.priority_class
    if wl.max_run_duration_seconds is not None:
        body["maxRunDurationSeconds"] = wl.max_run_duration_seconds
    if wl.labels:
        body["labels"] = dict(wl.labels)
    return body


def _pod_set_to_api(ps: PodSet) -> dict[str, Any]:
    out: dict[str, Any] = {
        "name": ps.name,
        "count": ps.count,
        "requests": {r: format_quantity(r, q) for r, q in ps.requests.items()},
        "nodeSelector": dict(ps.node_selector),
    }
    if ps.min_count is not None:
        out["minCount"] = ps.min_count
    if ps.surplus != "Drop":
        out["surplus"] = ps.surplus
    if ps.backoff_limit:
        out["backoffLimit"] = ps.backoff_limit
    if ps.topology is not None:
        t = ps.topology
        out["topology"] = _drop_none(
            {
                "required": t.required,
                "preferred": t.preferred,
                "sliceSize": t.slice_size,
                "sliceRequired": t.slice_required,
                "exclusive": t.exclusive,
                "highestTierAllowed": t.tier,
                "mode": "soft" if t.tier_soft else None,
                "sliceHighestTierAllowed": t.slice_tier,
            }
        )
    if ps.devices is not None:
        d = ps.devices
        out["devices"] = {
            "useUuids": list(d.use_uuids),
            "avoidUuids": list(d.avoid_uuids),
            "useTypes": list(d.use_types),
            "avoidTypes": list(d.avoid_types),
        }
    if ps.tolerations:
        # Empty strings are the defaults; the API refuses them as values.
        out["tolerations"] = [
            {
                k: v
                for k, v in (
                    ("key", t.key),
                    ("operator", t.operator),
                    ("value", t.value),
                    ("effect", t.effect),
                )
                if v
            }
            for t in ps.tolerations
        ]
    return out


def _drop_none(d: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in d.items() if v is not None}


def _ids_of(server: str, names: list[tuple[str, str]]) -> list[str]:
    with client(server) as c:
        return [w.id for w in c.iter_workloads() if (w.namespace, w.name) in names]


def _wait_all(server: str, ids: list[str], timeout: float = 600.0) -> None:
    deadline = time.time() + timeout
    shown = ""
    while time.time() < deadline:
        with client(server) as c:
            items = list(c.iter_workloads())
        done = [w for w in items if w.id in ids and w.status in TERMINAL]
        running = sum(1 for w in items if w.status in ("Admitted", "Running"))
        line = f"finished {len(done)}/{len(ids)}, running {running}"
        if line != shown:
            _progress(line)
            shown = line
        if len(done) == len(ids):
            print()
            return
        time.sleep(0.5)
    raise CliError(f"not every workload finished within {timeout:.0f}s")


def _progress(text: str) -> None:
    """Rewrite one line on a terminal; print a line per change otherwise (CI logs)."""
    if sys.stdout.isatty():
        sys.stdout.write(f"\r  {text:<60}")
    else:
        sys.stdout.write(f"  {text}\n")
    sys.stdout.flush()


async def _demo_report(stack: Any) -> None:
    store = SqlEventStore(stack.store_url)
    try:
        log = await store.read_all(0)
    finally:
        await store.close()
    print_summary(summarize(log))
