"""``Settings`` takes a value that already has its field's type as it is, and gives any other
to pydantic: both ways give the same settings, so skipping pydantic changes nothing."""

from __future__ import annotations

from pathlib import Path, PurePosixPath
from typing import Any

import pytest
from stowage.core import ConfigError, Settings, _declare, setting_infos

CHECK = _declare.declarations(Settings)

#: values of every kind a field may be given: its own type, near misses, what JSON gives back
VALUES: tuple[Any, ...] = (
    None,
    True,
    False,
    0,
    1,
    -1,
    3,
    2**60,
    0.0,
    0.5,
    1.0,
    1.5,
    -0.5,
    float("nan"),
    float("inf"),
    "",
    "5",
    "0.5",
    "chat",
    "anthropic",
    "none",
    "read-only",
    "sdk",
    "scripted",
    "yes",
    Path("x"),
    PurePosixPath("x"),
    (),
    ("a", "b"),
    ["a", "b"],
    ["a", 1],
    [],
)


def _outcome(values: dict[str, Any], validate: Any) -> tuple[str, Any]:
    try:
        taken = validate(values)
    except ConfigError as exc:
        return "error", str(exc)
    return "ok", {name: (type(value), value) for name, value in taken.items()}


def _same(a: tuple[str, Any], b: tuple[str, Any]) -> bool:
    return repr(a) == repr(b)  # nan == nan by its repr


@pytest.mark.parametrize("info", setting_infos(), ids=lambda info: info.name)
def test_a_value_taken_as_given_is_what_pydantic_gives(info: Any) -> None:
    for value in VALUES:
        values = {info.name: value}
        as_given = _declare._as_given(info, value)
        if as_given is _declare._CONVERT:
            continue
        assert _same(_outcome(values, CHECK.validated), _outcome(values, CHECK.converted))


def test_settings_a_log_recorded_are_taken_without_pydantic() -> None:
    recorded = Settings().public()
    values = {name: recorded[name] for name in ("soft_mark", "mcp", "tool_deny", "command_env")}
    assert all(
        _declare._as_given(info, values[info.name]) is not _declare._CONVERT
        for info in setting_infos()
        if info.name in values
    )
    assert Settings(**values) == Settings()


def test_a_value_to_convert_is_converted_or_named() -> None:
    assert Settings(compact_threshold="12").compact_threshold == 12  # type: ignore[arg-type]
    assert Settings(mcp=["a"]).mcp == ("a",)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"^soft_mark must be <= 1, got 2$"):
        Settings(soft_mark=2)
    with pytest.raises(ConfigError, match=r"^bogus is not a setting"):
        Settings(bogus=1)  # type: ignore[call-arg]
