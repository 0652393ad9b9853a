"""Durable session logs behind one Protocol, and the codec that gives every store one format.

``open_store`` picks a store from a spec: a plain path is a JSONL directory (the default),
``sqlite:///path`` a SQLite file, ``postgresql://...`` a PostgreSQL database (asyncpg, the
``[postgres]`` extra, is imported only when one is opened). Each store's module is imported
when its name is first looked up or a spec names it, so reading a JSONL store loads no
database driver.

Every store lets one writer per session write, across processes: see ``LogStore.acquire`` and
the ``stowage.core`` store module for the writer lease.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from stowage._lazy import lazy_exports

if TYPE_CHECKING:
    from stowage.core import LogRead, LogStore, TornTail

    from ._codec import decode_record, encode_record
    from ._jsonl import JsonlStore
    from ._open import open_store
    from ._postgres import PostgresStore
    from ._sqlite import SqliteStore
    from ._syncfs import load_syncfs

__all__ = [
    "JsonlStore",
    "LogRead",
    "LogStore",
    "PostgresStore",
    "SqliteStore",
    "TornTail",
    "decode_record",
    "encode_record",
    "load_syncfs",
    "open_store",
]

#: where each name is defined, imported when first looked up (see ``stowage._lazy``)
_EXPORTS = {
    "LogRead": "stowage.core",
    "LogStore": "stowage.core",
    "TornTail": "stowage.core",
    "decode_record": "._codec",
    "encode_record": "._codec",
    "JsonlStore": "._jsonl",
    "open_store": "._open",
    "PostgresStore": "._postgres",
    "SqliteStore": "._sqlite",
    "load_syncfs": "._syncfs",
}
if not TYPE_CHECKING:  # the checkers see the imports: a name not exported is an error
    __getattr__, __dir__ = lazy_exports(__name__, globals(), _EXPORTS)
