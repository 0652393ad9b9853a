"""The runnable examples of the README and the site's pages, and how to run them.

A fenced block right under ``<!-- run -->`` is run by ``test_examples.py``:

- a ``python`` block as a script of its own;
- a ``console`` block through bash: its ``$ `` lines (a line ending in ``\\`` goes on on the
  next) are the commands, run in order by one ``bash -e``; every other line is output the
  commands must print, where ``…`` stands for anything;
- under ``<!-- run: file NAME -->``, a block of any language is written to ``NAME`` first;
- ``<!-- run: postgres -->`` (with any of the above) needs the local PostgreSQL: the URL
  ``postgresql://postgres@127.0.0.1:5432/test`` (and a ``?schema=`` after it) is replaced by
  the test server's URL with a fresh schema, dropped afterwards.

Each page runs in a temporary directory of its own holding a copy of the README (the file the
examples read), its blocks in the order they appear, with the real ``stowage`` command of this
interpreter's environment first on ``PATH`` and no configuration, key or endpoint of the
person running the tests.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

#: the marker line, the opening fence (its language), the body and the closing fence
_BLOCK = re.compile(
    r"^<!-- run(?::[ \t]*(?P<options>[^>]*?))?[ \t]*-->[ \t]*\n"
    r"```(?P<language>[\w-]+)[^\n]*\n(?P<body>.*?)^```[ \t]*$",
    re.MULTILINE | re.DOTALL,
)
_DOC_PG = re.compile(r"postgresql://postgres@127\.0\.0\.1:5432/test(?:\?schema=\w+)?")
LANGUAGES = ("python", "console")
TIMEOUT = 120.0


@dataclass(frozen=True)
class Example:
    page: str  # relative to the repository
    line: int
    language: str
    body: str
    file: str | None = None  # written to this name instead of run
    postgres: bool = False

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line}"


def pages(root: Path) -> list[Path]:
    """The README and every page of the site (the hook's folder aside)."""
    docs = root / "docs"
    found = sorted(p for p in docs.rglob("*.md") if "_hooks" not in p.relative_to(docs).parts)
    return [root / "README.md", *found]


def examples(root: Path, page: Path) -> list[Example]:
    """The runnable blocks of ``page``, in order. Raises ValueError for a marker it cannot run."""
    text = page.read_text(encoding="utf-8")
    found = []
    for match in _BLOCK.finditer(text):
        where = f"{page.relative_to(root)}:{text.count(chr(10), 0, match.start()) + 1}"
        words = (match["options"] or "").split()
        file = None
        if "file" in words:
            at = words.index("file")
            if at + 1 >= len(words):
                raise ValueError(f"{where}: 'run: file' needs a file name")
            file = words.pop(at + 1)
            words.remove("file")
        postgres = "postgres" in words
        unknown = set(words) - {"postgres"}
        if unknown:
            raise ValueError(f"{where}: unknown run option(s) {sorted(unknown)}")
        if file is None and match["language"] not in LANGUAGES:
            raise ValueError(f"{where}: cannot run a {match['language']!r} block")
        found.append(
            Example(
                page=str(page.relative_to(root)),
                line=text.count("\n", 0, match.start()) + 1,
                language=match["language"],
                body=match["body"],
                file=file,
                postgres=postgres,
            )
        )
    unmarked = len(re.findall(r"^<!-- run\b", text, re.MULTILINE)) - len(found)
    if unmarked:
        raise ValueError(f"{page}: {unmarked} run marker(s) not right above a fenced block")
    return found


def console_script(body: str) -> tuple[str, list[str]]:
    """The commands of a console block as one script, and the output lines it shows."""
    commands: list[str] = []
    shown: list[str] = []
    going_on = False
    for line in body.splitlines():
        if going_on or line.startswith("$ "):
            command = line if going_on else line[2:]
            commands.append(command)
            going_on = command.endswith("\\")
        elif line.strip():
            shown.append(line.strip())
    return "\n".join(commands) + "\n", shown


def shown_pattern(line: str) -> re.Pattern[str]:
    """A line a block shows as a pattern: ``…`` stands for anything."""
    return re.compile(".*".join(re.escape(part.strip()) for part in line.split("…")))


def environment(workdir: Path) -> dict[str, str]:
    """What the examples run with: this environment's ``stowage`` first on PATH, nothing of
    the person's configuration, keys or endpoints."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("OPENAI_", "ANTHROPIC_", "STOWAGE_", "PYTEST_", "COV_"))
    }
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    env["XDG_CONFIG_HOME"] = str(workdir / ".config")
    env["XDG_STATE_HOME"] = str(workdir / ".state")
    env["PYTHONUNBUFFERED"] = "1"
    env["COLUMNS"] = "200"
    env["TERM"] = "dumb"
    return env


def run_page(
    root: Path, examples_of_page: list[Example], workdir: Path, pg_url: str | None
) -> list[str]:
    """Run one page's examples in ``workdir``; the problems found, one text each (empty: all
    ran as shown). ``pg_url``: the URL of a fresh schema for ``postgres`` blocks."""
    workdir.mkdir(parents=True, exist_ok=True)
    shutil.copy(root / "README.md", workdir / "README.md")
    env = environment(workdir)
    problems = []
    for n, example in enumerate(examples_of_page):
        body = example.body
        if example.postgres:
            assert pg_url is not None, "a postgres block needs the test server"
            body = _DOC_PG.sub(pg_url, body)
        if example.file is not None:
            (workdir / example.file).write_text(body, encoding="utf-8")
            continue
        if example.language == "python":
            script = workdir / f"example_{n}.py"
            script.write_text(body, encoding="utf-8")
            argv, shown = [sys.executable, str(script)], list[str]()
        else:
            commands, shown = console_script(body)
            argv = ["bash", "-e", "-o", "pipefail", "-c", commands]
        done = _run(argv, workdir, env)
        output = done.stdout + done.stderr
        if done.returncode != 0:
            problems.append(
                f"{example.where}: exit {done.returncode}\n--- ran:\n{body}--- printed:\n{output}"
            )
            break  # later blocks of the page build on this one
        lines = output.splitlines()
        for expected in shown:
            if not any(shown_pattern(expected).search(line) for line in lines):
                problems.append(
                    f"{example.where}: printed no line like {expected!r}\n--- printed:\n{output}"
                )
    return problems


def _run(argv: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """Run ``argv`` in a process group of its own; whatever it left running (a server started
    with ``&``) is stopped when it ends."""
    proc = subprocess.Popen(
        argv, cwd=cwd, env=env, text=True, stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
    )  # fmt: skip
    try:
        out, err = proc.communicate(timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        err += f"\n(stopped after {TIMEOUT:.0f} s)"
        return subprocess.CompletedProcess(argv, -9, out, err)
    finally:
        with contextlib.suppress(ProcessLookupError):  # what the block left in the background
            os.killpg(proc.pid, signal.SIGTERM)
    return subprocess.CompletedProcess(argv, proc.returncode, out, err)


def fresh_schema() -> str:
    return f"stowage_docs_{secrets.token_hex(6)}"
