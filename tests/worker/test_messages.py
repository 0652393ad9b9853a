"""The message format: ids travel with the user item through the codec, old logs still read,
and the pure helpers of the worker package say what they should. No event loop needed."""

from __future__ import annotations

import orjson
import pytest
from stowage.core import (
    AssistantMessage,
    ConfigError,
    FunctionCall,
    ItemRecord,
    RoundCommittedRecord,
    UserMessage,
)
from stowage.storage import decode_record, encode_record
from stowage.storage._pg_inbox import channel_name
from stowage.worker import InboxMessage, WorkerOptions, new_message_id
from stowage.worker._messages import answer_text, final_round_first_seq, parse_message


def test_a_user_items_message_id_survives_the_codec() -> None:
    record = ItemRecord(seq=4, item=UserMessage(text="hi", message_id="m-1"))
    line = encode_record(record)
    assert orjson.loads(line)["item"]["message_id"] == "m-1"
    assert decode_record(line) == record


def test_a_user_item_without_an_id_is_written_as_before_and_old_lines_still_read() -> None:
    line = encode_record(ItemRecord(seq=2, item=UserMessage(text="x", pinned=True)))
    assert "message_id" not in orjson.loads(line)["item"]
    old = b'{"v":1,"seq":2,"ts":"2025-01-01T00:00:00.000+00:00","type":"item","item":{"type":"user","text":"x"}}'
    decoded = decode_record(old)
    assert isinstance(decoded, ItemRecord) and decoded.item == UserMessage(text="x")


def test_an_inbox_entry_parses_back_into_its_message() -> None:
    message = InboxMessage(message_id=new_message_id(), text="hello", pinned=True)
    assert parse_message(message.to_entry()) == message
    assert parse_message({"text": "no id"}) is None
    assert parse_message({"message_id": "m", "text": 3}) is None
    assert new_message_id() != new_message_id()


def test_the_answer_is_the_assistant_text_of_the_final_round() -> None:
    final_round = (
        ItemRecord(seq=10, item=AssistantMessage(text="Hello, "), round=3),
        ItemRecord(seq=11, item=AssistantMessage(text="world"), round=3),
        RoundCommittedRecord(seq=12, round=3, usage=None, first_seq=10, last_seq=12),
    )
    assert answer_text(final_round) == "Hello, world"
    assert final_round_first_seq(final_round[-1:]) == 10
    assert (
        final_round_first_seq(
            (ItemRecord(seq=1, item=FunctionCall(call_id="c", name="n", arguments="{}")),)
        )
        is None
    )


def test_worker_options_name_the_bad_value() -> None:
    for bad in (
        {"concurrency": 0},
        {"grace": 0},
        {"poll_interval": -1},
        {"turn_attempts": 0},
        {"metrics_port": 65536},
    ):
        with pytest.raises(ConfigError, match=f"{next(iter(bad))} must be "):
            WorkerOptions(**bad)


def test_notify_channels_fit_postgres_names_whatever_the_schema() -> None:
    assert channel_name("public", "inbox") == "stowage_inbox_public"
    long = "s" * 63
    assert len(channel_name(long, "answers")) <= 63
    assert channel_name(long, "answers") != channel_name("s" * 62 + "t", "answers")
