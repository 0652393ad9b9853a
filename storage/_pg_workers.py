"""The workers of a PostgreSQL store, each a row it writes itself: who is up, idle ones too.

Leases name only the workers that hold a session; a worker waiting for input holds none. So a
worker also keeps one row in ``<schema>.stowage_workers``: written when it is ready, rewritten
every lease-renew interval (one statement: a fleet of 100 workers at the default 10 s is 10
statements a second, whatever the rounds) and deleted when it stops. The row carries its rounds
so far and the previous beat's, so rounds/s is a difference of two beats that needs nothing
from the worker between them. A worker killed leaves its row, which stops counting as live
once ``expires`` passes and is deleted by the next beat of any worker an hour later.

``stowage workers`` joins these rows to the live leases (sessions held, per owner), so a store
object that holds leases but never beats (a plain ``stowage run``) is still listed.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["WorkerTable"]

# a worker row whose worker is gone this long is deleted by the next beat of another
_FORGET_AFTER = "1 hour"


@dataclass(frozen=True, slots=True)
class WorkerTable:
    """The SQL of the workers table of one schema (``sessions``: that schema's sessions)."""

    schema: str
    sessions: str

    @property
    def table(self) -> str:
        return f'"{self.schema}".stowage_workers'

    def ddl(self) -> str:
        """The table (idempotent): one row per store object that ran a worker."""
        return (
            f"CREATE TABLE IF NOT EXISTS {self.table} (owner text PRIMARY KEY, pid integer, "
            "host text, started timestamptz NOT NULL DEFAULT now(), "
            "renewed timestamptz NOT NULL DEFAULT now(), expires timestamptz NOT NULL, "
            "rounds bigint NOT NULL DEFAULT 0, rounds_before bigint, renewed_before timestamptz)"
        )

    def beat_sql(self) -> str:
        """Write this worker's row ($1 owner, $2 pid, $3 host, $4 TTL, $5 rounds); prunes."""
        return (
            f"WITH forget AS (DELETE FROM {self.table} "
            f"WHERE expires < now() - interval '{_FORGET_AFTER}') "
            f"INSERT INTO {self.table} AS w (owner, pid, host, expires, rounds) "
            "VALUES ($1, $2, $3, now() + make_interval(secs => $4), $5) "
            "ON CONFLICT (owner) DO UPDATE SET rounds_before = w.rounds, "
            "renewed_before = w.renewed, rounds = EXCLUDED.rounds, renewed = now(), "
            "expires = EXCLUDED.expires"
        )

    def leave_sql(self) -> str:
        """Delete this worker's row (``$1`` owner)."""
        return f"DELETE FROM {self.table} WHERE owner = $1"

    def list_sql(self) -> str:
        """The live workers and lease holders, one row each, ordered by host and pid."""
        # the lease count reads the sessions table as before; the workers table is tiny
        return (
            "WITH held AS (SELECT lease_owner AS owner, max(lease_pid) AS pid, "
            "max(lease_host) AS host, count(*) AS sessions, min(lease_since) AS since, "
            f"max(lease_renewed) AS renewed FROM {self.sessions} "
            "WHERE lease_owner IS NOT NULL AND lease_expires > now() GROUP BY lease_owner), "
            f"up AS (SELECT * FROM {self.table} WHERE expires > now()) "
            "SELECT coalesce(up.owner, held.owner) AS owner, coalesce(up.pid, held.pid) AS pid, "
            "coalesce(up.host, held.host) AS host, coalesce(held.sessions, 0) AS sessions, "
            "coalesce(held.since, up.started) AS since, "
            "greatest(held.renewed, up.renewed) AS renewed, "
            "CASE WHEN up.renewed > up.renewed_before THEN (up.rounds - up.rounds_before) "
            "/ extract(epoch FROM up.renewed - up.renewed_before)::float8 END AS rounds_per_s "
            "FROM up FULL JOIN held ON held.owner = up.owner "
            "ORDER BY 3, 2"
        )
