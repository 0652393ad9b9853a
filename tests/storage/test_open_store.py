"""open_store picks a store from a spec; the package exports exactly its public names."""

from __future__ import annotations

from pathlib import Path

import pytest
import stowage.storage as storage
from stowage.core._errors import ConfigError
from stowage.storage import JsonlStore, SqliteStore, open_store


def test_public_names_are_pinned() -> None:
    assert sorted(storage.__all__) == sorted(
        [
            "JsonlStore",
            "LogRead",
            "LogStore",
            "PostgresStore",
            "SqliteStore",
            "TornTail",
            "decode_record",
            "encode_record",
            "open_store",
        ]
    )
    for name in storage.__all__:
        assert getattr(storage, name) is not None


@pytest.mark.parametrize("as_path", [True, False])
def test_a_plain_path_opens_a_jsonl_store(tmp_path: Path, as_path: bool) -> None:
    spec = tmp_path / "logs"
    store = open_store(spec if as_path else str(spec), durability="none")
    assert isinstance(store, JsonlStore)
    assert store.root == spec.resolve()
    assert spec.is_dir()


def test_a_sqlite_url_opens_a_sqlite_store(tmp_path: Path) -> None:
    store = open_store(f"sqlite:///{tmp_path}/logs.db")  # four slashes: an absolute path
    assert isinstance(store, SqliteStore)
    assert repr(store) == f"SqliteStore({str(tmp_path / 'logs.db')!r})"


@pytest.mark.parametrize(
    "spec", ["", "   ", "sqlite://", "sqlite:///", "s3://bucket/logs", "mysql://db", "http://x"]
)
def test_an_unknown_spec_is_a_config_error_naming_it_and_the_forms(spec: str) -> None:
    with pytest.raises(ConfigError) as caught:
        open_store(spec)
    assert repr(spec) in str(caught.value)
    assert "sqlite:///" in str(caught.value) and "postgresql://" in str(caught.value)
