"""Each setting is declared once; the command line and the configuration are made from the
declarations and agree with them (the settings reference the site makes from them is checked
in ``tests/docs/test_site.py``)."""

from __future__ import annotations

import argparse
import typing

import pytest
from stowage.cli._config import ModelProfile, StowageConfig
from stowage.cli._run_options import add_model_options
from stowage.cli._setting_options import typed_settings
from stowage.core import ConfigError, Settings, setting_infos


def parser() -> argparse.ArgumentParser:
    made = argparse.ArgumentParser(prog="stowage run", exit_on_error=False)
    add_model_options(made, system_help="system message")
    return made


def test_every_flag_is_a_declared_setting_with_its_type_bounds_and_choices() -> None:
    made = parser()
    flags = {a.option_strings[0]: a for a in made._actions if a.option_strings}
    declared = {i.cli: i for i in setting_infos() if i.cli}
    assert set(declared) <= set(flags)
    assert set(flags) - set(declared) == {"-h", "--tools-from"}
    for flag, info in declared.items():
        action = flags[flag]
        assert action.dest == info.name and action.default is None
        if typing.get_origin(info.annotation) is typing.Literal:
            assert list(action.choices or ()) == list(typing.get_args(info.annotation))
    # bounds come from the declaration: the flag refuses what Settings refuses
    for flag, bad in (("--soft-mark", "1.5"), ("--keep-rounds", "-1"), ("--context-window", "0"),
                      ("--micro-min-free", "1"), ("--max-answer-chars", "x")):  # fmt: skip
        with pytest.raises(argparse.ArgumentError, match="expected"):
            made.parse_args([flag, bad])
    args = made.parse_args(["--soft-mark", "0.6", "--no-stream", "--wire-api", "responses"])
    assert typed_settings(args) == {"soft_mark": 0.6, "stream": False, "wire_api": "responses"}


def test_every_configuration_key_and_profile_key_is_a_declared_setting() -> None:
    infos = {i.name: i for i in setting_infos()}
    for name in StowageConfig.model_fields:
        if name in ("models", "mcp", "mcp_url", "otel", "prices"):
            continue  # the command line's own keys
        assert name in infos and infos[name].config, name
    assert set(ModelProfile.model_fields) == {n for n, i in infos.items() if i.profile}
    # a file's bad value is refused with the same bounds as the setting
    with pytest.raises(ValueError, match="less than or equal to 1"):
        StowageConfig.model_validate({"soft_mark": 2})


def test_a_bad_value_names_the_setting_and_the_value() -> None:
    with pytest.raises(ConfigError, match=r"soft_mark must be <= 1, got 2"):
        Settings(soft_mark=2)
    with pytest.raises(ConfigError, match=r"modle is not a setting"):
        Settings(modle="x")  # type: ignore[call-arg]
    with pytest.raises(
        ConfigError, match=r"wire_api must be 'chat', 'responses' or 'anthropic', got 'x'"
    ):
        Settings(wire_api="x")  # type: ignore[arg-type]
    assert "sk-secret" not in repr(Settings(api_key="sk-secret", base_url="http://u:p@h/"))
