"""Offsets kept in the graph itself, for exactly-once streams.

An exactly-once stream writes each batch's next offsets with the batch, in the
same transaction (Bolt) or the same append (cypherl): one
`(:MgstreamsOffset {stream, topic, partition})` node per partition holding
`next_offset`. The graph then says exactly which messages it holds, so a crash
between the graph write and the Kafka commit repeats nothing, and restoring a
Memgraph snapshot (or cutting a cypherl file back at a batch boundary) rewinds
the stream to exactly what the graph holds.

In a cypherl file the statements are rendered one per line, after the batch's
own statements, in the shape `OFFSET_LINE` reads back (cypherl_frames keeps
them in its frame lines too, so they are read without a scan).

A batch checks the offsets it continues from in its own transaction
(`continuation`): a retried or duplicated batch writes nothing, and one that
does not continue from what is stored raises StoredOffsetsConflict.
"""
from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from enum import Enum

from ..errors import StoredOffsetsConflict
from ..model import PartitionKey
from .statement import Statement

SP = tuple[str, str, int]   # (stream, topic, partition)
OFFSET_LABEL = "MgstreamsOffset"
WRITE_QUERY = (f"MERGE (o:{OFFSET_LABEL} {{stream: $stream, topic: $topic, partition: $partition}}) "
               f"SET o.next_offset = $next_offset")
READ_QUERY = (f"MATCH (o:{OFFSET_LABEL} {{stream: $stream}}) "
              f"RETURN o.topic AS topic, o.partition AS partition, o.next_offset AS next_offset")
# The change mark an offset change stores beside the offsets (change_marks.MarkKey.encode_stored), so that a
# takeover after a kill between the sink's store and the Kafka commit still knows the change was persisted.
MARK_LABEL = "MgstreamsChangeMark"
MARK_QUERY = (f"MERGE (m:{MARK_LABEL} {{stream: $stream, topic: $topic, partition: $partition}}) "
              f"SET m.mark = $mark")
# An offset change's marks and offsets in one statement (change_as_one_statement): on FalkorDB a statement applies
# whole or not at all (a refused one leaves nothing), so the mark is never stored without the offsets it stands for.
CHANGE_QUERY = (f"UNWIND $marks AS mark MERGE (m:{MARK_LABEL} {{stream: mark.stream, topic: mark.topic, "
                f"partition: mark.partition}}) SET m.mark = mark.mark WITH count(*) AS marked "
                f"UNWIND $offsets AS next MERGE (o:{OFFSET_LABEL} {{stream: next.stream, topic: next.topic, "
                f"partition: next.partition}}) SET o.next_offset = next.next_offset")
READ_MARKS_QUERY = (f"MATCH (m:{MARK_LABEL} {{stream: $stream}}) "
                    f"RETURN m.topic AS topic, m.partition AS partition, m.mark AS mark")
MARK_LINE = re.compile(
    rf'^MERGE \(m:{MARK_LABEL} \{{stream: "(?P<stream>[A-Za-z0-9_]+)", topic: "(?P<topic>[A-Za-z0-9._-]+)", '
    r'partition: (?P<partition>\d+)\}\) SET m\.mark = "(?P<mark>[0-9a-f]+\.\d+\.\d+\.(?:\d+|-)\.[0-9a-f]+)";$', re.M)
# WRITE_QUERY as cypher_literals renders it (stream and topic names need no escaping: see config).
OFFSET_LINE = re.compile(
    rf'^MERGE \(o:{OFFSET_LABEL} \{{stream: "(?P<stream>[A-Za-z0-9_]+)", topic: "(?P<topic>[A-Za-z0-9._-]+)", '
    r'partition: (?P<partition>\d+)\}\) SET o\.next_offset = (?P<offset>-?\d+);$', re.M)


def offset_statements(stream: str, offsets: Mapping[PartitionKey, int]) -> list[Statement]:
    """The statements that store `offsets` (next offset to read, per partition) for `stream`."""
    return [Statement(WRITE_QUERY, {"stream": stream, "topic": topic, "partition": partition,
                                    "next_offset": offset})
            for (topic, partition), offset in sorted(offsets.items())]


def mark_statements(stream: str, marks: Mapping[PartitionKey, str]) -> list[Statement]:
    """The statements that store change marks (encoded, per partition) for `stream`: put BEFORE the offset
    statements (offsets_in_statements reads the trailing ones)."""
    return [Statement(MARK_QUERY, {"stream": stream, "topic": topic, "partition": partition, "mark": mark})
            for (topic, partition), mark in sorted(marks.items())]


def change_as_one_statement(statements: Sequence[Statement]) -> list[Statement]:
    """`statements` with a trailing offset change (mark statements, then offset statements: what an offset
    change stores) as ONE statement (CHANGE_QUERY), for an engine without transactions (FalkorDB): each statement
    is atomic there, two are not, and a kill or a refusal between them left a mark without its offsets, which a
    takeover believed (the change "persisted") while the sink stored nothing of it. Anything else is returned as
    it is (a batch's offsets follow its data: the engine's stated limit, docs/how-to/exactly-once-delivery.md)."""
    end = len(statements)
    while end and statements[end - 1].query == WRITE_QUERY:
        end -= 1
    start = end
    while start and statements[start - 1].query == MARK_QUERY:
        start -= 1
    if start == end or end == len(statements):
        return list(statements)
    marks = [dict(s.parameters) for s in statements[start:end]]
    offsets = [dict(s.parameters) for s in statements[end:]]
    return [*statements[:start], Statement(CHANGE_QUERY, {"marks": marks, "offsets": offsets})]


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


class Continuation(Enum):
    """What an exactly-once batch is, against the offsets its sink stores (see `continuation`)."""
    APPLY = "apply"        # it continues from them: write it
    DONE = "done"          # they already are its end offsets: it was written (a lost ack, a retry): write nothing


def continuation(stored: Mapping[SP, int], end: Mapping[SP, int],
                 expect: Mapping[PartitionKey, int | None] | None = None) -> Continuation:
    """The compare-and-set of an exactly-once batch, made inside its transaction (or under the file's lock).

    `end`: the (stream, topic, partition) -> next offset the batch stores
    (offsets_in_statements); `stored`: what the sink holds for those streams;
    `expect`: (topic, partition) -> the offset the batch continues from, as
    the writer last knew the stored one (None: none stored). DONE when every
    one of `end` is already stored. Otherwise, with `expect`, each of the
    batch's partitions must store exactly what is expected, or
    StoredOffsetsConflict carries what is stored (the writer realigns there).
    Without `expect` (an explicit move, offset_statements alone) the batch is
    written whatever is stored.
    """
    if end and all(stored.get(key) == offset for key, offset in end.items()):
        return Continuation.DONE
    if expect is None:
        return Continuation.APPLY
    streams = {stream for stream, _, _ in end}
    if len(streams) != 1:
        raise ValueError(f"expect: a batch with expected offsets stores those of one stream, not {sorted(streams)}")
    [stream] = streams
    keys = set(expect) | {PartitionKey(topic, partition) for _, topic, partition in end}
    now = {tp: stored.get((stream, *tp)) for tp in keys}
    wrong = {tp: (expect.get(tp), value) for tp, value in now.items() if value != expect.get(tp)}
    if not wrong:
        return Continuation.APPLY
    shown = ", ".join(f"{t}:{p} stored {value if value is not None else 'none'}, expected "
                      f"{wanted if wanted is not None else 'none'}" for (t, p), (wanted, value) in sorted(wrong.items()))
    raise StoredOffsetsConflict(f"stored offsets of stream {stream!r}: the batch does not continue from them "
                                f"({shown}); nothing was written",
                                stored={tp: value for tp, value in now.items() if value is not None},
                                expected={tp: expect.get(tp) for tp in now})


def stored_in_rows(stream: str, rows: Iterable[Sequence]) -> dict[SP, int]:
    """READ_QUERY's rows as (stream, topic, partition) -> next offset."""
    return {(stream, topic, partition): offset for topic, partition, offset in rows}
