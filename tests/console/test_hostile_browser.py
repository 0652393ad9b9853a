"""Hostile ids, paths, queries and stored payloads in a real browser (Debian's chromium through
Playwright): no script runs (``window.__xss`` never set, no dialog), no request leaves for
another origin, and the pages break none of their own Content-Security-Policy. Then the same
tour with the policy switched off in the browser: the escaping alone holds too."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import anyio
import pytest
from stowage.core import FunctionCall, FunctionCallOutput, ItemRecord, RoundCommittedRecord
from stowage.storage import JsonlStore

from .browser import chromium
from .conftest import PAYLOAD, PAYLOADS, payload_records

pytestmark = pytest.mark.slow

Start = Callable[[str, Path], str]
WAIT_MS = 60_000  # a ceiling for a noisy machine, never a figure under test

HOSTILE_PATHS = (
    "/s/<img src=x onerror=alert(1)>",
    "/s/%3Cscript%3Ewindow.__xss%3D'path'%3C%2Fscript%3E",
    '/s/"><svg onload="window.__xss=1">',
    "/s/payloads?before=<script>window.__xss='query'</script>",
    "/s/payloads?from=%22%3E%3Cimg%20src%3Dx%20onerror%3Dalert(1)%3E&fragment=1",
    "/s/payloads?part=<svg onload=alert(1)>",
    "/s/payloads?cards_before=1#<img src=x onerror=alert(1)>",
    "/?q=<script>window.__xss='q'</script>",
    '/?q="><img src=x onerror=alert(1)>&sort=<svg onload=alert(1)>&state="><script>',
    "/<script>alert(1)</script>",
    "/static/<img src=x onerror=alert(1)>",
    "/s/nope<script>alert(1)</script>",
)

#: records the page's own policy violations; an init script runs before any of the page's
CSP_WATCH = """
window.__csp = [];
document.addEventListener("securitypolicyviolation",
  function (e) { window.__csp.push(e.violatedDirective + " " + e.blockedURI); });
"""


def _write(root: Path) -> int:
    records = payload_records()

    async def write() -> None:
        store = JsonlStore(root)
        try:
            await store.create("payloads", records)
        finally:
            await store.aclose()

    anyio.run(write)
    return records[-1].seq


def _append_hostile_round(root: Path, after: int) -> None:
    """Another round of payloads, as a live session would add it."""

    async def append() -> None:
        store = JsonlStore(root)
        try:
            await store.acquire("payloads")
            call = FunctionCall(call_id="late", name="echo", arguments=PAYLOAD)
            await store.append(
                "payloads",
                [
                    ItemRecord(seq=after + 1, round=15, item=call),
                    ItemRecord(seq=after + 2, round=15, item=FunctionCallOutput(call_id="late", output=PAYLOAD)),
                    RoundCommittedRecord(seq=after + 3, round=15, usage=None, first_seq=after + 1, last_seq=after + 3),
                ],
            )  # fmt: skip
        finally:
            await store.aclose()

    # Playwright's sync API runs a loop in this thread: the store is written from another
    with ThreadPoolExecutor(max_workers=1) as pool:
        pool.submit(anyio.run, append).result()


def _tour(browser: Any, base: str, *, bypass_csp: bool, live: Callable[[], None] | None) -> None:
    context = browser.new_context(bypass_csp=bypass_csp)
    foreign: list[str] = []
    dialogs: list[str] = []

    def route(request_route: Any) -> None:
        url = request_route.request.url
        if url.startswith(base + "/"):
            request_route.continue_()
        else:
            foreign.append(url)
            request_route.abort()

    context.route("**/*", route)
    context.add_init_script(CSP_WATCH)
    page = context.new_page()
    page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))

    def clean(where: str) -> None:
        assert page.evaluate("window.__xss === undefined"), (where, page.evaluate("window.__xss"))
        assert dialogs == [], (where, dialogs)
        assert foreign == [], (where, foreign)
        if not bypass_csp:
            assert page.evaluate("window.__csp") == [], (where, page.evaluate("window.__csp"))

    for path in HOSTILE_PATHS:
        page.goto(base + path)
        clean(path)
    page.goto(base + "/")
    page.locator('tr[data-session="payloads"]').wait_for(timeout=WAIT_MS)
    clean("sessions page")
    page.goto(base + "/s/payloads")
    page.locator("#live-status.on").wait_for(timeout=WAIT_MS)
    # the stored payloads are on the page as text
    outputs = page.locator("li.t-output pre.text")
    assert outputs.first.inner_text() == PAYLOAD
    assert page.locator("#tile-compactions").count() == 1
    assert page.locator("svg.chart a.over").count() == 1  # round 3, above the hard mark
    # open every summary, hover the marked round, load the older page (HTML put in by script)
    for summary in page.locator("details > summary").all():
        summary.click()
    page.locator("svg.chart a.over circle").hover()
    page.locator("#timeline-older a.older").click()
    page.wait_for_function("() => document.body.dataset.older === '1'", timeout=WAIT_MS)
    assert page.locator("li.t-user pre.text").first.inner_text() == f"please echo {PAYLOAD}"
    clean("session page")
    if live is not None:
        # a round of payloads arrives while the page is open: swapped in by script
        live()
        page.wait_for_function(
            "() => Number(document.body.dataset.refreshed || 0) >= 1", timeout=WAIT_MS
        )
        assert page.locator("li.t-call pre.text").first.inner_text() == PAYLOAD
        # the older page the reader loaded is still below the newest one
        assert page.locator("#timeline-older li.t-user").count() == 1
        clean("after a live refresh")
    # every script the page ran was its own file
    assert PAYLOADS[0] not in page.content()
    context.close()


def test_hostile_urls_and_stored_payloads_run_no_script_and_reach_no_other_origin(
    tmp_path: Path, console_server: Start
) -> None:
    last = _write(tmp_path / "store")
    base = console_server("store", tmp_path)
    with chromium() as browser:
        _tour(
            browser,
            base,
            bypass_csp=False,
            live=lambda: _append_hostile_round(tmp_path / "store", last),
        )
        # the browser ignoring the policy: the escaping alone keeps every payload text
        _tour(browser, base, bypass_csp=True, live=None)
