"""The PostgreSQL statements of the writer lease: its columns on the session row, a grant, a
renewal, a release, and a claim of the sessions with input waiting."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from stowage.core import LeaseHolder

from ._lease import Lease, LeaseRow, Taken, now_holder

__all__ = ["LEASE_COLUMNS", "LeaseStatements", "lease_row"]

#: what ``lease_row`` reads of a session row
LEASE_COLUMNS = (
    "lease_token, lease_owner, lease_pid, lease_host, lease_since, "
    "(lease_expires IS NULL OR lease_expires < now()) AS lease_expired"
)

#: what a grant sets besides owner and token ($3 TTL in seconds, $4 pid, $5 host)
_GRANT = (
    "lease_expires = now() + make_interval(secs => $3), lease_renewed = now(), "
    "lease_pid = $4, lease_host = $5, lease_since = now()"
)


def lease_row(row: Mapping[str, Any]) -> LeaseRow:
    """The lease of a row read with ``LEASE_COLUMNS``."""
    owner = row["lease_owner"]
    holder = None
    if owner is not None and row["lease_pid"] is not None:
        holder = LeaseHolder(
            owner=owner, pid=row["lease_pid"], host=row["lease_host"], since=row["lease_since"]
        )
    return LeaseRow(
        token=int(row["lease_token"]),
        owner=owner,
        expired=bool(row["lease_expired"]),
        holder=holder,
    )


class LeaseStatements:
    """The lease statements of one store object (``owner``) on the ``sessions`` table."""

    def __init__(self, sessions: str, *, owner: str, ttl: float) -> None:
        self._sessions = sessions
        self._owner = owner
        self._ttl = ttl

    async def take(self, conn: Any, session_id: str) -> Taken:
        """Grant this store the lease of a locked row whose lease is free."""
        holder = now_holder(self._owner)  # its since is replaced by the database's now()
        granted = await conn.fetchrow(
            f"UPDATE {self._sessions} SET lease_owner = $2, lease_token = lease_token + 1, "
            f"{_GRANT} WHERE session_id = $1 "
            "RETURNING lease_token, lease_since",
            session_id,
            self._owner,
            self._ttl,
            holder.pid,
            holder.host,
        )
        return session_id, int(granted["lease_token"]), self._mine(holder, granted["lease_since"])

    async def lock(self, conn: Any, session_id: str, *, also: str = "") -> Any:
        """The session row's lease (and ``also``), locked ``FOR UPDATE``; None without a row."""
        return await conn.fetchrow(
            f"SELECT {also}{LEASE_COLUMNS} FROM {self._sessions} WHERE session_id = $1 FOR UPDATE",
            session_id,
        )

    async def extend(self, conn: Any, leases: Sequence[Lease]) -> set[str]:
        """Extend the leases still held under their tokens; returns their session ids."""
        renew = "lease_expires = now() + make_interval(secs => $4), lease_renewed = now()"
        return await self._update_mine(conn, leases, renew, self._ttl)

    async def free(self, conn: Any, leases: Sequence[Lease]) -> None:
        """Release the leases still held under their tokens."""
        release = (
            "lease_owner = NULL, lease_expires = NULL, lease_pid = NULL, lease_host = NULL, "
            "lease_since = NULL"
        )
        await self._update_mine(conn, leases, release)

    async def claim(
        self, pool: Any, *, limit: int, others_only: bool
    ) -> list[tuple[Taken, LeaseHolder | None]]:
        """Lease up to ``limit`` sessions with input and no live lease (``SKIP LOCKED``)."""
        holder = now_holder(self._owner)  # its since is replaced by the database's now()
        not_mine = "AND lease_owner IS DISTINCT FROM $1 " if others_only else ""
        rows = await pool.fetch(
            "WITH free AS (SELECT session_id, lease_owner AS was_owner, lease_pid AS was_pid, "
            f"lease_host AS was_host, lease_since AS was_since FROM {self._sessions} "
            "WHERE inbox <> '[]'::jsonb "
            "AND (lease_owner IS NULL OR lease_expires IS NULL OR lease_expires < now()) "
            f"{not_mine}ORDER BY session_id LIMIT $2 FOR UPDATE SKIP LOCKED) "
            f"UPDATE {self._sessions} AS s SET lease_owner = $1, "
            f"lease_token = s.lease_token + 1, {_GRANT} "
            "FROM free WHERE s.session_id = free.session_id "
            "RETURNING s.session_id, s.lease_token, s.lease_since, "
            "free.was_owner, free.was_pid, free.was_host, free.was_since",
            self._owner,
            limit,
            self._ttl,
            holder.pid,
            holder.host,
        )
        claimed: list[tuple[Taken, LeaseHolder | None]] = []
        for row in sorted(rows, key=lambda row: str(row["session_id"])):
            previous = None
            if row["was_owner"] is not None and row["was_pid"] is not None:
                previous = LeaseHolder(
                    owner=row["was_owner"],
                    pid=row["was_pid"],
                    host=row["was_host"],
                    since=row["was_since"],
                )
            mine = self._mine(holder, row["lease_since"])
            claimed.append(((str(row["session_id"]), int(row["lease_token"]), mine), previous))
        return claimed

    def _mine(self, holder: LeaseHolder, since: Any) -> LeaseHolder:
        return LeaseHolder(owner=self._owner, pid=holder.pid, host=holder.host, since=since)

    async def _update_mine(
        self, conn: Any, leases: Sequence[Lease], assignments: str, *arguments: Any
    ) -> set[str]:
        """``SET assignments`` on the rows still under ``leases``' tokens; the ids updated."""
        rows = await conn.fetch(
            f"WITH mine AS (SELECT s.session_id FROM {self._sessions} AS s "
            "JOIN unnest($1::text[], $2::bigint[]) AS u(session_id, token) "
            "ON s.session_id = u.session_id AND s.lease_token = u.token "
            "WHERE s.lease_owner = $3 ORDER BY s.session_id FOR UPDATE OF s) "
            f"UPDATE {self._sessions} AS s SET {assignments} "
            "FROM mine WHERE s.session_id = mine.session_id RETURNING s.session_id",
            [lease.session_id for lease in leases],
            [lease.token for lease in leases],
            self._owner,
            *arguments,
        )
        return {row["session_id"] for row in rows}
