"""Pick a log store from one string, so settings and the CLI name a store the same way."""

from __future__ import annotations

from pathlib import Path

from stowage.core import ConfigError, Durability, LogStore

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
    if not isinstance(spec, Path):
        if not isinstance(spec, str) or not spec.strip():
            raise ConfigError(f"store spec {spec!r} is empty or not a string; use {_FORMS}")
        scheme, sep, rest = spec.partition("://")
        if sep:
            return _database_store(spec, scheme, rest, durability)
    from ._jsonl import JsonlStore

    return JsonlStore(spec, durability=durability)


def _database_store(spec: str, scheme: str, rest: str, durability: Durability) -> LogStore:
    """The SQL store of URL ``spec`` (``scheme://rest``). Raises ``ConfigError``."""
    if scheme == "sqlite":
        if not rest.startswith("/") or rest == "/":
            raise ConfigError(f"store spec {spec!r} names no file; use {_FORMS}")
        from ._sqlite import SqliteStore

        return SqliteStore(rest[1:], durability=durability)
    if scheme in ("postgresql", "postgres"):
        from ._postgres import PostgresStore

        return PostgresStore(spec)
    raise ConfigError(f"store spec {spec!r} has an unsupported scheme {scheme!r}; use {_FORMS}")
