"""Kafka records as a plain client sees them: what the range reader (and the Spark source over it) must match;
and a plain client's commits, as another application makes them."""
from __future__ import annotations

import uuid

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition


def direct_consume(bootstrap: str, topic: str, partitions: int) -> dict[int, list[tuple]]:
    """Every visible record per partition, read start to end by a plain read_committed consumer."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"direct-{uuid.uuid4().hex[:6]}",
                         "enable.partition.eof": True, "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    records: dict[int, list[tuple]] = {p: [] for p in range(partitions)}
    at_end: set[int] = set()
    while len(at_end) < partitions:
        msg = consumer.poll(10)
        assert msg is not None, "direct consume timed out"
        if msg.error():
            assert msg.error().code() == KafkaError._PARTITION_EOF, msg.error()
            at_end.add(msg.partition())
            continue
        records[msg.partition()].append((msg.offset(), msg.key(), msg.value(), msg.timestamp()[1]))
    consumer.close()
    return records


def transactional_topic(kafka, partitions: int = 2) -> tuple[str, int]:
    """Committed and aborted transactions (aborted ones flushed, so they occupy offsets), plus markers."""
    topic = kafka.new_topic(partitions)
    producer = Producer({"bootstrap.servers": kafka.bootstrap_servers, "transactional.id": f"tx-{topic}"})
    producer.init_transactions(30)
    outcomes = [True, False, True, False, False, True, True]
    for i, commit in enumerate(outcomes):
        producer.begin_transaction()
        for j in range(3):
            producer.produce(topic, value=b"%d-%d-%s" % (i, j, b"committed" if commit else b"aborted"),
                             partition=j % partitions)
        producer.flush(30)
        producer.commit_transaction(30) if commit else producer.abort_transaction(30)
    return topic, partitions


def commit_as(kafka, group: str, offsets: dict[tuple[str, int], int]) -> None:
    """Commit offsets for `group` the way another application would (no subscription, no join)."""
    consumer = Consumer({"bootstrap.servers": kafka.bootstrap_servers, "group.id": group,
                         "enable.auto.commit": False})
    try:
        consumer.commit(offsets=[TopicPartition(t, p, o) for (t, p), o in offsets.items()], asynchronous=False)
    finally:
        consumer.close()
