"""bench.traces' tables and issue 19's targets, from the figures of each configuration.

``rows`` maps a configuration (or an ``oracle-*`` reference replay) to its figures
(``muster.core.sim.figures``, plus the run's wall and events). A tenant's wait is compared
with its wait under ``strict`` (muster's StrictFIFO: the issue's "its FIFO figure"); a
tenant that waited nothing under ``strict`` has no ratio unless it waits now (then inf).
That wait is the time pending (submission to finish, less the time holding quota): the
first wait plus every wait after a preemption; without preemption, the first wait.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from muster.cli.tables import table as _table

# Jain's index over the tenants' slowdowns, each its mean JCT / mean run time (JAIN):
# the figures (StrictFIFO 0.20, fair sharing 0.89) are that one; the mean of each
# job's slowdown (JAIN-JOBS) lets 1-second jobs that waited dominate a tenant's figure.

FIFO = "strict"  # the configuration each tenant's wait is compared with
SJF = "oracle-sjf"
TENANT_RATIO = 2.0  # a tenant waiting more than this times its FIFO wait is flagged

# Issue 19, "Must reach".
PHILLY_JCT, PHILLY_JAIN, PHILLY_LOSS = 13_000.0, 0.9, 0.02
ITP_VS_BESTEFFORT = 0.8


def tenant_ratios(rows: dict[str, dict[str, Any]], config: str) -> dict[str, float]:
    """Each tenant's avg wait in ``config`` over its avg wait in ``strict`` (none without
    a ``strict`` row)."""
    if FIFO not in rows:
        return {}
    fifo = rows[FIFO]["namespaces"]
    out = {}
    for ns, figs in rows[config]["namespaces"].items():
        base, now = _pending(fifo.get(ns, {})), _pending(figs)
        out[ns] = now / base if base else (float("inf") if now else 1.0)
    return out


def _pending(ns: dict[str, Any]) -> float:
    return float(ns.get("mean_pending", ns.get("mean_wait", 0.0)))


def _worst(rows: dict[str, dict[str, Any]], config: str) -> tuple[str, float] | None:
    ratios = tenant_ratios(rows, config)
    return max(ratios.items(), key=lambda kv: kv[1]) if ratios else None


def table(rows: dict[str, dict[str, Any]], walls: dict[str, float] | None = None) -> str:
    """One row per configuration (see bench/traces.py's docstring); ``walls``: a harness
    wall target per configuration, shown beside its wall."""
    sjf = rows.get(SJF, {}).get("jct_seconds", {}).get("mean")
    out = []
    for name, r in rows.items():
        jct, wait = r["jct_seconds"]["mean"], r["wait_seconds"]
        worst = _worst(rows, name)
        flag = " !" if worst and worst[1] > TENANT_RATIO else ""
        wall = f"{r['wall']:.1f}s" + (f" (<= {walls[name]:g})" if walls and name in walls else "")
        out.append(
            [
                name,
                f"{jct:,.0f}",
                f"{jct / sjf:.2f}" if sjf else "-",
                f"{wait['mean']:,.0f}",
                f"{wait['p99']:,.0f}",
                f"{r.get('pending_seconds', wait)['mean']:,.0f}",
                "-" if r["utilisation"] is None else f"{r['utilisation']:.1%}",
                f"{r['jain_slowdown_of_means']:.3f}",
                f"{r['jain_slowdown']:.3f}",
                f"{r['evictions']:,}",
                f"{r['preemption_lost_share']:.2%}",
                f"{worst[1]:.2f}x {worst[0]}{flag}" if worst else "-",
                wall,
                "-" if r["events"] is None else f"{r['events']:,}",
            ]
        )
    head = ["CONFIG", "AVG JCT", "/SJF", "AVG WAIT", "P99 WAIT", "AVG PENDING", "UTIL", "JAIN"]
    head += ["JAIN-JOBS"]
    head += ["EVICTIONS"]
    head += ["LOST", "WORST TENANT WAIT/FIFO", "WALL", "EVENTS"]
    return _table(head, out)


def tenant_table(rows: dict[str, dict[str, Any]]) -> str:
    """Per tenant and configuration: avg wait (x its ``strict`` wait, ``!`` over 2x) and
    slowdown (mean JCT over mean run time)."""
    tenants = sorted({ns for r in rows.values() for ns in r["namespaces"]})
    ratios = {name: tenant_ratios(rows, name) for name in rows}
    out = []
    for ns in tenants:
        line: list[object] = [ns, next(r["namespaces"][ns]["jobs"] for r in rows.values())]
        for name, r in rows.items():
            figs = r["namespaces"].get(ns)
            if figs is None:
                line.append("-")
                continue
            ratio = ratios[name].get(ns)
            mark = "" if ratio is None else f" ({ratio:.2f}x{'!' if ratio > TENANT_RATIO else ''})"
            line.append(f"{_pending(figs):,.0f}{mark} / {figs['slowdown_of_means']:.2f}")
        out.append(line)
    caption = (
        "per tenant: avg pending (x its strict figure; ! over 2x) / slowdown (its mean JCT "
        "over its mean run time)\n"
    )
    return caption + _table(["TENANT", "JOBS", *rows], out)


def check(results: dict[str, dict[str, dict[str, Any]]]) -> list[str]:
    """Issue 19's targets, met or missed, as lines to print: per trace, what each muster
    configuration meets, then the verdict (met if some configuration meets them all)."""
    lines: list[str] = []
    if "philly" in results:
        lines += list(_philly(results["philly"]))
    if "itp" in results:
        lines += list(_itp(results["itp"]))
    return lines


def _ours(rows: dict[str, dict[str, Any]]) -> list[str]:
    return [n for n in rows if not n.startswith("oracle-")]


def _met(ok: bool) -> str:
    return "met" if ok else "MISSED"


def _philly(rows: dict[str, dict[str, Any]]) -> Iterator[str]:
    yield (
        f"target, philly: avg JCT <= {PHILLY_JCT:,.0f} s with Jain >= {PHILLY_JAIN}, GPU-time "
        f"lost to preemption <= {PHILLY_LOSS:.0%}, no tenant's avg wait (pending) > "
        f"{TENANT_RATIO:g}x its FIFO ({FIFO}) figure"
    )
    out, passing = [], []
    for name in sorted(_ours(rows), key=lambda n: rows[n]["jct_seconds"]["mean"]):
        r = rows[name]
        worst = _worst(rows, name)
        each = [
            r["jct_seconds"]["mean"] <= PHILLY_JCT,
            r["jain_slowdown_of_means"] >= PHILLY_JAIN,
            r["preemption_lost_share"] <= PHILLY_LOSS,
            worst is not None and worst[1] <= TENANT_RATIO,
        ]
        if all(each):
            passing.append(name)
        out.append(
            [
                name,
                f"{r['jct_seconds']['mean']:,.0f} {_met(each[0])}",
                f"{r['jain_slowdown_of_means']:.3f} {_met(each[1])}",
                f"{r['preemption_lost_share']:.2%} {_met(each[2])}",
                f"{worst[1]:.2f}x {worst[0]} {_met(each[3])}" if worst else "no FIFO row MISSED",
                _met(all(each)),
            ]
        )
    head = ["CONFIG", "AVG JCT", "JAIN", "LOST", "WORST TENANT WAIT/FIFO", "ALL"]
    yield _table(head, out)
    yield (
        f"philly: {_met(bool(passing))}"
        + (f" by {', '.join(passing)}" if passing else " (no configuration meets all four)")
    )


def _itp(rows: dict[str, dict[str, Any]]) -> Iterator[str]:
    if "besteffort" not in rows:
        yield "itp: no besteffort row to compare with: MISSED"
        return
    base = rows["besteffort"]["jct_seconds"]["mean"]
    bound = ITP_VS_BESTEFFORT * base
    ours = _ours(rows)
    best = min(ours, key=lambda n: rows[n]["jct_seconds"]["mean"])
    jct = rows[best]["jct_seconds"]["mean"]
    yield (
        f"target, itp: avg JCT <= {ITP_VS_BESTEFFORT} x besteffort's ({base:,.0f} s): "
        f"<= {bound:,.0f} s; best configuration {best}: {jct:,.0f} s "
        f"({jct / base:.2f}x besteffort's)"
    )
    yield f"itp: {_met(jct <= bound)}"
