"""The documentation site: ``mkdocs build --strict`` (what ``make docs`` runs) succeeds, and the
generated references say what the parser, the settings' declaration and the public API say.

Skipped, saying why, where the ``docs`` extra is not installed (``make`` installs it with
``dev``)."""

from __future__ import annotations

import argparse
import html
import importlib.util
import os
import re
import subprocess
import sys
import typing
from pathlib import Path
from types import ModuleType

import pytest

for _package in ("mkdocs", "material", "mkdocstrings", "mkdocstrings_handlers.python"):
    pytest.importorskip(_package, reason="the docs extra is missing: pip install -e '.[docs]'")

from stowage.cli._config import StowageConfig  # noqa: E402
from stowage.cli._main import build_parser  # noqa: E402
from stowage.cli._setting_options import settings_table  # noqa: E402
from stowage.core import Settings, setting_infos  # noqa: E402

pytestmark = pytest.mark.timeout(300)

PUBLIC = ("stowage", "stowage.worker", "stowage.storage", "stowage.testing")
_ANCHOR = re.compile(r'<a id="\w+"></a>')


@pytest.fixture(scope="module")
def hook(repo_root: Path) -> ModuleType:
    """The site's hook module (``docs/_hooks/reference.py``), as MkDocs loads it."""
    spec = importlib.util.spec_from_file_location(
        "docs_reference_hook", repo_root / "docs" / "_hooks" / "reference.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def site(repo_root: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The site built as ``make docs`` builds it, into a temporary directory."""
    out = tmp_path_factory.mktemp("site")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}  # as `make docs` runs it
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet",
         "-f", str(repo_root / "mkdocs.yml"), "-d", str(out)],
        cwd=repo_root, env=env, capture_output=True, text=True, timeout=240, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "WARNING" not in done.stderr, done.stderr
    return out


def _text(page: Path) -> str:
    """The text of a built page, tags out."""
    return html.unescape(re.sub(r"<[^>]+>", " ", page.read_text(encoding="utf-8")))


def _page(repo_root: Path, name: str) -> str:
    return (repo_root / "docs" / name).read_text(encoding="utf-8")


def test_the_strict_build_makes_every_page_and_a_local_search_index(site: Path) -> None:
    for page in ("index.html", "guides/compaction/index.html", "reference/commands/index.html",
                 "reference/settings/index.html", "reference/api/stowage/index.html",
                 "benchmarks/index.html", "search/search_index.json"):  # fmt: skip
        assert (site / page).is_file(), page
    for page in site.rglob("*.html"):  # nothing the site shows is fetched from elsewhere
        text = page.read_text(encoding="utf-8")
        assert "fonts.googleapis.com" not in text and "fonts.gstatic.com" not in text, page


def test_the_command_reference_has_every_command_and_option_of_the_parser(site: Path) -> None:
    text = _text(site / "reference" / "commands" / "index.html")
    parser = build_parser()
    commands = next(a for a in parser._actions if isinstance(a.choices, dict)).choices
    assert len(commands) >= 20
    for name, command in commands.items():
        assert f"stowage {name}" in text, name
        section = text.split(f"stowage {name} ", 1)[1]
        command.format_help()  # a command adds its options when it is first used
        for action in command._actions:
            if action.help != argparse.SUPPRESS and action.option_strings and action.dest != "help":
                assert action.option_strings[0] in section, (name, action.option_strings)


def test_the_settings_page_is_the_table_the_declarations_make(
    hook: ModuleType, repo_root: Path
) -> None:
    """What the README's table was checked for, now on the page the table moved to: the page
    is made from the declarations, with an anchor per setting for the command reference."""
    page = _page(repo_root, "reference/settings.md")
    assert "<!-- generated: settings -->" in page
    rendered = hook.render(page)
    assert settings_table() in _ANCHOR.sub("", rendered)
    for info in setting_infos():
        if info.config or info.cli:
            assert f'<a id="{info.name}"></a>`{info.name}`' in rendered, info.name


def test_every_configuration_key_is_a_setting_and_on_the_settings_page(
    hook: ModuleType, repo_root: Path
) -> None:
    rendered = hook.render(_page(repo_root, "reference/settings.md"))
    fields = set(Settings.__dataclass_fields__)
    for name in StowageConfig.model_fields:
        if name in ("models", "mcp", "mcp_url", "otel", "prices"):
            assert f"`{name}`" in rendered or f"[{name}.NAME]" in rendered, name
            continue
        assert name in fields and f'<a id="{name}"></a>`{name}`' in rendered, name
    sessions = _page(repo_root, "guides/sessions.md")
    for name in ("micro_min_free", "reattach_share", "max_answer_chars"):
        assert name in fields and name in StowageConfig.model_fields
        assert f"--{name.replace('_', '-')}" in sessions  # the hand-written options table


def test_a_flag_that_sets_a_setting_links_to_its_row(hook: ModuleType) -> None:
    reference = hook.commands_reference()
    declared = [i for i in setting_infos() if i.cli]
    assert declared
    for info in declared:
        assert f"(setting [`{info.name}`](settings.md#{info.name}))" in reference, info.name
    literal = [i for i in declared if typing.get_origin(i.annotation) is typing.Literal]
    for info in literal:  # choices are listed
        assert " \\| ".join(f"`{c}`" for c in typing.get_args(info.annotation)) in reference


@pytest.mark.parametrize("module", PUBLIC)
def test_the_api_reference_documents_every_public_name(site: Path, module: str) -> None:
    page = site / "reference" / "api" / module.removeprefix("stowage.") / "index.html"
    text = page.read_text(encoding="utf-8")
    imported = __import__(module, fromlist=["__all__"])
    names = [n for n in imported.__all__ if not n.startswith("__")]  # __version__: a string
    missing = [n for n in names if f'id="{module}.{n}"' not in text]
    assert not missing, f"{module}: not in the API reference: {missing}"


def test_the_readmes_links_into_the_site_lead_to_pages(repo_root: Path) -> None:
    readme = (repo_root / "README.md").read_text(encoding="utf-8")
    links = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", readme)
    local = [link for link in links if "://" not in link]
    assert len(local) >= 15, local
    for link in local:
        assert (repo_root / link).exists(), link
    assert len(readme.splitlines()) <= 300
