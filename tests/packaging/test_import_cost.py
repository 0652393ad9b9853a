"""What ``import stowage`` costs: the extras' packages are not loaded by the core import.

Each check runs in a fresh interpreter of the development venv, where every extra is installed:
an eager import of one shows here, and would break an install without that extra. structlog
imports rich by itself when rich is installed, so structlog is imported first and only what the
stowage import adds counts. The packages export their names lazily, so the probe also looks up
every name a module exports: what counts is what using them loads.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

#: the packages of the extras: [cli] rich, psutil; [postgres] asyncpg; [server] starlette,
#: uvicorn; [anthropic] anthropic
EXTRAS = ("anthropic", "asyncpg", "psutil", "rich", "starlette", "uvicorn")

PROBE = """
import json, sys
# structlog (and httpx before openai 3) import rich on their own when it is installed; what
# counts is what stowage itself adds
import structlog
try:
    import httpx
except ImportError:
    pass
before = set(sys.modules)
assert {module!r} not in before, "imported before the probe"
import {module}
for name in getattr({module}, "__all__", ()):
    getattr({module}, name)
print(json.dumps(sorted(set(sys.modules) - before)))
"""


def added_by_import(module: str, cwd: Path) -> list[str]:
    """The modules ``import module`` and a look-up of each name it exports load beyond the
    interpreter's and structlog's."""
    done = subprocess.run(
        [sys.executable, "-c", PROBE.format(module=module)],
        cwd=cwd, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return list(json.loads(done.stdout))


def test_import_stowage_loads_none_of_the_extras(tmp_path: Path) -> None:
    added = added_by_import("stowage", tmp_path)
    assert "stowage.facade" in added  # the probe saw the import and looked the names up
    assert [m for m in added if m.partition(".")[0] in EXTRAS] == []


def test_the_store_contract_for_third_party_stores_needs_no_test_framework(
    tmp_path: Path,
) -> None:
    added = added_by_import("stowage.storage.contract", tmp_path)
    assert [m for m in added if m.partition(".")[0] in ("pytest", "_pytest", "hypothesis")] == []
