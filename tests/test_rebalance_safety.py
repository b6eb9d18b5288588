"""At-least-once under rebalances (issue 10): what a consumer no longer owns is never written or committed.

Scenario: a stream collects a long batch (batch_interval_ms of seconds, so the
batch spans many consume() calls); meanwhile a second member joins the group
and takes a partition. librdkafka runs the revoke callback inside consume();
messages already collected from the partition given away must leave the batch.
"""
from __future__ import annotations

import threading
import time

from confluent_kafka import Consumer, TopicPartition

from stream_helpers import by_partition, wait_until
from stream_registry import StreamConfig, StreamRegistry

FAST_GROUP = {"session.timeout.ms": 6000, "heartbeat.interval.ms": 100}


def test_messages_of_a_partition_revoked_mid_batch_are_not_written_or_committed(kafka, tmp_path, memory_sinks):
    topic = kafka.new_topic(partitions=2)
    kafka.produce(topic, 200, partitions=2)
    group = f"g_{topic}"
    registry = StreamRegistry(tmp_path / "state")
    other = None
    try:
        registry.create(StreamConfig("orders", [topic], kafka.bootstrap_servers, "stream_helpers.offsets_transform",
                                     "memory://out", consumer_group=group, batch_size=100_000,
                                     batch_interval_ms=6000, configs={**FAST_GROUP,
                                                                      "partition.assignment.strategy": "range"}))
        registry.start("orders")
        # The stream owns both partitions and is collecting its first (long) batch.
        wait_until(lambda: {p.assigned for p in registry.describe("orders")} == {True}, 30, what="assignment")
        time.sleep(0.5)
        assert memory_sinks["out"].delivered() == [], "the first batch is still being collected"

        other = Consumer({"bootstrap.servers": kafka.bootstrap_servers, "group.id": group,
                          "enable.auto.commit": False, "partition.assignment.strategy": "range", **FAST_GROUP})
        other.subscribe([topic])
        taken: set = set()
        stop = threading.Event()

        def poll_other():
            while not stop.is_set():
                other.poll(0.05)
                taken.update((tp.topic, tp.partition) for tp in other.assignment())
        thread = threading.Thread(target=poll_other, daemon=True)
        thread.start()
        try:
            wait_until(lambda: taken, 20, what="the second member's assignment")
            [(_, given_away)] = taken
            wait_until(lambda: memory_sinks["out"].delivered(), 30, what="the stream's first batch")
            time.sleep(0.5)
        finally:
            stop.set()
            thread.join()
        written = by_partition(memory_sinks["out"].delivered())
        assert (topic, given_away) not in written, \
            f"partition {given_away} was revoked mid-batch but the stream wrote {len(written[(topic, given_away)])} " \
            f"of its messages"
        kept = 1 - given_away
        assert written[(topic, kept)] == list(range(100)), "the partition it kept is delivered whole, in order"
        committed = {tp.partition: tp.offset for tp in other.committed(
            [TopicPartition(topic, 0), TopicPartition(topic, 1)], timeout=10)}
        assert committed[given_away] < 0, "nothing was committed for the partition given away"
        assert committed[kept] == 100
    finally:
        if other is not None:
            other.close()
        registry.close()
