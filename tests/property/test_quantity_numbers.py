"""A quantity given as a JSON number reads as the same quantity given as its digits
(``parse_quantity``'s shortcut for plain counts, taken on every submission's requests;
Kubernetes' resource.Quantity accepts both forms alike, peers.md §2.4)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from muster.core.model.resources import MAX_QUANTITY, QuantityError, parse_quantity

SETTINGS = settings(max_examples=500, deadline=None, database=None)

RESOURCES = st.sampled_from(["cpu", "memory", "nvidia.com/gpu", "ephemeral-storage"])
COUNTS = st.one_of(
    st.integers(min_value=-(10**3), max_value=10**4),
    st.integers(min_value=MAX_QUANTITY // 1000 - 5, max_value=MAX_QUANTITY // 1000 + 5),
    st.integers(min_value=MAX_QUANTITY - 5, max_value=MAX_QUANTITY + 5),
    st.integers(min_value=-(2**80), max_value=2**80),
)


def _read(resource: str, raw: object) -> int | str:
    try:
        return parse_quantity(resource, raw)
    except QuantityError as exc:
        return f"refused: {exc}"


@SETTINGS
@given(RESOURCES, COUNTS)
def test_a_number_reads_as_its_digits(resource: str, count: int) -> None:
    assert _read(resource, count) == _read(resource, str(count))
