"""keep_latest: a map kept to its latest entries."""

from __future__ import annotations

from muster.core.bounded import keep_latest


def test_keeps_the_latest_inserted_once_twice_as_many() -> None:
    entries: dict[str, int] = {}
    sizes = []
    for i in range(20):
        entries[f"k{i}"] = i
        keep_latest(entries, 4)
        sizes.append(len(entries))
    assert max(sizes) == 8 and min(sizes[8:]) == 4
    assert list(entries) == [f"k{i}" for i in range(15, 20)]  # trimmed at k18 to k15-k18
    entries["k16"] = 99  # an update keeps its place; a key inserted again goes last
    del entries["k17"]
    entries["k17"] = 17
    assert list(entries) == ["k15", "k16", "k18", "k19", "k17"]
    keep_latest(entries, 0)
    assert entries == {}
