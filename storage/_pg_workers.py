"""The workers of a PostgreSQL store, each a row it writes itself: who is up, idle ones too."""

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
