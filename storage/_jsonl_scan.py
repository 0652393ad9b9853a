"""Reading a JSONL log from its end: torn-tail detection and the resume tail."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from aiofiles.threadpool.binary import AsyncBufferedReader
from stowage.core import CompactionRecord, CorruptLogError, Record, StoreError

from ._codec import decode_record

__all__ = ["LogEnd", "NeedFullScan", "Suffix", "parse_all", "scan_end", "tail_of", "tail_records"]

# The encoder writes ``"type":"compaction"`` unescaped only as a record's (or a nested object's)
# type; quotes inside strings are escaped, so the marker never matches text. Nested objects can
# still match, which is why every hit is decoded before it is believed.
_MARKER = b'"type":"compaction"'
_FIRST_CHUNK = 64 * 1024
_MAX_CHUNK = 8 * 1024 * 1024


class NeedFullScan(Exception):
    """The quick tail scan met something odd; a full read will name the bad line exactly."""


@dataclass(frozen=True, slots=True, kw_only=True)
class LogEnd:
    good_end: int  # offset just past the last good line's newline
    last: Record | None  # the record on that line
    torn_bytes: int  # bytes after good_end: a torn last line to cut off


class Suffix:
    """The end of an open file, read backwards in growing chunks as a search needs it."""

    def __init__(self, file: AsyncBufferedReader, size: int) -> None:
        self.file = file
        self._chunk = _FIRST_CHUNK
        self.size = size
        self.start = size  # file offset of buf[0]
        self.buf = b""

    async def grow(self) -> bool:
        if self.start == 0:
            return False
        n = min(self._chunk, self.start)
        self.start -= n
        await self.file.seek(self.start)
        data = await self.file.read(n)
        if len(data) != n:  # the file shrank under us: only possible if someone else writes
            raise StoreError(f"log changed while being read (expected {n} bytes at {self.start})")
        self.buf = data + self.buf
        self._chunk = min(self._chunk * 2, _MAX_CHUNK)
        return True

    async def rfind(self, needle: bytes, end: int) -> int:
        """File offset of the last ``needle`` lying wholly before ``end``, or -1."""
        while True:
            if end > self.start:
                i = self.buf.rfind(needle, 0, end - self.start)
                if i >= 0:
                    return self.start + i
            if not await self.grow():
                return -1

    def find(self, needle: bytes, begin: int) -> int:
        """File offset of the first ``needle`` at or after ``begin`` (already read), or -1."""
        i = self.buf.find(needle, begin - self.start)
        return -1 if i < 0 else self.start + i

    def slice(self, begin: int, end: int) -> bytes:
        return self.buf[begin - self.start : end - self.start]


def _try_decode(line: bytes) -> Record | None:
    try:
        return decode_record(line)
    except ValueError:
        return None


def parse_all(data: bytes, path: str) -> tuple[list[Record], LogEnd]:
    """Every record of a log's bytes, and the incomplete last line (no newline) after them."""
    lines = data.split(b"\n")
    partial = lines.pop()  # b"" when the file ends in a newline
    records: list[Record] = []
    torn = len(partial)
    for number, line in enumerate(lines, 1):
        try:
            record = decode_record(line)
        except ValueError as exc:
            raise CorruptLogError(str(exc), path=path, line=number) from None
        if record.seq != number:
            raise CorruptLogError(
                f"seq {record.seq} on line {number}; seqs must run 1, 2, 3, ... one per line",
                path=path,
                line=number,
            )
        records.append(record)
    end = LogEnd(good_end=len(data) - torn, last=records[-1] if records else None, torn_bytes=torn)
    return records, end


def tail_of(records: Sequence[Record]) -> tuple[Record, ...]:
    """The session record, then every record from the newest compaction's covers_through + 1."""
    if not records:
        return ()
    start = 2
    for record in reversed(records):
        if isinstance(record, CompactionRecord):
            start = max(record.covers_through + 1, 2)
            break
    # seq n sits at index n - 1
    return (records[0], *records[start - 1 :])


async def scan_end(sx: Suffix) -> LogEnd:
    """The last good line and any torn tail after it, read from the end of the log."""
    size = sx.size
    if size == 0:
        return LogEnd(good_end=0, last=None, torn_bytes=0)
    last_newline = await sx.rfind(b"\n", size)
    if last_newline == size - 1:
        start = await sx.rfind(b"\n", size - 1) + 1
        record = _try_decode(sx.slice(start, size - 1))
        if record is None:
            raise NeedFullScan  # corrupt, not torn: the full read names the line
        return LogEnd(good_end=size, last=record, torn_bytes=0)
    torn_start = last_newline + 1  # no trailing newline: the write was cut
    if torn_start == 0:
        return LogEnd(good_end=0, last=None, torn_bytes=size)
    previous = await sx.rfind(b"\n", torn_start - 1) + 1
    record = _try_decode(sx.slice(previous, torn_start - 1))
    if record is None:
        raise NeedFullScan
    return LogEnd(good_end=torn_start, last=record, torn_bytes=size - torn_start)


async def _first_line(file: AsyncBufferedReader) -> bytes:
    await file.seek(0)
    head = b""
    while True:
        chunk = await file.read(4096)
        newline = chunk.find(b"\n")
        if newline >= 0:
            return head + chunk[:newline]
        if not chunk:
            raise NeedFullScan
        head += chunk


async def tail_records(sx: Suffix, end: LogEnd) -> tuple[Record, ...]:
    """Decode the session line and the lines from the newest compaction's covers_through + 1."""
    good_end = end.good_end
    compaction: CompactionRecord | None = None
    compaction_start = 0
    search_end = good_end
    while (hit := await sx.rfind(_MARKER, search_end)) >= 0:
        line_start = await sx.rfind(b"\n", hit) + 1
        record = _try_decode(sx.slice(line_start, sx.find(b"\n", hit)))
        if isinstance(record, CompactionRecord):
            compaction, compaction_start = record, line_start
            break
        search_end = line_start

    if compaction is None:  # the whole file has been read by now
        offset, line = sx.find(b"\n", 0) + 1, 2
        first_seq = 2
    else:
        first_seq = max(compaction.covers_through + 1, 2)
        offset, line = compaction_start, compaction.seq
        while line > first_seq:
            if offset == 0:
                raise NeedFullScan  # seqs are not one per line
            offset = await sx.rfind(b"\n", offset - 1) + 1
            line -= 1
        while line < first_seq and offset < good_end:
            offset = sx.find(b"\n", offset) + 1
            line += 1
        offset = min(offset, good_end)

    head = sx.slice(0, sx.find(b"\n", 0)) if sx.start == 0 else await _first_line(sx.file)
    session = _try_decode(head)
    if session is None or session.seq != 1:
        raise NeedFullScan
    out: list[Record] = [session]
    if offset < good_end:
        expected = first_seq
        for raw in sx.slice(offset, good_end - 1).split(b"\n"):
            record = _try_decode(raw)
            if record is None or record.seq != expected:
                raise NeedFullScan
            out.append(record)
            expected += 1
    return tuple(out)
