"""Every example marked runnable in the README and the site runs as printed (see ``examples.py``
for the markers), so that the guides cannot drift from what the command and the API do."""

from __future__ import annotations

import asyncio
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import asyncpg  # type: ignore[import-untyped,unused-ignore]
import pytest

from tests.conftest import PG_DSN
from tests.docs.examples import (
    Example,
    console_script,
    examples,
    fresh_schema,
    pages,
    run_page,
    shown_pattern,
)

pytestmark = pytest.mark.timeout(300)

#: pages run side by side: each is mostly a chain of short processes, one after another
PAGES_AT_ONCE = 3


def _all(root: Path) -> dict[str, list[Example]]:
    return {str(p.relative_to(root)): found for p in pages(root) if (found := examples(root, p))}


async def _postgres_answers() -> str | None:
    """None when the test server answers, else why not."""
    try:
        conn = await asyncpg.connect(PG_DSN, timeout=3)
    except (OSError, asyncpg.PostgresError) as exc:
        return f"{PG_DSN}: {exc}"
    await conn.close()
    return None


async def _drop(schemas: list[str]) -> None:
    conn = await asyncpg.connect(PG_DSN, timeout=3)
    try:
        for name in schemas:
            await conn.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')
    finally:
        await conn.close()


def test_the_readme_and_the_guides_hold_runnable_examples(repo_root: Path) -> None:
    found = _all(repo_root)
    readme = found.get("README.md", [])
    assert {e.language for e in readme} == {"python", "console"}, readme
    assert len(readme) >= 6, "the README's tour is made of runnable steps"
    guides = [page for page in found if page.startswith("docs/guides/")]
    assert len(guides) >= 6, guides
    # the first README example is the one the wheel test runs in a fresh install, offline
    first_python = next(e for e in readme if e.language == "python")
    assert 'model="scripted"' in first_python.body


def test_console_blocks_are_read_as_commands_and_the_output_they_show() -> None:
    script, shown = console_script(
        '$ stowage run --session a \\\n    "hi"\nAnswer to: hi. …\n\n$ stowage list\n'
    )
    assert script == 'stowage run --session a \\\n    "hi"\nstowage list\n'
    assert shown == ["Answer to: hi. …"]
    assert shown_pattern("tour … idle").search("tour      scripted   idle")
    assert not shown_pattern("tour … idle").search("tour      scripted   open")


def test_a_marker_that_cannot_be_run_is_refused(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("<!-- run -->\n```yaml\na: 1\n```\n")
    with pytest.raises(ValueError, match="cannot run a 'yaml' block"):
        examples(tmp_path, page)
    page.write_text("<!-- run -->\n\n```python\nprint(1)\n```\n")
    with pytest.raises(ValueError, match="not right above a fenced block"):
        examples(tmp_path, page)


def test_a_block_that_fails_or_prints_something_else_is_reported(
    repo_root: Path, tmp_path: Path
) -> None:
    failing = Example("page.md", 3, "console", "$ stowage resume nobody hi\n")
    wrong = Example("page.md", 9, "console", "$ echo hello\nhello, world\n")
    assert "page.md:3: exit 2" in run_page(repo_root, [failing], tmp_path / "a", None)[0]
    problems = run_page(repo_root, [wrong], tmp_path / "b", None)
    assert problems and "page.md:9: printed no line like 'hello, world'" in problems[0]


def test_every_runnable_example_runs_as_printed(repo_root: Path, tmp_path: Path) -> None:
    found = _all(repo_root)
    pg_url = None
    schemas: list[str] = []
    needs_pg = [page for page, blocks in found.items() if any(e.postgres for e in blocks)]
    why_not = asyncio.run(_postgres_answers()) if needs_pg else None
    if why_not is not None:
        if os.environ.get("CI"):
            pytest.fail(f"no PostgreSQL under CI: {why_not}")
        for page in needs_pg:  # the rest still runs; these need the server
            found[page] = [e for e in found[page] if not e.postgres]
    elif needs_pg:
        schemas.append(fresh_schema())
        pg_url = f"{PG_DSN}?schema={schemas[0]}"
    try:
        with ThreadPoolExecutor(PAGES_AT_ONCE) as pool:
            results = pool.map(
                lambda item: run_page(repo_root, item[1], tmp_path / f"page{item[0]}", pg_url),
                enumerate(found.values()),
            )
            problems = [p for page_problems in results for p in page_problems]
    finally:
        if schemas:
            asyncio.run(_drop(schemas))
    assert not problems, "\n\n".join(problems)
    if why_not is not None:
        pytest.skip(f"the PostgreSQL examples of {needs_pg} did not run: {why_not}")
