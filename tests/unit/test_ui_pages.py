"""The web UI's quota bars (services/intake/ui/pages.py) from Kueue's quota arithmetic
(kueue.md §1.3): a queue's usage beyond its nominal quota is borrowed from its cohort,
within its borrowing limit, and the most it could hold is its nominal plus what the cohort
could lend it."""

from __future__ import annotations

from typing import Any

from muster.core.model import parse
from muster.core.queueing import quota as qt
from services.intake.ui.pages import quota_rows

GPU = "nvidia.com/gpu"


def _cq(name: str, nominal: int, **limits: int) -> dict[str, Any]:
    quota = {"name": GPU, "nominalQuota": nominal, **limits}
    return {
        "name": name,
        "cohort": "lab",
        "resourceGroups": [
            {"coveredResources": [GPU], "flavors": [{"name": "a100", "resources": [quota]}]}
        ],
    }


def _tree(usage: dict[str, int], **limits: int) -> qt.QuotaTree:
    cluster = parse.cluster(
        {
            "name": "t",
            "zones": ["a"],
            "resourceFlavors": [{"name": "a100"}],
            "clusterQueues": [_cq("research", 4, **limits), _cq("prod", 4)],
        }
    )
    queues = {q.name: q for q in cluster.cluster_queues}
    return qt.build(queues, {}, {q: {"a100": {GPU: n}} for q, n in usage.items()})


def test_a_borrowing_queue_shows_what_it_borrows() -> None:
    tree = _tree({"research": 6, "prod": 1})
    (row,) = quota_rows(tree.queues["research"])
    assert (row["nominal"], row["usage"], row["borrowed"], row["potential"]) == (4, 6, 2, 8)
    assert row["text"]["usage"] == "6" and row["borrowingLimit"] is None
    (cohort,) = quota_rows(tree.cohorts["lab"])
    assert (cohort["nominal"], cohort["usage"], cohort["borrowed"]) == (8, 7, 0)


def test_a_borrowing_limit_caps_what_it_could_hold() -> None:
    tree = _tree({"research": 5}, borrowingLimit=1)
    (row,) = quota_rows(tree.queues["research"])
    assert (row["borrowed"], row["potential"], row["borrowingLimit"]) == (1, 5, 1)
    (prod,) = quota_rows(tree.queues["prod"])
    assert (prod["usage"], prod["borrowed"], prod["potential"]) == (0, 0, 8)
