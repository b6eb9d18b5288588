"""Batches in a cypherl file, framed so that a batch is whole or absent after any kill.

Each batch is its statement lines followed by one frame line, a Cypher
comment (mgconsole passes it on with the next statement, Memgraph skips it;
at the end of the file mgconsole drops it):

    // mgstreams-batch <body bytes> <crc32 of the body, hex> [<stream>:<topic>:<partition>=<next offset> ...]

The body is everything since the previous frame line. A file the sink
creates starts with an empty frame (`// mgstreams-batch 0 00000000`), so even
its first batch is framed. The offsets in a frame are cumulative: every
partition of each stream named in the batch, as stored after it. So the
stored offsets are read from the last frame that names the stream, found by
hopping back frame to frame (each says how far back the previous one ends):
a few small reads however large the file, and a partition never written costs
nothing more.

A reader trusts a complete frame line: a kill leaves a prefix of a write, and
the frame is the last line of each write. The writer, when it opens the file,
also checks the last frame's CRC (a power loss can keep a later page and lose
an earlier one) and cuts the file back to the end of the last whole batch.
Files written before framing (no frame line at all) are read by scanning
their offset lines backwards, as before.
"""
from __future__ import annotations

import os
import re
import zlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from ..model import PartitionKey
from .offset_store import MARK_LINE, OFFSET_LINE

SP = tuple[str, str, int]    # (stream, topic, partition)
FRAME_PREFIX = b"// mgstreams-batch "
EMPTY_FRAME = FRAME_PREFIX + b"0 00000000\n"
_FRAME = re.compile(rb"^// mgstreams-batch (\d+) ([0-9a-f]{8})((?: [A-Za-z0-9_]+:[A-Za-z0-9._-]+:\d+=-?\d+)*)\n$")
_ENTRY = re.compile(rb"([A-Za-z0-9_]+):([A-Za-z0-9._-]+):(\d+)=(-?\d+)")
_CHUNK = 1 << 20
_FIRST_CHUNK = 1 << 14        # the last frame is usually the file's last line
MAX_FRAME_LINE = 16 << 20    # longer lines are not frames (a frame names each partition in ~40 bytes)


@dataclass(frozen=True)
class Frame:
    """One frame line: at [start, end) of the file, closing the `body` bytes before it."""
    start: int
    end: int
    body: int
    crc: int
    offsets: Mapping[SP, int] = field(default_factory=dict)

    @property
    def body_start(self) -> int:
        return self.start - self.body

    def streams(self) -> set[str]:
        return {stream for stream, _, _ in self.offsets}


def frame_line(body: bytes, offsets: Mapping[SP, int]) -> bytes:
    """The frame that closes `body`, naming `offsets` (stream, topic, partition) -> next offset."""
    entries = "".join(f" {s}:{t}:{p}={o}" for (s, t, p), o in sorted(offsets.items()))
    return FRAME_PREFIX + f"{len(body)} {zlib.crc32(body):08x}{entries}\n".encode()


def parse_frame(line: bytes, start: int) -> Frame | None:
    """The frame a whole line (newline included) holds, None if it is not one."""
    match = _FRAME.match(line)
    if match is None:
        return None
    offsets = {(m[1].decode(), m[2].decode(), int(m[3])): int(m[4]) for m in _ENTRY.finditer(match[3])}
    return Frame(start, start + len(line), int(match[1]), int(match[2], 16), offsets)


def last_frame(fd: int, size: int, before: int | None = None) -> Frame | None:
    """The last complete frame line ending at or before `before` (default: the file's end)."""
    end = size if before is None else before
    needle = b"\n" + FRAME_PREFIX
    high, chunk = end, _FIRST_CHUNK   # looking for frame lines that start before `high`
    while high > 0:
        low = max(0, high - chunk)
        chunk = min(chunk * 2, _CHUNK)
        block = os.pread(fd, min(high + len(needle), end) - low, low)
        at = min(len(block), high - low + len(needle) - 1)
        while (at := block.rfind(needle, 0, at)) >= 0:
            frame = _frame_at(fd, low + at + 1, end)
            if frame is not None:
                return frame
            at += len(needle) - 1    # look at occurrences starting before this one
        if low == 0:
            break
        high = low
    return _frame_at(fd, 0, end) if end > 0 else None


def previous_frame(fd: int, frame: Frame) -> Frame | None:
    """The frame that ends where `frame`'s body begins; None at the start of the file or legacy content."""
    end = frame.body_start
    if end <= 0:
        return None
    start = _line_start(fd, end)
    if start is None:
        return None
    return parse_frame(os.pread(fd, end - start, start), start)


def verified_end(fd: int, size: int) -> int | None:
    """The end of the last whole batch: the last frame whose body is where it says and matches its CRC.
    None when the file holds no frame (a file written before framing)."""
    frame = last_frame(fd, size)
    while frame is not None:
        if _body_matches(fd, frame):
            return frame.end
        frame = last_frame(fd, size, before=frame.start)
    return None


def stored_offsets(fd: int, size: int, stream: str, partitions: Iterable[PartitionKey] | None = None,
                   end: int | None = None) -> dict[PartitionKey, int]:
    """`stream`'s offsets as its last frame (before `end`) names them; files without frames are scanned."""
    wanted = set(partitions) if partitions is not None else None
    frame = last_frame(fd, size, before=end)
    legacy_end = size if end is None else end
    while frame is not None:
        if stream in frame.streams():
            return {PartitionKey(t, p): o for (s, t, p), o in frame.offsets.items()
                    if s == stream and (wanted is None or (t, p) in wanted)}
        legacy_end = frame.body_start
        frame = previous_frame(fd, frame)
    return _scan_offset_lines(fd, legacy_end, stream, wanted)


def offsets_in_cypherl(path: str, stream: str,
                       partitions: Iterable[PartitionKey] | None = None) -> dict[PartitionKey, int]:
    """A cypherl file's stored offsets for `stream` (a missing file holds none); never writes."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return {}
    try:
        return stored_offsets(fd, os.fstat(fd).st_size, stream, partitions)
    finally:
        os.close(fd)


MARK_SCAN_BYTES = 64 << 20   # a mark is read back by the next owner, soon after its change: near the file's end


def marks_in_cypherl(fd: int, size: int, stream: str, partitions: Iterable[PartitionKey] | None = None
                     ) -> dict[PartitionKey, str]:
    """`stream`'s last stored change mark of each partition (offset_store.MARK_LINE), read backwards over the
    file's last MARK_SCAN_BYTES: a mark matters until the group's commit carries it, right after a restart."""
    wanted = set(partitions) if partitions is not None else None
    found: dict[PartitionKey, str] = {}
    end, floor, tail = size, max(0, size - MARK_SCAN_BYTES), b""
    while end > floor and (wanted is None or not wanted <= found.keys()):
        start = max(floor, end - _CHUNK)
        block = os.pread(fd, end - start, start) + tail
        end, tail = start, b""
        if start > 0:   # the first line of the block may be cut: keep it for the next (earlier) block
            cut = block.find(b"\n") + 1
            block, tail = (block[cut:], block[:cut]) if cut else (b"", block)
        if b"MgstreamsChangeMark" not in block:
            continue
        for match in reversed(list(MARK_LINE.finditer(block.decode("utf-8", "replace")))):
            if match["stream"] == stream:
                found.setdefault(PartitionKey(match["topic"], int(match["partition"])), match["mark"])
    return {tp: m for tp, m in found.items() if wanted is None or tp in wanted}


# -- internals ----------------------------------------------------------------
def _newline_at(fd: int, position: int) -> bool:
    return position >= 0 and os.pread(fd, 1, position) == b"\n"


def _frame_at(fd: int, start: int, limit: int) -> Frame | None:
    """The frame line beginning at `start`, if it is one and ends (with its newline) by `limit`."""
    head = os.pread(fd, min(limit - start, 4096), start)
    newline = head.find(b"\n")
    if newline < 0:
        if limit - start <= len(head):
            return None
        line = _read_line(fd, start, limit)
        if line is None:
            return None
    else:
        line = head[:newline + 1]
    return parse_frame(line, start)


def _read_line(fd: int, start: int, limit: int) -> bytes | None:
    data = os.pread(fd, min(limit - start, MAX_FRAME_LINE), start)
    newline = data.find(b"\n")
    return data[:newline + 1] if newline >= 0 else None


def _line_start(fd: int, end: int) -> int | None:
    """Where the line ending (newline included) at `end` begins; None if it is longer than a frame may be."""
    if os.pread(fd, 1, end - 1) != b"\n":
        return None
    position = end - 1
    while position > 0 and end - position <= MAX_FRAME_LINE:
        start = max(0, position - 4096)
        block = os.pread(fd, position - start, start)
        newline = block.rfind(b"\n")
        if newline >= 0:
            return start + newline + 1
        position = start
    return 0 if position == 0 else None


def _body_matches(fd: int, frame: Frame) -> bool:
    start = frame.body_start
    if start < 0 or (start > 0 and not _newline_at(fd, start - 1)):
        return False
    crc, position = 0, start
    while position < frame.start:
        block = os.pread(fd, min(_CHUNK * 8, frame.start - position), position)
        if not block:
            return False
        crc = zlib.crc32(block, crc)
        position += len(block)
    return crc == frame.crc


def _scan_offset_lines(fd: int, end: int, stream: str, wanted: set[PartitionKey] | None) -> dict[PartitionKey, int]:
    """Unframed content: the last offset line of each partition, read backwards from `end`."""
    found: dict[PartitionKey, int] = {}
    tail = b""
    while end > 0 and (wanted is None or not wanted <= found.keys()):
        start = max(0, end - _CHUNK)
        block = os.pread(fd, end - start, start) + tail
        end, tail = start, b""
        if start > 0:   # the first line of the block may be cut: keep it for the next (earlier) block
            cut = block.find(b"\n") + 1
            block, tail = (block[cut:], block[:cut]) if cut else (b"", block)
        for match in reversed(list(OFFSET_LINE.finditer(block.decode("utf-8", "replace")))):
            if match["stream"] == stream:
                found.setdefault(PartitionKey(match["topic"], int(match["partition"])), int(match["offset"]))
    return {tp: o for tp, o in found.items() if wanted is None or tp in wanted}
