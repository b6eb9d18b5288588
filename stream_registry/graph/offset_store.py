"""Offsets kept in the graph itself, for exactly-once streams.

An exactly-once stream writes each batch's next offsets with the batch, in the
same transaction (Bolt) or the same append (cypherl): one
`(:MgstreamsOffset {stream, topic, partition})` node per partition holding
`next_offset`. The graph then says exactly which messages it holds, so a crash
between the graph write and the Kafka commit repeats nothing, and restoring a
Memgraph snapshot (or cutting a cypherl file back at a batch boundary) rewinds
the stream to exactly what the graph holds.

In a cypherl file the statements are rendered one per line, after the batch's
own statements, in the shape `OFFSET_LINE` reads back.
"""
from __future__ import annotations

import os
import re
from typing import Iterable, Mapping, Sequence

from .transform import Statement

TP = tuple[str, int]
OFFSET_LABEL = "MgstreamsOffset"
WRITE_QUERY = (f"MERGE (o:{OFFSET_LABEL} {{stream: $stream, topic: $topic, partition: $partition}}) "
               f"SET o.next_offset = $next_offset")
READ_QUERY = (f"MATCH (o:{OFFSET_LABEL} {{stream: $stream}}) "
              f"RETURN o.topic AS topic, o.partition AS partition, o.next_offset AS next_offset")
# WRITE_QUERY as cypher_literals renders it (stream and topic names need no escaping: see config).
OFFSET_LINE = re.compile(
    rf'^MERGE \(o:{OFFSET_LABEL} \{{stream: "(?P<stream>[A-Za-z0-9_]+)", topic: "(?P<topic>[A-Za-z0-9._-]+)", '
    r'partition: (?P<partition>\d+)\}\) SET o\.next_offset = (?P<offset>-?\d+);$', re.M)
_CHUNK = 1 << 20


def offset_statements(stream: str, offsets: Mapping[TP, int]) -> list[Statement]:
    """The statements that store `offsets` (next offset to read, per partition) for `stream`."""
    return [Statement(WRITE_QUERY, {"stream": stream, "topic": topic, "partition": partition,
                                    "next_offset": offset})
            for (topic, partition), offset in sorted(offsets.items())]


def offsets_in_statements(statements: Sequence[Statement]) -> dict[tuple[str, str, int], int]:
    """The offsets a batch stores, by (stream, topic, partition): its trailing offset statements (the
    worker appends them after the batch's own), so a batch without any costs one comparison."""
    found: dict[tuple[str, str, int], int] = {}
    for statement in reversed(statements):
        if statement.query != WRITE_QUERY:
            break
        p = statement.parameters
        found.setdefault((p["stream"], p["topic"], p["partition"]), p["next_offset"])
    return found


def offsets_in_cypherl(path: str, stream: str, partitions: Iterable[TP] | None = None) -> dict[TP, int]:
    """The last stored offset of each partition in a cypherl file, read from its end backwards.

    Stops as soon as every partition in `partitions` was found; a missing file
    holds no offsets.
    """
    wanted = set(partitions) if partitions is not None else None
    found: dict[TP, int] = {}
    try:
        handle = open(path, "rb")
    except FileNotFoundError:
        return found
    with handle:
        end = handle.seek(0, os.SEEK_END)
        tail = b""
        while end > 0 and (wanted is None or not wanted <= found.keys()):
            start = max(0, end - _CHUNK)
            handle.seek(start)
            block = handle.read(end - start) + tail
            end = start
            tail = b""
            if start > 0:   # the first line of the block may be cut: keep it for the next (earlier) block
                cut = block.find(b"\n") + 1
                block, tail = (block[cut:], block[:cut]) if cut else (b"", block)
            for match in reversed(list(OFFSET_LINE.finditer(block.decode("utf-8", "replace")))):
                if match["stream"] == stream:
                    found.setdefault((match["topic"], int(match["partition"])), int(match["offset"]))
    return found
