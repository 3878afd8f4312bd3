"""``muster``: run the demo, submit and inspect workloads, simulate, replay and verify."""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, NoReturn

from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError, SQLAlchemyError

from muster.cli import commands, http, resources, state, up
from muster.cli import report as accounting
from muster.core.model.documents import DocumentError, load_documents

DEFAULT_SERVER = "http://127.0.0.1:8080"


class _Found:
    """The running stack's state file, read at most once per command (its stale-file hint
    printed once) and only by a command that needs an address nobody gave."""

    def __init__(self) -> None:
        self._read = False
        self._state: state.StackState | None = None

    def __call__(self) -> state.StackState | None:
        if not self._read:
            self._state, self._read = state.read(), True
        return self._state


def server_url(
    flag: str | None = None,
    found: Callable[[], state.StackState | None] = state.read,
    env: Mapping[str, str] = os.environ,
) -> str:
    """Intake's URL: --server, else $MUSTER_SERVER, else the running ``muster up``'s, else
    the default port on this machine. The one place the CLI (and a client it builds)
    learns where the server is."""
    if flag:
        return flag
    if env.get("MUSTER_SERVER"):
        return env["MUSTER_SERVER"]
    running = found()
    return running.server if running else DEFAULT_SERVER


def token_for(
    flag: str | None,
    found: Callable[[], state.StackState | None] = state.read,
    env: Mapping[str, str] = os.environ,
) -> str | None:
    """--token, else $MUSTER_TOKEN, else the token the running ``muster up`` made."""
    if flag or env.get("MUSTER_TOKEN"):
        return flag or env["MUSTER_TOKEN"]
    running = found()
    return running.token if running else None


def store_url_for(
    flag: str | None,
    found: Callable[[], state.StackState | None] = state.read,
    env: Mapping[str, str] = os.environ,
) -> str | None:
    """--store-url, else $MUSTER_STORE_URL, else the running ``muster up``'s store."""
    if flag or env.get("MUSTER_STORE_URL"):
        return flag or env["MUSTER_STORE_URL"]
    running = found()
    return running.store_url if running else None


def broker_for(
    flag: str | None,
    store_url: str | None,
    found: Callable[[], state.StackState | None] = state.read,
    env: Mapping[str, str] = os.environ,
) -> str | None:
    """--kafka-bootstrap, else $MUSTER_KAFKA_BOOTSTRAP, else the running stack's broker
    when the store written is that stack's (another store's changes are not its news)."""
    if flag or env.get("MUSTER_KAFKA_BOOTSTRAP"):
        return flag or env["MUSTER_KAFKA_BOOTSTRAP"]
    running = found()
    return running.broker if running and running.store_url == store_url else None


def _store_url(
    value: str | None,
    *,
    existing: bool = True,
    found: Callable[[], state.StackState | None] = state.read,
) -> str:
    """The store's URL; ``existing``: an SQLite file must be there already (reading one
    that is not would create it empty)."""
    url = store_url_for(value, found)
    if not url:
        raise SystemExit(
            "muster: give --store-url, set MUSTER_STORE_URL, or start a stack with `muster up`"
        )
    try:
        parsed = make_url(url)
    except ArgumentError:
        raise SystemExit(f"muster: {url!r} is not a database URL") from None
    path = parsed.database
    local = parsed.get_backend_name() == "sqlite" and path and path != ":memory:"
    if existing and local and not Path(str(path)).exists():
        raise SystemExit(f"muster: no store at {path} (`muster migrate` creates one)")
    return url


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


class _Parser(argparse.ArgumentParser):
    """argparse, with its usage errors on one line like every other error."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="muster", description=__doc__)
    p.add_argument(
        "--token",
        help="bearer token for intake (default $MUSTER_TOKEN, else the running `muster up`'s; "
        "docs/api.md, 'Access')",
    )
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    server = None  # resolved in main(): server_url

    demo = sub.add_parser("demo", help="start the embedded stack, run a demo, print a summary")
    demo.add_argument("--data-dir", default=".muster", type=Path)
    demo.add_argument("--cluster", type=Path, default=commands.EXAMPLES / "cluster.yaml")
    demo.add_argument("--workloads", type=Path, default=commands.EXAMPLES / "workloads.yaml")
    demo.add_argument(
        "-f",
        "--filename",
        dest="filenames",
        action="append",
        type=Path,
        metavar="FILE",
        help="Kubernetes manifests to apply too (default examples/dws-demo.yaml and "
        "examples/placement-demo.yaml)",
    )
    demo.add_argument(
        "--stay",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="keep the stack running after the demo, like `muster up`, until Ctrl-C "
        "(default: when standard input is a terminal)",
    )

    mig = sub.add_parser("migrate", help="bring the event store schema up to date")
    mig.add_argument("--store-url")

    ap = sub.add_parser(
        "apply",
        help="apply Kubernetes manifests (-f FILE|-) and/or a cluster description",
        description="Kubernetes manifests (-f, multi-document YAML; - reads standard input) go "
        "to intake, which checks every object (fields, access, queues, conflicts) before it "
        "appends anything: queue objects (Kueue ResourceFlavor, ClusterQueue, LocalQueue, "
        "Cohort, WorkloadPriorityClass, AdmissionCheck, ProvisioningRequestConfig; "
        "PriorityClass, ResourceQuota; the admin scope) where they changed; JobSets, Jobs, "
        "Volcano Jobs and Pods submitted with the idempotency key namespace/name; "
        "ProvisioningRequests with their PodTemplates. Applying the same files twice "
        "changes nothing. A cluster description (--cluster: cloud, node pools, queues) is "
        "written to the store directly, the operator's bootstrap.",
    )
    ap.add_argument(
        "--cluster",
        type=Path,
        metavar="FILE",
        help="cluster description: cloud, node pools, queues (docs/cluster-description.md)",
    )
    ap.add_argument(
        "-f",
        "--filename",
        dest="filenames",
        action="append",
        default=[],
        metavar="FILE",
        help="Kubernetes manifests, multi-document YAML, - for standard input; repeatable, "
        "later files replace same-named objects (docs/api.md, 'Kubernetes manifests')",
    )
    ap.add_argument(
        "--store-url",
        help="event store URL for --cluster (default $MUSTER_STORE_URL, else the running "
        "`muster up`'s)",
    )
    ap.add_argument(
        "--kafka-bootstrap",
        help="publish --cluster's changes to this broker at once (default "
        "$MUSTER_KAFKA_BOOTSTRAP, else the running `muster up`'s)",
    )
    ap.add_argument(
        "--server",
        default=server,
        help="intake URL (default $MUSTER_SERVER, else the running `muster up`'s, else "
        f"{DEFAULT_SERVER})",
    )

    sb = sub.add_parser("submit", help="submit a workload (JSON or YAML file, or - for stdin)")
    sb.add_argument("file")
    sb.add_argument("--idempotency-key")
    sb.add_argument("--server", default=server)

    types = (
        "workloads (wl), clusterqueues (cq), localqueues (lq), resourceflavors (rf), "
        "cohorts, priorityclasses (pc), resourcequotas (quota), admissionchecks (ac), "
        "provisioningrequestconfigs (prc), provisioningrequests (provreq), nodes (no)"
    )
    get = sub.add_parser(
        "get",
        help="list objects of a type, or show one (like kubectl get)",
        description=f"TYPE is one of {types}.",
    )
    get.add_argument("type", metavar="TYPE")
    get.add_argument("name", nargs="?", metavar="NAME", help="a name (a workload's ID)")
    get.add_argument(
        "--namespace", "-n", help="default $MUSTER_NAMESPACE, else default (like kubectl)"
    )
    get.add_argument("--all-namespaces", "-A", action="store_true")
    get.add_argument(
        "--status", help="workloads: only this status, any case (pending, admitted, ...)"
    )
    get.add_argument("-o", "--output", choices=resources.OUTPUTS, default="table")
    get.add_argument("--server", default=server)

    desc = sub.add_parser(
        "describe",
        help="one object in detail: a workload's event history with reasons, a queue's "
        "pending workloads, a ProvisioningRequest's conditions",
        description=f"describe TYPE NAME, or describe ID (a workload). TYPE is one of {types}.",
    )
    desc.add_argument("type", metavar="TYPE|ID")
    desc.add_argument("name", nargs="?", metavar="NAME")
    desc.add_argument("--namespace", "-n")
    desc.add_argument("--server", default=server)

    explain = sub.add_parser(
        "explain",
        help="a workload's state and why, now or at a past moment",
        description="The workload's status, reason (quota shortfall with numbers, flavors "
        "tried, position in its queues, placement, admission checks and provisioning, "
        "evictions and who preempted it) and Kueue's conditions, rebuilt by intake from the "
        "log. --at TIME: an RFC 3339 time (2026-11-26T10:03:00Z), relative to now (-5m, -2h) "
        "or a log position (@12345, or a bare integer).",
    )
    explain.add_argument("id", metavar="WORKLOAD", help="the workload's ID")
    explain.add_argument("--at", metavar="TIME", help="RFC 3339, -5m, or @POSITION")
    explain.add_argument("-o", "--output", choices=["text", "json", "yaml"], default="text")
    explain.add_argument("--server", default=server)

    dele = sub.add_parser(
        "delete",
        help="cancel workloads or delete ProvisioningRequests (like kubectl delete)",
        description="delete TYPE NAME... or delete -f FILE (the workloads and "
        "ProvisioningRequests a manifest made). A workload is cancelled: its quota and "
        "nodes are given back. Queue configuration is not deleted (the log keeps it).",
    )
    dele.add_argument("type", nargs="?", metavar="TYPE")
    dele.add_argument("names", nargs="*", metavar="NAME")
    dele.add_argument("-f", "--filename", dest="filenames", action="append", default=[])
    dele.add_argument("--namespace", "-n")
    dele.add_argument("--server", default=server)

    pend = sub.add_parser(
        "pending",
        help="pending workloads of a queue: positions and current reasons",
        description="Kueue's visibility API: a ClusterQueue's or LocalQueue's pending "
        "workloads in admission order, with the reason each waits right now.",
    )
    which = pend.add_mutually_exclusive_group(required=True)
    which.add_argument("--cluster-queue", "-c", metavar="NAME")
    which.add_argument("--local-queue", "-l", metavar="NAMESPACE/NAME")
    pend.add_argument("--limit", type=int, default=1000)
    pend.add_argument("-o", "--output", choices=["table", "json"], default="table")
    pend.add_argument("--server", default=server)

    pr = sub.add_parser(
        "provreq",
        help="ProvisioningRequests: list, show one's conditions, or delete one",
        description="Standalone ProvisioningRequests and those made for queued workloads, "
        "with their conditions (Accepted, Provisioned, Failed, BookingExpired, "
        "CapacityRevoked), like kubectl get/describe provreq.",
    )
    pr.add_argument("name", nargs="?", metavar="NAMESPACE/NAME")
    pr.add_argument("--delete", action="store_true", help="delete it (cancel if not provisioned)")
    pr.add_argument("--all", action="store_true", help="also the requests of queued workloads")
    pr.add_argument("-o", "--output", choices=resources.OUTPUTS, default="table")
    pr.add_argument("--server", default=server)

    cancel = sub.add_parser("cancel", help="cancel a workload (delete workload ID)")
    cancel.add_argument("id")
    cancel.add_argument("--server", default=server)

    sim = sub.add_parser(
        "sim", help="run the deciders in virtual time over a cluster and workloads"
    )
    sim.add_argument(
        "--cluster",
        required=True,
        type=Path,
        metavar="FILE",
        help="cluster description (docs/cluster-description.md)",
    )
    sim.add_argument(
        "--workloads",
        required=True,
        type=Path,
        nargs="+",
        metavar="FILE",
        help="workload lists (docs/cluster-description.md) or Kubernetes manifests "
        "(docs/api.md): the manifests' queue objects are added to the cluster (same name "
        "replaces), their JobSets, Jobs and Pods submitted at 0s or at the annotation "
        "muster.dev/submit-at",
    )
    sim.add_argument("--until", help="stop at this virtual time (e.g. 2h)")
    sim.add_argument("--json", action="store_true", help="event log and summary as JSON lines")
    sim.add_argument(
        "--summary",
        action="store_true",
        help="only the summary: outcomes, job completion and queueing percentiles, "
        "utilisation, preemption and per-namespace figures (no event log)",
    )

    rp = sub.add_parser("replay", help="rebuild state from the store and print queue usage")
    rp.add_argument("--store-url")
    rp.add_argument(
        "--until",
        help="a global position (12345 or @12345), a time in seconds since the epoch, an "
        "RFC 3339 time (2026-11-26T10:03:00Z) or one relative to now (-5m)",
    )
    rp.add_argument(
        "--verify",
        nargs="*",
        metavar="URL",
        help="compare with what running services hold (their base URLs)",
    )
    rp.add_argument(
        "--decisions",
        action="store_true",
        help="re-derive every logged decision from its log prefix",
    )
    up.add_parsers(sub)
    _accounting_parser(sub, server)
    return p


def _accounting_parser(sub: Any, server: str | None) -> None:
    """``muster report`` (sacct/sreport)."""
    rep = sub.add_parser(
        "report",
        help="accounting: per workload submit/start/end, wait, run time and GPU-hours; "
        "totals per namespace or ClusterQueue (like sacct and sreport)",
        description="Workloads whose life overlaps [--since, --until) (default: all), with "
        "run time and GPU-hours counted inside the range. Times: RFC 3339 "
        "(2026-11-26T10:00:00Z), epoch seconds, or a duration before now (2h, 7d; or "
        "--since=-2h). "
        "Run time is the time a workload held quota, over all its attempts; GPU-hours "
        "its devices x that time (docs/api.md, 'Accounting').",
    )
    rep.add_argument("--since", metavar="TIME")
    rep.add_argument("--until", metavar="TIME")
    rep.add_argument(
        "--namespace", "-n", help="default $MUSTER_NAMESPACE, else default (like kubectl)"
    )
    rep.add_argument("--all-namespaces", "-A", action="store_true")
    rep.add_argument("--by", choices=accounting.BY, default="workload")
    rep.add_argument("-o", "--output", choices=accounting.OUTPUTS, default="table")
    rep.add_argument("--server", default=server)


# Options that take a time, which may be relative to now: "-5m" reads to argparse as an
# option of its own, so ``--at -5m`` is passed on as ``--at=-5m``.
TIME_OPTIONS = frozenset({"--at", "--since", "--until"})
RELATIVE = re.compile(r"^-\d+(\.\d+)?[smhd]?$")


def _relative_times(argv: list[str]) -> list[str]:
    out: list[str] = []
    for arg in argv:
        if out and out[-1] in TIME_OPTIONS and RELATIVE.match(arg):
            out[-1] = f"{out[-1]}={arg}"
        else:
            out.append(arg)
    return out


def main(argv: list[str] | None = None) -> None:
    argv = _relative_times(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    found = _Found()
    if "server" in vars(args):  # a command that talks to intake
        args.server = server_url(args.server, found)
        args.token = token_for(args.token, found)
    http.configure(args.token or os.environ.get("MUSTER_TOKEN"))
    try:
        code = _dispatch(args, found)
    except (commands.CliError, resources.ResourceError) as exc:
        print(f"muster {args.command}: {exc}", file=sys.stderr)
        code = 1
    except (OSError, SQLAlchemyError) as exc:  # a store or file the command could not use
        print(f"muster {args.command}: {_first_line(exc)}", file=sys.stderr)
        code = 1
    except KeyboardInterrupt:  # Ctrl-C: what was started is stopped on the way out
        print(f"\nmuster {args.command}: interrupted", file=sys.stderr)
        code = 130
    except Exception as exc:  # one line, not a traceback; MUSTER_DEBUG=1 shows it
        if os.environ.get("MUSTER_DEBUG"):
            raise
        print(f"muster {args.command}: {type(exc).__name__}: {_first_line(exc)}", file=sys.stderr)
        code = 1
    raise SystemExit(code)


def _dispatch(args: argparse.Namespace, found: Callable[[], state.StackState | None]) -> int:
    match args.command:
        case "up":
            return up.run(args)
        case "demo":
            return commands.demo(
                args.data_dir,
                args.cluster,
                args.workloads,
                args.filenames
                or [commands.EXAMPLES / "dws-demo.yaml", commands.EXAMPLES / "placement-demo.yaml"],
                stay=sys.stdin.isatty() if args.stay is None else args.stay,
            )
        case "migrate":
            from muster.store.migrate import upgrade

            upgrade(_store_url(args.store_url, existing=False, found=found))
            print("store schema is up to date")
            return 0
        case "apply":
            store = store_url_for(args.store_url, found) if args.cluster else None
            return commands.apply(
                store,
                args.cluster,
                args.filenames,
                broker_for(args.kafka_bootstrap, store, found),
                args.server,
            )
        case "submit":
            return commands.submit(args.server, _read_doc(args.file), args.idempotency_key)
        case "get":
            return resources.get(
                args.server,
                args.type,
                args.name,
                args.namespace,
                args.all_namespaces,
                args.status,
                args.output,
            )
        case "describe":
            return resources.describe(args.server, args.type, args.name, args.namespace)
        case "explain":
            from muster.cli import explain

            return explain.explain(args.server, args.id, args.at, args.output)
        case "delete":
            return resources.delete(
                args.server, args.type, args.names, args.namespace, args.filenames
            )
        case "cancel":
            return resources.delete(args.server, "workload", [args.id], None, [])
        case "provreq":
            return commands.provreq(args.server, args.name, args.delete, args.all, args.output)
        case "pending":
            return commands.pending(
                args.server, args.cluster_queue, args.local_queue, args.limit, args.output
            )
        case "sim":
            return commands.sim(args.cluster, args.workloads, args.until, args.json, args.summary)
        case "report":
            namespace = args.namespace or resources.current_namespace()
            return accounting.report(
                args.server,
                args.since,
                args.until,
                None if args.all_namespaces else namespace,
                args.by,
                args.output,
            )
        case "replay":
            return asyncio.run(
                commands.replay(
                    _store_url(args.store_url, found=found), args.until, args.verify, args.decisions
                )
            )
    return 2


def _read_doc(path: str) -> Any:
    if path != "-":
        return commands.load_yaml(Path(path))
    try:
        docs = load_documents(sys.stdin.read())
    except DocumentError as exc:
        raise commands.CliError(f"cannot read standard input: {exc}") from None
    if len(docs) != 1:
        raise commands.CliError(f"standard input: expected one document, found {len(docs)}")
    return docs[0]


if __name__ == "__main__":
    main()
