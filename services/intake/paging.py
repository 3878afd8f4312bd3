"""Pages of a list in a stable order, as every list operation answers them."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from muster.core.access.policy import Action
from muster.core.access.tokens import Principal
from services.intake.context import Context
from services.intake.errors import refuse

MAX_LIST = 1000


def check_limit(limit: int, most: int = MAX_LIST) -> None:
    if not 0 < limit <= most:
        raise refuse("InvalidQuery", f"limit must be an integer from 1 to {most}", "limit")


async def prepare(ctx: Context, who: Principal, namespace: str | None, limit: int) -> None:
    """A list's preliminaries: a sane limit, read access to the namespace asked for (None:
    all the caller sees), and intake's state caught up with the log."""
    check_limit(limit)
    if namespace:
        ctx.access.require(who, Action.READ, namespace)
    await ctx.loop.step()


def page(
    items: list[Any],
    limit: int,
    after: str | None,
    *,
    key: Callable[[Any], str],
    render: Callable[[Any], dict[str, Any]],
) -> dict[str, Any]:
    """One page: ``after`` is the previous page's ``next`` (its last key)."""
    if after:
        keys = [key(i) for i in items]
        items = items[keys.index(after) + 1 :] if after in keys else []
    chosen = items[:limit]
    return {
        "items": [render(i) for i in chosen],
        "next": key(chosen[-1]) if len(items) > limit else None,
    }
