"""Numbers read off the Kubernetes API: "²" and "١٢" pass str.isdigit() but int() refuses
them, so they must read as "no number", not crash the reconciler."""

from __future__ import annotations

from muster.core.nodes.kube import _count
from services.provisioner.kube import _rv


def test_non_ascii_digits_are_not_numbers() -> None:
    assert _count("12") == 12
    assert _count("²") is None
    assert _rv({"metadata": {"resourceVersion": "42"}}) == 42
    assert _rv({"metadata": {"resourceVersion": "١٢"}}) is None
