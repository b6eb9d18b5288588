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


def test_a_move_whose_commit_fails_is_pending_with_the_kafka_error_then_applied(own_kafka, tmp_path, memory_sinks):
    """A change is `applied` only once its commit succeeded; until then the row says why, and the
    commit is retried until it goes through (issue 10, defect 2)."""
    kafka, embedded_kafka = own_kafka, own_kafka.embedded   # every OffsetCommit of its cluster is this test's
    from confluent_kafka import KafkaError

    topic = kafka.new_topic(partitions=1)
    kafka.produce(topic, 20, partitions=1)
    registry = StreamRegistry(tmp_path / "state")
    try:
        registry.create(StreamConfig("orders", [topic], kafka.bootstrap_servers, "stream_helpers.offsets_transform",
                                     "memory://out", consumer_group=f"g_{topic}", batch_interval_ms=20,
                                     configs=FAST_GROUP))
        registry.start("orders")
        wait_until(lambda: len(memory_sinks["out"].delivered()) == 20, 30, what="the first 20 messages")
        wait_until(lambda: registry.describe("orders")[0].committed_offset == 20, 10, what="commit of 20")
        embedded_kafka.push_request_errors("OffsetCommit", *[KafkaError.OFFSET_METADATA_TOO_LARGE] * 400)
        try:
            started = time.monotonic()
            [change] = registry.set_offset("orders", 5, timeout=2)
            assert time.monotonic() - started < 3.5, "the call ends at its own timeout"
            assert change.status.value == "pending", change
            assert "committing the new offset failed" in change.message, change.message
            assert "OFFSET_METADATA_TOO_LARGE" in change.message, "the Kafka error code is named"
            assert registry.history("orders") == [], "nothing is recorded as applied while the commit fails"
        finally:
            embedded_kafka.clear_request_errors("OffsetCommit")
        wait_until(lambda: registry.history("orders"), 15, what="the retried commit")
        [entry] = registry.history("orders")
        assert (entry.offset, entry.status.value) == (5, "applied")
        # the change is recorded once persisted; its first batch is delivered after that
        wait_until(lambda: len(memory_sinks["out"].delivered()) >= 35, 15, what="the redelivery from 5")
        offsets = [o for _, _, o in memory_sinks["out"].delivered()]
        assert offsets[20:] == list(range(5, 20)), "redelivered from exactly the new offset"
    finally:
        registry.close()


def test_the_assignment_protocol_is_learned_from_the_consumer_not_only_the_config(kafka, tmp_path, memory_sinks,
                                                                                 monkeypatch):
    """Issue 10, defect 7: with a wrong first guess (eager for a cooperative-sticky group), librdkafka refuses
    assign() with _STATE and the worker switches to incremental_assign(); the stream runs and offsets apply."""
    from stream_registry.registry.stream import worker as worker_module

    real_init = worker_module.StreamWorker.__init__

    def wrong_guess(self, *args, **kwargs):
        real_init(self, *args, **kwargs)
        self.assignment.incremental = False
    monkeypatch.setattr(worker_module.StreamWorker, "__init__", wrong_guess)
    topic = kafka.new_topic(partitions=2)
    kafka.produce(topic, 10, partitions=2)
    registry = StreamRegistry(tmp_path / "state")
    try:
        registry.create(StreamConfig("orders", [topic], kafka.bootstrap_servers, "stream_helpers.offsets_transform",
                                     "memory://out", consumer_group=f"g_{topic}", batch_interval_ms=20,
                                     configs={**FAST_GROUP, "partition.assignment.strategy": "cooperative-sticky"}))
        registry.set_offset("orders", 2)
        registry.start("orders")
        wait_until(lambda: len(memory_sinks["out"].delivered()) == 6, 30, what="delivery from offset 2")
        assert registry._streams["orders"].runner._worker.assignment.incremental is True
        assert registry.get("orders").status.value == "running"
    finally:
        registry.close()
