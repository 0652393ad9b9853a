"""Projection: the wire input of one request, derived from history; never stored."""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence

from ._items import FunctionCallOutput, HistoryEntry, Item, SystemMessage

__all__ = ["PREVIEW_MIN_CHARS", "StubCache", "StubRenderer", "build_projection", "default_stub"]

StubRenderer = Callable[[HistoryEntry], str]
#: by seq: an output as history holds it, and the stub item a projection showed for it
StubCache = dict[int, tuple[FunctionCallOutput, FunctionCallOutput]]

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
    stubs: StubCache | None = None,
) -> tuple[Item, ...]:
    """The items of the next request: history in order, with outputs at ``stubbed`` seqs
    replaced by stubs and ``protected_text`` as its own message after the leading system one.
    ``stubs``: the stub items of the last projection made with the same ``stub``, reused
    for the same outputs (and updated), so a session's requests keep the same item objects
    and what is cached by item (a request's lines and hashes) stays valid."""
    items: list[Item] = []
    made: StubCache = {}
    for entry in history:
        item = entry.item
        if entry.seq in stubbed and isinstance(item, FunctionCallOutput):
            kept = stubs.get(entry.seq) if stubs is not None else None
            if kept is not None and kept[0] is item:
                stub_item = kept[1]
            else:
                stub_item = FunctionCallOutput(
                    call_id=item.call_id, output=stub(entry), is_error=item.is_error
                )
            made[entry.seq] = (item, stub_item)
            item = stub_item
        items.append(item)
    if stubs is not None:
        stubs.clear()
        stubs.update(made)
    if protected_text:
        at = 1 if items and isinstance(items[0], SystemMessage) else 0
        items.insert(at, SystemMessage(text=protected_text))
    return tuple(items)
