"""``stowage --version`` and ``stowage --help`` start at once: they import none of the runtime.

Each case runs the command line in a fresh interpreter and names the modules it must not have
loaded; a module-level import in ``stowage.cli`` (or an eager package ``__init__``) shows here.
The test counts modules, never time: ``scripts/bench_startup.py`` times the commands.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

#: what ``--version`` must not load: the third-party packages of the runtime and its layers
NOT_FOR_VERSION = (
    "openai",
    "httpx",
    "aiohttp",
    "pydantic",
    "pydantic_settings",
    "structlog",
    "rich",
    "anyio",
    "asyncpg",
    "stowage.actors",
    "stowage.facade",
    "stowage.storage",
    "stowage.model",
    "stowage.policy",
    "stowage.core",
    "stowage.tools",
    "stowage.load",
    "stowage.worker",
)

#: ``--help`` prints every command's one-line help and the exit statuses, nothing more
NOT_FOR_HELP = NOT_FOR_VERSION

#: ``list``, ``show`` and ``context`` read the store: not the model client, the actors, the
#: facade's runtime, the tools, the price table; for a JSONL store no database driver; no
#: rich (their output is plain lines; structlog would import it for tracebacks they never draw);
#: no pydantic (the settings a log recorded have their types: ``Settings`` takes them as they
#: are); and no structlog until something logs (``configure_logging(..., lazily=True)``)
NOT_FOR_LIST = (
    "openai",
    "httpx",
    "aiohttp",
    "anthropic",
    "asyncpg",
    "sqlite3",
    "rich",
    "pydantic",
    "pydantic_settings",
    "structlog",
    "stowage.actors",
    "stowage.console",
    "stowage.model",
    "stowage.facade._runtime",
    "stowage.load",
    "stowage.policy._prices",
    "stowage.storage._postgres",
    "stowage.storage._sqlite",
    "stowage.tools",
    "stowage.worker",
)

PROBE = """
import json, sys
import stowage.cli
try:
    status = stowage.cli.main({argv!r})
except SystemExit as exc:
    status = exc.code
sys.stdout.flush()
print(json.dumps({{"status": status, "modules": sorted(sys.modules)}}), file=sys.stderr)
"""


def loaded_by(argv: list[str], cwd: Path) -> tuple[int, str, set[str]]:
    """The exit status, stdout and modules of ``stowage ARGV`` run in a fresh interpreter."""
    done = subprocess.run(
        [sys.executable, "-c", PROBE.format(argv=argv)],
        cwd=cwd, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    last = done.stderr.strip().splitlines()[-1]
    report = json.loads(last)
    return int(report["status"] or 0), done.stdout, set(report["modules"])


def _found(modules: set[str], names: tuple[str, ...]) -> list[str]:
    return sorted(name for name in names if name in modules)


def test_version_imports_none_of_the_runtime(tmp_path: Path) -> None:
    status, out, modules = loaded_by(["--version"], tmp_path)
    assert status == 0
    assert out.startswith("stowage ") and "(stowage-runtime)" in out
    assert _found(modules, NOT_FOR_VERSION) == []


def test_help_imports_none_of_the_runtime_and_lists_every_command(tmp_path: Path) -> None:
    status, out, modules = loaded_by(["--help"], tmp_path)
    assert status == 0
    for command in ("run", "resume", "chat", "list", "show", "check", "load", "worker", "send"):
        assert f"    {command} " in out
    assert "exit statuses:" in out
    assert _found(modules, NOT_FOR_HELP) == []


def test_a_command_help_adds_that_commands_options(tmp_path: Path) -> None:
    status, out, modules = loaded_by(["show", "--help"], tmp_path)
    assert status == 0
    assert "--json" in out and "--store" in out
    assert _found(modules, NOT_FOR_HELP) == []


@pytest.fixture(scope="module")
def store_with_a_session(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """A JSONL store holding one session the offline demo wrote, and that session's id."""
    store = tmp_path_factory.mktemp("startup") / "store"
    done = subprocess.run(
        [sys.executable, "-m", "stowage.cli", "demo", "--turns", "2", "--store", str(store)],
        cwd=store.parent, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    (log,) = store.glob("*.jsonl")
    return store, log.stem


@pytest.mark.parametrize("command", ["list", "show", "context"])
def test_reading_commands_import_no_model_client_nor_actors(
    store_with_a_session: tuple[Path, str], command: str
) -> None:
    store, session_id = store_with_a_session
    argv = [command, "--store", str(store)] + ([session_id] if command != "list" else [])
    status, out, modules = loaded_by(argv, store.parent)
    assert status == 0
    assert session_id in out  # the command ran to the end
    assert _found(modules, NOT_FOR_LIST) == []
