"""What the browser tests share: Debian's chromium (Playwright's own browser downloads
are not used), where screenshots are kept, and skipping only where it is allowed."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = "/usr/bin/chromium"
ARTIFACTS = Path(__file__).parent / "artifacts"  # git-ignored; CI keeps them


def browser_or_skip() -> None:
    """Skip where chromium or Playwright is missing locally; in CI (CI=true) fail instead,
    so the browser tests really run there (.ci/run installs chromium)."""
    missing = []
    if not os.path.exists(CHROMIUM):
        missing.append(f"chromium ({CHROMIUM}; apt-get install chromium)")
    try:
        import playwright  # noqa: F401
    except ImportError:
        missing.append("playwright (pip install -e '.[dev]')")
    if not missing:
        return
    why = "the browser tests need " + " and ".join(missing)
    if os.environ.get("CI") == "true":
        pytest.fail(why + "; CI must run them")
    pytest.skip(why)


def expect(target: Any) -> Any:
    """Playwright's assertions (imported late: the module loads, and skips, without it)."""
    from playwright.sync_api import expect as assertions

    return assertions(target)
