"""The sampler's helpers are objects of their own: none reaches into another's private state,
and none knows the sampler."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ACTORS = Path(__file__).resolve().parents[2] / "actors"


@pytest.mark.parametrize(
    "helper", ["_journal.py", "_plans.py", "_gate.py", "_summary_jobs.py", "compactor.py"]
)
def test_no_helper_imports_the_sampler(helper: str) -> None:
    tree = ast.parse((ACTORS / helper).read_text())
    imported = {
        node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module
    }
    assert "sampler" not in imported and "stowage.actors.sampler" not in imported
