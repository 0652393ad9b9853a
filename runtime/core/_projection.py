"""Projection: the wire input of one request, derived from history; never stored."""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence

from ._items import FunctionCallOutput, HistoryEntry, Item, SystemMessage

__all__ = ["PREVIEW_MIN_CHARS", "StubRenderer", "build_projection", "default_stub"]

StubRenderer = Callable[[HistoryEntry], str]

#: a stubbed output at least this long keeps a preview: its head and its tail
PREVIEW_MIN_CHARS = 16_000
_HEAD_CHARS = 1_500
_TAIL_CHARS = 500


def default_stub(entry: HistoryEntry) -> str:
    """The text a stubbed tool output is replaced with: its artifact reference, and for a
    huge output (``PREVIEW_MIN_CHARS``, one capped as soon as it came back) its head and
    tail too. The reference can be paged through with ``recall_artifact``."""
    assert isinstance(entry.item, FunctionCallOutput)
    output = entry.item.output
    size = len(output)
    ref = f"R{entry.seq}"
    if size < PREVIEW_MIN_CHARS:
        return (
            f"[output stored as artifact {ref}, {size} chars ~{(size + 3) // 4} tokens; "
            f"call recall_artifact with ref {ref} to read it]"
        )
    omitted = size - _HEAD_CHARS - _TAIL_CHARS
    return (
        f"{output[:_HEAD_CHARS]}\n[... {omitted} chars omitted: the whole output of {size} "
        f"chars is stored as artifact {ref}; call recall_artifact with ref {ref} and an offset "
        f"and length to read any part of it ...]\n{output[-_TAIL_CHARS:]}"
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
