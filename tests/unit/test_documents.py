"""Reading YAML from untrusted text: bounds are checked on libyaml's event stream before
anything is built; every failure is one DocumentError line."""

from __future__ import annotations

import pytest

from muster.core.model.documents import DocumentError, load_documents


def test_documents_load_with_empty_ones_kept_in_place() -> None:
    assert load_documents("a: 1\n---\n---\nb: [1, {c: 2}]\n") == [
        {"a": 1},
        None,
        {"b": [1, {"c": 2}]},
    ]
    assert load_documents(b'{"json": [true]}') == [{"json": [True]}]


@pytest.mark.parametrize(
    ("text", "limits", "message"),
    [
        ("a: " + "[" * 5 + "]" * 5, {"max_depth": 4}, "more than 4 levels at line 1"),
        ("a: " + "[" * 4 + "]" * 4, {"max_depth": 5}, None),
        ("a: 1\n---\nb: 2\n---\nc: 3\n", {"max_documents": 2}, "more than 2 documents"),
        ("a: &x 1\nb: [*x, *x, *x]\n", {"max_aliases": 2}, "more than 2 aliases"),
        ("a: [1,\n", {}, "not valid YAML or JSON"),
    ],
)
def test_bounds_refuse_in_one_line(text: str, limits: dict[str, int], message: str | None) -> None:
    if message is None:
        assert load_documents(text, **limits)
        return
    with pytest.raises(DocumentError) as err:
        load_documents(text, **limits)
    assert message in str(err.value)
    assert "\n" not in str(err.value)
