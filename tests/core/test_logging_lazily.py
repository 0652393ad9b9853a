"""``configure_logging(..., lazily=True)`` imports structlog at the first log line, and that
line is configured as an eager configuration's would be: on stderr, never on stdout."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

PROBE = """
import json, sys
from stowage.core import configure_logging, get_logger
log = get_logger("stowage.test")
configure_logging({fmt!r}, "warning", quiet={{"quieted"}}, lazily={lazily!r})
before = "structlog" in sys.modules
log.info("below_the_level")
log.warning("quieted")
log.warning("said", answer=42)
print(json.dumps({{"structlog_before_logging": before}}))
"""


def run_probe(fmt: str, lazily: bool, cwd: Path) -> tuple[dict[str, bool], str]:
    done = subprocess.run(
        [sys.executable, "-c", PROBE.format(fmt=fmt, lazily=lazily)],
        cwd=cwd, capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    return json.loads(done.stdout), done.stderr


def test_a_lazy_configuration_imports_structlog_at_the_first_line(tmp_path: Path) -> None:
    report, _ = run_probe("json", True, tmp_path)
    assert report == {"structlog_before_logging": False}


def test_a_lazy_configuration_logs_as_an_eager_one(tmp_path: Path) -> None:
    for fmt in ("json", "console"):
        _, lazy = run_probe(fmt, True, tmp_path)
        _, eager = run_probe(fmt, False, tmp_path)
        assert "said" in lazy and "42" in lazy
        assert "quieted" not in lazy and "below_the_level" not in lazy
        if fmt == "json":
            lazy_line, eager_line = json.loads(lazy), json.loads(eager)
            assert lazy_line.keys() == eager_line.keys()
            assert {**lazy_line, "timestamp": ""} == {**eager_line, "timestamp": ""}
        else:
            assert lazy.split(" ", 1)[1] == eager.split(" ", 1)[1]  # past the timestamp
