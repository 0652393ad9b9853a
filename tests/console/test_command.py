"""``stowage console`` as a user starts it: loopback by default, a remote bind only on request."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import anyio
import pytest
from stowage.console import session_view

from .conftest import only_session, run_cli
from .test_browser import _records

pytestmark = pytest.mark.slow


def test_a_non_loopback_host_is_refused_without_allow_remote(tmp_path: Path) -> None:
    done = run_cli("console", "--store", "st", "--host", "0.0.0.0", "--port", "0", cwd=tmp_path)
    assert done.returncode == 2
    assert "--allow-remote" in done.stderr
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "st").exists()


def test_a_port_out_of_range_is_a_usage_error(tmp_path: Path) -> None:
    done = run_cli("console", "--port", "70000", cwd=tmp_path)
    assert done.returncode == 2
    assert "--port 70000" in done.stderr


def test_the_cards_fraction_is_measured_on_the_budget_the_policy_logged(demo_store: Path) -> None:
    """ "applied at" divides the tokens history held when the compaction was applied by the
    usable budget the policy decided against (its reason states that budget, and the fraction
    it saw when it decided: a plan made in the background lands a round or more later, at
    another figure); no compaction is applied to a context below the target mark."""
    session_id = only_session(demo_store)
    view = session_view(session_id, _records(demo_store, session_id))
    checked = 0
    for card in view.cards:
        stated = re.search(r"are (\d+)% of the usable (\d+)", card.reason)
        if stated is None or card.applied_at is None or card.tokens_before is None:
            continue
        assert view.row.usable == int(stated.group(2))
        assert card.in_use is not None
        assert card.applied_at == card.in_use / view.row.usable
        assert card.applied_at > 0.5  # never a compaction of a context below the target
        checked += 1
    assert checked > 0
    # one figure: a compaction applied right after round N's commit was applied at the figure
    # the chart shows for round N
    # (the newest round committed before the compaction's record: the turn's "finished"
    # record may come between them; a compaction applied once the next message came counts
    # that message too, and no round's figure shows it)
    records = _records(demo_store, session_id)
    inputs = [r.seq for r in records if type(getattr(r, "item", None)).__name__ == "UserMessage"]
    agreed = 0
    for card in view.cards:
        earlier = [point for point in view.chart if point.seq < card.seq]
        before = earlier[-1] if earlier else None
        if before is not None and any(before.seq < seq < card.seq for seq in inputs):
            continue
        if before is not None and card.in_use is not None:
            assert card.in_use == before.tokens, (card, before)
            assert card.in_use_estimated == before.estimated
            agreed += 1
    assert agreed > 0


def test_the_command_line_loads_the_console_only_when_it_is_asked_for(tmp_path: Path) -> None:
    probe = (
        "import json, sys; before = set(sys.modules); import stowage.cli; "
        "print(json.dumps(sorted(set(sys.modules) - before)))"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], cwd=tmp_path, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    added = json.loads(done.stdout)
    assert "stowage.cli" in added
    assert [m for m in added if m.startswith(("jinja2", "stowage.console", "opentelemetry"))] == []


def test_the_public_names_of_console_and_otel_are_pinned() -> None:
    import stowage.console
    import stowage.otel

    assert sorted(stowage.console.__all__) == [
        "ChartPoint", "CompactionCard", "ProtectedRow", "SessionRow", "SessionView",
        "StoreReader", "TimelineEntry", "create_app", "serve_console", "session_row",
        "session_view",
    ]  # fmt: skip
    assert stowage.otel.__all__ == ["TraceSubscriber"]


async def test_the_console_reads_a_postgresql_store_in_its_schema(
    pg_schema: str, tmp_path: Path
) -> None:
    import httpx
    from stowage.storage import PostgresStore

    from ..conftest import PG_DSN
    from .test_app import records

    store = PostgresStore(PG_DSN, schema=pg_schema)
    try:
        await store.create("pg-one", records())
    finally:
        await store.aclose()

    def look() -> str:
        proc = subprocess.Popen(
            [sys.executable, "-m", "stowage.cli", "console", "--store", PG_DSN, "--schema",
             pg_schema, "--port", "0"],
            cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        try:
            assert proc.stdout is not None
            found = re.search(r"(http://127\.0\.0\.1:\d+)/", proc.stdout.readline())
            assert found
            return httpx.get(found.group(1) + "/s/pg-one", timeout=30).text
        finally:
            proc.terminate()
            proc.communicate(timeout=30)

    with anyio.fail_after(90):
        page = await anyio.to_thread.run_sync(look)
    assert 'data-testid="compactions-count">1<' in page
    assert "&lt;script&gt;window.__pwned" in page


def test_the_host_check_applies_to_every_bind_address(tmp_path: Path) -> None:
    """A console on another loopback address (no --allow-remote needed) still refuses a page
    that rebinds its own name to that address (DNS rebinding): 400 unless Host names it."""
    import httpx
    from stowage.console._serve import host_names

    assert "*" not in host_names("0.0.0.0", ("*",))
    assert set(host_names("::1")) >= {"::1", "[::1]", "127.0.0.1", "localhost"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "stowage.cli", "console", "--store", "st", "--host", "127.0.0.2",
         "--port", "0"],
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        url = re.search(r"http://\S+/", line)
        assert url is not None, line + (proc.stderr.read() if proc.stderr else "")
        assert httpx.get(url.group(0), timeout=10).status_code == 200
        evil = httpx.get(url.group(0), headers={"Host": "evil.example"}, timeout=10)
        assert evil.status_code == 400
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        for stream in (proc.stdout, proc.stderr):
            if stream:
                stream.close()


def test_one_figure_per_round_on_the_chart_in_show_and_in_list(demo_store: Path) -> None:
    """The chart's point for a round, ``show``'s line for it and (for the newest) ``list``
    read the same recorded figure and say whether it was reported or estimated; a card's
    "in use when applied" is ``show``'s "applied at"."""
    session_id = only_session(demo_store)
    view = session_view(session_id, _records(demo_store, session_id))
    shown = run_cli("show", session_id, "--store", str(demo_store), cwd=demo_store.parent)
    assert shown.returncode == 0, shown.stderr
    rounds = {
        int(m.group(1)): (int(m.group(2).replace(",", "")), m.group(3))
        for m in re.finditer(
            r"round (\d+) committed[^\n]*; in use ([\d,]+) \((reported|estimated)\)", shown.stdout
        )
    }
    assert len(rounds) == len(view.chart) > 5
    for point in view.chart:
        assert rounds[point.round] == (
            point.tokens,
            "estimated" if point.estimated else "reported",
        ), point
    applied = [
        int(m.group(1).replace(",", ""))
        for m in re.finditer(r"applied at ([\d,]+) tokens in use", shown.stdout)
    ]
    assert applied == [card.in_use for card in view.cards]
    listed = run_cli("list", "--store", str(demo_store), cwd=demo_store.parent)
    assert f"{view.row.tokens:,}" in listed.stdout
    assert view.row.tokens == view.chart[-1].tokens  # nothing after the last round moved it
