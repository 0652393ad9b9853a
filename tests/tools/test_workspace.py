"""Workspace tools: read, list and search inside the root, and nothing outside it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import pytest
from stowage.core._items import FunctionCall, FunctionCallOutput
from stowage.tools._registry import ToolError, ToolRegistry, execute_call
from stowage.tools._workspace import workspace_tools


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    secret = tmp_path / "outside"
    secret.mkdir()
    (secret / "secret.txt").write_text("TOKEN=hunter2\n")
    return secret


@pytest.fixture
def root(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    (root / "src" / "pkg").mkdir(parents=True)
    (root / "README.md").write_text("# Demo\nneedle in the readme\n")
    (root / "src" / "main.py").write_text("import pkg\n\nprint('needle')\nNEEDLE = 1\n")
    (root / "src" / "pkg" / "__init__.py").write_text("")
    (root / "image.png").write_bytes(b"\x89PNG\r\n\x1a\n\0\0needle")
    (root / ".git").mkdir()
    (root / ".git" / "config").write_text("needle in git\n")
    (root / ".venv").mkdir()
    (root / ".venv" / "lib.py").write_text("needle in venv\n")
    return root


@pytest.fixture
def tools(root: Path) -> ToolRegistry:
    return workspace_tools(root)


async def run(tools: ToolRegistry, name: str, **arguments: Any) -> FunctionCallOutput:
    call = FunctionCall(call_id="c1", name=name, arguments=json.dumps(arguments))
    with anyio.fail_after(10):
        return await execute_call(tools, call, default_timeout=5)


def test_workspace_tools_are_read_list_search_with_descriptions(tools: ToolRegistry) -> None:
    assert tools.names() == ("read_file", "list_dir", "search_text")
    for spec in tools.specs():
        assert len(spec.description) > 40
        assert spec.parameters["type"] == "object"
    read_schema = tools.specs()[0].parameters
    assert read_schema["required"] == ["path"]
    assert read_schema["properties"]["limit"]["default"] == 20000


def test_workspace_tools_refuse_a_root_that_is_not_a_directory(tmp_path: Path) -> None:
    with pytest.raises(ToolError, match="not a directory"):
        workspace_tools(tmp_path / "missing")


# read_file


async def test_read_file_returns_the_text(tools: ToolRegistry) -> None:
    out = await run(tools, "read_file", path="src/main.py")
    assert not out.is_error
    assert out.output == "import pkg\n\nprint('needle')\nNEEDLE = 1\n"


async def test_read_file_notes_truncation_and_where_to_continue(
    root: Path, tools: ToolRegistry
) -> None:
    (root / "long.txt").write_text("0123456789" * 3)
    out = await run(tools, "read_file", path="long.txt", limit=12)
    assert out.output == (
        "012345678901\n"
        "[bytes 0-12 of 30; 18 more bytes not shown; call read_file with offset=12 to continue]"
    )
    rest = await run(tools, "read_file", path="long.txt", offset=24)
    assert rest.output == "456789\n[bytes 24-30 of 30]"


async def test_read_file_refuses_binary_files(tools: ToolRegistry) -> None:
    out = await run(tools, "read_file", path="image.png")
    assert out.is_error
    assert "binary" in out.output


async def test_read_file_reports_missing_files_and_directories(tools: ToolRegistry) -> None:
    missing = await run(tools, "read_file", path="nope.txt")
    assert missing.is_error and "no such file" in missing.output
    directory = await run(tools, "read_file", path="src")
    assert directory.is_error and "list_dir" in directory.output


async def test_read_file_rejects_offset_past_the_end(tools: ToolRegistry) -> None:
    out = await run(tools, "read_file", path="README.md", offset=10_000)
    assert out.is_error
    assert "past the end" in out.output


async def test_read_file_of_an_empty_file_is_empty(tools: ToolRegistry) -> None:
    out = await run(tools, "read_file", path="src/pkg/__init__.py")
    assert out == FunctionCallOutput(call_id="c1", output="")


# list_dir


async def test_list_dir_sorts_entries_and_marks_directories(tools: ToolRegistry) -> None:
    out = await run(tools, "list_dir")
    assert out.output.splitlines() == [
        ".git/",
        ".venv/",
        "README.md",
        "image.png",
        "src/",
    ]


async def test_list_dir_of_a_subdirectory(tools: ToolRegistry) -> None:
    out = await run(tools, "list_dir", path="src")
    assert out.output.splitlines() == ["main.py", "pkg/"]


async def test_list_dir_reports_files_and_missing_paths(tools: ToolRegistry) -> None:
    file = await run(tools, "list_dir", path="README.md")
    assert file.is_error and "read_file" in file.output
    missing = await run(tools, "list_dir", path="nowhere")
    assert missing.is_error and "no such directory" in missing.output


async def test_list_dir_says_when_a_directory_is_empty(root: Path, tools: ToolRegistry) -> None:
    (root / "empty").mkdir()
    out = await run(tools, "list_dir", path="empty")
    assert not out.is_error
    assert "empty" in out.output


# search_text


async def test_search_text_prints_file_line_text_skipping_binary_and_hidden_dirs(
    tools: ToolRegistry,
) -> None:
    out = await run(tools, "search_text", pattern="needle")
    assert out.output.splitlines() == [
        "README.md:2: needle in the readme",
        "src/main.py:3: print('needle')",
    ]


async def test_search_text_is_case_sensitive_and_literal(root: Path, tools: ToolRegistry) -> None:
    (root / "regex.txt").write_text("a.b\naxb\n")
    upper = await run(tools, "search_text", pattern="NEEDLE")
    assert upper.output == "src/main.py:4: NEEDLE = 1"
    literal = await run(tools, "search_text", pattern="a.b")
    assert literal.output == "regex.txt:1: a.b"


async def test_search_text_within_a_path_or_a_single_file(tools: ToolRegistry) -> None:
    in_dir = await run(tools, "search_text", pattern="needle", path="src")
    assert in_dir.output == "src/main.py:3: print('needle')"
    in_file = await run(tools, "search_text", pattern="needle", path="README.md")
    assert in_file.output == "README.md:2: needle in the readme"


async def test_search_text_stops_at_max_results(root: Path, tools: ToolRegistry) -> None:
    (root / "many.txt").write_text("hit\n" * 10)
    out = await run(tools, "search_text", pattern="hit", max_results=3)
    lines = out.output.splitlines()
    assert lines[:3] == ["many.txt:1: hit", "many.txt:2: hit", "many.txt:3: hit"]
    assert "stopped at 3" in lines[3]
    assert len(lines) == 4


async def test_search_text_says_when_nothing_matches(tools: ToolRegistry) -> None:
    out = await run(tools, "search_text", pattern="zebra")
    assert not out.is_error
    assert "no matches for 'zebra'" in out.output


async def test_search_text_rejects_an_empty_pattern(tools: ToolRegistry) -> None:
    out = await run(tools, "search_text", pattern="")
    assert out.is_error
    assert "pattern" in out.output


# escapes


@pytest.mark.parametrize("name", ["read_file", "list_dir", "search_text"])
@pytest.mark.parametrize("path", ["../outside/secret.txt", "..", "src/../../outside"])
async def test_dotdot_paths_are_refused(
    tools: ToolRegistry, outside: Path, name: str, path: str
) -> None:
    extra = {"pattern": "TOKEN"} if name == "search_text" else {}
    out = await run(tools, name, path=path, **extra)
    assert out.is_error
    assert "outside the workspace" in out.output
    assert "hunter2" not in out.output


@pytest.mark.parametrize("name", ["read_file", "list_dir", "search_text"])
async def test_absolute_paths_are_refused(tools: ToolRegistry, outside: Path, name: str) -> None:
    extra = {"pattern": "TOKEN"} if name == "search_text" else {}
    for path in ("/etc/passwd", str(outside / "secret.txt"), "~/.ssh/id_rsa"):
        out = await run(tools, name, path=path, **extra)
        assert out.is_error
        assert "relative to the workspace root" in out.output
        assert "hunter2" not in out.output


async def test_symlink_pointing_outside_is_refused(
    root: Path, tools: ToolRegistry, outside: Path
) -> None:
    (root / "link.txt").symlink_to(outside / "secret.txt")
    (root / "linkdir").symlink_to(outside, target_is_directory=True)
    read = await run(tools, "read_file", path="link.txt")
    assert read.is_error and "outside the workspace" in read.output
    listed = await run(tools, "list_dir", path="linkdir")
    assert listed.is_error and "outside the workspace" in listed.output
    through = await run(tools, "read_file", path="linkdir/secret.txt")
    assert through.is_error and "outside the workspace" in through.output


async def test_search_text_skips_symlinked_files_that_point_outside(
    root: Path, tools: ToolRegistry, outside: Path
) -> None:
    (root / "link.txt").symlink_to(outside / "secret.txt")
    out = await run(tools, "search_text", pattern="TOKEN")
    assert "hunter2" not in out.output
    assert "no matches" in out.output


async def test_symlink_inside_the_workspace_is_followed(root: Path, tools: ToolRegistry) -> None:
    (root / "alias.md").symlink_to(root / "README.md")
    out = await run(tools, "read_file", path="alias.md")
    assert not out.is_error
    assert out.output.startswith("# Demo")
