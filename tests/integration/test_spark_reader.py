"""Reading offset ranges with confluent-kafka (the code every Spark task runs), without Spark."""
from __future__ import annotations

import pytest
from broker_support import READ_COMMITTED_SHOWS_ABORTED, skip_rest_on_tansu
from confluent_kafka import Producer
from kafka_records import direct_consume, transactional_topic

from spark_bridge.range_plan import DataLossError, OffsetRange, plan, plan_ranges
from spark_bridge.range_reader import RangeReader, arrow_schema
from stream_registry.kafka.queries import PartitionQuery
from stream_registry.offset_spec import parse_offset_spec


def read(bootstrap: str, ranges, **kwargs) -> dict[int, list[tuple]]:
    records: dict[int, list[tuple]] = {}
    with RangeReader({"bootstrap.servers": bootstrap}, **kwargs) as reader:
        for r in ranges:
            for batch in reader.messages(r):
                records.setdefault(r.partition, []).extend(
                    (m.offset(), m.key(), m.value(), m.timestamp()[1]) for m in batch)
    return records


def test_ranges_read_exactly_what_a_direct_consume_sees(kafka):
    topic = kafka.new_topic(3)
    kafka.produce(topic, 300, partitions=3, key=lambda i: b"k%d" % i, timestamp_ms=lambda i: 1_700_000_000_000 + i)
    expected = direct_consume(kafka.bootstrap_servers, topic, 3)
    with PartitionQuery(kafka.bootstrap_servers, "planner") as query:
        ranges = plan_ranges(query, [topic], parse_offset_spec("earliest"), parse_offset_spec("latest"), 7)
    assert len(ranges) == 7
    assert read(kafka.bootstrap_servers, ranges, max_batch=17) == expected


def test_ranges_over_transaction_markers_and_aborted_records_end_and_lose_nothing(kafka):
    topic, partitions = transactional_topic(kafka)
    visible = direct_consume(kafka.bootstrap_servers, topic, partitions)
    with PartitionQuery(kafka.bootstrap_servers, "planner") as query:
        result = plan(query, [topic], parse_offset_spec("earliest"), parse_offset_spec("latest"), 1000)
    # one-offset ranges: many start and end on a commit/abort marker or inside an aborted transaction
    assert all(r.size == 1 for r in result.ranges)
    log_ends = {b.partition: b.until_offset for b in result.bounds}
    for p in range(partitions):
        assert len(visible[p]) < log_ends[p], "the log must have gaps (markers) for this test"
    assert read(kafka.bootstrap_servers, result.ranges, poll_timeout_ms=5000) == visible
    skip_rest_on_tansu(READ_COMMITTED_SHOWS_ABORTED)
    if kafka.embedded is None:  # the embedded broker does not report aborted transactions to consumers
        assert not any(b"aborted" in value for records in visible.values() for _, _, value, _ in records)


def test_range_past_the_log_end_ends_at_eof_instead_of_waiting(kafka):
    topic = kafka.new_topic(1)
    kafka.produce(topic, 5)
    records = read(kafka.bootstrap_servers, [OffsetRange(topic, 0, 2, 1_000)], poll_timeout_ms=60_000)
    assert [offset for offset, *_ in records[0]] == [2, 3, 4]


def test_deleted_start_raises_or_starts_at_the_earliest_available(embedded_kafka, kafka):
    topic = kafka.new_topic(1)
    # the embedded broker keeps about 5 MiB per partition: 7 MiB pushes the log start up
    kafka.produce(topic, 7 * 1024, payload=lambda i: b"%06d" % i + b"x" * 1018)
    with PartitionQuery(kafka.bootstrap_servers, "planner") as query:
        [(low, high)] = query.watermarks([(topic, 0)]).values()
        assert low > 0
        with pytest.raises(DataLossError, match=rf"offsets \[0, {low}\) of {topic}:0 were deleted"):
            plan_ranges(query, [topic], parse_offset_spec(0), parse_offset_spec("latest"))
    r = OffsetRange(topic, 0, 0, low + 3)
    with pytest.raises(DataLossError, match=rf"{topic}:0 \[0, {low + 3}\): offsets \[0, {low}\) were deleted"):
        read(kafka.bootstrap_servers, [r])
    records = read(kafka.bootstrap_servers, [r], fail_on_data_loss=False)
    assert [offset for offset, *_ in records[0]] == [low, low + 1, low + 2]


def test_arrow_batches_carry_the_jvm_source_row_schema(kafka):
    topic = kafka.new_topic(1)
    producer = Producer({"bootstrap.servers": kafka.bootstrap_servers})
    producer.produce(topic, value=b"v", key=b"k", headers=[("h", b"1"), ("h", None)], timestamp=1_700_000_000_123)
    producer.produce(topic, value=None, key=None)
    producer.flush(10)
    with RangeReader({"bootstrap.servers": kafka.bootstrap_servers}) as reader:
        [batch] = list(reader.record_batches(OffsetRange(topic, 0, 0, 2), include_headers=True))
    assert batch.schema == arrow_schema(True)
    first, second = batch.to_pylist()
    assert (first["key"], first["value"], first["topic"], first["partition"], first["offset"]) == \
        (b"k", b"v", topic, 0, 0)
    assert int(first["timestamp"].timestamp() * 1000) == 1_700_000_000_123 and first["timestampType"] == 0
    assert first["headers"] == [{"key": "h", "value": b"1"}, {"key": "h", "value": None}]
    assert (second["key"], second["value"], second["headers"]) == (None, None, [])
