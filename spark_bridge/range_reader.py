"""Reading one offset range with confluent-kafka, without joining a group (plain Python).

A range `[from, until)` is read with `assign()` and ends when the consumer's
position reaches `until` or the partition reports EOF. Offsets are not
contiguous (transaction markers, aborted records under read_committed,
compaction), so a read never waits for the record at `until - 1`: it may not
exist. pyarrow is imported only by the Arrow helpers (the Spark side), so the
local engine reads ranges on an install without the `[spark]` extra. A start below the log start is data loss: it raises under
`fail_on_data_loss`, or the read starts at the earliest available offset.
"""
from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from functools import lru_cache
from typing import TYPE_CHECKING

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from stream_registry.errors import KafkaOperationError
from stream_registry.kafka.client import new_consumer
from stream_registry.kafka.messages import message_offset
from stream_registry.redaction import redact, secret_values

from .range_plan import DataLossError, OffsetRange

if TYPE_CHECKING:
    import pyarrow as pa

# The JVM Kafka source's row schema (Spark DDL); headers only with includeHeaders=true.
ROW_SCHEMA = ("key binary, value binary, topic string, partition int, offset long, "
              "timestamp timestamp, timestampType int")
HEADERS_COLUMN = "headers array<struct<key:string,value:binary>>"

_CONSUME_WAIT = 0.05  # seconds; consume() waits this long unless max_batch messages are ready
_DATA_LOSS = (KafkaError._AUTO_OFFSET_RESET, KafkaError.OFFSET_OUT_OF_RANGE)


def row_schema(include_headers: bool = False) -> str:
    return f"{ROW_SCHEMA}, {HEADERS_COLUMN}" if include_headers else ROW_SCHEMA


def _header_type():
    import pyarrow as pa

    return pa.list_(pa.field("element", pa.struct([("key", pa.string()), ("value", pa.binary())])))


@lru_cache(maxsize=2)
def arrow_schema(include_headers: bool = False) -> pa.Schema:
    """The Arrow form of `row_schema` exactly as Spark expects it from a Python data source."""
    import pyarrow as pa

    base = [("key", pa.binary()), ("value", pa.binary()), ("topic", pa.string()), ("partition", pa.int32()),
            ("offset", pa.int64()), ("timestamp", pa.timestamp("us", tz="UTC")), ("timestampType", pa.int32())]
    return pa.schema(base + ([("headers", _header_type())] if include_headers else []))


class RangeReader:
    """One consumer that reads ranges one after the other; use as a context manager."""

    def __init__(self, consumer_config: Mapping[str, object], *, fail_on_data_loss: bool = True,
                 poll_timeout_ms: int = 120_000, max_batch: int = 10_000):
        self._secrets = secret_values(consumer_config)
        conf = dict(consumer_config)
        conf.setdefault("group.id", "mgstreams-backfill")
        conf.setdefault("isolation.level", "read_committed")
        # A range read runs to the end of what is there: don't let a fetch idle at the log end
        # (consume() also returns only once it has max_batch messages or its timeout passed).
        conf.setdefault("fetch.wait.max.ms", 50)
        # ...and keep fetching ahead: librdkafka stops prefetching at queued.min.messages (100,000), and then
        # consume() waits for every fetch round trip; a range is read to its end, so prefetch it (still
        # bounded by queued.max.messages.kbytes). About 1.2x the rate of one reader on the embedded broker.
        conf.setdefault("queued.min.messages", 1_000_000)
        conf.setdefault("max.partition.fetch.bytes", 16 * 1024 * 1024)
        conf.update({"enable.auto.commit": False, "enable.auto.offset.store": False,
                     "enable.partition.eof": True, "auto.offset.reset": "error"})
        self._consumer: Consumer | None = new_consumer(conf, self._secrets, field="kafka.*")
        self.fail_on_data_loss = fail_on_data_loss
        self.poll_timeout = poll_timeout_ms / 1000
        self.max_batch = max_batch

    def close(self) -> None:
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None

    def _live(self) -> Consumer:
        if self._consumer is None:
            raise KafkaOperationError("kafka.*: the range reader is closed")
        return self._consumer

    def __enter__(self) -> RangeReader:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- reading ------------------------------------------------------------------
    def messages(self, r: OffsetRange) -> Iterator[list]:
        """Batches of the visible confluent_kafka.Messages of `r`, in offset order."""
        start = self._start(r, r.from_offset)
        if start is None:
            return
        consumer = self._live()
        consumer.assign([TopicPartition(r.topic, r.partition, start)])
        try:
            last_progress, at = time.monotonic(), start
            while True:
                # never more than the range can still hold: what librdkafka prefetched past the range's end is
                # not made into Python messages only to be dropped (a stream's micro-batch ranges are short)
                wanted = max(1, min(self.max_batch, r.until_offset - at))
                polled = consumer.consume(wanted, timeout=min(_CONSUME_WAIT, self.poll_timeout))
                batch, done = [], False
                for msg in polled:
                    err = msg.error()
                    if err is not None:
                        if err.code() == KafkaError._PARTITION_EOF:
                            done = True
                            break
                        if err.retriable() and not err.fatal() and err.code() not in _DATA_LOSS:
                            continue  # librdkafka retries by itself
                        restart = self._on_error(r, err)
                        if restart is None:
                            done = True
                            break
                        consumer.assign([TopicPartition(r.topic, r.partition, restart)])
                        at = restart
                        break
                    offset = message_offset(msg)
                    if offset >= r.until_offset:
                        done = True
                        break
                    batch.append(msg)
                    if offset + 1 >= r.until_offset:
                        done = True
                        break
                if batch:
                    last_progress, at = time.monotonic(), message_offset(batch[-1]) + 1
                    yield batch
                if done:
                    return
                if not polled:
                    position = self._position(r)
                    if position is not None and position >= r.until_offset:
                        return  # only markers or aborted records were left
                    if time.monotonic() - last_progress > self.poll_timeout:
                        raise KafkaOperationError(
                            f"{r}: no record, end or EOF within kafkaConsumer.pollTimeoutMs="
                            f"{int(self.poll_timeout * 1000)} (position {position})",
                            code="_TIMED_OUT", topic=r.topic, partition=r.partition)
        finally:
            if self._consumer is not None:
                self._consumer.unassign()

    def record_batches(self, r: OffsetRange, include_headers: bool = False) -> Iterator[pa.RecordBatch]:
        """The range as Arrow batches in the data source's row schema."""
        schema = arrow_schema(include_headers)
        for batch in self.messages(r):
            yield to_record_batch(batch, r, schema, include_headers)

    # -- internals -------------------------------------------------------------------
    def _start(self, r: OffsetRange, wanted: int) -> int | None:
        """Where to start reading `r` (None: nothing left), checking the log start first."""
        low, _high = self._watermarks(r)
        if wanted >= low:
            return wanted if wanted < r.until_offset else None
        self._lost(r, wanted, low)
        return low if low < r.until_offset else None

    def _lost(self, r: OffsetRange, wanted: int, low: int) -> None:
        if self.fail_on_data_loss:
            raise DataLossError(
                f"{r}: offsets [{wanted}, {min(low, r.until_offset)}) were deleted from the log (log start "
                f"{low}); some data was lost. Set failOnDataLoss=false to read from the earliest available "
                f"offset instead", code="OFFSET_OUT_OF_RANGE", topic=r.topic, partition=r.partition)

    def _on_error(self, r: OffsetRange, err: KafkaError) -> int | None:
        """Handle a consumer error: raise, or return where to restart (None: the range is done)."""
        if err.code() in _DATA_LOSS:
            position = self._position(r)
            low, _ = self._watermarks(r)
            wanted = position if position is not None and position >= 0 else r.from_offset
            self._lost(r, wanted, low)
            return max(wanted, low) if max(wanted, low) < r.until_offset else None
        raise KafkaOperationError(f"{r}: consume failed: {self._redact(err.str())} ({err.name()})",
                                  code=err.name(), topic=r.topic, partition=r.partition)

    def _watermarks(self, r: OffsetRange) -> tuple[int, int]:
        try:
            return self._live().get_watermark_offsets(TopicPartition(r.topic, r.partition),
                                                      timeout=self.poll_timeout)
        except KafkaException as exc:
            err = exc.args[0]
            raise KafkaOperationError(f"{r}: watermarks failed: {self._redact(err.str())} ({err.name()})",
                                      code=err.name(), topic=r.topic, partition=r.partition) from None

    def _position(self, r: OffsetRange) -> int | None:
        [tp] = self._live().position([TopicPartition(r.topic, r.partition)])
        return tp.offset if tp.offset >= 0 else None

    def _redact(self, exc) -> str:
        return redact(str(exc), self._secrets)


def to_record_batch(messages: list, r: OffsetRange, schema: pa.Schema, include_headers: bool) -> pa.RecordBatch:
    """confluent_kafka.Messages of one partition as one Arrow batch (librdkafka's timestamp types
    1 create / 2 log-append become Kafka's 0 / 1, as the JVM source reports them)."""
    import pyarrow as pa

    n = len(messages)
    stamps = [m.timestamp() for m in messages]
    columns = [
        pa.array([m.key() for m in messages], pa.binary()),
        pa.array([m.value() for m in messages], pa.binary()),
        pa.array([r.topic] * n, pa.string()),
        pa.array([r.partition] * n, pa.int32()),
        pa.array([m.offset() for m in messages], pa.int64()),
        pa.array([ms * 1000 if ms >= 0 else None for _, ms in stamps], pa.timestamp("us", tz="UTC")),
        pa.array([kind - 1 for kind, _ in stamps], pa.int32()),
    ]
    if include_headers:
        columns.append(pa.array([[{"key": k, "value": v} for k, v in (m.headers() or [])] for m in messages],
                                _header_type()))
    return pa.RecordBatch.from_arrays(columns, schema=schema)
