"""Hostile gRPC: every method of both services, raw bytes and messages filled from their
descriptors (over a valid message, or alone), as the admin, a tenant and nobody. No
answer is a server error (INTERNAL, UNKNOWN, ...), every refusal carries its
muster-error-code, and a refusal leaves the store as it was."""

from __future__ import annotations

import asyncio

import pytest

from tests.api.conftest import Api, head_from
from tests.api.hostile import HeadJudge, grpc_methods

EXAMPLES = 25  # per method


@pytest.mark.timeout(600)
async def test_hostile_grpc_gets_no_server_error_and_leaves_nothing_when_refused(
    api_: Api,
) -> None:
    judge = HeadJudge(head_from(api_, asyncio.get_running_loop()))
    await asyncio.to_thread(
        grpc_methods, api_.grpc_target, EXAMPLES, ("admin", "team-a", None), judge
    )
    seen = set(judge.statuses)
    # Accepted, malformed or invalid, unauthenticated, forbidden and missing were reached.
    assert {"OK", "INVALID_ARGUMENT", "UNAUTHENTICATED", "PERMISSION_DENIED"} <= seen, seen
    assert not judge.problems, "\n".join(judge.problems[:10])
