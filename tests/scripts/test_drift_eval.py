"""scripts/drift_eval.py on a small configuration: protected state keeps every constraint and
beats the plain summary, offline and through an OpenAI-compatible endpoint."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
from stowage.model._brain import ScriptedBrain
from stowage.testing import FakeOpenAIServer

pytestmark = pytest.mark.slow  # the script runs in a process of its own

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "drift_eval.py"
_spec = importlib.util.spec_from_file_location("drift_eval", SCRIPT)
assert _spec is not None and _spec.loader is not None
drift_eval = importlib.util.module_from_spec(_spec)
sys.modules["drift_eval"] = drift_eval
_spec.loader.exec_module(drift_eval)


def check(report: dict[str, Any], compactions: int) -> None:
    plain, protected = report["strategies"]["plain"], report["strategies"]["protected"]
    assert len(protected["recall_by_compaction"]) == compactions + 1
    assert protected["constraint_preservation"] == 1.0
    assert protected["recall_by_compaction"] == [1.0] * (compactions + 1)
    assert protected["drift_per_compaction"] == 0.0
    assert plain["constraint_preservation"] < 1.0
    assert plain["final_recall"] < protected["final_recall"]
    assert plain["drift_per_compaction"] > 0.0
    # a model deciding from its request retries what its request does not show failed
    assert protected["failed_approach_repeats"] == 0
    assert plain["failed_approach_repeats"] > 0
    assert plain["failed_approach_chances"] == protected["failed_approach_chances"] > 0
    # summaries made from the original records lose less than summaries of summaries
    regrounded = report["strategies"]["regrounded"]
    assert regrounded["final_recall"] > plain["final_recall"]


async def test_offline_run_shows_protected_state_beating_the_plain_summary(
    tmp_path: Path,
) -> None:
    with anyio.fail_after(90):
        report_path = tmp_path / "drift.json"
        argv = ["--sessions", "2", "--compactions", "20", "--loss", "0.15"]
        # a process of its own: the script configures logging for its whole process
        result = await anyio.run_process(
            [sys.executable, str(SCRIPT), *argv, "--json", str(report_path)], check=False
        )
        assert result.returncode == 0, result.stderr.decode()
        check(json.loads(report_path.read_text()), 20)
        out = result.stdout.decode()
        assert "plain" in out and "protected" in out and "preservation" in out


async def test_endpoint_run_through_the_openai_client(tmp_path: Path) -> None:
    with anyio.fail_after(90):
        # the endpoint answers as the offline run's agent does: each turn holds more than its
        # line of the summary (a compaction that frees nothing is not written)
        brain = drift_eval.WorkingNotes(ScriptedBrain(tool_rounds=0, loss=0.2, seed=5))
        async with FakeOpenAIServer(brain=brain) as server:
            report_path = tmp_path / "drift.json"
            result = await anyio.run_process(
                [
                    sys.executable,
                    str(SCRIPT),
                    "--sessions",
                    "1",
                    "--compactions",
                    "20",
                    "--base-url",
                    server.base_url,
                    "--model",
                    "fake-model",
                    "--api-key",
                    "sk-test",
                    "--json",
                    str(report_path),
                ],
                check=False,
            )
            assert result.returncode == 0, result.stderr.decode()
        report = json.loads(report_path.read_text())
        assert report["config"]["summarizer"].startswith("fake-model at http://127.0.0.1")
        check(report, 20)
