"""URLs are recorded without their credentials; the original is used only for requests."""

from __future__ import annotations

from pathlib import Path

import pytest
from stowage.core import REDACTED, ConfigError, Settings, redact_url


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("https://api.example.com/v1", "https://api.example.com/v1"),
        ("https://user:pass@api.example.com/v1", f"https://{REDACTED}@api.example.com/v1"),
        ("http://token@127.0.0.1:8080/v1", f"http://{REDACTED}@127.0.0.1:8080/v1"),
        ("https://h/v1?key=abc", f"https://h/v1?key={REDACTED}"),
        (
            "https://h/v1?api-version=2024&api_key=abc",
            f"https://h/v1?api-version=2024&api_key={REDACTED}",
        ),
        (
            "https://h/v1?X-Amz-Signature=abc&region=eu",
            f"https://h/v1?X-Amz-Signature={REDACTED}&region=eu",
        ),
        (
            "https://u:p@[::1]:9/v1?access_token=t",
            f"https://{REDACTED}@[::1]:9/v1?access_token={REDACTED}",
        ),
    ],
)
def test_user_info_and_secret_query_values_are_redacted(url: str, expected: str) -> None:
    assert redact_url(url) == expected


def test_none_stays_none_and_garbage_hides_what_precedes_an_at() -> None:
    assert redact_url(None) is None
    assert "pw" not in (redact_url("user:pw@host:notaport/x") or "")


def test_settings_record_and_repr_never_carry_the_credentials() -> None:
    settings = Settings(base_url="https://alice:hunter2@h.example/v1?key=sk-planted")
    assert settings.base_url == "https://alice:hunter2@h.example/v1?key=sk-planted"
    recorded = str(settings.public()) + repr(settings)
    for secret in ("hunter2", "alice", "sk-planted"):
        assert secret not in recorded


@pytest.mark.parametrize("url", ["sqlite:////tmp/a.db", "sqlite:///rel.db", "file:///x/y"])
def test_a_url_with_nothing_to_hide_is_kept_as_typed(url: str) -> None:
    """Rebuilding ``sqlite:////abs`` drops its empty authority and names another file."""
    assert redact_url(url) == url


@pytest.mark.parametrize(
    "store",
    [
        "sqlite:///var/lib/stowage/s.db",
        "postgresql://stowage:hunter2@db.internal/stowage",
        Path("postgres://stowage:hunter2@db.internal/stowage"),
    ],
)
def test_a_database_url_as_settings_store_is_refused_without_echoing_it(
    store: str | Path, tmp_path: Path
) -> None:
    """``Settings.store`` is a JSONL directory: a URL there would become a directory named
    after it (password and all), so it is refused, naming only the scheme and the way to
    open a database store."""
    with pytest.raises(ConfigError) as refused:
        Settings(store=store)
    message = str(refused.value)
    assert "hunter2" not in message and "db.internal" not in message
    assert "open_store" in message and "Runtime(store=" in message
    assert Settings(store=tmp_path / "a:b").store == tmp_path / "a:b"  # a colon alone is a path
