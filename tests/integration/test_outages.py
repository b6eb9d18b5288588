"""Truth under outages (issue 32): a cluster that cannot be reached shows in the stream's state at once, even
when the outage meets a batch's commit. Each test fails on the code before its fix."""
from __future__ import annotations

import time
from functools import partial

import pytest
from configs import stream_config
from stream_helpers import SLOW_S, wait_until

from stream_registry import StreamStatus

BROKERS = (1, 2, 3)
_config = partial(stream_config, batch_interval_ms=20)


@pytest.fixture
def slow_transformation():
    yield SLOW_S
    SLOW_S["per_batch"] = 0.0


def test_an_outage_during_a_batch_commit_shows_within_seconds(kafka, embedded_kafka, registry, memory_sinks,
                                                             slow_transformation):
    """The batch in flight when every broker goes down meets the outage at its commit. librdkafka's synchronous
    commit then waited for the coordinator, holding the poll thread (retried for 10 s here; ~45 s for one
    attempt), and the stream kept `running` with no error meanwhile. Now the commit's wait is bounded, the cluster
    is probed while it waits, and the outage shows within a few seconds (~4.7 s here; 12.8 s before)."""
    topic = kafka.new_topic(partitions=1)
    registry.create(_config(kafka, topic, batch_interval_ms=300))   # the three records below make one batch
    registry.start("orders")
    wait_until(lambda: registry.get("orders").status == StreamStatus.RUNNING, 30, what="running")
    kafka.produce(topic, 2, partitions=1)
    wait_until(lambda: len(memory_sinks["orders"].delivered()) == 2, 30, what="the first batch")
    slow_transformation["per_batch"] = 1.5
    kafka.produce(topic, 3, partitions=1)
    time.sleep(0.8)   # the batch is in the (slow) transformation: its commit comes after the brokers are down
    for broker in BROKERS:
        embedded_kafka.broker_down(broker)
    down_at = time.monotonic()
    try:
        error = wait_until(lambda: registry.get("orders").error, 20, what="the outage in the stream's error")
        shown_after = time.monotonic() - down_at
        assert error.startswith("all brokers down since 20"), error
        assert shown_after < 9, f"the outage showed only after {shown_after:.1f} s"
        assert len(memory_sinks["orders"].delivered()) == 5, "the batch was written before its commit"
    finally:
        for broker in BROKERS:
            embedded_kafka.broker_up(broker)
    wait_until(lambda: registry.get("orders").error is None, 60, what="the outage to clear")
    wait_until(lambda: [r.committed_offset for r in registry.describe("orders")] == [5], 30,
               what="the batch's offsets committed once the cluster answers (no new batch comes to carry them)")
    slow_transformation["per_batch"] = 0.0
    kafka.produce(topic, 1, partitions=1)
    wait_until(lambda: len(memory_sinks["orders"].delivered()) >= 6, 60, what="delivery after the outage")


# -- records that left the log ------------------------------------------------------------------------------------
# The embedded cluster keeps at most 5 MiB (and 100,000 batches) per partition, dropping its oldest batches first
# (librdkafka's mock partition log): twelve records of 600 KiB, one batch each, move the log start past whatever a
# stopped stream committed before them.
BIG = 600 * 1024


def _push_log_start_past(kafka, topic: str) -> int:
    kafka.produce(topic, 12, partitions=1, payload=lambda i: b'{"pad": "' + b"x" * BIG + b'"}')
    from confluent_kafka import Consumer, TopicPartition
    probe = Consumer({"bootstrap.servers": kafka.bootstrap_servers, "group.id": "probe"})
    try:
        low, _ = probe.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
    finally:
        probe.close()
    return low


def test_records_that_left_the_log_are_counted_until_acknowledged(kafka, embedded_kafka, registry, memory_sinks):
    """A stopped stream's committed offset fell below the log start. librdkafka reset the partition to the log
    start and the stream went on as if nothing happened (a warning in the log only). Now the records that left
    the log are counted: in the stream's info, per partition, and as a history row from where to where; they
    stay unacknowledged until an operator acknowledges them."""
    topic = kafka.new_topic(partitions=1)
    registry.create(_config(kafka, topic))
    registry.start("orders")
    kafka.produce(topic, 3, partitions=1)
    wait_until(lambda: len(memory_sinks["orders"].delivered()) == 3, 30, what="the first records")
    registry.stop("orders")
    log_start = _push_log_start_past(kafka, topic)
    assert log_start > 3, log_start
    registry.start("orders")
    wait_until(lambda: len(memory_sinks["orders"].delivered()) >= 3 + 15 - log_start, 60,
               what="the records still in the log")
    offsets = [o for _, _, o in memory_sinks["orders"].delivered()]
    assert offsets == [0, 1, 2, *range(log_start, 15)], offsets
    info = wait_until(lambda: registry.get("orders").records_lost and registry.get("orders"), 10, what="the count")
    assert (info.records_lost, info.records_lost_unacknowledged) == (log_start - 3, log_start - 3)
    assert registry.records_lost("orders") == {(topic, 0): log_start - 3}
    [row] = [h for h in registry.history("orders") if h.status.value == "lost"]
    assert (row.topic, row.partition, row.previous_offset, row.offset) == (topic, 0, 3, log_start)
    assert f"offsets 3 to {log_start - 1}" in row.message and "left the log" in row.message
    info = registry.acknowledge_loss("orders")
    assert (info.records_lost, info.records_lost_unacknowledged) == (log_start - 3, 0)


def test_on_data_loss_stop_stops_the_stream_naming_the_range(kafka, embedded_kafka, registry, memory_sinks):
    topic = kafka.new_topic(partitions=1)
    registry.create(_config(kafka, topic, on_data_loss="stop"))
    registry.start("orders")
    kafka.produce(topic, 3, partitions=1)
    wait_until(lambda: len(memory_sinks["orders"].delivered()) == 3, 30, what="the first records")
    registry.stop("orders")
    log_start = _push_log_start_past(kafka, topic)
    registry.start("orders")
    info = wait_until(lambda: registry.get("orders").status == StreamStatus.ERROR and registry.get("orders"), 30,
                      what="the stream in error")
    assert f"{log_start - 3} record(s) of {topic}:0 (offsets 3 to {log_start - 1}) left the log" in info.error
    assert "on_data_loss is stop" in info.error
    assert len(memory_sinks["orders"].delivered()) == 3, "nothing was read past the loss"
    assert [r.committed_offset for r in registry.describe("orders")] == [3], "the committed offset stays"
    assert info.records_lost == 0, "nothing was skipped"
