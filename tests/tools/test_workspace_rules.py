"""Workspace tools are safe and bounded: never the session store, no secrets, nothing
.gitignore ignores (unless allowed), bounded reads and searches, binary files named."""

from __future__ import annotations

import json
import time
import tracemalloc
from pathlib import Path
from typing import Any

import anyio
import pytest
from stowage.core import (
    ConfigError,
    FunctionCall,
    FunctionCallOutput,
    ItemRecord,
    SessionRecord,
    Settings,
    UserMessage,
)
from stowage.storage import encode_record
from stowage.tools import ToolRegistry, execute_call, workspace_tools

TWO_GIB = 2 * 1024**3


async def run(tools: ToolRegistry, name: str, **arguments: Any) -> FunctionCallOutput:
    call = FunctionCall(call_id="c1", name=name, arguments=json.dumps(arguments))
    with anyio.fail_after(10):
        return await execute_call(tools, call, default_timeout=5)


def write_log(path: Path, text: str = "needle from another session") -> None:
    """A real stowage session log, as the JSONL store writes it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(
        encode_record(SessionRecord(seq=1, model="m"))
        + encode_record(ItemRecord(seq=2, item=UserMessage(text=text)))
    )


@pytest.fixture
def root(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    (root / "src").mkdir(parents=True)
    (root / "README.md").write_text("needle in the readme\n")
    (root / "src" / "main.py").write_text("print('needle')\n")
    return root


def tools_for(root: Path, **settings: Any) -> ToolRegistry:
    settings.setdefault("store", root / ".stowage")
    return workspace_tools(root, settings=Settings(workspace=root, **settings))


def assert_refused(out: FunctionCallOutput, path: str, why: str) -> None:
    assert out.is_error, out.output
    assert f"path {path!r} is refused" in out.output
    assert why in out.output
    assert "needle" not in out.output


# -- the session store ---------------------------------------------------------------------


STORE_REFUSAL = "in the session store"


async def test_the_default_store_directory_is_refused_to_read_list_and_search(
    root: Path,
) -> None:
    write_log(root / ".stowage" / "other.jsonl")
    tools = tools_for(root)
    read = await run(tools, "read_file", path=".stowage/other.jsonl")
    assert_refused(read, ".stowage/other.jsonl", STORE_REFUSAL)
    listed = await run(tools, "list_dir", path=".stowage")
    assert_refused(listed, ".stowage", STORE_REFUSAL)
    searched = await run(tools, "search_text", pattern="needle", path=".stowage")
    assert_refused(searched, ".stowage", STORE_REFUSAL)


async def test_list_dir_hides_the_store_and_search_skips_it(root: Path) -> None:
    write_log(root / ".stowage" / "other.jsonl")
    tools = tools_for(root)
    listed = await run(tools, "list_dir")
    assert listed.output.splitlines() == [
        "README.md",
        "src/",
        "[not shown: 1 in the session store]",
    ]
    searched = await run(tools, "search_text", pattern="needle")
    assert searched.output.splitlines() == [
        "README.md:1: needle in the readme",
        "src/main.py:1: print('needle')",
    ]


async def test_a_directory_named_stowage_is_refused_even_when_the_store_is_elsewhere(
    root: Path, tmp_path: Path
) -> None:
    (root / "sub" / ".stowage").mkdir(parents=True)
    (root / "sub" / ".stowage" / "notes.txt").write_text("needle, no log yet\n")
    tools = tools_for(root, store=tmp_path / "elsewhere")
    read = await run(tools, "read_file", path="sub/.stowage/notes.txt")
    assert_refused(read, "sub/.stowage/notes.txt", STORE_REFUSAL)
    listed = await run(tools, "list_dir", path="sub")
    assert listed.output == "sub/ has nothing to show\n[not shown: 1 in the session store]"


async def test_the_configured_store_is_refused_whatever_its_name(root: Path) -> None:
    (root / "logs").mkdir()
    (root / "logs" / "notes.txt").write_text("needle, not a log, but in the store\n")
    tools = tools_for(root, store=root / "logs")
    read = await run(tools, "read_file", path="logs/notes.txt")
    assert_refused(read, "logs/notes.txt", STORE_REFUSAL)
    listed = await run(tools, "list_dir")
    assert "logs/" not in listed.output.splitlines()
    searched = await run(tools, "search_text", pattern="needle")
    assert "logs/" not in searched.output


async def test_a_relative_store_is_found_from_the_current_directory(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (root / "state").mkdir()
    (root / "state" / "notes.txt").write_text("needle\n")
    monkeypatch.chdir(root)
    tools = tools_for(root, store=Path("state"))
    read = await run(tools, "read_file", path="state/notes.txt")
    assert_refused(read, "state/notes.txt", STORE_REFUSAL)


async def test_a_directory_holding_stowage_logs_is_refused_as_a_store(root: Path) -> None:
    write_log(root / "archive" / "s-1.jsonl")
    (root / "archive" / "index.txt").write_text("needle next to the logs\n")
    tools = tools_for(root)
    read = await run(tools, "read_file", path="archive/index.txt")
    assert_refused(read, "archive/index.txt", STORE_REFUSAL)
    listed = await run(tools, "list_dir")
    assert "archive/" not in listed.output.splitlines()
    searched = await run(tools, "search_text", pattern="needle")
    assert "archive" not in searched.output


async def test_a_directory_holding_a_stowage_lease_lock_is_refused_as_a_store(
    root: Path,
) -> None:
    (root / "state").mkdir()
    (root / "state" / "s-1.lock").write_text('{"owner":"host:1:ab","pid":1,"token":3}\n')
    (root / "state" / "notes.txt").write_text("needle\n")
    (root / "build.lock").write_text("not a lease\n")
    tools = tools_for(root)
    read = await run(tools, "read_file", path="state/notes.txt")
    assert_refused(read, "state/notes.txt", STORE_REFUSAL)
    assert (await run(tools, "read_file", path="build.lock")).output == "not a lease\n"


async def test_jsonl_files_that_are_not_stowage_logs_stay_readable(root: Path) -> None:
    (root / "data").mkdir()
    (root / "data" / "rows.jsonl").write_text('{"type": "session", "needle": 1}\n')
    tools = tools_for(root)
    read = await run(tools, "read_file", path="data/rows.jsonl")
    assert not read.is_error
    searched = await run(tools, "search_text", pattern="needle", path="data")
    assert searched.output == 'data/rows.jsonl:1: {"type": "session", "needle": 1}'


async def test_a_stowage_log_at_the_root_is_refused_but_not_the_whole_root(root: Path) -> None:
    write_log(root / "s-9.jsonl")
    tools = tools_for(root)
    read = await run(tools, "read_file", path="s-9.jsonl")
    assert_refused(read, "s-9.jsonl", STORE_REFUSAL)
    assert not (await run(tools, "read_file", path="README.md")).is_error
    listed = await run(tools, "list_dir")
    assert "s-9.jsonl" not in listed.output


async def test_a_symlink_into_the_store_is_refused(root: Path) -> None:
    write_log(root / ".stowage" / "other.jsonl")
    (root / "alias").symlink_to(root / ".stowage", target_is_directory=True)
    (root / "log.txt").symlink_to(root / ".stowage" / "other.jsonl")
    tools = tools_for(root)
    for path in ("alias/other.jsonl", "log.txt"):
        assert_refused(await run(tools, "read_file", path=path), path, STORE_REFUSAL)
    assert_refused(await run(tools, "list_dir", path="alias"), "alias", STORE_REFUSAL)
    listed = await run(tools, "list_dir")
    assert "alias/" not in listed.output and "log.txt" not in listed.output
    searched = await run(tools, "search_text", pattern="another session")
    assert "no matches" in searched.output


async def test_list_dir_hides_a_symlink_to_a_store_outside_the_workspace(
    root: Path, tmp_path: Path
) -> None:
    (tmp_path / "store").mkdir()  # no log yet: only the settings say it is the store
    (root / "ext").symlink_to(tmp_path / "store", target_is_directory=True)
    tools = tools_for(root, store=tmp_path / "store")
    listed = await run(tools, "list_dir")
    assert listed.output.splitlines() == [
        "README.md",
        "src/",
        "[not shown: 1 in the session store]",
    ]


async def test_a_workspace_inside_the_store_reads_nothing(tmp_path: Path) -> None:
    store = tmp_path / "store"
    (store / "ws").mkdir(parents=True)
    (store / "ws" / "a.txt").write_text("needle\n")
    tools = workspace_tools(store / "ws", settings=Settings(store=store))
    out = await run(tools, "read_file", path="a.txt")
    assert_refused(out, "a.txt", "inside the session store")


async def test_a_database_store_stays_out_of_the_settings_the_tools_read(root: Path) -> None:
    """A database URL is never a ``Settings.store`` (it would name a directory, password and
    all); with a database store the command line leaves the default directory there, and the
    tools read the workspace as usual."""
    with pytest.raises(ConfigError, match="is a database URL"):
        Settings(store=Path("postgresql://db/x"))
    tools = workspace_tools(root, settings=Settings(store=root.parent / ".stowage"))
    assert not (await run(tools, "read_file", path="README.md")).is_error


# -- .gitignore ----------------------------------------------------------------------------


@pytest.fixture
def ignoring(root: Path) -> Path:
    (root / ".gitignore").write_text("build/\n*.log\n!keep.log\n")
    (root / "build").mkdir()
    (root / "build" / "out.txt").write_text("needle built\n")
    (root / "build" / "report.txt").write_text("needle report\n")
    (root / "debug.log").write_text("needle logged\n")
    (root / "keep.log").write_text("needle kept\n")
    (root / "src" / ".gitignore").write_text("generated.py\n")
    (root / "src" / "generated.py").write_text("needle generated\n")
    return root


IGNORED = "ignored by .gitignore"


async def test_gitignored_paths_are_refused_to_read(ignoring: Path) -> None:
    tools = tools_for(ignoring)
    for path in ("build/out.txt", "debug.log", "src/generated.py", "build"):
        name = "list_dir" if path == "build" else "read_file"
        assert_refused(await run(tools, name, path=path), path, IGNORED)
    kept = await run(tools, "read_file", path="keep.log")
    assert kept.output == "needle kept\n"


async def test_gitignored_paths_are_not_listed_or_searched(ignoring: Path) -> None:
    tools = tools_for(ignoring)
    listed = await run(tools, "list_dir")
    assert listed.output.splitlines() == [
        ".gitignore",
        "README.md",
        "keep.log",
        "src/",
        "[not shown: 2 ignored by .gitignore]",
    ]
    searched = await run(tools, "search_text", pattern="needle")
    assert searched.output.splitlines() == [
        "README.md:1: needle in the readme",
        "keep.log:1: needle kept",
        "src/main.py:1: print('needle')",
    ]


async def test_a_deeper_gitignore_overrides_a_shallower_one(root: Path) -> None:
    (root / ".gitignore").write_text("*.gen\n")
    (root / "src" / ".gitignore").write_text("!keep.gen\n")
    (root / "src" / "keep.gen").write_text("needle\n")
    (root / "src" / "drop.gen").write_text("needle\n")
    tools = tools_for(root)
    assert not (await run(tools, "read_file", path="src/keep.gen")).is_error
    assert_refused(await run(tools, "read_file", path="src/drop.gen"), "src/drop.gen", IGNORED)


async def test_git_info_exclude_is_honoured(root: Path) -> None:
    (root / ".git" / "info").mkdir(parents=True)
    (root / ".git" / "info" / "exclude").write_text("README.md\n")
    tools = tools_for(root)
    assert_refused(await run(tools, "read_file", path="README.md"), "README.md", IGNORED)


async def test_workspace_allow_lets_an_ignored_directory_be_read(ignoring: Path) -> None:
    tools = tools_for(ignoring, workspace_allow=("build/",))
    assert (await run(tools, "read_file", path="build/out.txt")).output == "needle built\n"
    listed = await run(tools, "list_dir")
    assert "build/" in listed.output.splitlines()
    searched = await run(tools, "search_text", pattern="built")
    assert searched.output == "build/out.txt:1: needle built"


async def test_workspace_allow_lets_one_file_of_an_ignored_directory_be_read(
    ignoring: Path,
) -> None:
    tools = tools_for(ignoring, workspace_allow=("build/report.txt",))
    assert not (await run(tools, "read_file", path="build/report.txt")).is_error
    out = await run(tools, "read_file", path="build/out.txt")
    assert_refused(out, "build/out.txt", IGNORED)


async def test_workspace_gitignore_off_reads_ignored_files(ignoring: Path) -> None:
    tools = tools_for(ignoring, workspace_gitignore=False)
    assert (await run(tools, "read_file", path="debug.log")).output == "needle logged\n"


async def test_the_allow_setting_never_opens_the_store(root: Path) -> None:
    write_log(root / ".stowage" / "other.jsonl")
    tools = tools_for(root, workspace_allow=("*", ".stowage/"))
    out = await run(tools, "read_file", path=".stowage/other.jsonl")
    assert_refused(out, ".stowage/other.jsonl", STORE_REFUSAL)


# -- secrets -------------------------------------------------------------------------------

SECRET = "looks like a secret"
SECRET_FILES = (
    ".env",
    ".env.local",
    ".ENV",
    "certs/server.pem",
    "tls/private.key",
    "id_rsa",
    "home/id_ed25519.pub",
    ".netrc",
    ".pgpass",
    ".git-credentials",
    "config/credentials-prod.json",
    ".aws/credentials",
    "home/.ssh/config",
)


@pytest.mark.parametrize("path", SECRET_FILES)
async def test_secret_files_are_refused(root: Path, path: str) -> None:
    (root / path).parent.mkdir(parents=True, exist_ok=True)
    (root / path).write_text("needle=hunter2\n")
    out = await run(tools_for(root), "read_file", path=path)
    assert_refused(out, path, SECRET)
    assert "hunter2" not in out.output


async def test_secret_files_are_not_listed_or_searched(root: Path) -> None:
    for path in SECRET_FILES:
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text("needle=hunter2\n")
    tools = tools_for(root)
    searched = await run(tools, "search_text", pattern="hunter2")
    assert "no matches" in searched.output
    listed = await run(tools, "list_dir")
    names = listed.output.splitlines()
    assert ".env" not in names and "id_rsa" not in names and ".aws/" not in names
    assert names[-1].startswith("[not shown:") and "secret" in names[-1]
    assert_refused(await run(tools, "list_dir", path=".aws"), ".aws", SECRET)


async def test_workspace_allow_lets_a_named_secret_be_read(root: Path) -> None:
    (root / ".env").write_text("TOKEN=hunter2\n")
    (root / ".env.example").write_text("TOKEN=changeme\n")
    tools = tools_for(root, workspace_allow=(".env.example",))
    assert (await run(tools, "read_file", path=".env.example")).output == "TOKEN=changeme\n"
    assert_refused(await run(tools, "read_file", path=".env"), ".env", SECRET)
    searched = await run(tools, "search_text", pattern="TOKEN")
    assert searched.output == ".env.example:1: TOKEN=changeme"


async def test_a_symlink_to_a_secret_or_named_as_one_is_refused(root: Path) -> None:
    (root / ".env").write_text("TOKEN=hunter2\n")
    (root / "notes.txt").symlink_to(root / ".env")
    (root / "id_rsa").symlink_to(root / "README.md")
    tools = tools_for(root)
    assert_refused(await run(tools, "read_file", path="notes.txt"), "notes.txt", SECRET)
    assert_refused(await run(tools, "read_file", path="id_rsa"), "id_rsa", SECRET)
    assert "hunter2" not in (await run(tools, "search_text", pattern="TOKEN")).output
    listed = await run(tools, "list_dir")
    assert "notes.txt" not in listed.output


def test_bad_settings_are_refused_when_the_tools_are_made(root: Path) -> None:
    with pytest.raises(ConfigError, match="read_max_bytes"):
        tools_for(root, read_max_bytes=0)
    with pytest.raises(ConfigError, match="search_max_matches"):
        tools_for(root, search_max_matches=0)
    with pytest.raises(ConfigError, match="workspace_allow"):
        tools_for(root, workspace_allow=".env")


# -- bounded reads -------------------------------------------------------------------------


@pytest.fixture
def huge_text(root: Path) -> Path:
    """A 2 GiB sparse file: 300 KiB of text, then holes."""
    path = root / "huge.txt"
    with open(path, "wb") as f:
        f.write(b"line of text\n" * (300 * 1024 // 13))
        f.truncate(TWO_GIB)
    return path


async def test_a_2gib_file_is_read_up_to_the_cap_quickly_and_in_little_memory(
    root: Path, huge_text: Path
) -> None:
    tools = tools_for(root)
    tracemalloc.start()
    started = time.monotonic()
    try:
        out = await run(tools, "read_file", path="huge.txt", limit=10**12)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert time.monotonic() - started < 5
    assert peak < 16 * 1024**2
    text, note = out.output.rsplit("\n[", 1)
    cap = 256 * 1024
    assert len(text.encode()) == cap
    left = TWO_GIB - cap
    assert note == (
        f"bytes 0-262,144 of 2,147,483,648; {left:,} more bytes not shown; "
        f"call read_file with offset={cap} to continue (at most 262,144 bytes a call)]"
    )


async def test_read_file_returns_20000_bytes_unless_asked_for_more(
    root: Path, huge_text: Path
) -> None:
    out = await run(tools_for(root), "read_file", path="huge.txt")
    text, note = out.output.rsplit("\n[", 1)
    assert len(text.encode()) <= 20_000
    assert "call read_file with offset=" in note


async def test_the_read_cap_is_a_setting(root: Path, huge_text: Path) -> None:
    out = await run(tools_for(root, read_max_bytes=100), "read_file", path="huge.txt", limit=500)
    text, note = out.output.rsplit("\n[", 1)
    assert len(text.encode()) == 100
    assert "offset=100" in note and "at most 100 bytes a call" in note


@pytest.fixture
def huge_binary(root: Path) -> Path:
    """A 2 GiB sparse file of NUL bytes."""
    path = root / "disk.img"
    with open(path, "wb") as f:
        f.truncate(TWO_GIB)
    return path


async def test_a_2gib_binary_file_is_named_as_binary(root: Path, huge_binary: Path) -> None:
    out = await run(tools_for(root), "read_file", path="disk.img")
    assert out.is_error
    assert out.output == (
        "error: 'disk.img' is a binary file (2,147,483,648 bytes; it has NUL bytes); not shown"
    )


async def test_a_file_that_is_not_utf8_is_named_as_binary(root: Path) -> None:
    (root / "latin1.txt").write_bytes("café crème\n".encode("latin-1"))
    out = await run(tools_for(root), "read_file", path="latin1.txt")
    assert out.is_error
    assert "binary file" in out.output and "not UTF-8" in out.output


async def test_utf8_cut_short_by_the_sniff_is_still_text(root: Path) -> None:
    # a 3-byte character straddles the 8192-byte sniff window
    (root / "wide.txt").write_bytes(b"a" * 8191 + "€".encode() + b"\n")
    out = await run(tools_for(root), "read_file", path="wide.txt")
    assert not out.is_error
    assert out.output.endswith("€\n")


async def test_reads_never_split_a_character(root: Path) -> None:
    (root / "accents.txt").write_text("é" * 10)  # 20 bytes
    tools = tools_for(root)
    first = await run(tools, "read_file", path="accents.txt", limit=5)
    assert first.output.startswith("éé\n[bytes 0-4 of 20;")
    assert "offset=4 " in first.output
    inside = await run(tools, "read_file", path="accents.txt", offset=5, limit=4)
    assert inside.output.startswith("éé\n[bytes 6-10 of 20;")
    tiny = await run(tools, "read_file", path="accents.txt", limit=1)
    assert tiny.output.startswith("é\n[bytes 0-2 of 20;")
    tiny_inside = await run(tools, "read_file", path="accents.txt", offset=5, limit=1)
    assert tiny_inside.output.startswith("é\n[bytes 6-8 of 20;")


@pytest.mark.parametrize("limit", [1, 2, 3, 5, 7, 64])
async def test_following_the_offsets_reads_the_whole_file_once(root: Path, limit: int) -> None:
    text = "a é € 😀 ß\n" * 20  # characters of 1 to 4 bytes
    (root / "mixed.txt").write_text(text)
    tools = tools_for(root)
    offset, parts = 0, []
    while True:
        out = await run(tools, "read_file", path="mixed.txt", offset=offset, limit=limit)
        chunk, note = out.output.rsplit("\n[", 1)
        parts.append(chunk)
        if "offset=" not in note:
            break
        offset = int(note.split("offset=")[1].split()[0])
    assert "".join(parts) == text


# -- bounded searches ----------------------------------------------------------------------


async def test_search_stops_at_the_setting_and_says_so(root: Path) -> None:
    (root / "many.txt").write_text("hit\n" * 50)
    out = await run(tools_for(root, search_max_matches=5), "search_text", pattern="hit")
    lines = out.output.splitlines()
    assert lines[:5] == [f"many.txt:{n}: hit" for n in range(1, 6)]
    assert lines[5:] == [
        "[stopped at 5 matches, the most search_text returns; more lines match: "
        "narrow the pattern or path]"
    ]


async def test_search_says_nothing_about_stopping_when_all_matches_fit(root: Path) -> None:
    (root / "few.txt").write_text("hit\n" * 3)
    out = await run(tools_for(root), "search_text", pattern="hit", path="few.txt", max_results=3)
    assert out.output.splitlines() == [f"few.txt:{n}: hit" for n in range(1, 4)]


async def test_search_skips_files_over_the_size_cap_and_names_them(root: Path) -> None:
    (root / "big.txt").write_text("needle\n" * 100)
    out = await run(tools_for(root, search_max_file_bytes=200), "search_text", pattern="needle")
    assert out.output.splitlines() == [
        "README.md:1: needle in the readme",
        "src/main.py:1: print('needle')",
        "[skipped 1 file over 200 bytes: big.txt; read_file reads them in parts]",
    ]


async def test_search_skips_a_2gib_file_quickly(root: Path, huge_text: Path) -> None:
    started = time.monotonic()
    out = await run(tools_for(root), "search_text", pattern="line of text")
    assert time.monotonic() - started < 5
    assert "no matches" in out.output
    assert "[skipped 1 file over 1,048,576 bytes: huge.txt;" in out.output


async def test_search_skips_binary_and_non_utf8_files(root: Path) -> None:
    (root / "blob.bin").write_bytes(b"needle\0\0")
    (root / "latin1.txt").write_bytes("needle café\n".encode("latin-1"))
    out = await run(tools_for(root), "search_text", pattern="needle")
    assert "blob.bin" not in out.output and "latin1.txt" not in out.output
