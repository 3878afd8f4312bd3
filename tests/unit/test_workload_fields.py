"""The table of workload fields (``workload_fields``) and its copy in docs/api.md.

The docs say, for every field of every workload kind, whether muster honours it, passes
it through or refuses it (issue 17, item 4c); the copy must be the table itself.
"""

from __future__ import annotations

from pathlib import Path

from muster.core.model import manifests, workload_fields
from muster.core.model.workload_fields import Shape

API_DOCS = Path(__file__).resolve().parents[2] / "docs" / "api.md"


def shapes() -> dict[str, Shape]:
    """Every shape of the table by name, in the order the kinds reach them."""
    out: dict[str, Shape] = {}

    def walk(shape: Shape) -> None:
        if shape.name not in out:
            out[shape.name] = shape
            for nested in shape.nested.values():
                walk(nested)

    for root in workload_fields.WORKLOAD_SHAPES.values():
        walk(root)
    return out


def harmless(value: object) -> str:
    return value if isinstance(value, str) else repr(value)


def markdown() -> str:
    lines = ["| object | honoured | passed through | refused |", "|---|---|---|---|"]
    for name, shape in shapes().items():
        cols: dict[str, list[str]] = {"honoured": [], "passed": [], "refused": []}
        for key, rule in shape.fields.items():
            accepted = ", ".join(harmless(h) for h in rule.harmless)
            cols[rule.treatment].append(
                f"`{key}`" + (f" (accepted: {accepted})" if accepted else "")
            )
        row = " | ".join(", ".join(c) or "-" for c in cols.values())
        lines.append(f"| {name} | {row} |")
    return "\n".join(lines)


def test_the_docs_hold_the_table_of_workload_fields() -> None:
    assert markdown() in API_DOCS.read_text(), "docs/api.md: paste the output of markdown()"


def test_every_shape_has_a_distinct_name() -> None:
    """The docs' rows and the property tests' values go by shape name."""
    seen: dict[str, int] = {}

    def walk(shape: Shape) -> None:
        if seen.setdefault(shape.name, id(shape)) != id(shape):
            raise AssertionError(f"two shapes named {shape.name}")
        for nested in shape.nested.values():
            walk(nested)

    for root in workload_fields.WORKLOAD_SHAPES.values():
        walk(root)


def test_every_refused_reason_reads_after_not_supported_by_muster() -> None:
    """Refusals read "<path>: is not supported by muster: <why>": one clause, no stop."""
    for shape in shapes().values():
        for key, rule in shape.fields.items():
            if rule.treatment == "refused":
                assert rule.why and not rule.why.endswith("."), (shape.name, key)


# Kinds read as queue objects, priority classes, quotas, requests or PodGroups: strictly.
NOT_WORKLOADS = {
    "ResourceFlavor",
    "ClusterQueue",
    "LocalQueue",
    "Cohort",
    "WorkloadPriorityClass",
    "AdmissionCheck",
    "ProvisioningRequestConfig",
    "ProvisioningRequest",
    "PriorityClass",
    "ResourceQuota",
    "PodGroup",  # read strictly by manifests._pod_group
}


def test_every_workload_kind_has_a_table() -> None:
    """A kind read as a workload (or a PodTemplate) without a table would have its fields
    read leniently: each needs one."""
    kinds = {key for key in manifests.SUPPORTED if key[1] not in NOT_WORKLOADS}
    assert kinds == set(workload_fields.WORKLOAD_SHAPES)
