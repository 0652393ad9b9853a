"""How the PostgreSQL store reaches its database: the URL and schema, the pool, the tables."""

from __future__ import annotations

import inspect
import re
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager, suppress
from types import ModuleType
from typing import Any, TypeVar
from urllib.parse import unquote_plus

import anyio
from anyio.streams.memory import MemoryObjectReceiveStream
from stowage.core import ConfigError, StoreError

__all__ = ["PgPool", "core_ddl", "resolve_schema"]

T = TypeVar("T")

_SCHEMA_NAME = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")
_NO_EXTRA = (
    "the PostgreSQL store needs the [postgres] extra: pip install 'stowage-runtime[postgres]'"
)


def resolve_schema(dsn: str, schema: str | None) -> tuple[str, str]:
    """The URL without its ``schema`` parameter, and the schema (given, the URL's, or public)."""
    base, mark, query = dsn.partition("?")
    named: list[str] = []
    kept: list[str] = []
    for part in query.split("&") if mark else ():
        key, _, value = part.partition("=")
        if unquote_plus(key) == "schema":
            named.append(unquote_plus(value))
        elif part:
            kept.append(part)
    if len(named) > 1:
        raise ConfigError(f"the store URL names its schema {len(named)} times; name it once")
    from_url = named[0] if named else None
    if schema is not None and from_url is not None and schema != from_url:
        raise ConfigError(
            f"schema {schema!r} differs from the store URL's ?schema={from_url}; "
            "give one of them, or the same name in both"
        )
    chosen = schema if schema is not None else from_url if from_url is not None else "public"
    if not _SCHEMA_NAME.fullmatch(chosen):
        raise ConfigError(f"schema {chosen!r} must be lower-case letters, digits and '_'")
    return (base + "?" + "&".join(kept) if kept else base), chosen


def core_ddl(schema: str, sessions: str, records: str) -> list[str]:
    """The statements that make the schema, the sessions table and the records table."""
    return [
        f'CREATE SCHEMA IF NOT EXISTS "{schema}"',
        f"CREATE TABLE IF NOT EXISTS {sessions} ("
        "session_id text PRIMARY KEY, last_seq bigint NOT NULL DEFAULT 0, "
        "tail_from bigint NOT NULL DEFAULT 1, lease_owner text, "
        "lease_token bigint NOT NULL DEFAULT 0, lease_expires timestamptz, "
        "inbox jsonb NOT NULL DEFAULT '[]'::jsonb)",
        # the holder's name, added to tables made before leases named their holder
        f"ALTER TABLE {sessions} ADD COLUMN IF NOT EXISTS lease_pid integer, "
        "ADD COLUMN IF NOT EXISTS lease_host text, "
        "ADD COLUMN IF NOT EXISTS lease_since timestamptz, "
        "ADD COLUMN IF NOT EXISTS lease_renewed timestamptz",
        f"CREATE TABLE IF NOT EXISTS {records} ("
        "session_id text NOT NULL, seq bigint NOT NULL, body text NOT NULL, "
        "PRIMARY KEY (session_id, seq))",
    ]


def _asyncpg() -> ModuleType:
    """The asyncpg module; ``ConfigError`` naming the extra when it is not installed."""
    try:
        import asyncpg  # type: ignore[import-untyped,unused-ignore]
    except ImportError as exc:
        raise ConfigError(_NO_EXTRA) from exc
    module: ModuleType = asyncpg
    return module


class PgPool:
    """One store's asyncpg pool, opened on first use; a writer's first use runs ``ddl``."""

    def __init__(
        self, dsn: str, *, min_size: int, max_size: int, ddl: Sequence[str], name: str
    ) -> None:
        self.pg = _asyncpg()
        self.errors: tuple[type[BaseException], ...] = (
            self.pg.PostgresError,
            self.pg.InterfaceError,
            OSError,
        )
        self._dsn = dsn
        self._min_size, self._max_size = min_size, max_size
        self._ddl = list(ddl)
        self._name = name  # the store's repr, for "is closed"
        self._pool: Any = None
        self._schema_ready = False
        self._lock = anyio.Lock()
        self._closed = False

    @contextmanager
    def mapped(self, what: str = "postgres store") -> Iterator[None]:
        """Raise the driver's errors (and ``OSError``) as ``StoreError`` prefixed ``what``."""
        try:
            yield
        except self.errors as exc:
            raise StoreError(f"{what}: {exc}") from exc

    async def get(self, *, write: bool) -> Any:
        """The pool (with the tables when ``write``); raises ``StoreError``."""
        async with self._lock:
            if self._closed:
                raise StoreError(f"{self._name} is closed")
            with self.mapped("cannot open postgres store"):
                if self._pool is None:
                    self._pool = await self.pg.create_pool(
                        self._dsn,
                        min_size=self._min_size,
                        max_size=self._max_size,
                        **_pool_options(self.pg),
                    )
                if write and not self._schema_ready:
                    await self._ensure_schema(self._pool)
                    self._schema_ready = True
            return self._pool

    @asynccontextmanager
    async def connection(self, *, transaction: bool = False) -> AsyncIterator[Any]:
        """A writer's pooled connection (a transaction if asked); errors become ``StoreError``."""
        pool = await self.get(write=True)
        with self.mapped():
            async with pool.acquire() as conn:
                if not transaction:
                    yield conn
                    return
                async with conn.transaction():
                    yield conn

    async def write(self, fn: Callable[[Any], Awaitable[T]]) -> T:
        """``fn(pool)`` for a writer, its errors raised as ``StoreError``."""
        pool = await self.get(write=True)
        with self.mapped():
            return await fn(pool)

    async def read(self, fn: Callable[[Any], Awaitable[Any]], missing: Callable[[], T]) -> Any:
        """``fn(pool)`` for a reader; ``missing()`` answers it when the tables do not exist yet."""
        pool = await self.get(write=False)
        try:
            return await fn(pool)
        except (self.pg.UndefinedTableError, self.pg.InvalidSchemaNameError):
            return missing()
        except self.errors as exc:
            raise StoreError(f"postgres store: {exc}") from exc

    async def close(self, before: Callable[[Any], Awaitable[None]] | None = None) -> None:
        """Run ``before(conn)`` (errors ignored), then close the pool for good."""
        async with self._lock:
            if self._closed:
                return
            self._closed = True
            if self._pool is None:
                return
            pool, self._pool = self._pool, None
            with anyio.CancelScope(shield=True):
                try:
                    if before is not None:
                        async with pool.acquire() as conn:
                            await before(conn)
                except self.errors:
                    pass
                finally:
                    await pool.close()

    @asynccontextmanager
    async def listen(
        self, channel: str, *, buffer: int
    ) -> AsyncIterator[MemoryObjectReceiveStream[str]]:
        """LISTEN on ``channel`` over a connection of its own; yields the payloads."""
        send, receive = anyio.create_memory_object_stream[str](buffer)

        def on_notification(conn: Any, pid: int, channel: str, payload: str) -> None:
            # a full buffer drops it: the reader is behind, and one wake-up is as good as many
            with suppress(anyio.WouldBlock, anyio.ClosedResourceError, anyio.BrokenResourceError):
                send.send_nowait(payload)

        def on_lost(conn: Any) -> None:
            send.close()

        with self.mapped("cannot listen on postgres store"):
            conn = await self.pg.connect(self._dsn)
        try:
            with self.mapped():
                await conn.add_listener(channel, on_notification)
                conn.add_termination_listener(on_lost)
                with receive:
                    yield receive
        finally:
            send.close()
            with anyio.CancelScope(shield=True), anyio.move_on_after(5):
                try:
                    await conn.close()
                except self.errors:
                    conn.terminate()

    async def _ensure_schema(self, pool: Any) -> None:
        async with pool.acquire() as conn, conn.transaction():
            # Serialise first-use DDL across workers: concurrent CREATE ... IF NOT EXISTS can
            # still collide in the catalogue.
            await conn.execute("SELECT pg_advisory_xact_lock(hashtext('stowage_schema'))")
            for statement in self._ddl:
                await conn.execute(statement)


def _pool_options(pg: ModuleType) -> dict[str, Any]:
    """No reset query when a connection goes back to the pool (asyncpg >= 0.30 lets us say so)."""
    if "reset" not in inspect.signature(pg.create_pool).parameters:
        return {}
    return {"reset": _keep_session}


async def _keep_session(conn: Any) -> None:
    """The pool's reset: nothing to undo (see ``_pool_options``)."""
