"""A stream's partitions as the cluster names them now, though an offset call asks the ones it knew first.

`PartitionQuery.topic_snapshots` asks the watermarks and committed offsets of the partitions metadata named
last time while it asks metadata again (bench/offset_latency.py --trace: a round trip less per offset call).
What it returns must still be every partition the fresh answer names, each with its own offsets: partitions
added since, and none that is gone. librdkafka's mock cluster cannot add partitions nor make a topic anew, so
there the query's memory of the last answer is set to what it would hold (`_seen`); on a broker that can
(Tansu, a real cluster), partitions are added for real.
"""
from __future__ import annotations

import time

import pytest
from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewPartitions

from stream_registry.errors import OffsetSpecError
from stream_registry.kafka.queries import PartitionQuery
from stream_registry.offset_spec import parse_offset_spec

TIMEOUT_S = 60.0   # the query's own timeout: a call that waited it out would show in the duration check


def filled(kafka, partitions: int) -> str:
    """A topic whose partition p holds p + 1 records (each partition's offsets its own)."""
    topic = kafka.new_topic(partitions=partitions)
    produce(kafka, topic, range(partitions))
    return topic


def produce(kafka, topic: str, partitions) -> None:
    producer = Producer({"bootstrap.servers": kafka.bootstrap_servers})
    for p in partitions:
        for _ in range(p + 1):   # a batch each (Tansu gave a batch of several records one offset)
            producer.produce(topic, value=b"x", partition=p)
            assert producer.flush(30) == 0


def ends(snapshots) -> dict[int, int]:
    return {s.partition: s.log_end for s in snapshots}


@pytest.fixture
def query(kafka):
    q = PartitionQuery(kafka.bootstrap_servers, "g-partition-query", timeout=TIMEOUT_S)
    yield q
    q.close()


def test_partitions_named_before_and_gone_now_are_not_waited_for_nor_returned(kafka, query):
    topic = filled(kafka, 3)
    assert query.partitions([topic]) == {topic: [0, 1, 2]}
    query._seen[topic] = [0, 1, 2, 3, 4]   # as after a topic of 5 partitions was made anew with 3
    began = time.monotonic()
    assert ends(query.topic_snapshots([topic])) == {0: 1, 1: 2, 2: 3}
    assert time.monotonic() - began < TIMEOUT_S / 2   # the gone ones' "unknown partition" not retried to the end
    assert query._seen[topic] == [0, 1, 2]


def test_partitions_not_named_before_are_asked_too(kafka, query):
    topic = filled(kafka, 4)
    query.partitions([topic])
    query._seen[topic] = [0, 1]   # as before two partitions were added
    assert ends(query.topic_snapshots([topic])) == {0: 1, 1: 2, 2: 3, 3: 4}


def test_a_spec_is_checked_against_the_fresh_answer(kafka, query):
    topic = filled(kafka, 2)
    query.partitions([topic])
    query._seen[topic] = [0, 1, 2]
    spec = parse_offset_spec({f"{topic}:2": 0})
    with pytest.raises(OffsetSpecError, match=rf"unknown partition {topic}:2 \(topic '{topic}' has 2 partitions"):
        query.topic_snapshots([topic], check=spec.check_against)


def test_partitions_added_on_the_broker_are_in_the_next_snapshots(kafka, query):
    if kafka.embedded is not None:
        pytest.skip("librdkafka's mock cluster does not implement CreatePartitions (the tests above stand in)")
    topic = filled(kafka, 2)
    assert ends(query.topic_snapshots([topic])) == {0: 1, 1: 2}
    admin = AdminClient({"bootstrap.servers": kafka.bootstrap_servers})
    try:
        admin.create_partitions([NewPartitions(topic, 4)])[topic].result(30)
    except KafkaException as exc:
        pytest.skip(f"this broker does not add partitions: {exc}")
    produce(kafka, topic, [2, 3])
    assert ends(query.topic_snapshots([topic])) == {0: 1, 1: 2, 2: 3, 3: 4}
