"""The PostgreSQL store's inbox: messages waiting for a worker, and which of them the log holds.

A queued message is a JSON object in its session's ``inbox`` array: ``message_id`` (the
sender's uuid), ``text``, ``pinned`` and ``sent`` (when). ``<schema>.stowage_messages`` has a
row per message id the log holds: the seq of its user item, then either ``answered_seq`` (the
seq of its turn's ``finished`` record) or ``status = 'failed'`` with the reason a worker gave up.

The rows move with the log, in the append's own transaction: the append that logs a user item
carrying a message id inserts its row (and is refused, before anything is written, when the id
is there already: the log holds a message id at most once); the append that logs a turn's
``finished`` record marks the turn's messages answered and takes them out of the inbox. So a
message leaves the inbox only once its answer is durable, and a worker that dies mid-turn leaves
it queued, marked as logged, for the next worker to finish the turn without logging it again.

A session whose log does not exist yet can still receive messages (``push_message(...,
create=True)``): its row has ``tail_from = 0`` (a real log's is 1 or more) until ``create``.

Workers are woken by NOTIFY on two channels per schema: ``inbox`` when a message is queued,
``answers`` when one is answered or given up on; the payload is the session id.
"""

from __future__ import annotations

import hashlib
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import orjson
from stowage.core import ItemRecord, Record, StoreError, TurnRecord, UserMessage

__all__ = [
    "InboxTables",
    "Logged",
    "channel_name",
    "decode_entries",
    "keep_entries",
    "messages_logged",
    "queued_status",
]

#: the most a NOTIFY channel name may be (PostgreSQL's NAMEDATALEN - 1)
_MAX_CHANNEL = 63


def channel_name(schema: str, kind: Literal["inbox", "answers"]) -> str:
    """The NOTIFY channel for ``kind`` in ``schema``; a long schema name is hashed to fit."""
    name = f"stowage_{kind}_{schema}"
    if len(name) <= _MAX_CHANNEL:
        return name
    digest = hashlib.sha256(schema.encode()).hexdigest()[:16]
    return f"stowage_{kind}_{digest}"


@dataclass(frozen=True, slots=True, kw_only=True)
class Logged:
    """The message ids a group of batches logs, and the turns it finishes."""

    #: (session_id, message_id, seq of the user item)
    messages: list[tuple[str, str, int]]
    #: session_id -> seq of the newest ``finished`` turn record
    finished: dict[str, int]

    def only(self, session_ids: Collection[str]) -> Logged:
        """What the batches of ``session_ids`` log (the sessions a group commit accepted)."""
        return Logged(
            messages=[m for m in self.messages if m[0] in session_ids],
            finished={k: v for k, v in self.finished.items() if k in session_ids},
        )

    def refusal(self, session_id: str, logged_before: Mapping[str, str]) -> StoreError | None:
        """The error refusing ``session_id``'s batches for logging a message id a second time."""
        message_id = logged_before.get(session_id)
        if message_id is None:
            return None
        return StoreError(
            f"session {session_id!r}: message {message_id!r} is in the log already; "
            "a message is logged once"
        )


def messages_logged(batches: Sequence[tuple[str, Sequence[Record]]]) -> Logged:
    """The user items with a message id, and the finished turns, in ``batches``."""
    messages: list[tuple[str, str, int]] = []
    finished: dict[str, int] = {}
    for session_id, records in batches:
        for record in records:
            if isinstance(record, ItemRecord) and isinstance(record.item, UserMessage):
                message_id = record.item.message_id
                if message_id is not None:
                    messages.append((session_id, message_id, record.seq))
            elif isinstance(record, TurnRecord) and record.phase == "finished":
                finished[session_id] = max(record.seq, finished.get(session_id, 0))
    return Logged(messages=messages, finished=finished)


def decode_entries(inbox: str | bytes) -> list[dict[str, Any]]:
    """The inbox column's entries; a non-object comes back as ``{"value": ...}``."""
    loaded = orjson.loads(inbox)
    if not isinstance(loaded, list):
        return []
    return [entry if isinstance(entry, dict) else {"value": entry} for entry in loaded]


# the inbox without the entries a predicate on ``e`` matches, in order
_KEEP = (
    "(SELECT coalesce(jsonb_agg(e ORDER BY n), '[]'::jsonb) "
    "FROM jsonb_array_elements({inbox}) WITH ORDINALITY AS x(e, n) WHERE {keep})"
)


def keep_entries(inbox: str, keep: str) -> str:
    """SQL for the entries of ``inbox`` for which ``keep`` (a predicate on ``e``) holds."""
    return _KEEP.format(inbox=inbox, keep=keep)


@dataclass(frozen=True, slots=True)
class InboxTables:
    """The SQL of the inbox over one schema's tables."""

    schema: str

    @property
    def sessions(self) -> str:
        return f'"{self.schema}".stowage_sessions'

    @property
    def messages(self) -> str:
        return f'"{self.schema}".stowage_messages'

    @property
    def inbox_channel(self) -> str:
        return channel_name(self.schema, "inbox")

    @property
    def answers_channel(self) -> str:
        return channel_name(self.schema, "answers")

    def ddl(self) -> list[str]:
        """The statements that make the inbox's table and index (idempotent)."""
        return [
            f"CREATE TABLE IF NOT EXISTS {self.messages} ("
            "session_id text NOT NULL, message_id text NOT NULL, seq bigint, "
            "answered_seq bigint, status text NOT NULL DEFAULT 'logged', reason text, "
            "PRIMARY KEY (session_id, message_id))",
            # claims look only at sessions with input waiting
            f"CREATE INDEX IF NOT EXISTS stowage_sessions_waiting ON {self.sessions} "
            "(session_id) WHERE inbox <> '[]'::jsonb",
            # a finished turn marks its session's open messages answered: only those are
            # read, not every message the session ever answered
            f"CREATE INDEX IF NOT EXISTS stowage_messages_open ON {self.messages} "
            "(session_id, seq) WHERE status = 'logged'",
        ]

    # -- appends ----------------------------------------------------------------------------

    async def already_logged(self, conn: Any, logged: Logged) -> dict[str, str]:
        """Session id -> a message id of ``logged`` that the log holds already."""
        if not logged.messages:
            return {}
        rows = await conn.fetch(
            f"SELECT m.session_id, m.message_id FROM {self.messages} AS m "
            "JOIN unnest($1::text[], $2::text[]) AS u(session_id, message_id) "
            "ON m.session_id = u.session_id AND m.message_id = u.message_id",
            [m[0] for m in logged.messages],
            [m[1] for m in logged.messages],
        )
        return {row["session_id"]: row["message_id"] for row in rows}

    async def record(self, conn: Any, logged: Logged) -> None:
        """Record logged message ids; settle the answered ones and NOTIFY their sessions."""
        if logged.messages:
            await conn.execute(
                f"INSERT INTO {self.messages} (session_id, message_id, seq) "
                "SELECT * FROM unnest($1::text[], $2::text[], $3::bigint[])",
                [m[0] for m in logged.messages],
                [m[1] for m in logged.messages],
                [m[2] for m in logged.messages],
            )
        if logged.finished:
            keep = _KEEP.format(
                inbox="s.inbox", keep="(e->>'message_id' = ANY(per.ids)) IS NOT TRUE"
            )
            await conn.fetch(
                f"WITH done AS (UPDATE {self.messages} AS m SET status = 'answered', "
                "answered_seq = u.seq FROM unnest($1::text[], $2::bigint[]) AS u(session_id, seq) "
                "WHERE m.session_id = u.session_id AND m.status = 'logged' AND m.seq < u.seq "
                "RETURNING m.session_id, m.message_id), "
                "per AS (SELECT session_id, array_agg(message_id) AS ids FROM done "
                "GROUP BY session_id), "
                f"cleared AS (UPDATE {self.sessions} AS s SET inbox = {keep} FROM per "
                "WHERE s.session_id = per.session_id RETURNING s.session_id) "
                "SELECT pg_notify($3, session_id) FROM cleared",
                list(logged.finished),
                list(logged.finished.values()),
                self.answers_channel,
            )

    # -- the inbox --------------------------------------------------------------------------

    async def push(
        self, conn: Any, session_id: str, message: Mapping[str, Any], *, create: bool
    ) -> Literal["queued", "duplicate", "missing"]:
        """Queue ``message`` unless its id is queued or logged, in the caller's transaction."""
        message_id = message["message_id"]
        if create:
            await conn.execute(
                f"INSERT INTO {self.sessions} (session_id, last_seq, tail_from) "
                "VALUES ($1, 0, 0) ON CONFLICT (session_id) DO NOTHING",
                session_id,
            )
        row = await conn.fetchrow(
            f"SELECT inbox @> jsonb_build_array(jsonb_build_object('message_id', $2::text)) "
            f"AS queued, EXISTS (SELECT 1 FROM {self.messages} WHERE session_id = $1 "
            "AND message_id = $2) AS logged "
            f"FROM {self.sessions} WHERE session_id = $1 FOR UPDATE",
            session_id,
            message_id,
        )
        if row is None:
            return "missing"
        if row["queued"] or row["logged"]:
            return "duplicate"
        await conn.execute(
            f"UPDATE {self.sessions} SET inbox = inbox || jsonb_build_array($2::jsonb) "
            "WHERE session_id = $1",
            session_id,
            orjson.dumps(dict(message)).decode(),
        )
        await conn.execute("SELECT pg_notify($1, $2)", self.inbox_channel, session_id)
        return "queued"

    def peek_sql(self, lease_columns: str) -> str:
        """One session's inbox, its lease, and the status of each queued id the log holds."""
        # one primary-key look-up per queued id (a subquery per entry, which the planner
        # cannot turn into a join; OFFSET 0 keeps it from being evaluated twice): a join read
        # every message row of the session, 20,000 for one that had answered 20,000 messages
        return (
            f"SELECT s.inbox, {lease_columns}, "
            "(SELECT coalesce(jsonb_object_agg(q.id, q.status), '{}'::jsonb) "
            "FROM (SELECT e->>'message_id' AS id, "
            f"(SELECT m.status FROM {self.messages} AS m WHERE m.session_id = s.session_id "
            "AND m.message_id = e->>'message_id') AS status "
            "FROM jsonb_array_elements(s.inbox) AS e OFFSET 0) AS q WHERE q.status IS NOT NULL) "
            f"AS statuses FROM {self.sessions} AS s WHERE s.session_id = $1"
        )

    async def drop(
        self, conn: Any, session_id: str, entries: Sequence[Mapping[str, Any]], reason: str
    ) -> None:
        """Take ``entries`` out of the inbox; the unanswered ones fail with ``reason``."""
        bodies = [orjson.dumps(dict(entry)).decode() for entry in entries]
        keep = _KEEP.format(inbox="inbox", keep="NOT (e = ANY($2::jsonb[]))")
        await conn.execute(
            f"UPDATE {self.sessions} SET inbox = {keep} WHERE session_id = $1", session_id, bodies
        )
        ids = [str(e["message_id"]) for e in entries if isinstance(e.get("message_id"), str)]
        if ids:
            await conn.execute(
                f"INSERT INTO {self.messages} AS m (session_id, message_id, status, reason) "
                "SELECT $1, id, 'failed', $3 FROM unnest($2::text[]) AS id "
                "ON CONFLICT (session_id, message_id) DO UPDATE SET status = 'failed', "
                "reason = EXCLUDED.reason WHERE m.status <> 'answered'",
                session_id,
                ids,
                reason,
            )
        await conn.execute("SELECT pg_notify($1, $2)", self.answers_channel, session_id)

    async def status(self, conn: Any, session_id: str, message_id: str) -> dict[str, Any] | None:
        """One message id's status, seq, answered_seq, reason; None when the log lacks it."""
        row = await conn.fetchrow(
            f"SELECT status, seq, answered_seq, reason FROM {self.messages} "
            "WHERE session_id = $1 AND message_id = $2",
            session_id,
            message_id,
        )
        return None if row is None else dict(row)


def queued_status(statuses: str | bytes | None, message_id: object) -> str | None:
    """The status a ``peek_sql`` row gives one queued message id (None: not logged)."""
    if statuses is None or not isinstance(message_id, str):
        return None
    found = orjson.loads(statuses).get(message_id)
    return found if isinstance(found, str) else None
