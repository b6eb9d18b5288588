"""Issue 45: the poll thread wakes for an offset change at once, not at the end of a consume timeout or batch
interval (kafka/consumer_wake.py: librdkafka's rd_kafka_queue_yield on the consumer's queue)."""
from __future__ import annotations

import threading
import time

from confluent_kafka import Consumer
from stream_helpers import FAST_REJOIN, by_partition, wait_until

from stream_registry import ChangeStatus, StreamConfig
from stream_registry.kafka.consumer_wake import ConsumerWake
from stream_registry.registry.stream import collector

LONG_S = 60.0   # a consume slice and batch interval far longer than any wait below


def test_a_consume_waiting_on_its_timeout_returns_when_woken_and_a_closed_wake_does_nothing(kafka):
    topic = kafka.new_topic(partitions=1)
    consumer = Consumer({"bootstrap.servers": kafka.bootstrap_servers, "group.id": f"g_{topic}"})
    consumer.subscribe([topic])
    wake = ConsumerWake.of(consumer)
    try:
        assert wake.active
        threading.Timer(0.2, wake.wake).start()
        started = time.monotonic()
        assert consumer.consume(10, LONG_S) == []
        assert time.monotonic() - started < LONG_S / 4
    finally:
        wake.close()
        wake.wake()   # closed: nothing (the consumer may be gone)
        consumer.close()
    assert not wake.active


def test_an_offset_change_reaches_a_poll_thread_waiting_in_a_long_consume_at_once(kafka, registry, memory_sinks,
                                                                                   monkeypatch):
    """With a consume slice and a batch interval of a minute, a change is applied and its first record delivered
    within seconds: the request wakes the poll thread (before: at the end of the slice, a minute later)."""
    monkeypatch.setattr(collector, "CONTROL_SLICE_S", LONG_S)
    topic = kafka.new_topic(partitions=2)
    kafka.produce(topic, 40, partitions=2)
    registry.create(StreamConfig(name="woken", topics=[topic], bootstrap_servers=kafka.bootstrap_servers,
                                 transform="stream_helpers.offsets_transform", sink="memory://woken",
                                 consumer_group=f"g_{topic}", batch_size=20, batch_interval_ms=int(LONG_S * 1000),
                                 configs=FAST_REJOIN))
    registry.set_offset("woken", 0)   # an explicit start: no reset to decide (between batches, a minute apart)
    registry.start("woken")
    sink = memory_sinks["woken"]
    wait_until(lambda: len(sink.delivered()) >= 40, 60, what="both partitions read to their end",
               describe=lambda: (len(sink.delivered()), registry.get("woken")))
    seen = len(sink.delivered())
    started = time.monotonic()
    changes = registry.set_offset("woken", 15, timeout=LONG_S / 2)
    assert {c.status for c in changes} == {ChangeStatus.APPLIED}, changes
    wait_until(lambda: {tp: offsets[0] for tp, offsets in by_partition(sink.delivered()[seen:]).items()} ==
               {(topic, 0): 15, (topic, 1): 15}, LONG_S / 2, what="the first record at the target on each partition")
    assert time.monotonic() - started < LONG_S / 4

