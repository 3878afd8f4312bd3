"""Which of a node's free GPUs a whole-GPU pod takes, by their interconnect.

HAMi's ``topology-aware`` GPU policy (shared/reference/peers.md §3.4; HAMi
pkg/device/nvidia/calculate_score.go): every pair of GPUs has a score, higher for a
faster link (NVLink: 100 per link; PCIe: 50 through one bridge down to 10 across NUMA
nodes). A pod wanting N > 1 GPUs takes the N free ones whose pairs score the most in
sum; a pod wanting one takes the free card least connected to the other free cards, so
well-connected sets stay whole for the pods that need them. Ties go to the choice that
leaves the other free cards best connected, then to device order.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache
from itertools import combinations
from math import comb

from muster.core.model.inventory import NVLINK, PCIE_LINKS

# HAMi's scores: SYS 10, NODE 20, PHB 30, PXB 40, PIX 50; NV<n> 100 * n.
PCIE_SCORE = {link: 10 * (i + 1) for i, link in enumerate(PCIE_LINKS)}
NVLINK_SCORE = 100
# Sets of free cards beyond which the best one is searched greedily, not exhaustively
# (an 8-GPU node has at most C(8, 4) = 70; C(16, 8) = 12,870 is already too many per pod).
MAX_SETS = 5000


def score(link: str) -> int:
    """How good one link is (0: not a link, e.g. the device itself)."""
    nv = NVLINK.match(link)
    if nv is not None:
        return NVLINK_SCORE * int(nv.group(1))
    return PCIE_SCORE.get(link, 0)


@cache
def scores(links: tuple[tuple[str, ...], ...]) -> tuple[tuple[int, ...], ...]:
    """The score of every pair (a node's matrix is scored once, not per pod)."""
    return tuple(tuple(score(link) for link in row) for row in links)


def choose(links: tuple[tuple[str, ...], ...], free: Sequence[int], count: int) -> tuple[int, ...]:
    """``count`` of the ``free`` device positions (in device order), the best connected
    among themselves; ``free`` holds at least ``count``."""
    if count >= len(free):
        return tuple(free[:count])
    s = scores(links)
    if comb(len(free), count) > MAX_SETS:
        candidates = [_grow(s, free, seed, count) for seed in free]
    else:
        candidates = list(combinations(free, count))
    return min(candidates, key=lambda chosen: _rank(s, free, chosen))


def _rank(
    s: tuple[tuple[int, ...], ...], free: Sequence[int], chosen: tuple[int, ...]
) -> tuple[int, int, tuple[int, ...]]:
    """Best first: the most within the set, then the least lost to the cards left free,
    then device order."""
    inside = sum(s[a][b] for a, b in combinations(chosen, 2))
    taken = set(chosen)
    outside = sum(s[a][b] for a in chosen for b in free if b not in taken)
    return (-inside, outside, tuple(sorted(chosen)))


def _grow(
    s: tuple[tuple[int, ...], ...], free: Sequence[int], seed: int, count: int
) -> tuple[int, ...]:
    """A set from ``seed``, adding the card best connected to those taken (the earliest on
    a tie) until it has ``count``."""
    chosen = [seed]
    while len(chosen) < count:
        rest = [d for d in free if d not in chosen]
        chosen.append(max(rest, key=lambda d: (sum(s[d][c] for c in chosen), -d)))
    return tuple(sorted(chosen))
