"""The mgstreams_kafka PySpark data source on the shared SparkSession."""
from __future__ import annotations

import uuid

import pytest
from kafka_records import direct_consume, transactional_topic

from mgstreams.cli.backfill import root_cause
from spark_bridge.kafka_source import register
from spark_bridge.range_reader import row_schema
from spark_bridge.source_options import parse_source_options

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def source(spark):
    register(spark)
    return spark


def reader(spark, kafka, **options):
    r = spark.read.format("mgstreams_kafka").option("kafka.bootstrap.servers", kafka.bootstrap_servers)
    return r.options(**options)


def as_records(rows) -> dict[int, list[tuple]]:
    records: dict[int, list[tuple]] = {}
    for row in sorted(rows, key=lambda r: (r.partition, r.offset)):
        stamp = round(row.timestamp.timestamp() * 1000) if row.timestamp else None
        records.setdefault(row.partition, []).append((row.offset, row.key, row.value, stamp))
    return records


def test_source_output_equals_a_direct_consume(source, kafka):
    topic = kafka.new_topic(3)
    kafka.produce(topic, 120, partitions=3, key=lambda i: b"k%d" % i, timestamp_ms=lambda i: 1_700_000_000_000 + i)
    df = reader(source, kafka, subscribe=topic, minPartitions="5", includeHeaders="true").load()
    assert [f.name for f in df.schema.fields] == [c.split(" ")[0] for c in row_schema(True).split(", ")]
    assert df.schema.simpleString() == (
        "struct<key:binary,value:binary,topic:string,partition:int,offset:bigint,timestamp:timestamp,"
        "timestampType:int,headers:array<struct<key:string,value:binary>>>")
    rows = df.collect()
    assert {r.topic for r in rows} == {topic} and {r.timestampType for r in rows} == {0}
    assert as_records(rows) == direct_consume(kafka.bootstrap_servers, topic, 3)
    # explicit offsets in Spark's dialect (-2 = earliest) and an assign subscription
    part = reader(source, kafka, assign=f'{{"{topic}": [1, 2]}}',
                  startingOffsets=f'{{"{topic}": {{"1": 30, "2": -2}}}}',
                  endingOffsets=f'{{"{topic}": {{"1": -1, "2": 5}}}}').load()
    assert sorted((r.partition, r.offset) for r in part.collect()) == \
        [(1, o) for o in range(30, 40)] + [(2, o) for o in range(5)]


def test_source_over_transactions_returns_the_visible_records(source, kafka):
    topic, partitions = transactional_topic(kafka)
    rows = reader(source, kafka, subscribe=topic, minPartitions="9").load().collect()
    visible = direct_consume(kafka.bootstrap_servers, topic, partitions)
    assert {p: [(o, v) for o, _, v, _ in recs] for p, recs in as_records(rows).items()} == \
        {p: [(o, v) for o, _, v, _ in recs] for p, recs in visible.items()}


def jobs_in(spark, group: str) -> list[int]:
    return list(spark.sparkContext.statusTracker().getJobIdsForGroup(group))


@pytest.mark.parametrize("options, message", [
    ({"startingOffsets": "latest"}, "startingOffsets: starting offset 'latest' (-1) is not allowed"),
    ({"minPartitions": "zero"}, "minPartitions: expected a positive integer, got 'zero'"),
    ({"subscribe": "a", "assign": '{"a":[0]}'}, "subscribe: exactly one of subscribe, assign"),
    ({"kafka.auto.offset.reset": "earliest"}, "kafka.auto.offset.reset: not supported"),
])
def test_bad_options_fail_at_load_naming_the_option_before_any_job(source, kafka, options, message):
    group = f"bad-options-{uuid.uuid4().hex[:8]}"
    source.sparkContext.setJobGroup(group, "bad options")
    try:
        with pytest.raises(Exception) as caught:
            reader(source, kafka, **{"subscribe": "t", **options}).load()
    finally:
        source.sparkContext.setLocalProperty("spark.jobGroup.id", None)
    assert message in root_cause(caught.value)
    assert jobs_in(source, group) == []
    with pytest.raises(Exception, match=r"^" + message.split(":")[0]):  # the same check, on the driver
        parse_source_options({"kafka.bootstrap.servers": kafka.bootstrap_servers, "subscribe": "t", **options})


def test_unknown_topic_fails_at_planning_before_any_job(source, kafka):
    group = f"bad-topic-{uuid.uuid4().hex[:8]}"
    df = reader(source, kafka, subscribe="no_such_topic_here").load()
    source.sparkContext.setJobGroup(group, "unknown topic")
    try:
        with pytest.raises(Exception) as caught:
            df.collect()
    finally:
        source.sparkContext.setLocalProperty("spark.jobGroup.id", None)
    assert "topics: topic 'no_such_topic_here' does not exist" in root_cause(caught.value)
    assert jobs_in(source, group) == []
