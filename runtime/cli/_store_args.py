"""Which store a command names, and how it is opened: one answer for every command.

``--store``, else ``$STOWAGE_STORE``, else ``store`` in a ``stowage.toml``, else ``.stowage``: a
directory (JSONL), a ``sqlite:///`` file or a ``postgresql://`` database, opened through
``stowage.storage.open_store``. A writer may create the store; a reader never does, and says
which path it looked at when there is nothing there.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from stowage.core import LogStore, Settings

__all__ = [
    "DEFAULT_STORE",
    "STORE_ENV",
    "open_cli_store",
    "reader_store",
    "settings_from",
    "store_dir",
    "store_fields",
    "store_label",
    "store_spec",
]

STORE_ENV = "STOWAGE_STORE"
DEFAULT_STORE = ".stowage"


def store_spec(args: argparse.Namespace) -> str:
    """The store the command names: ``--store``, else ``$STOWAGE_STORE``, else ``store`` in a
    ``stowage.toml`` (the project's over the user's), else ``.stowage``."""
    spec: str | None = getattr(args, "store", None) or os.environ.get(STORE_ENV)
    if not spec:
        from ._config import load_config  # the configuration (pydantic) only when it is read

        spec = load_config().store
    return spec if spec else DEFAULT_STORE


def open_cli_store(args: argparse.Namespace) -> LogStore:
    """The store the command names (see ``store_spec``), with ``--durability`` when it has one.
    Raises ``ConfigError`` for a spec that is none of the accepted forms."""
    from stowage.core import lineage_store
    from stowage.storage import open_store

    # forks read their parents' records, rewound logs skip their discarded branches
    return lineage_store(
        open_store(store_spec(args), durability=getattr(args, "durability", None) or "fsync")
    )


def reader_store(args: argparse.Namespace) -> LogStore:
    """The store the command names, as a reader (the store's default durability). Raises
    ``ConfigError`` naming the resolved path when a directory or SQLite store does not exist: a
    reader creates nothing, and "no sessions" would hide a wrong path."""
    from stowage.core import ConfigError, lineage_store
    from stowage.storage import open_store

    spec = store_spec(args)
    local = spec.removeprefix("sqlite:///") if spec.startswith("sqlite:///") else None
    if "://" not in spec:
        local = spec
    if local is not None and not Path(local).exists():
        where = Path(local).expanduser().resolve()
        raise ConfigError(
            f"store {where}: no such {'directory' if '://' not in spec else 'file'}: name "
            "the store with --store or STOWAGE_STORE ('stowage run MESSAGE' starts a session)"
        )
    return lineage_store(open_store(spec))


def store_label(args: argparse.Namespace) -> str:
    """The store a command uses, as it may be shown: a resolved directory, or a URL without
    its credentials."""
    from stowage.core import redact_url

    spec = store_spec(args)
    if "://" in spec:
        return redact_url(spec) or spec
    return str(Path(spec).expanduser().resolve())


def store_dir(spec: str) -> Path:
    """The directory ``Settings.store`` names for ``spec`` (the workspace tools never show
    it); a database URL is kept out of ``Settings`` altogether (its repr may be logged, and a
    URL may hold a password)."""
    return Path(DEFAULT_STORE) if "://" in spec else Path(spec)


def settings_from(args: argparse.Namespace) -> Settings:
    """Settings from parsed options. Raises ``ConfigError`` for bad values."""
    from ._run_options import settings_from_options

    return settings_from_options(args, **store_fields(args))


def store_fields(args: argparse.Namespace) -> dict[str, Any]:
    """The ``Settings`` fields the store options give: the store directory, the durability."""
    fields: dict[str, Any] = {"store": store_dir(store_spec(args))}
    if getattr(args, "durability", None) is not None:
        fields["durability"] = args.durability
    return fields
