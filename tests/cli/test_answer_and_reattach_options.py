"""``--max-answer-chars`` and ``--reattach-share`` are declared like ``--micro-min-free``: a
flag, a ``STOWAGE_*`` variable and a ``stowage.toml`` key, checked against ``Settings``. On a
continued session they apply to that run and are not recorded as identity overrides (they
are not part of a session's identity), rather than being refused.
"""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest
from stowage.cli._config import StowageConfig
from stowage.cli._main import build_parser
from stowage.cli._run_options import continued_settings, settings_from_options
from stowage.core import ConfigError, SessionRecord, Settings
from stowage.storage import JsonlStore


def test_the_new_settings_have_their_defaults_and_bounds() -> None:
    settings = Settings()
    assert settings.max_answer_chars == 1_000_000 and settings.reattach_share == 0.20
    assert settings.compaction_loop_repeats == 3 and settings.max_compactions_per_turn == 8
    assert settings.public()["max_answer_chars"] == 1_000_000
    with pytest.raises(ConfigError, match="max_answer_chars"):
        Settings(max_answer_chars=0)
    for share in (-0.1, 1.0):
        with pytest.raises(ConfigError, match="reattach_share"):
            Settings(reattach_share=share)


def test_flags_and_configuration_reach_the_settings(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("STOWAGE_REATTACH_SHARE", "0.35")
    assert StowageConfig().reattach_share == 0.35
    args = build_parser().parse_args(["run", "hi", "--max-answer-chars", "5000"])
    settings = settings_from_options(args)
    assert settings.max_answer_chars == 5000 and settings.reattach_share == 0.35
    with pytest.raises(SystemExit):
        build_parser().parse_args(["run", "hi", "--reattach-share", "1"])


async def test_a_continued_session_runs_with_them_and_records_the_compaction_settings(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The answer cap is the command's; how a session compacts is the session's own: typed
    again, it is an override the log records (and every later resume keeps)."""
    monkeypatch.chdir(tmp_path)
    with anyio.fail_after(10):
        store = JsonlStore(tmp_path / "st", durability="none")
        await store.create(
            "c", [SessionRecord(seq=1, model="scripted", settings=Settings().public())]
        )
        args = build_parser().parse_args(
            ["resume", "c", "more", "--max-answer-chars", "5000", "--reattach-share", "0.3",
             "--micro-min-free", "0.1"]
        )  # fmt: skip
        try:
            settings, overrides, _ = await continued_settings(args, store, "c")
        finally:
            await store.aclose()
    assert overrides == {"reattach_share": 0.3, "micro_min_free": 0.1}
    assert settings.max_answer_chars == 5000
    assert settings.reattach_share == 0.3 and settings.micro_min_free == 0.1
