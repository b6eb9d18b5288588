"""A PySpark Python Data Source that reads Kafka offset ranges in batch, and streams (stream_reader).

    from spark_bridge.kafka_source import register
    register(spark)
    df = (spark.read.format("mgstreams_kafka")
          .option("kafka.bootstrap.servers", "host:9092")
          .option("subscribe", "orders")
          .option("startingOffsets", "earliest").option("endingOffsets", "latest")
          .load())

Options and row schema mirror Spark's JVM Kafka source (see source_options).
Planning runs once per query when Spark plans the scan: the ranges of
`range_plan` become the input partitions, one Spark task each. Only the
DataFrame and DataSource APIs are used, so the source works under Spark
Connect too (the server needs this package importable by its Python workers).
"""
from __future__ import annotations

from collections.abc import Iterator, Mapping

from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.types import StructType

from stream_registry.errors import ConfigError
from stream_registry.kafka.queries import PartitionQuery
from stream_registry.model import PartitionKey
from stream_registry.registry.state.state_store import stored_config

from .handoff import stream_resume_offsets, uses_committed
from .range_plan import RangePlan, plan, split_ranges
from .range_reader import row_schema
from .source_options import SHORT_NAME, SourceOptions, include_headers, parse_source_options
from .stream_reader import KafkaRangePartition, KafkaStreamReader, read_partition


class KafkaDataSource(DataSource):
    """Batch reads of Kafka topics; the short name is `mgstreams_kafka`."""

    @classmethod
    def name(cls) -> str:
        return SHORT_NAME

    def schema(self) -> str:
        """Called at load, for batch and streaming reads alike (the source is not told which): options wrong for
        both are refused here, naming the option (as the batch read words it); one wrong only for the read's kind
        at planning (reader() / streamReader())."""
        try:
            parse_source_options(self.options, streaming=False)
        except ConfigError as batch_error:
            try:
                parse_source_options(self.options, streaming=True)
            except ConfigError:
                raise batch_error from None
        return row_schema(include_headers(self.options))

    def reader(self, schema: StructType) -> KafkaBatchReader:
        return KafkaBatchReader(self._checked(schema, streaming=False))

    def streamReader(self, schema: StructType) -> KafkaStreamReader:
        return KafkaStreamReader(self._checked(schema, streaming=True))

    def _checked(self, schema: StructType, streaming: bool) -> SourceOptions:
        options = parse_source_options(self.options, streaming=streaming)
        expected = row_schema(options.include_headers)
        given = [f.name for f in schema.fields]
        wanted = [column.split(" ", 1)[0] for column in expected.split(", ")]
        if given != wanted:
            raise ConfigError(f"schema: the {SHORT_NAME} source has the fixed schema '{expected}' "
                              f"(includeHeaders adds headers); got columns {given}")
        return options


class KafkaBatchReader(DataSourceReader):
    def __init__(self, options: SourceOptions):
        self.options = options

    def partitions(self) -> list[KafkaRangePartition]:
        return [KafkaRangePartition(r) for r in plan_source(self.options).ranges]

    def read(self, partition: InputPartition) -> Iterator:
        return read_partition(self.options, partition)


def plan_source(options: SourceOptions) -> RangePlan:
    """The ranges a read with these options covers (an explicit offsetRanges plan is only split).
    With the `stream` option, `committed` is where that registered stream resumes (the hand-off)."""
    if options.ranges is not None:
        ranges = split_ranges(options.ranges, options.min_partitions, options.max_records_per_partition)
        return RangePlan((), tuple(ranges))
    resume = stream_resume(options) if options.stream else None
    with PartitionQuery(options.bootstrap_servers, options.group_id, options.client_config) as query:
        return plan(query, options.topics, options.starting, options.ending, options.min_partitions,
                    max_offsets_per_partition=options.max_records_per_partition,
                    fail_on_data_loss=options.fail_on_data_loss, resume_offsets=resume)


def stream_resume(options: SourceOptions) -> dict[PartitionKey, int] | None:
    """The resume point of the `stream` option's stream when the offsets refer to `committed`; its topics
    must include the subscribed ones."""
    stream, state_dir = options.stream, options.state_dir
    if not stream or not state_dir:   # parse_options pairs them; a caller building options by hand may not
        raise ConfigError(f"stream: needs the stream's name and its host's stateDir, got {stream!r} in "
                          f"{state_dir!r}")
    config = stored_config(state_dir, stream).with_group()
    subscribed = list(options.topics)
    foreign = [t for t in subscribed if t not in config.topics]
    if foreign:
        option = "assign" if isinstance(options.topics, Mapping) else "subscribe"
        raise ConfigError(f"{option}: topic(s) {', '.join(map(repr, foreign))} are not topics of stream "
                          f"{options.stream!r} ({', '.join(config.topics)})")
    if not uses_committed(options.starting, options.ending):
        return None
    return stream_resume_offsets(state_dir, config)


def register(spark) -> None:
    """Make `spark.read.format("mgstreams_kafka")` available in this session."""
    spark.dataSource.register(KafkaDataSource)
