"""open_store picks a store from a spec and creates nothing; the package exports exactly its
public names, and imports without the [postgres] extra."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import stowage.storage as storage
from stowage.core import ConfigError
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
            "load_syncfs",
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
    assert not spec.exists(), "opening a store created its root"


def test_a_sqlite_url_creates_no_file(tmp_path: Path) -> None:
    open_store(f"sqlite:///{tmp_path}/db/logs.db")
    assert list(tmp_path.iterdir()) == []


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


WITHOUT_ASYNCPG = """
import sys
sys.modules["asyncpg"] = None  # as if the [postgres] extra were not installed
import stowage.storage
from stowage.core import ConfigError
for make in (lambda: stowage.storage.PostgresStore("postgresql://x@h/db"),
             lambda: stowage.storage.open_store("postgresql://x@h/db")):
    try:
        make()
    except ConfigError as exc:
        print(exc)
"""


def test_storage_imports_without_asyncpg_and_names_the_extra_when_postgres_is_used() -> None:
    done = subprocess.run(
        [sys.executable, "-c", WITHOUT_ASYNCPG],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    message = (
        "the PostgreSQL store needs the [postgres] extra: pip install 'stowage-runtime[postgres]'"
    )
    assert done.stdout.splitlines() == [message, message]


def test_importing_storage_does_not_load_asyncpg() -> None:
    probe = "import sys, stowage.storage; print('asyncpg' in sys.modules)"
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.stdout.strip() == "False", done.stderr
