"""The PostgreSQL append in one statement, for the sessions a store holds the lease of.

An append checked in Python (``PostgresStore`` locks the rows, reads them back, checks each
lease and seq, then inserts and updates) costs five to seven round trips with its BEGIN and
COMMIT. A worker's appends are nearly always to sessions whose lease it holds and whose last
seq it knows from the batch itself (the batch starts one past it), so the checks fit in the
WHERE of one statement: lock the session rows that still carry this store's token and owner,
end where the batches start, and hold none of the message ids being logged; write the records,
the message rows and the sessions' new seqs for those rows only; mark the finished turns'
messages answered, take them out of the inbox and NOTIFY. One statement is one transaction.

A session the statement did not accept (a lease lost, a seq gap, a message logged already) is
left unwritten, and the caller appends it the checked way, which says what is wrong.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ._pg_inbox import InboxTables, Logged, keep_entries
from ._sql import PlannedBatch

__all__ = ["FastAppend", "fast_append_sql", "plan_fast"]


@dataclass(frozen=True, slots=True, kw_only=True)
class FastAppend:
    """The arguments of one single-statement append (see ``sql``), by column."""

    session_ids: list[str]
    tokens: list[int]
    expected_last: list[int]
    last_seqs: list[int]
    tail_froms: list[int | None]
    rows: list[tuple[str, int, str]]
    logged: Logged

    def arguments(self, owner: str, answers_channel: str) -> list[Any]:
        """The statement's parameters, in order."""
        finished = self.logged.finished
        messages = self.logged.messages
        # a message whose turn finishes in this same append is answered as it is inserted:
        # the statement's own UPDATE cannot see the rows it inserts
        answered_at = [finished[s] if finished.get(s, 0) > seq else None for s, _, seq in messages]
        return [
            self.session_ids,
            self.tokens,
            self.expected_last,
            self.last_seqs,
            self.tail_froms,
            owner,
            [r[0] for r in self.rows],
            [r[1] for r in self.rows],
            [r[2] for r in self.rows],
            [m[0] for m in messages],
            [m[1] for m in messages],
            [m[2] for m in messages],
            answered_at,
            list(finished),
            list(finished.values()),
            answers_channel,
        ]


def plan_fast(
    planned: Mapping[str, Sequence[PlannedBatch]], tokens: Mapping[str, int], logged: Logged
) -> FastAppend | None:
    """The one-statement append of the held sessions whose batches chain; None if none. Pure."""
    ids: list[str] = []
    expected: list[int] = []
    last: list[int] = []
    tails: list[int | None] = []
    rows: list[tuple[str, int, str]] = []
    for session_id in sorted(planned):  # one lock order for all workers
        if session_id not in tokens:
            continue
        batches = [b for b in planned[session_id] if b.first_seq is not None]
        if not batches or any(
            later.first_seq != (earlier.last_seq or 0) + 1
            for earlier, later in itertools.pairwise(batches)
        ):
            continue  # nothing to write, or seqs the checked path must name
        first, final = batches[0].first_seq, batches[-1].last_seq
        assert first is not None and final is not None
        ids.append(session_id)
        expected.append(first - 1)
        last.append(final)
        tails.append(next((b.tail_from for b in reversed(batches) if b.tail_from), None))
        for batch in batches:
            rows += batch.rows
    if not ids:
        return None
    return FastAppend(
        session_ids=ids,
        tokens=[tokens[s] for s in ids],
        expected_last=expected,
        last_seqs=last,
        tail_froms=tails,
        rows=rows,
        logged=logged.only(ids),
    )


def fast_append_sql(tables: InboxTables, records: str) -> str:
    """The statement; returns the session ids it wrote (see ``FastAppend.arguments``)."""
    keep = keep_entries("s.inbox", "(e->>'message_id' = ANY(per.ids)) IS NOT TRUE")
    return (
        "WITH u AS (SELECT * FROM unnest($1::text[], $2::bigint[], $3::bigint[], "
        "$4::bigint[], $5::bigint[]) AS u(session_id, token, expected, last_seq, tail_from)), "
        "new AS (SELECT * FROM unnest($10::text[], $11::text[], $12::bigint[], $13::bigint[]) "
        "AS n(session_id, message_id, seq, answered_seq)), "
        f"ok AS (SELECT s.session_id FROM {tables.sessions} AS s JOIN u "
        "ON s.session_id = u.session_id WHERE s.lease_token = u.token "
        "AND s.lease_owner = $6 AND s.last_seq = u.expected AND s.tail_from > 0 "
        f"AND NOT EXISTS (SELECT 1 FROM new JOIN {tables.messages} AS m "
        "ON m.session_id = new.session_id AND m.message_id = new.message_id "
        "WHERE new.session_id = s.session_id) "
        "ORDER BY s.session_id FOR UPDATE OF s), "
        f"wrote AS (INSERT INTO {records} (session_id, seq, body) "
        "SELECT r.session_id, r.seq, r.body FROM unnest($7::text[], $8::bigint[], $9::text[]) "
        "AS r(session_id, seq, body) WHERE r.session_id IN (SELECT session_id FROM ok)), "
        f"logged AS (INSERT INTO {tables.messages} (session_id, message_id, seq, "
        "answered_seq, status) SELECT new.session_id, new.message_id, new.seq, "
        "new.answered_seq, CASE WHEN new.answered_seq IS NULL THEN 'logged' ELSE 'answered' "
        "END FROM new WHERE new.session_id IN (SELECT session_id FROM ok) "
        "RETURNING session_id, message_id, status), "
        f"done AS (UPDATE {tables.messages} AS m SET status = 'answered', "
        "answered_seq = f.seq FROM unnest($14::text[], $15::bigint[]) AS f(session_id, seq) "
        "WHERE m.session_id = f.session_id AND f.session_id IN (SELECT session_id FROM ok) "
        "AND m.status = 'logged' AND m.seq < f.seq RETURNING m.session_id, m.message_id), "
        "per AS (SELECT session_id, array_agg(message_id) AS ids FROM (SELECT session_id, "
        "message_id FROM done UNION ALL SELECT session_id, message_id FROM logged "
        "WHERE status = 'answered') AS a GROUP BY session_id), "
        f"moved AS (UPDATE {tables.sessions} AS s SET last_seq = u.last_seq, "
        "tail_from = coalesce(u.tail_from, s.tail_from), "
        f"inbox = CASE WHEN per.ids IS NULL THEN s.inbox ELSE {keep} END "
        "FROM u JOIN ok ON ok.session_id = u.session_id "
        "LEFT JOIN per ON per.session_id = u.session_id "
        "WHERE s.session_id = u.session_id "
        "RETURNING s.session_id, per.ids IS NOT NULL AS answered) "
        "SELECT session_id, CASE WHEN answered THEN pg_notify($16, session_id) END AS notified "
        "FROM moved"
    )
