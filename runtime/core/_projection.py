"""Projection: the wire input of one request, derived from history; never stored."""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence

from ._items import FunctionCallOutput, HistoryEntry, Item, SystemMessage

__all__ = ["StubRenderer", "build_projection", "default_stub"]

StubRenderer = Callable[[HistoryEntry], str]


def default_stub(entry: HistoryEntry) -> str:
    """The text a microcompacted tool output is replaced with."""
    assert isinstance(entry.item, FunctionCallOutput)
    size = len(entry.item.output)
    return (
        f"[output stored as artifact R{entry.seq}, {size} chars ~{(size + 3) // 4} tokens; "
        f"call recall_artifact with ref R{entry.seq} to read it]"
    )


def build_projection(
    history: Sequence[HistoryEntry],
    *,
    stubbed: Collection[int] = (),
    protected_text: str | None = None,
    stub: StubRenderer = default_stub,
) -> tuple[Item, ...]:
    """The items of the next request: history in order, with outputs at ``stubbed`` seqs
    replaced by stubs and ``protected_text`` as its own message after the leading system one."""
    items: list[Item] = []
    for entry in history:
        item = entry.item
        if entry.seq in stubbed and isinstance(item, FunctionCallOutput):
            item = FunctionCallOutput(
                call_id=item.call_id, output=stub(entry), is_error=item.is_error
            )
        items.append(item)
    if protected_text:
        at = 1 if items and isinstance(items[0], SystemMessage) else 0
        items.insert(at, SystemMessage(text=protected_text))
    return tuple(items)
