"""The runtime's limits are declared once (``RuntimeLimits``, ``WorkerOptions``): the flags of
``stowage worker`` and ``stowage load`` are made from the declarations, with their defaults,
ranges and help, and a value out of range is refused naming the limit and the range."""

from __future__ import annotations

import argparse

import pytest
from stowage.core import (
    ConfigError,
    RuntimeLimits,
    add_limit_options,
    limit_infos,
    limits_from_args,
)
from stowage.load import add_load_arguments
from stowage.load._engine import LoadConfig
from stowage.worker import WORKER_LIMITS, WorkerOptions


def _options(parser: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    # argparse lists its options only in ``_actions`` (the docs hook reads it the same way)
    return {a.option_strings[0]: a for a in parser._actions if a.option_strings}


def _worker_parser() -> argparse.ArgumentParser:
    from stowage.cli._worker import add_worker_commands

    parser = argparse.ArgumentParser(prog="stowage")
    add_worker_commands(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["worker", "--store", "postgresql://h/db"])
    assert args.command == "worker"
    return parser


def test_every_limit_is_a_worker_flag_and_a_load_flag_with_its_declared_help() -> None:
    load = argparse.ArgumentParser()
    add_load_arguments(load)
    worker = argparse.ArgumentParser()
    add_limit_options(worker, WORKER_LIMITS)
    for parser, defaults in ((load, LoadConfig().limits), (worker, WORKER_LIMITS)):
        options = _options(parser)
        for info in limit_infos(RuntimeLimits):
            action = options[info.flag]
            assert action.default == getattr(defaults, info.name)
            assert info.help in (action.help or "") and info.allowed() in (action.help or "")


def test_the_worker_command_reads_its_limits_and_pacing_from_the_declarations() -> None:
    parser = _worker_parser()
    args = parser.parse_args(["worker", "--store", "postgresql://h/db", "--idle-timeout", "0"])
    assert limits_from_args(RuntimeLimits, args) == WORKER_LIMITS.with_(idle_timeout=0)
    assert limits_from_args(WorkerOptions, args) == WorkerOptions()
    args = parser.parse_args(
        ["worker", "--store", "postgresql://h/db", "--max-running-sessions", "none"]
    )
    assert limits_from_args(RuntimeLimits, args).max_running_sessions is None


@pytest.mark.parametrize(
    ("flag", "value", "expected"),
    [
        ("--idle-timeout", "-1", "expected >= 0 (seconds; None: never), got -1"),
        ("--max-model-calls", "0", "expected >= 1 (a whole number; None: no limit), got 0"),
        ("--max-tool-calls", "2.5", "expected >= 1"),
        ("--concurrency", "none", "expected >= 1 (a whole number), got none"),
        ("--metrics-port", "70000", "expected >= 0 and <= 65535"),
    ],
)
def test_a_flag_out_of_range_is_refused_with_the_range(
    flag: str, value: str, expected: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit):
        _worker_parser().parse_args(["worker", "--store", "postgresql://h/db", flag, value])
    assert f"argument {flag}: {expected}" in capsys.readouterr().err


def test_a_limit_out_of_range_in_python_names_the_limit_and_the_range() -> None:
    with pytest.raises(ConfigError, match=r"^idle_timeout must be >= 0 \(seconds; None: never\)"):
        RuntimeLimits(idle_timeout=-0.5)
    with pytest.raises(ConfigError, match=r"^max_compactions must be >= 1 .*got True"):
        RuntimeLimits(max_compactions=True)
    with pytest.raises(ConfigError, match=r"^poll_interval must be > 0 \(seconds\), got 0"):
        WorkerOptions(poll_interval=0)
    assert RuntimeLimits(idle_timeout=0).idle_timeout == 0  # 0: hibernate at once
