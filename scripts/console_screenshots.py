"""Screenshots of the console for the README: docs/console-sessions.png, docs/console-session.png.

Makes a store in a temp dir (the offline demo plus two short sessions), starts
``stowage console`` on it and photographs both pages with Debian's chromium through
Playwright. Run: ``.venv/bin/python scripts/console_screenshots.py [OUT_DIR]``.
"""

from __future__ import annotations

import re
import subprocess
import sys
import tempfile
from pathlib import Path

from playwright.sync_api import sync_playwright

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]  # fmt: skip
LIMIT = 150_000  # bytes a README picture may weigh


def stowage(*args: str, cwd: Path) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "stowage.cli", *args], cwd=cwd, capture_output=True, text=True
    )
    if "inspect it" not in done.stdout and done.returncode != 0:
        raise SystemExit(f"stowage {' '.join(args)} failed: {done.stderr}")
    return done.stdout


def _waiting_session(store: Path) -> None:
    """A session whose turn stopped for a person's word on a call, as the console shows it.
    Written through the store (a tool that needs approval is the application's, not the
    offline model's)."""
    import anyio
    from stowage.core import (
        ApprovalRecord,
        FunctionCall,
        ItemRecord,
        SessionRecord,
        TurnRecord,
        UserMessage,
    )
    from stowage.storage import JsonlStore

    async def write() -> None:
        jsonl = JsonlStore(store)
        try:
            await jsonl.create(
                "deploy-prod",
                [
                    SessionRecord(seq=1, model="scripted", context_window=8000),
                    ItemRecord(seq=2, item=UserMessage(text="ship release 4.2 to production")),
                    TurnRecord(seq=3, turn=1, phase="started"),
                    ItemRecord(
                        seq=4,
                        round=1,
                        item=FunctionCall(
                            call_id="call-deploy-1",
                            name="deploy",
                            arguments='{"env": "prod", "release": "4.2"}',
                        ),
                    ),
                    ApprovalRecord(seq=5, call_id="call-deploy-1", decision="requested"),
                ],
            )
        finally:
            await jsonl.aclose()

    anyio.run(write)


def main(out: Path) -> int:
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        shown = stowage("demo", "--store", "store", cwd=work)
        demo_id = re.search(r"stowage show (s-[0-9a-f]+)", shown).group(1)  # type: ignore[union-attr]
        stowage(
            "run", "list the files here", "--session", "triage-notes", "--store", "store", cwd=work
        )
        stowage("run", "read the plan", "--session", "nightly-report", "--store", "store", cwd=work)
        stowage("resume", "nightly-report", "and summarise it", "--store", "store", cwd=work)
        _waiting_session(work / "store")
        console = subprocess.Popen(
            [sys.executable, "-m", "stowage.cli", "console", "--store", "store", "--port", "0"],
            cwd=work, stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        try:
            assert console.stdout is not None
            base = re.search(r"(http://127\.0\.0\.1:\d+)/", console.stdout.readline()).group(1)  # type: ignore[union-attr]
            with sync_playwright() as p:
                browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS, headless=True)
                page = browser.new_page(viewport={"width": 1200, "height": 800})
                page.goto(base + "/")
                page.locator("#live-status.on").wait_for()
                page.screenshot(path=str(out / "console-sessions.png"))
                page.goto(f"{base}/s/{demo_id}")
                page.locator("#live-status.on").wait_for()
                page.locator("article.card-full details.summary summary").first.click()
                page.locator("h2", has_text="Tokens in use").scroll_into_view_if_needed()
                page.evaluate("window.scrollTo(0, document.querySelector('.tiles').offsetTop - 10)")
                page.screenshot(path=str(out / "console-session.png"))
                browser.close()
        finally:
            console.terminate()
            console.wait(timeout=20)
            console.stdout.close()  # type: ignore[union-attr]
    for name in ("console-sessions.png", "console-session.png"):
        size = (out / name).stat().st_size
        print(f"{out / name}: {size} bytes")
        if size > LIMIT:
            print(f"  over {LIMIT} bytes: shrink it before committing", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path("docs")))
