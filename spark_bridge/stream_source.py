"""The source a Spark stream's query reads: the `mgstreams_kafka` streaming reader whose input partitions are written
where they are read.

    name = register_writing_source(spark, writing)      # one per query: it carries the stream's StreamWriting
    spark.readStream.format(name).options(**source).load()   # rows: SHARE_STATS, one per Kafka partition range

The driver side is KafkaStreamReader's, unchanged: epoch offsets, admission control, changes taken at micro-batch
boundaries, the moves persisted in the graph at planning, the group's commits after each micro-batch. Only `read`
differs: the executor's task reads its Kafka range itself, runs it through the stream's transformation into the
sink (micro_batch.ShareWriter, exactly-once by the stored-offset compare-and-set) and yields one stats row. So the
records stay in one Python worker from Kafka to the sink, as the backfill's tasks do (backfill.RangeLoader);
nothing but the ranges (pickled input partitions) and the stats rows crosses into the JVM.

The StreamWriting (transformation, sink, its credentials) travels as an attribute of a data source class made for
the query (pickled by value with the class, as a foreachBatch function would be), never as an option: options
show in query plans and logs.
"""
from __future__ import annotations

import uuid
from collections.abc import Iterator, Sequence

from pyspark.sql.datasource import InputPartition
from pyspark.sql.types import StructType

from stream_registry.errors import ConfigError
from stream_registry.graph.transform import Message

from .kafka_source import KafkaDataSource
from .micro_batch import SHARE_STATS, ShareWriter, StreamWriting
from .range_plan import OffsetRange
from .range_reader import RangeReader
from .source_options import SHORT_NAME, SourceOptions, parse_source_options
from .stream_offsets import group_ranges
from .stream_reader import KafkaStreamReader


class KafkaWritingSource(KafkaDataSource):
    """The streaming source of one query (made by `writing_source`: `writing` and `tag` are set on a subclass)."""
    writing: StreamWriting
    tag: str = ""

    @classmethod
    def name(cls) -> str:
        return f"{SHORT_NAME}_writing_{cls.tag}"

    def schema(self) -> str:
        parse_source_options(self.options, streaming=True)
        return SHARE_STATS

    def reader(self, schema: StructType):
        raise ConfigError(f"{self.name()}: a stream's writing source has no batch read (use {SHORT_NAME})")

    def streamReader(self, schema: StructType) -> KafkaWritingStreamReader:
        return KafkaWritingStreamReader(parse_source_options(self.options, streaming=True), self.writing)


class KafkaWritingStreamReader(KafkaStreamReader):
    """KafkaStreamReader whose `read` (executor side) writes its range and yields one stats row."""

    def __init__(self, options: SourceOptions, writing: StreamWriting):
        super().__init__(options)
        self.writing = writing

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        """KafkaStreamReader's planning (the moves persisted, the changes answered), its ranges grouped into at
        most `writing.tasks` input partitions of about equal size."""
        ranges = [p.value for p in super().partitions(start, end) if p.value is not None]
        return [RangeGroup(group) for group in group_ranges(ranges, self.writing.tasks)]

    def read(self, partition: InputPartition) -> Iterator:
        """Each range of the input partition read, transformed and written (executor side); one stats row each."""
        ranges = partition.value if isinstance(partition, RangeGroup) else (partition.value,)
        for r in ranges:
            if r is None:
                continue
            reader = _range_reader(self.options)
            try:
                stats = ShareWriter(self.writing).write_range(r, reader_messages(reader))
            except BaseException:
                _drop_reader(reader)
                raise
            yield (r.topic, r.partition, stats["records"], stats["written"], stats["skipped"], stats["statements"])


def reader_messages(reader: RangeReader):
    """A range's records as batches of Messages, read with `reader`."""
    def read(piece: OffsetRange) -> Iterator[list[Message]]:
        return ([Message.from_kafka(m) for m in batch] for batch in reader.messages(piece))
    return read


class RangeGroup(InputPartition):
    """The Kafka partition ranges one task writes, in order; `value` is the tuple of OffsetRanges."""

    def __init__(self, value: tuple[OffsetRange, ...]):
        super().__init__(value)


# One consumer per source's settings in each Python worker, kept across its tasks (Spark reuses its Python
# workers): a new consumer per task (connect, metadata, first fetch) cost a small micro-batch much of its time.
_READERS: dict[tuple, RangeReader] = {}


def _range_reader(o: SourceOptions) -> RangeReader:
    key = (tuple(sorted((k, str(v)) for k, v in o.consumer_config().items())), o.fail_on_data_loss, o.poll_timeout_ms)
    reader = _READERS.get(key)
    if reader is None:
        reader = _READERS[key] = RangeReader(o.consumer_config(), fail_on_data_loss=o.fail_on_data_loss,
                                             poll_timeout_ms=o.poll_timeout_ms)
    return reader


def _drop_reader(reader: RangeReader) -> None:
    """A read that failed: its consumer is closed and not reused (its state is unknown)."""
    for key, cached in list(_READERS.items()):
        if cached is reader:
            del _READERS[key]
    reader.close()


def writing_source(writing: StreamWriting) -> type[KafkaWritingSource]:
    """A data source class for one query, carrying its StreamWriting."""
    tag = uuid.uuid4().hex[:12]
    return type(f"KafkaWritingSource_{tag}", (KafkaWritingSource,), {"writing": writing, "tag": tag})


def register_writing_source(spark, writing: StreamWriting) -> str:
    """Register a writing source for one query in this session; returns the format name to read."""
    source = writing_source(writing)
    spark.dataSource.register(source)
    return source.name()
