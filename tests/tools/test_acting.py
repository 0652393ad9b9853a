"""The tools that change files: ``write_file`` and ``edit_file`` (exact replace or a unified
diff) inside the workspace only, refusing stale and ambiguous edits with what the file holds;
and after a kill, telling from the file whether a logged call had been applied."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import pytest
from stowage.core import Effect, FunctionCall, FunctionCallOutput, Settings
from stowage.tools import (
    ToolRegistry,
    after_crash,
    call_effects,
    call_preview,
    execute_call,
    workspace_tools,
)


@pytest.fixture
def root(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    (root / "src").mkdir(parents=True)
    (root / "src" / "app.py").write_text("def main():\n    return 1\n\n\nprint(main())\n")
    (root / "notes.txt").write_text("alpha\nbeta\nalpha\n")
    return root


@pytest.fixture
def tools(root: Path, tmp_path: Path) -> ToolRegistry:
    settings = Settings(store=tmp_path / "store", sandbox="workspace-write")
    return workspace_tools(root, settings=settings)


def call(name: str, **arguments: Any) -> FunctionCall:
    return FunctionCall(call_id="c1", name=name, arguments=json.dumps(arguments))


async def run(tools: ToolRegistry, name: str, **arguments: Any) -> FunctionCallOutput:
    with anyio.fail_after(30):
        return await execute_call(tools, call(name, **arguments), default_timeout=20)


def test_acting_tools_are_offered_only_when_the_sandbox_lets_something_change(
    root: Path, tmp_path: Path
) -> None:
    read_only = workspace_tools(root, settings=Settings(store=tmp_path / "store"))
    assert read_only.names() == ("read_file", "list_dir", "search_text")
    for sandbox in ("workspace-write", "full"):
        acting = workspace_tools(root, settings=Settings(store=tmp_path / "s", sandbox=sandbox))
        assert {"write_file", "edit_file", "run_command"} <= set(acting.names())


async def test_write_creates_a_file_and_its_folders_and_replaces_one(
    tools: ToolRegistry, root: Path
) -> None:
    out = await run(tools, "write_file", path="pkg/new/mod.py", content="X = 1\n")
    assert not out.is_error and out.output == "created pkg/new/mod.py (6 characters)"
    assert (root / "pkg" / "new" / "mod.py").read_text() == "X = 1\n"
    out = await run(tools, "write_file", path="pkg/new/mod.py", content="X = 2\n")
    assert out.output.startswith("replaced pkg/new/mod.py")
    assert (root / "pkg" / "new" / "mod.py").read_text() == "X = 2\n"
    assert not [p for p in (root / "pkg" / "new").iterdir() if p.name.endswith(".tmp")]


@pytest.mark.parametrize("path", ["../escape.txt", "/etc/passwd", "src/../../escape.txt"])
async def test_nothing_is_written_outside_the_workspace(
    tools: ToolRegistry, root: Path, path: str
) -> None:
    out = await run(tools, "write_file", path=path, content="x")
    assert out.is_error
    assert "outside the workspace" in out.output or "relative to the workspace" in out.output
    assert not (root.parent / "escape.txt").exists()


async def test_a_symlink_out_of_the_workspace_is_not_followed_to_write(
    tools: ToolRegistry, root: Path, tmp_path: Path
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (root / "link").symlink_to(outside)
    out = await run(tools, "write_file", path="link/x.txt", content="x")
    assert out.is_error
    assert not (outside / "x.txt").exists()


async def test_the_session_store_is_never_written(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    (root / ".stowage").mkdir(parents=True)
    tools = workspace_tools(
        root, settings=Settings(store=root / ".stowage", sandbox="workspace-write")
    )
    out = await run(tools, "write_file", path=".stowage/s1.jsonl", content="{}")
    assert out.is_error and "store" in out.output
    assert not (root / ".stowage" / "s1.jsonl").exists()


async def test_an_exact_edit_shows_its_diff(tools: ToolRegistry, root: Path) -> None:
    out = await run(tools, "edit_file", path="src/app.py", old="return 1", new="return 2")
    assert not out.is_error
    assert "-    return 1\n+    return 2" in out.output and "a/src/app.py" in out.output
    assert (root / "src" / "app.py").read_text().splitlines()[1] == "    return 2"


async def test_a_stale_edit_is_refused_showing_the_nearest_lines(
    tools: ToolRegistry, root: Path
) -> None:
    before = (root / "src" / "app.py").read_text()
    out = await run(tools, "edit_file", path="src/app.py", old="    return 11", new="x")
    assert out.is_error and "not in the file" in out.output and "read it again" in out.output
    assert "line 2" in out.output and "    2|     return 1" in out.output
    assert (root / "src" / "app.py").read_text() == before


async def test_an_ambiguous_edit_is_refused_naming_the_lines(
    tools: ToolRegistry, root: Path
) -> None:
    out = await run(tools, "edit_file", path="notes.txt", old="alpha", new="gamma")
    assert out.is_error and "2 times (lines 1, 3)" in out.output and "replace_all" in out.output
    assert (root / "notes.txt").read_text() == "alpha\nbeta\nalpha\n"
    out = await run(
        tools, "edit_file", path="notes.txt", old="alpha", new="gamma", replace_all=True
    )
    assert not out.is_error
    assert (root / "notes.txt").read_text() == "gamma\nbeta\ngamma\n"


PATCH = """--- a/src/app.py
+++ b/src/app.py
@@ -1,5 +1,5 @@
 def main():
-    return 1
+    return 42


 print(main())
"""


async def test_a_unified_diff_applies_and_one_that_does_not_fit_is_refused(
    tools: ToolRegistry, root: Path
) -> None:
    out = await run(tools, "edit_file", path="src/app.py", patch=PATCH)
    assert not out.is_error, out.output
    assert "    return 42" in (root / "src" / "app.py").read_text()
    again = await run(tools, "edit_file", path="src/app.py", patch=PATCH)
    assert again.is_error and "does not apply" in again.output and "read it again" in again.output
    assert (root / "src" / "app.py").read_text().count("return 42") == 1


async def test_an_edit_needs_one_form(tools: ToolRegistry) -> None:
    out = await run(tools, "edit_file", path="src/app.py", old="x")
    assert out.is_error and "either old and new" in out.output
    out = await run(tools, "edit_file", path="missing.py", old="a", new="b")
    assert out.is_error and "does not exist" in out.output


def test_each_tool_says_what_it_touches(tools: ToolRegistry) -> None:
    def effects(name: str, **arguments: Any) -> tuple[Effect, ...]:
        return call_effects(tools.get(name), call(name, **arguments))

    assert effects("write_file", path="./a/../b.txt", content="") == (Effect("write", "b.txt"),)
    assert effects("edit_file", path="src/app.py", patch=PATCH) == (Effect("edit", "src/app.py"),)
    assert effects("run_command", command=["pytest", "-q", "a b"]) == (
        Effect("run", "pytest -q 'a b'"),
    )
    assert effects("read_file", path="src/app.py") == (Effect("read", "src/app.py"),)
    assert effects("write_file", nonsense=True) == ()  # arguments that do not validate


async def test_after_a_kill_the_file_tells_whether_a_call_was_applied(
    tools: ToolRegistry, root: Path
) -> None:
    def applied(name: str, **arguments: Any) -> bool | None:
        return after_crash(tools.get(name), call(name, **arguments))

    # a write: the file holds its content, or does not
    assert applied("write_file", path="new.txt", content="hello") is False
    await run(tools, "write_file", path="new.txt", content="hello")
    assert applied("write_file", path="new.txt", content="hello") is True
    # an exact replace: the old text is there (not applied), or the new one is
    assert applied("edit_file", path="src/app.py", old="return 1", new="return 7") is False
    await run(tools, "edit_file", path="src/app.py", old="return 1", new="return 7")
    assert applied("edit_file", path="src/app.py", old="return 1", new="return 7") is True
    # one text inside the other: the file cannot tell
    assert applied("edit_file", path="src/app.py", old="return 7", new="return 77") is None
    # a diff: it reverses (applied) or applies (not yet)
    assert applied("edit_file", path="src/app.py", patch=PATCH) is None  # neither: changed since
    (root / "src" / "app.py").write_text("def main():\n    return 1\n\n\nprint(main())\n")
    assert applied("edit_file", path="src/app.py", patch=PATCH) is False
    await run(tools, "edit_file", path="src/app.py", patch=PATCH)
    assert applied("edit_file", path="src/app.py", patch=PATCH) is True
    # a tool that cannot tell
    assert applied("read_file", path="src/app.py") is None


def test_a_person_approving_sees_the_diff_and_the_whole_command(
    tools: ToolRegistry, root: Path
) -> None:
    def preview(name: str, **arguments: Any) -> str | None:
        return call_preview(tools.get(name), call(name, **arguments))

    assert preview("edit_file", path="src/app.py", old="return 1", new="return 2") == (
        "edit src/app.py:\n--- a/src/app.py\n+++ b/src/app.py\n@@ -1,5 +1,5 @@\n"
        " def main():\n-    return 1\n+    return 2\n \n \n print(main())\n"
    )
    stale = preview("edit_file", path="src/app.py", old="gone", new="x") or ""
    assert stale.startswith("edit src/app.py: as the file is now, this edit will be refused")
    assert preview("write_file", path="n.txt", content="a\nb") == "create n.txt (2 lines):\na\nb"
    replace = preview("write_file", path="notes.txt", content="alpha\n") or ""
    assert replace.startswith("replace notes.txt:\n--- a/notes.txt") and "-beta" in replace
    assert preview("run_command", command=["pytest", "-q", "a b"], cwd="src", timeout=30) == (
        "$ pytest -q 'a b'\n(in src, in the workspace-write sandbox, no network, killed after 30s)"
    )
    assert preview("read_file", path="src/app.py") is None
    assert (root / "src" / "app.py").read_text().count("return 1") == 1  # a preview changes nothing
