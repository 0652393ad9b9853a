"""Debian's chromium through Playwright for Python (Playwright's own browser download cannot
work here). Missing either fails in CI with the fix; elsewhere the browser tests are skipped."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

CHROMIUM = os.environ.get("STOWAGE_CHROMIUM", "/usr/bin/chromium")
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def _missing(why: str) -> None:
    if os.environ.get("CI"):
        pytest.fail(f"{why} (CI needs it: .ci/run installs chromium; pip install -e '.[dev]')")
    pytest.skip(why)


@contextmanager
def chromium() -> Iterator[Any]:
    """A headless chromium browser; fails in CI (skips elsewhere) when it cannot start."""
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _missing("playwright is not installed")
    if not (os.path.exists(CHROMIUM) or shutil.which(CHROMIUM)):
        _missing(f"no chromium at {CHROMIUM} (apt-get install -y chromium)")
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS, headless=True)
        try:
            yield browser
        finally:
            browser.close()
