"""When to try a call again, and how long to wait first.

Retried: 429 and 503 (the server says nothing was done: over the rate, the store away),
502 and 504 and a broken connection only when repeating the call is harmless (a read, a
cancel, a submission carrying an idempotency key), and a connection that could not be
opened at all. The wait is the server's ``Retry-After`` when it gives one (seconds or an
HTTP date), else exponential backoff with full jitter; attempts and total time are bounded.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime

# Answers that say the server did nothing and may do it later.
ALWAYS = frozenset({429, 503})
# Answers (from a proxy, typically) after which the call may or may not have happened.
IF_IDEMPOTENT = frozenset({502, 504})


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    attempts: int = 5  # in all, the first included; 1 turns retrying off
    base_seconds: float = 0.2  # the first backoff's ceiling, doubled each attempt
    max_seconds: float = 10.0  # no single wait longer than this (nor a Retry-After)
    max_elapsed_seconds: float = 60.0  # no retry that would end after this much time
    rng: random.Random = field(default_factory=random.Random, compare=False, repr=False)

    def backoff(self, attempt: int) -> float:
        """Full jitter (AWS's "Exponential Backoff and Jitter"): uniform in [0, ceiling]."""
        ceiling = min(self.max_seconds, self.base_seconds * 2 ** max(0, attempt - 1))
        return self.rng.uniform(0, ceiling)

    def delay(self, attempt: int, retry_after: float | None) -> float:
        """The wait before attempt ``attempt + 1``: the server's word when it gave one."""
        if retry_after is not None:
            return min(self.max_seconds, max(0.0, retry_after))
        return self.backoff(attempt)

    def may_retry(self, attempt: int, started: float, wait: float) -> bool:
        """Another attempt is allowed, and would start within the time budget."""
        elapsed = time.monotonic() - started
        return attempt < self.attempts and elapsed + wait <= self.max_elapsed_seconds


NO_RETRY = RetryPolicy(attempts=1)


def retryable_status(status: int, idempotent: bool) -> bool:
    return status in ALWAYS or (idempotent and status in IF_IDEMPOTENT)


def parse_retry_after(value: str | None, now: float | None = None) -> float | None:
    """``Retry-After`` as seconds from now: delta-seconds or an HTTP date (RFC 9110
    §10.2.3); None when absent or unreadable."""
    if value is None or not value.strip():
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    current = time.time() if now is None else now
    return max(0.0, when.timestamp() - current)


def http_date(at: float) -> str:
    """``at`` (seconds since the epoch) as an HTTP date, as a server writes Retry-After."""
    return datetime.fromtimestamp(at, UTC).strftime("%a, %d %b %Y %H:%M:%S GMT")
