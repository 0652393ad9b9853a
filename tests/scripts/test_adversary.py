"""scripts/adversary.py: a small run against JSONL and SQLite, in which every probe holds and
every probe that can run on a store was tried; the audit it judges by finds what is doubled
and a failure that does not end in one line."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

import anyio
import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "adversary.py"


def adversary() -> ModuleType:
    """The script as a module (its dataclasses need it in ``sys.modules``)."""
    if "adversary" not in sys.modules:
        spec = importlib.util.spec_from_file_location("adversary", SCRIPT)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules["adversary"] = module
        spec.loader.exec_module(module)
    return sys.modules["adversary"]


@pytest.mark.slow  # the script runs the command line in processes of its own
@pytest.mark.timeout(900)
@pytest.mark.bwrap  # the approval probe's calls act in the sandbox
async def test_a_small_run_holds_every_probe_on_jsonl_and_sqlite(tmp_path: Path) -> None:
    out = tmp_path / "figures.json"
    argv = ["--kills", "4", "--lies", "3", "--seed", "7", "--json", str(out)]
    with anyio.fail_after(850):
        done = await anyio.run_process([sys.executable, str(SCRIPT), *argv], check=False)
    assert done.returncode == 0, done.stdout.decode()[-3000:] + done.stderr.decode()[-3000:]
    figures = json.loads(out.read_text())
    assert figures["ok"] and figures["errors"] == []
    for kind in ("jsonl", "sqlite"):
        probes = figures["stores"][kind]
        ran = {name: p for name, p in probes.items() if p["skipped"] is None}
        assert all(p["failed"] == 0 and p["held"] == p["tried"] for p in ran.values()), probes
        expected = ["kill run", "kill resume", "kill approve", "race resume"]
        expected += ["lie: huge answer, small usage", "lie: stall, passing"]
        expected += ["lie: cut stream, every retry", "lie: the session goes on"]
        expected += ["kill archive"] if kind == "sqlite" else []
        assert all(ran[name]["tried"] > 0 for name in expected), probes
        # a probe is skipped only with its reason: the worker without PostgreSQL, archive on
        # JSONL, a full disk where no tmpfs may be mounted
        assert probes["kill worker"]["skipped"]
        assert probes["disk full"]["tried"] == 1 or probes["disk full"]["skipped"]
    assert figures["stores"]["jsonl"]["kill archive"]["skipped"]


def test_the_audit_finds_a_user_message_and_a_tool_output_logged_twice() -> None:
    def item(seq: int, **fields: str) -> dict[str, object]:
        return {"seq": seq, "type": "item", "item": fields}

    records = [
        item(1, type="user", text="read the file"),
        item(2, type="function_call_output", call_id="c1", output="ok"),
        item(3, type="user", text="read the file"),
        item(4, type="function_call_output", call_id="c1", output="ok"),
        item(5, type="user", text="once"),
    ]
    found = adversary().doubled(records)
    assert found == [
        "user message 'read the file' logged 2 times",
        "output of call c1 logged 2 times",
    ]
    assert adversary().doubled(records[:2] + records[4:]) == []


def test_a_failed_command_must_end_with_one_stowage_line_and_no_traceback() -> None:
    said = adversary().said_one_error
    assert said("warning logged first\nstowage: error: the endpoint failed\n") == []
    assert said("Traceback (most recent call last):\nstowage: error: x\n")
    assert said("stowage: error: x\nsomething after it\n")
    assert said("")


def test_a_store_kind_it_does_not_know_is_refused_by_name(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as exited:
        adversary().parse(["--store-kinds", "jsonl,mongodb"])
    assert exited.value.code == 2
    assert "--store-kinds 'jsonl,mongodb'" in capsys.readouterr().err
