"""Durable session logs behind one Protocol, and the codec that gives every store one format.

``open_store`` picks a store from a spec: a plain path is a JSONL directory (the default),
``sqlite:///path`` a SQLite file, ``postgresql://...`` a PostgreSQL database (asyncpg, the
``[postgres]`` extra, is imported only when one is opened).

Every store lets one writer per session write, across processes: see ``LogStore.acquire`` and
the ``stowage.core`` store module for the writer lease.
"""

from __future__ import annotations

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
