"""The data source's options (JVM Kafka source names and Spark's offset dialect), without Spark."""
from __future__ import annotations

import pytest

from spark_bridge.range_plan import OffsetRange
from spark_bridge.source_options import parse_source_options, spark_offsets
from stream_registry.errors import ConfigError
from stream_registry.offset_spec import Absolute, AtTime, Committed, Earliest, Latest, OffsetSpec, parse_offset_spec

BASE = {"kafka.bootstrap.servers": "localhost:9", "subscribe": "a,b"}


def options(**extra):
    return parse_source_options({**BASE, **extra})


def test_defaults_mirror_the_jvm_batch_source():
    o = options()
    assert o.topics == ("a", "b")
    assert o.starting == OffsetSpec(default=Earliest()) and o.ending == OffsetSpec(default=Latest())
    assert (o.fail_on_data_loss, o.include_headers, o.min_partitions, o.ranges) == (True, False, None, None)
    assert o.group_id.startswith("spark-kafka-relation-")
    assert options(groupIdPrefix="mine").group_id.startswith("mine-")


def test_option_names_are_case_insensitive_and_kafka_settings_pass_through():
    o = parse_source_options({"KAFKA.BOOTSTRAP.SERVERS": "h:1", "Subscribe": "a", "MINPARTITIONS": "4",
                              "kafka.client.id": "me", "kafka.group.id": "g", "failondataloss": "FALSE"})
    assert (o.bootstrap_servers, o.min_partitions, o.fail_on_data_loss, o.group_id) == ("h:1", 4, False, "g")
    assert o.consumer_config() == {"client.id": "me", "bootstrap.servers": "h:1", "group.id": "g"}


def test_spark_json_dialect_is_not_memgraphs():
    # Spark: -2 earliest, -1 latest.  Memgraph (the registry's specs): -1 beginning, -2 end.
    start = spark_offsets('{"a": {"0": 23, "1": -2}}', "startingOffsets")
    assert start.partitions == {("a", 0): Absolute(23), ("a", 1): Earliest()}
    end = spark_offsets('{"a": {"0": -1, "1": 40}}', "endingOffsets")
    assert end.partitions == {("a", 0): Latest(), ("a", 1): Absolute(40)}
    assert parse_offset_spec(-1).default == Earliest() and parse_offset_spec(-2).default == Latest()
    assert options(startingOffsets='{"a":{"0":-2}}').starting.partitions == {("a", 0): Earliest()}


def test_named_offsets_and_committed_extension():
    assert spark_offsets(" Earliest ", "startingOffsets").default == Earliest()
    assert spark_offsets("latest", "endingOffsets").default == Latest()
    assert options(endingOffsets="committed", **{"kafka.group.id": "live"}).ending.default == Committed()


def test_timestamp_options_take_precedence_like_the_jvm_source():
    o = options(startingOffsets="earliest", startingTimestamp="1700000000000",
                endingOffsetsByTimestamp='{"b": {"2": 1700000001000}}')
    assert o.starting.default == AtTime(1700000000000, "2023-11-14T22:13:20.000+00:00")
    assert o.ending.partitions == {("b", 2): AtTime(1700000001000, "2023-11-14T22:13:21.000+00:00")}


def test_assign_lists_partitions():
    o = parse_source_options({"kafka.bootstrap.servers": "h:1", "assign": '{"a": [2, 0, 2], "b": [1]}'})
    assert o.topics == {"a": (0, 2), "b": (1,)}


def test_offset_ranges_option_is_an_exact_plan():
    o = options(offsetRanges='[{"topic":"a","partition":0,"from_offset":5,"until_offset":9}]')
    assert o.ranges == (OffsetRange("a", 0, 5, 9),)


@pytest.mark.parametrize("extra, message", [
    ({"kafka.bootstrap.servers": ""}, r"^kafka.bootstrap.servers: required"),
    ({"assign": '{"a":[0]}'}, r"^subscribe: exactly one of subscribe, assign, subscribePattern"),
    ({"subscribe": " , "}, r"^subscribe: expected a comma-separated list"),
    ({"subscribePattern": "a.*", "subscribe": None}, r"^subscribePattern: not supported"),
    ({"startingOffsets": "latest"}, r"^startingOffsets: starting offset 'latest' \(-1\) is not allowed"),
    ({"endingOffsets": '{"a":{"0":-2}}'}, r"^endingOffsets\[a\]\[0\]: ending offset 'earliest' \(-2\)"),
    ({"startingOffsets": '{"a":{"0":-3}}'}, r"^startingOffsets\[a\]\[0\]: invalid offset -3; use >= 0, -2 \(earl"),
    ({"startingOffsets": '{"a":{"x":1}}'}, r"^startingOffsets: partition 'x' of topic 'a' is not a number"),
    ({"startingOffsets": '{"zzz":{"0":1}}'}, r"^startingOffsets: topic 'zzz' is not subscribed"),
    ({"startingOffsets": "{oops"}, r"^startingOffsets: not valid JSON"),
    ({"startingOffsets": "-1"}, r"^startingOffsets: expected 'earliest', 'latest' or JSON"),
    ({"endingOffsets": "committed"}, r"^endingOffsets: 'committed' needs kafka.group.id"),
    ({"startingTimestamp": "yesterday"}, r"^startingTimestamp: expected a timestamp in milliseconds"),
    ({"minPartitions": "0"}, r"^minPartitions: expected a positive integer, got '0'"),
    ({"maxRecordsPerPartition": "many"}, r"^maxRecordsPerPartition: expected a positive integer"),
    ({"failOnDataLoss": "yes"}, r"^failOnDataLoss: expected true or false, got 'yes'"),
    ({"includeHeaders": "1"}, r"^includeHeaders: expected true or false"),
    ({"maxOffsetsPerTrigger": "10"}, r"^maxOffsetsPerTrigger: only for streaming reads \(readStream\) of the mgstreams_kafka"),
    ({"startingOfsets": "earliest"}, r"^startingofsets: unknown option"),
    ({"kafka.auto.offset.reset": "latest"}, r"^kafka.auto.offset.reset: not supported \(set startingOffsets"),
    ({"kafka.enable.auto.commit": "true"}, r"^kafka.enable.auto.commit: not supported"),
    ({"kafka.no.such.setting": "1"}, r"^kafka\.\*\['no\.such\.setting'\]: '1' rejected by the Kafka client: .*no.such.setting"),
    ({"offsetRanges": '[{"topic":"a"}]'}, r"^offsetRanges: offset range: expected topic, partition"),
])
def test_bad_options_name_the_option(extra, message):
    given = {**BASE, **extra}
    given = {k: v for k, v in given.items() if v is not None}
    with pytest.raises(ConfigError, match=message):
        parse_source_options(given)


def test_secrets_in_rejected_kafka_settings_are_masked():
    with pytest.raises(ConfigError) as caught:
        options(**{"kafka.sasl.password": "hunter22", "kafka.security.protocol": "bogus-hunter22"})
    assert "hunter22" not in str(caught.value)
