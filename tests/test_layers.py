"""The import rules import-linter cannot see: names, not modules.

import-linter (``make lint``) checks that layers point down, that no package imports another's
private module and that there are no cycles. These tests add what it does not check: no private
*name* crosses a package boundary, and no import of stowage hides inside a function or behind
``TYPE_CHECKING`` (the usual ways to dodge a cycle).
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
_LAZY_ALLOWED = {
    "stowage.cli",
    "stowage.cli._console",
    "stowage.cli._tracing",
    "stowage.model._factory",
}


@pytest.mark.parametrize(("module", "is_package", "path"), MODULES, ids=[m for m, _, _ in MODULES])
def test_every_import_of_stowage_is_at_module_level(
    module: str, is_package: bool, path: Path
) -> None:
    tree = ast.parse(path.read_text(), str(path))
    top_level = set()
    for node in tree.body:
        if isinstance(node, ast.ImportFrom | ast.Import):
            top_level.add(id(node))
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and id(node) not in top_level:
            target = _absolute(node, module, is_package)
            if target.startswith("stowage") and module not in _LAZY_ALLOWED:
                pytest.fail(f"{path}:{node.lineno} imports {target} below module level")
        if isinstance(node, ast.Import) and id(node) not in top_level:
            for alias in node.names:
                if alias.name.startswith("stowage") and module not in _LAZY_ALLOWED:
                    pytest.fail(f"{path}:{node.lineno} imports {alias.name} below module level")


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
