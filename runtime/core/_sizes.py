"""How many characters a model reads of an item, an entry or a history, and a rough token count.

Token accounting calibrates a chars-per-token ratio on these figures, so they must count exactly
what a projection sends: a stubbed output counts as its stub.
"""

from __future__ import annotations

import json
import math
from collections.abc import Collection, Iterable, Sequence

from ._errors import ConfigError
from ._gateway import ToolSpec
from ._items import (
    AssistantMessage,
    CompactionSummary,
    FunctionCall,
    FunctionCallOutput,
    HistoryEntry,
    Item,
    SystemMessage,
    UserMessage,
)
from ._projection import default_stub

__all__ = ["entry_chars", "estimate_tokens", "history_chars", "item_chars", "tool_schema_tokens"]


def item_chars(item: Item) -> int:
    """The number of characters of ``item`` a model reads (text, or name, arguments and id).

    Raises nothing.
    """
    # isinstance tests, most frequent first: a history is mostly calls and their outputs,
    # and this runs for every item a round adds
    if isinstance(item, FunctionCallOutput):
        return len(item.call_id) + len(item.output)
    if isinstance(item, FunctionCall):
        return len(item.call_id) + len(item.name) + len(item.arguments)
    if isinstance(item, (SystemMessage, UserMessage, AssistantMessage)):
        return len(item.text)
    if isinstance(item, CompactionSummary):
        if item.provider is None:
            return len(item.text)
        if isinstance(item.provider, dict):
            # the Responses wire sends the provider's item in place of the text
            return len(json.dumps(item.provider, separators=(",", ":")))
    raise TypeError(f"not an item: {item!r}")  # pragma: no cover - exhaustive above


def estimate_tokens(items: Sequence[Item], chars_per_token: float = 4.0) -> int:
    """Estimate the tokens ``items`` cost from their characters, rounding up.

    Raises ``ConfigError`` if ``chars_per_token`` is not positive.
    """
    if not chars_per_token > 0:
        raise ConfigError(f"chars_per_token must be > 0, got {chars_per_token}")
    return math.ceil(sum(item_chars(item) for item in items) / chars_per_token)


def entry_chars(entry: HistoryEntry, stubbed: Collection[int] = ()) -> int:
    """Characters of ``entry`` as the model reads it: a stubbed output counts as its stub.
    Raises nothing."""
    item = entry.item
    if entry.seq in stubbed and isinstance(item, FunctionCallOutput):
        return len(item.call_id) + len(default_stub(entry))
    return item_chars(item)


def history_chars(history: Iterable[HistoryEntry], stubbed: Collection[int] = ()) -> int:
    """Characters of ``history`` as projected with ``stubbed`` outputs. Raises nothing."""
    return sum(entry_chars(entry, stubbed) for entry in history)


def tool_schema_tokens(specs: Sequence[ToolSpec], chars_per_token: float = 4.0) -> int:
    """Tokens the tool schemas of a request cost, estimated from their JSON: the one figure
    the budget, the refusal of a message that cannot fit, every request's manifest and every
    view use. Raises nothing."""
    if not specs:
        return 0
    text = json.dumps(
        [{"name": s.name, "description": s.description, "parameters": s.parameters} for s in specs],
        sort_keys=True,
    )
    return math.ceil(len(text) / chars_per_token)
