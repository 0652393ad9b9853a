"""The runtime drives its sessions through their named members, never their private state,
and a session knows nothing of its runtime."""

from __future__ import annotations

import ast
from pathlib import Path

FACADE = Path(__file__).resolve().parents[2] / "runtime" / "facade"


def test_a_session_does_not_import_the_runtime() -> None:
    tree = ast.parse((FACADE / "_session.py").read_text())
    imported = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    assert "_runtime" not in imported and "stowage.facade._runtime" not in imported
