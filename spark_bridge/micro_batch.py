"""Each micro-batch of a Spark stream through the stream's transformation into its sink, on the executors.

The query reads the writing source (stream_source): each input partition is one Kafka partition's range of the
micro-batch, and its task reads the range from Kafka itself, transforms and writes it (`ShareWriter.write_range`)
and yields one stats row (SHARE_STATS). Records never cross into the JVM (a Python -> JVM -> Python round trip
per record cost more CPU than the transformation); only the ranges go out and the stats rows come back.
The query's sink is `noop` (stream_query): running the micro-batch is all it does.

Exactly-once (`exactly_once=True`, Bolt or cypherl): every write of `batch_size` records stores the
partition's next offset in the same transaction (graph.offset_store), continuing from the stored offset it
read (`expect`: a zombie or duplicate task writes nothing). A share first reads what is stored: records
below it were written by an earlier attempt of this micro-batch (a query restart, a driver kill), so the read
starts there and a replayed micro-batch writes nothing twice. A move (a new epoch) is stored in the graph by the
reader when it plans the epoch's first micro-batch (`GraphOffsets.persist_move`, once per epoch), so every
share continues from what is stored. At-least-once: the statements alone.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from stream_registry.errors import StoredOffsetsConflict
from stream_registry.formats import Decoder
from stream_registry.graph.offset_store import offset_statements
from stream_registry.graph.sinks.protocol import Written
from stream_registry.graph.sinks.schemes import NO_CREDENTIALS, open_sink
from stream_registry.graph.sinks.stored_offsets import read_stored_offsets_within
from stream_registry.graph.transform import Message, decode_all, load_transformation, run_transformation, wrap
from stream_registry.graph.unwind import nodes_first
from stream_registry.model import PartitionKey

from .bolt_load import WriterSlots, is_bolt_uri
from .job import Loading, long_lived_objects_frozen, rebatch
from .range_plan import OffsetRange

SHARE_STATS = "topic string, partition int, records long, written long, skipped long, statements long"


@dataclass(frozen=True)
class GraphOffsets:
    """The offsets an exactly-once Spark stream stores in its graph, under `stream` (driver side: the reader)."""
    sink: str
    stream: str
    credentials: Mapping[str, str] = field(default_factory=dict, repr=False)

    def stored(self, partitions: Iterable[PartitionKey]) -> dict[PartitionKey, int]:
        with open_sink(self.sink, self.credentials or NO_CREDENTIALS) as sink:
            return read_stored_offsets_within(sink, self.stream, list(partitions))

    def persist_move(self, offsets: Mapping[PartitionKey, int]) -> None:
        """Store a move (the epoch's start on each moved partition) in one transaction."""
        with open_sink(self.sink, self.credentials or NO_CREDENTIALS) as sink:
            sink.write(offset_statements(self.stream, offsets))


@dataclass(frozen=True)
class StreamWriting:
    """What each micro-batch does: the stream's Loading (transformation, sink, batch size, writers, formats),
    and for exactly-once the name its offsets are stored under. `tasks`: at most this many Spark tasks per
    micro-batch, each writing several Kafka partitions' ranges one after the other (None: one task per range);
    the executors' cores is the natural value (fewer tasks to schedule, one wave)."""
    loading: Loading
    stream: str
    exactly_once: bool = False
    tasks: int | None = None


class ShareWriter:
    """One Kafka partition's share of a micro-batch through the transformation into the sink (executor side,
    plain Python: the model test calls it without Spark)."""

    def __init__(self, writing: StreamWriting):
        self.writing = writing

    def write_range(self, r: OffsetRange, read: Callable[[OffsetRange], Iterable[list[Message]]]) -> dict[str, int]:
        """Read `r` with `read` (batches of Messages in offset order) and write it. Exactly-once: the records
        below the graph's stored offset were written by an earlier attempt of this micro-batch and are not read
        again (the read starts at the stored offset)."""
        tp = PartitionKey(r.topic, r.partition)
        with self._sink() as sink:
            stored = self._stored(sink, tp, r.from_offset, r.until_offset - 1)
            skipped = 0
            if stored is not None and stored > r.from_offset:
                skipped, r = stored - r.from_offset, OffsetRange(r.topic, r.partition, stored, r.until_offset)
            if r.from_offset >= r.until_offset:
                return _stats(skipped, 0, 0)
            return self._write(sink, tp, stored, rebatch(read(r), self.writing.loading.batch_size), skipped)

    def _sink(self):
        loading = self.writing.loading
        return open_sink(loading.sink, loading.sink_credentials or NO_CREDENTIALS)

    def _stored(self, sink, tp: PartitionKey, first: int, last: int) -> int | None:
        """Exactly-once: the partition's stored offset (None otherwise); past this micro-batch's records (`first`
        .. `last`) it is a conflict: another writer moved it."""
        w = self.writing
        if not w.exactly_once:
            return None
        stored = read_stored_offsets_within(sink, w.stream, [tp]).get(tp)
        if stored is not None and stored > last + 1:
            raise StoredOffsetsConflict(
                f"stored offsets of stream {w.stream!r}: {tp.topic}:{tp.partition} stores {stored}, past this "
                f"micro-batch's records {first}..{last}: another writer moved it; nothing was written",
                stored={tp: stored}, expected={tp: first})
        return stored

    def _write(self, sink, tp: PartitionKey, stored: int | None, chunks: Iterable[list[Message]],
               skipped: int) -> dict[str, int]:
        """Each chunk (batch_size records) transformed and written; exactly-once: with the partition's next
        offset in the same transaction, continuing from `stored` (the compare-and-set)."""
        w, loading = self.writing, self.writing.loading
        fn = load_transformation(loading.transform, loading.search_dirs, options=loading.transform_options)
        decoder = Decoder(**loading.decoding)
        slots = WriterSlots(loading.sink, loading.writers) if is_bolt_uri(loading.sink) else None
        written = statements = 0
        with long_lived_objects_frozen():
            for chunk in chunks:
                if decoder.active:
                    chunk = [wrap(m, decoder) for m in chunk]
                    decode_all(chunk)
                produced = run_transformation(fn, chunk, name=loading.transform)
                statements += len(produced)
                batch = nodes_first(produced) if slots is not None else produced
                if w.exactly_once:
                    end = chunk[-1].offset() + 1
                    batch = [*batch, *offset_statements(w.stream, {tp: end})]
                    expect: dict[PartitionKey, int | None] | None = {tp: stored}
                    stored = end
                elif not batch:
                    continue
                else:
                    expect = None
                if slots is not None:
                    with slots.slot():
                        done = sink.write(batch, expect=expect)
                else:
                    done = sink.write(batch, expect=expect)
                if done == Written.ALREADY_APPLIED:
                    skipped += len(chunk)
                else:
                    written += len(chunk)
        return _stats(skipped, written, statements)


def _stats(skipped: int, written: int, statements: int) -> dict[str, int]:
    return {"records": written + skipped, "written": written, "skipped": skipped, "statements": statements}
