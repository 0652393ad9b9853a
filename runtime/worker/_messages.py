"""The one format of a queued message, and reading a message's answer back out of the log."""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from stowage.core import AssistantMessage, ItemRecord, Record, RoundCommittedRecord

__all__ = [
    "InboxMessage",
    "answer_text",
    "final_round_first_seq",
    "new_message_id",
    "parse_message",
]


@dataclass(frozen=True, slots=True, kw_only=True)
class InboxMessage:
    """One queued user message."""

    message_id: str
    text: str
    pinned: bool = False

    def to_entry(self) -> dict[str, Any]:
        """The inbox entry (a JSON object) for this message."""
        return {
            "message_id": self.message_id,
            "text": self.text,
            "pinned": self.pinned,
            "sent": datetime.now(UTC).isoformat(timespec="milliseconds"),
        }


def new_message_id() -> str:
    """A fresh message id (a random uuid)."""
    return str(uuid.uuid4())


def parse_message(entry: Mapping[str, Any]) -> InboxMessage | None:
    """The message an inbox entry holds; None when it is not one (no string id or text)."""
    message_id, text = entry.get("message_id"), entry.get("text")
    if not isinstance(message_id, str) or not message_id or not isinstance(text, str):
        return None
    return InboxMessage(message_id=message_id, text=text, pinned=entry.get("pinned") is True)


def answer_text(final_round: Sequence[Record]) -> str:
    """The answer of a turn: the assistant text of its last round."""
    return "".join(
        r.item.text
        for r in final_round
        if isinstance(r, ItemRecord) and isinstance(r.item, AssistantMessage)
    )


def final_round_first_seq(commit: Sequence[Record]) -> int | None:
    """The first seq of the round a ``round_committed`` record closes (None: not one)."""
    for record in commit:
        if isinstance(record, RoundCommittedRecord):
            return record.first_seq
    return None
