"""``stowage cost`` and ``list --cost`` over real loopback HTTP: turns against the fake server,
whose prefix cache reports cached tokens, then the figures checked by hand against the log
and against what the server itself counted."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path
from typing import Any

import anyio
import pytest
from stowage.testing import FakeOpenAIServer

pytestmark = pytest.mark.slow

Cli = Callable[..., subprocess.CompletedProcess[str]]  # the ``cli`` fixture of tests/conftest.py

PRICES = """
[prices."fake-model"]
input = 2.5
cached_input = 1.25
output = 10
"""
M = Decimal(1_000_000)


def price(usage: dict[str, Any]) -> Decimal:
    """By hand: uncached input, cached input and output at the prices above."""
    cached = usage.get("cached_tokens", 0)
    return (
        (usage["input_tokens"] - cached) * Decimal("2.5")
        + cached * Decimal("1.25")
        + usage["output_tokens"] * 10
    ) / M


def session(tmp_path: Path, cli: Cli) -> tuple[Path, dict[str, int]]:
    """A session of five turns, four of them resumed in a new process, that compacts."""
    work = tmp_path / "work"
    work.mkdir()
    (work / "stowage.toml").write_text(PRICES)
    for name in ("alpha.txt", "beta.txt", "gamma.txt"):
        (work / name).write_text(f"{name} holds " + "data " * 300)

    async def turns() -> dict[str, int]:
        async with FakeOpenAIServer() as server:
            common = ["--store", "st", "--model", "fake-model", "--base-url", server.base_url,
                      "--api-key", "sk-test", "--compact-threshold", "1200"]  # fmt: skip
            words = [("run", "--session", "c1", "read the alpha file")] + [
                ("resume", "c1", f"now look at file number {n}") for n in range(4)
            ]
            for argv in words:
                done = await anyio.to_thread.run_sync(lambda a=argv: cli(*a, *common, cwd=work))
                assert done.returncode == 0, done.stderr
            return dict(server.stats)

    return work, anyio.run(turns)


def test_cost_matches_the_figures_computed_by_hand_from_the_log_and_the_server(
    tmp_path: Path, cli: Cli
) -> None:
    work, stats = session(tmp_path, cli)
    done = cli("cost", "c1", "--json", "--store", "st", cwd=work)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    log = [json.loads(line) for line in (work / "st" / "c1.jsonl").read_text().splitlines()]
    rounds = [r["usage"] for r in log if r["type"] == "round_committed"]
    compactions = [r for r in log if r["type"] == "compaction"]
    summaries = [c["usage"] for c in compactions]
    assert len(compactions) >= 2 and all(summaries), "each summary's usage is in the log"

    # what the server counted is what the log holds, summaries included
    assert report["input_tokens"] == stats["round_input_tokens"] + stats["summary_input_tokens"]
    assert report["cached_tokens"] == stats["round_cached_tokens"] + stats["summary_cached_tokens"]
    assert report["cached_tokens"] > 0  # the fake server's prefix cache served some
    assert report["cached_share"] == report["cached_tokens"] / report["input_tokens"]
    # money, by hand
    assert Decimal(report["rounds_usd"]) == sum(map(price, rounds), Decimal(0))
    assert Decimal(report["summaries_usd"]) == sum(map(price, summaries), Decimal(0))
    assert Decimal(report["usd"]) == sum(map(price, rounds + summaries), Decimal(0))
    assert report["unknown"] == [] and report["sources"] == ["custom"]

    # each compaction: its summary's price, and the tokens it took out of each later round
    for mine, record in zip(report["compactions"], compactions, strict=True):
        assert Decimal(mine["usd"]) == price(record["usage"])
        removed = record["tokens_before"] - record["tokens_after"]
        later = [
            r for r in log
            if r["type"] == "round_committed" and r["seq"] > record["seq"]
            and not any(record["seq"] < c["seq"] < r["seq"] for c in compactions)
        ]  # fmt: skip
        assert mine["removed_tokens"] == removed > 0
        assert mine["rounds_after"] == len(later)
        assert mine["input_saved"] == removed * len(later)
        assert Decimal(mine["net_usd"]) == Decimal(mine["usd_saved"]) - Decimal(mine["usd"])

    # each resume (a new process) marked its first round; the server's cache outlived them
    resumed = [r for r in log if r["type"] == "round_committed" and r.get("resumed")]
    assert [r["round"] for r in report["resumes"]] == [r["round"] for r in resumed]
    assert len(resumed) == 4
    for mine, record in zip(report["resumes"], resumed, strict=True):
        usage = record["usage"]
        assert mine["share"] == usage.get("cached_tokens", 0) / usage["input_tokens"]
    assert any(r["share"] > 0 for r in report["resumes"])

    # the same figures for people, and as the list's column
    text = cli("cost", "c1", "--store", "st", cwd=work).stdout
    assert text.startswith(f"session c1: ${Decimal(report['usd']):.4f}")
    assert text.count("compaction at round") == len(compactions)
    listed = cli("list", "--cost", "--json", "--store", "st", cwd=work)
    assert json.loads(listed.stdout)["usd"] == report["usd"]
    assert "$" in cli("list", "--cost", "--store", "st", cwd=work).stdout


def test_a_model_without_a_price_costs_unknown_and_says_what_to_set(
    tmp_path: Path, cli: Cli, cli_env: dict[str, str]
) -> None:
    assert cli("demo", "--store", "st", cwd=tmp_path).returncode == 0
    (log,) = (tmp_path / "st").glob("*.jsonl")
    done = cli("cost", log.stem, "--json", "--store", "st", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["usd"] is None and report["input_tokens"] > 0
    assert 'stowage.toml: [prices."scripted"]' in done.stderr
    # a price set in the environment prices it
    cli_env["STOWAGE_PRICES"] = '{"scripted": {"input": 1, "output": 1}}'
    priced = cli("cost", log.stem, "--json", "--store", "st", cwd=tmp_path)
    tokens = report["input_tokens"] + report["output_tokens"]
    assert Decimal(json.loads(priced.stdout)["usd"]) == tokens / M
    # a fork has spent nothing yet: its parent's requests are the parent's
    fork = cli("fork", log.stem, "--as", "forked", "--store", "st", cwd=tmp_path)
    assert fork.returncode == 0, fork.stderr
    forked = json.loads(cli("cost", "forked", "--json", "--store", "st", cwd=tmp_path).stdout)
    assert (forked["usd"], forked["requests"], forked["compactions"]) == ("0", 0, [])
    listed = cli("list", "--cost", "--json", "--store", "st", cwd=tmp_path).stdout
    rows = {row["id"]: row["usd"] for row in map(json.loads, listed.splitlines())}
    assert rows == {log.stem: json.loads(priced.stdout)["usd"], "forked": "0"}


def test_cost_of_an_unknown_session_is_a_usage_error(tmp_path: Path, cli: Cli) -> None:
    (tmp_path / "st").mkdir()
    done = cli("cost", "nope", "--store", "st", cwd=tmp_path)
    assert done.returncode == 2
    assert "nope" in done.stderr and "Traceback" not in done.stderr
