"""Pick a log store from one string, so settings and the CLI name a store the same way."""

from __future__ import annotations

from pathlib import Path

from stowage.core import ConfigError, Durability, LogStore

from ._jsonl import JsonlStore
from ._postgres import PostgresStore
from ._sqlite import SqliteStore

__all__ = ["open_store"]

_FORMS = (
    "a directory path (JSONL), 'sqlite:///relative/file.db' or 'sqlite:////absolute/file.db', "
    "or 'postgresql://user@host:port/db'"
)


def open_store(spec: str | Path, *, durability: Durability = "fsync") -> LogStore:
    """The store ``spec`` names: a path is a ``JsonlStore`` directory, ``sqlite:///path`` a
    ``SqliteStore``, ``postgresql://...`` (or ``postgres://``) a ``PostgresStore``.

    Raises ``ConfigError`` naming the spec and the accepted forms when it is none of them, or
    naming the ``[postgres]`` extra for a PostgreSQL spec without asyncpg installed. Opening
    creates nothing: a JSONL root or SQLite file is made by the first write.
    """
    if isinstance(spec, Path):
        return JsonlStore(spec, durability=durability)
    if not isinstance(spec, str) or not spec.strip():
        raise ConfigError(f"store spec {spec!r} is empty or not a string; use {_FORMS}")
    scheme, sep, rest = spec.partition("://")
    if not sep:
        return JsonlStore(spec, durability=durability)
    if scheme == "sqlite":
        if not rest.startswith("/") or rest == "/":
            raise ConfigError(f"store spec {spec!r} names no file; use {_FORMS}")
        return SqliteStore(rest[1:], durability=durability)
    if scheme in ("postgresql", "postgres"):
        return PostgresStore(spec)
    raise ConfigError(f"store spec {spec!r} has an unsupported scheme {scheme!r}; use {_FORMS}")
