"""Per-tenant submission rate: a token bucket, with time as a parameter.

A tenant may submit ``burst`` workloads at once and ``rate`` per second after that;
a refused submission learns exactly how long to wait (HTTP Retry-After).
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Bucket:
    tokens: float
    at: float  # when `tokens` was last brought up to date


@dataclass(frozen=True, slots=True)
class Limit:
    rate: float  # tokens refilled per second
    burst: int  # capacity

    def __post_init__(self) -> None:
        if not (math.isfinite(self.rate) and self.rate > 0):
            raise ValueError(f"a rate must be a positive number per second, not {self.rate}")
        if isinstance(self.burst, bool) or not isinstance(self.burst, int) or self.burst < 1:
            raise ValueError(f"a burst must be a positive integer, not {self.burst!r}")


def refill(bucket: Bucket | None, limit: Limit, now: float) -> Bucket:
    """``bucket`` brought up to ``now``; a missing bucket is a full one."""
    if bucket is None:
        return Bucket(float(limit.burst), now)
    if now <= bucket.at:
        # Time went backwards (or stood still): no tokens, and keep `at` so the
        # interval is not counted again once the clock passes it.
        return Bucket(min(bucket.tokens, float(limit.burst)), bucket.at)
    return Bucket(min(float(limit.burst), bucket.tokens + (now - bucket.at) * limit.rate), now)


def take(
    bucket: Bucket | None, limit: Limit, now: float, cost: int = 1
) -> tuple[Bucket, float | None]:
    """Take ``cost`` tokens at ``now``: (new bucket, None) when allowed, or
    (the refilled bucket, seconds until ``cost`` tokens are there) when refused."""
    if cost > limit.burst:
        # It could never pass; waiting would not help, so this is the caller's error (a 4xx).
        raise ValueError(f"a batch of {cost} exceeds the burst of {limit.burst}")
    if cost < 0:
        raise ValueError(f"a cost must not be negative, not {cost}")
    if not math.isfinite(now):
        raise ValueError(f"now must be a finite time, not {now}")
    current = refill(bucket, limit, now)
    if current.tokens >= cost:
        return Bucket(current.tokens - cost, current.at), None
    return current, _retry_after(current, limit, now, cost)


def _retry_after(current: Bucket, limit: Limit, now: float, cost: int) -> float:
    """The delay after which ``take(current, limit, now + delay, cost)`` is allowed.

    Floats round, so the closed form is only a first guess: the time is pinned by
    bisection to the first float at which refill yields ``cost`` tokens. A caller that
    waits the advertised time is never refused; one that comes earlier always is.
    """

    def enough(t: float) -> bool:
        return refill(current, limit, t).tokens >= cost

    lo = current.at  # refill there is current.tokens < cost: not enough
    step = max((cost - current.tokens) / limit.rate, math.ulp(lo))  # > 0 even on underflow
    while not enough(hi := lo + step):  # the guess may fall a rounding short
        step *= 2
    if math.isinf(hi):  # only for absurdly slow rates: no finite wait exists
        return math.inf
    if not enough(below := math.nextafter(hi, -math.inf)):
        lo = below  # the guess is already the first such float, as it usually is
    while True:  # invariant: not enough(lo), enough(hi)
        mid = lo + (hi - lo) / 2
        if not lo < mid < hi:
            mid = math.nextafter(lo, math.inf)
            if mid >= hi:  # lo and hi are adjacent floats: hi is the first time
                break
        lo, hi = (lo, mid) if enough(mid) else (mid, hi)
    delay = hi - now
    while now + delay < hi:  # the subtraction may have rounded down
        delay = math.nextafter(delay, math.inf)
    return delay


class Limiter:
    """Buckets per tenant. Mutable, but still clockless: ``now`` comes with each call.

    Every ``sweep_every`` checks it drops the buckets that are full again; that loses
    nothing (a missing bucket is a full one) and bounds the dict by the active tenants.
    """

    __slots__ = ("_buckets", "_calls", "sweep_every")

    def __init__(self, sweep_every: int = 1024) -> None:
        if sweep_every < 1:
            raise ValueError(f"sweep_every must be at least 1, not {sweep_every}")
        self.sweep_every = sweep_every
        self._buckets: dict[str, tuple[Bucket, Limit]] = {}
        self._calls = 0

    def check(self, tenant: str, limit: Limit, now: float, cost: int = 1) -> float | None:
        """None when ``tenant`` may submit ``cost`` workloads now, else the seconds to wait."""
        entry = self._buckets.get(tenant)
        bucket, retry_after = take(entry[0] if entry else None, limit, now, cost)
        # The limit is kept beside the bucket: the sweep must judge fullness by it.
        self._buckets[tenant] = (bucket, limit)
        self._calls += 1
        if self._calls % self.sweep_every == 0:
            self.sweep(now)
        return retry_after

    def sweep(self, now: float) -> None:
        self._buckets = {
            tenant: (bucket, limit)
            for tenant, (bucket, limit) in self._buckets.items()
            if refill(bucket, limit, now).tokens < limit.burst
        }

    def bucket(self, tenant: str) -> Bucket | None:
        entry = self._buckets.get(tenant)
        return entry[0] if entry else None

    def __len__(self) -> int:
        return len(self._buckets)
