"""URLs are recorded without their credentials; the original is used only for requests."""

from __future__ import annotations

import pytest
from stowage.core import REDACTED, Settings, redact_url


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
