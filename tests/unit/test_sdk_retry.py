"""The client's retry rules (sdk/python/muster_client/retry.py): Retry-After read as
seconds or an HTTP date (RFC 9110 §10.2.3), exponential backoff with full jitter bounded by
its ceiling, attempts and total time bounded; which answers are retried."""

from __future__ import annotations

import random
import time

from muster_client.errors import (
    ApiError,
    InvalidInput,
    RateLimited,
    TooLarge,
    Unavailable,
    api_error,
    from_http,
)
from muster_client.retry import RetryPolicy, http_date, parse_retry_after, retryable_status


def test_retry_after_in_seconds_and_as_a_date() -> None:
    now = 1_800_000_000.0
    assert parse_retry_after("3", now) == 3.0
    assert parse_retry_after(" 0 ", now) == 0.0
    assert parse_retry_after(http_date(now + 5), now) == 5.0
    assert parse_retry_after(http_date(now - 60), now) == 0.0  # a past date: now
    assert parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT", now) == 0.0
    assert parse_retry_after("soon", now) is None
    assert parse_retry_after(None, now) is None
    assert parse_retry_after("-4", now) == 0.0


def test_backoff_is_jittered_below_a_doubling_ceiling() -> None:
    policy = RetryPolicy(base_seconds=0.5, max_seconds=3.0, rng=random.Random(7))
    for attempt, ceiling in [(1, 0.5), (2, 1.0), (3, 2.0), (4, 3.0), (9, 3.0)]:
        waits = [policy.backoff(attempt) for _ in range(200)]
        assert all(0 <= w <= ceiling for w in waits)
        assert max(waits) > ceiling * 0.8  # full jitter spreads over the whole range


def test_the_servers_word_is_taken_but_capped() -> None:
    policy = RetryPolicy(max_seconds=10.0)
    assert policy.delay(1, 2.0) == 2.0
    assert policy.delay(1, 3600.0) == 10.0


def test_attempts_and_time_are_bounded() -> None:
    policy = RetryPolicy(attempts=3, max_elapsed_seconds=5.0)
    now = time.monotonic()
    assert policy.may_retry(1, now, 1.0) and policy.may_retry(2, now, 1.0)
    assert not policy.may_retry(3, now, 0.0)  # the third attempt was the last
    assert not policy.may_retry(1, now, 6.0)  # would end past the time budget


def test_which_answers_are_retried() -> None:
    assert retryable_status(429, idempotent=False)
    assert retryable_status(503, idempotent=False)  # intake: nothing was appended
    assert not retryable_status(502, idempotent=False)  # a proxy's: it may have happened
    assert retryable_status(502, idempotent=True) and retryable_status(504, idempotent=True)
    assert not any(retryable_status(s, idempotent=True) for s in (400, 401, 403, 404, 409, 422))


def test_errors_are_typed_by_code_and_carry_the_field() -> None:
    body = {"error": {"code": "InvalidField", "message": "must be at least 1", "field": "x.y"}}
    err = from_http(422, body, None)
    assert isinstance(err, InvalidInput) and err.field == "x.y" and err.code == "InvalidField"
    assert str(err) == "HTTP 422: must be at least 1 (x.y)"
    limited = from_http(429, {"error": {"code": "RateLimited", "message": "slow"}}, 2.0)
    assert isinstance(limited, RateLimited) and limited.retry_after == 2.0
    assert isinstance(from_http(502, "<html>bad gateway</html>", None), Unavailable)
    # gRPC gives the code, not the status: BatchTooLarge is 413 whatever the gRPC code.
    assert isinstance(api_error(None, "BatchTooLarge", "too many"), TooLarge)
    assert type(api_error(None, "SomethingNew", "?")) is Unavailable  # unknown: 500
    assert type(from_http(418, None, None)) is ApiError
