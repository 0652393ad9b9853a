"""The import rules import-linter cannot see: names, not modules.

import-linter (``make lint``) checks that layers point down, that no package imports another's
private module and that there are no cycles. These tests add what it does not check: no private
*name* crosses a package boundary, and no import of stowage hides inside a function or behind
``TYPE_CHECKING`` (the usual ways to dodge a cycle). Two kinds are deliberate: a package
``__init__`` names its exports under ``TYPE_CHECKING`` and imports them on first use from its
``_EXPORTS`` table (``stowage._lazy``), and the command line imports a command's code when that
command runs, so that ``stowage --version`` or ``stowage list`` start at once.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# folder -> the module name it installs as
FOLDERS = {"runtime": "stowage", "actors": "stowage.actors", "storage": "stowage.storage"}


def _modules() -> Iterator[tuple[str, bool, Path]]:
    for folder, package in FOLDERS.items():
        for path in sorted((ROOT / folder).rglob("*.py")):
            parts = path.relative_to(ROOT / folder).with_suffix("").parts
            is_package = parts[-1] == "__init__"
            if is_package:
                parts = parts[:-1]
            yield ".".join((package, *parts)), is_package, path


def _absolute(node: ast.ImportFrom, module: str, is_package: bool) -> str:
    if node.level == 0:
        return node.module or ""
    base = module.split(".") if is_package else module.split(".")[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join([*base, node.module] if node.module else base)


def _owner(module: str) -> str:
    """The subpackage a module belongs to: stowage.core._items -> stowage.core."""
    parts = module.split(".")
    return ".".join(parts[:2]) if len(parts) > 1 and not parts[1].startswith("_") else "stowage"


MODULES = list(_modules())


def test_the_walk_finds_every_layer() -> None:
    owners = {_owner(module) for module, _, _ in MODULES}
    for layer in ("core", "policy", "model", "tools", "actors", "storage", "facade", "cli"):
        assert f"stowage.{layer}" in owners


@pytest.mark.parametrize(("module", "is_package", "path"), MODULES, ids=[m for m, _, _ in MODULES])
def test_no_private_name_crosses_a_package_boundary(
    module: str, is_package: bool, path: Path
) -> None:
    tree = ast.parse(path.read_text(), str(path))
    for node in ast.walk(tree):
        if not isinstance(node, ast.ImportFrom):
            continue
        target = _absolute(node, module, is_package)
        if not target.startswith("stowage") or _owner(target) == _owner(module):
            continue
        private = [alias.name for alias in node.names if alias.name.startswith("_")]
        private = [name for name in private if name not in ("__version__",)]
        assert not private, f"{path}:{node.lineno} imports private {private} from {target}"


# The deliberate function-level imports: the command line says which extra to install when
# rich or psutil ([cli]), the console's Starlette, uvicorn and Jinja2 ([server]) or
# OpenTelemetry ([otel], only when tracing is switched on) are missing, instead of a traceback;
# and the OpenAI SDK (0.4 s to import) loads only when a session talks to an endpoint.
# The command line (every module of stowage.cli) imports each command's code in its handler:
# ``stowage --version`` and ``--help`` load none of the runtime, ``list`` and ``show`` only the
# store and the records.
_LAZY_ALLOWED = {
    # asks an endpoint for a window: the model package only then; counts the built-in tools'
    # schemas for a log that recorded none: the tools package only then
    "stowage.facade._identity",
    # a store's module when a spec names it: a JSONL store loads no database driver
    "stowage.storage._open",
    "stowage.model._factory",
    # `stowage fake-server`'s entry: the server extra is imported when a server is asked for,
    # so a missing starlette or uvicorn is one line naming the extra, not a traceback
    "stowage.testing.fake_server",
}
_LAZY_ALLOWED_PACKAGES = ("stowage.cli",)


def _lazy_allowed(module: str) -> bool:
    return module in _LAZY_ALLOWED or any(
        module == package or module.startswith(f"{package}.") for package in _LAZY_ALLOWED_PACKAGES
    )


def _type_checking_exports(tree: ast.Module) -> list[ast.ImportFrom]:
    """The imports under a module-level ``if TYPE_CHECKING:``: a package's lazy exports."""
    return [
        node
        for block in tree.body
        if isinstance(block, ast.If) and ast.unparse(block.test) == "TYPE_CHECKING"
        for node in block.body
        if isinstance(node, ast.ImportFrom)
    ]


@pytest.mark.parametrize(("module", "is_package", "path"), MODULES, ids=[m for m, _, _ in MODULES])
def test_every_import_of_stowage_is_at_module_level(
    module: str, is_package: bool, path: Path
) -> None:
    tree = ast.parse(path.read_text(), str(path))
    top_level = set()
    for node in tree.body:
        if isinstance(node, ast.ImportFrom | ast.Import):
            top_level.add(id(node))
    if is_package:
        top_level.update(id(node) for node in _type_checking_exports(tree))
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and id(node) not in top_level:
            target = _absolute(node, module, is_package)
            if target.startswith("stowage") and not _lazy_allowed(module):
                pytest.fail(f"{path}:{node.lineno} imports {target} below module level")
        if isinstance(node, ast.Import) and id(node) not in top_level:
            for alias in node.names:
                if alias.name.startswith("stowage") and not _lazy_allowed(module):
                    pytest.fail(f"{path}:{node.lineno} imports {alias.name} below module level")


PACKAGES = [(m, p) for m, is_package, p in MODULES if is_package]


@pytest.mark.parametrize(("module", "path"), PACKAGES, ids=[m for m, _ in PACKAGES])
def test_lazy_exports_match_what_the_type_checkers_see(module: str, path: Path) -> None:
    """A package's ``_EXPORTS`` table names exactly the imports under ``TYPE_CHECKING``, each
    from the same module, so what mypy sees is what the interpreter finds."""
    tree = ast.parse(path.read_text(), str(path))
    seen = {
        alias.name: _absolute(node, module, True)
        for node in _type_checking_exports(tree)
        for alias in node.names
    }
    table: dict[str, str] = {}
    exported: list[str] = []
    for node in tree.body:
        if isinstance(node, ast.Assign) and ast.unparse(node.targets[0]) == "_EXPORTS":
            table = ast.literal_eval(node.value)
        if isinstance(node, ast.Assign) and ast.unparse(node.targets[0]) == "__all__":
            exported = ast.literal_eval(node.value)
    resolved = {
        name: module + target if target.startswith(".") else target
        for name, target in table.items()
    }
    assert resolved == seen
    if table:  # a lazy package: every name of ``__all__`` is found through the table
        assert sorted(set(exported) - set(table)) == []


# Objects talk through named members: the sampler's helpers and the runtime reach into no other
# object's private state (the sampler's helpers once shared it, acting as one object).
_OBJECT_LAYERS = ("stowage.actors", "stowage.facade")


@pytest.mark.parametrize(
    ("module", "path"),
    [(m, p) for m, _, p in MODULES if _owner(m) in _OBJECT_LAYERS],
    ids=[m for m, _, _ in MODULES if _owner(m) in _OBJECT_LAYERS],
)
def test_no_module_touches_a_private_member_of_another_object(module: str, path: Path) -> None:
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if (
            isinstance(node, ast.Attribute)
            and node.attr.startswith("_")
            and not node.attr.startswith("__")
        ):
            owner = node.value
            assert isinstance(owner, ast.Name) and owner.id in ("self", "cls"), (
                f"{path}:{node.lineno} touches {ast.unparse(node)}"
            )
