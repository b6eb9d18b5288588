"""Each micro-batch of a Spark stream through the stream's transformation into its sink.

`MicroBatchWriter` is the query's `foreachBatch` function: it runs the micro-batch's DataFrame through
`ShareWriter` with `mapInArrow`, so each Kafka partition's share is transformed and written on an executor
(one Spark task per input partition, the reader's ranges: no shuffle), and returns nothing but stats.

Exactly-once (`exactly_once=True`, Bolt or cypherl): every write of `batch_size` records stores the
partition's next offset in the same transaction (graph.offset_store), continuing from the stored offset it
read (`expect`: a zombie or duplicate task writes nothing). A share first reads what is stored: records
below it were written by an earlier attempt of this micro-batch (a query restart, a driver kill) and are
dropped, so a replayed micro-batch writes nothing twice. A move (a new epoch) is stored in the graph by the
reader when it plans the epoch's first micro-batch (`GraphOffsets.persist_move`, once per epoch), so every
share continues from what is stored. At-least-once: the statements alone.
"""
from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field

import pyarrow as pa

from stream_registry.errors import StoredOffsetsConflict
from stream_registry.formats import Decoder
from stream_registry.graph.offset_store import offset_statements
from stream_registry.graph.sinks.protocol import Written
from stream_registry.graph.sinks.schemes import NO_CREDENTIALS, open_sink
from stream_registry.graph.sinks.stored_offsets import read_stored_offsets_within
from stream_registry.graph.transform import Message, decode_all, load_transformation, run_transformation, wrap
from stream_registry.graph.unwind import nodes_first
from stream_registry.model import PartitionKey

from .backfill import arrow_messages
from .bolt_load import WriterSlots, is_bolt_uri
from .job import Loading, long_lived_objects_frozen

SHARE_STATS = "topic string, partition int, records long, written long, skipped long, statements long"
_SHARE_ARROW = pa.schema([("topic", pa.string()), ("partition", pa.int32()), ("records", pa.int64()),
                          ("written", pa.int64()), ("skipped", pa.int64()), ("statements", pa.int64())])


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
    and for exactly-once the name its offsets are stored under."""
    loading: Loading
    stream: str
    exactly_once: bool = False


class MicroBatchWriter:
    """foreachBatch(df, batch_id): every partition's share on the executors; the stats rows back."""

    def __init__(self, writing: StreamWriting):
        self.writing = writing
        self.batches: list[tuple[int, list]] = []   # driver-side record of (batch_id, stats rows), classic only

    def __call__(self, df, batch_id: int) -> None:
        rows = df.mapInArrow(ShareWriter(self.writing), SHARE_STATS).collect()
        self.batches.append((batch_id, rows))
        del self.batches[:-50]


class ShareWriter:
    """mapInArrow function: the rows of one or more Kafka partitions, in offset order within each."""

    def __init__(self, writing: StreamWriting):
        self.writing = writing

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        shares: dict[PartitionKey, list[Message]] = {}
        for messages in arrow_messages(batches):
            for message in messages:
                shares.setdefault(PartitionKey(message.topic_name(), message.partition()), []).append(message)
        with long_lived_objects_frozen():
            for tp, messages in shares.items():
                yield pa.RecordBatch.from_pylist([{"topic": tp.topic, "partition": tp.partition,
                                                   **self.write_share(tp, messages)}], schema=_SHARE_ARROW)

    def write_share(self, tp: PartitionKey, messages: list[Message]) -> dict[str, int]:
        """Transform and write one partition's records (plain Python, callable without Spark)."""
        w, loading = self.writing, self.writing.loading
        fn = load_transformation(loading.transform, loading.search_dirs, options=loading.transform_options)
        decoder = Decoder(**loading.decoding)
        slots = WriterSlots(loading.sink, loading.writers) if is_bolt_uri(loading.sink) else None
        written = skipped = statements = 0
        with open_sink(loading.sink, loading.sink_credentials or NO_CREDENTIALS) as sink:
            stored: int | None = None
            if w.exactly_once:
                stored = read_stored_offsets_within(sink, w.stream, [tp]).get(tp)
                last = messages[-1].offset()
                if stored is not None and stored > last + 1:
                    raise StoredOffsetsConflict(
                        f"stored offsets of stream {w.stream!r}: {tp.topic}:{tp.partition} stores {stored}, past this "
                        f"micro-batch's records {messages[0].offset()}..{last}: another writer moved it; nothing "
                        f"was written", stored={tp: stored}, expected={tp: messages[0].offset()})
                if stored is not None:
                    kept = [m for m in messages if m.offset() >= stored]
                    skipped, messages = len(messages) - len(kept), kept
            for start in range(0, len(messages), loading.batch_size):
                chunk = messages[start:start + loading.batch_size]
                if decoder.active:
                    chunk = [wrap(m, decoder) for m in chunk]
                    decode_all(chunk)
                produced = run_transformation(fn, chunk, name=loading.transform)
                statements += len(produced)
                batch = nodes_first(produced) if slots is not None else produced
                if w.exactly_once:
                    end = chunk[-1].offset() + 1
                    batch = [*batch, *offset_statements(w.stream, {tp: end})]
                    expect = {tp: stored}
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
        return {"records": written + skipped, "written": written, "skipped": skipped, "statements": statements}
