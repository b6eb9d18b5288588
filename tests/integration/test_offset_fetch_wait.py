"""Issue 45: a stream's consumer holds its Fetch requests short (kafka/fetch_wait.py) only while an offset change is
coming, and goes back to the configured fetch.wait.max.ms once the moved partitions delivered.

The first test reads librdkafka's own view of the running handle's configuration (rd_kafka_conf_get on
rd_kafka_conf(rk)), the value each Fetch request is built with; the second follows a change through a running
stream of the registry."""
from __future__ import annotations

from confluent_kafka import Consumer
from stream_helpers import FAST_REJOIN, by_partition, wait_until

from stream_registry import ChangeStatus, StreamConfig
from stream_registry.config import CONSUMER_DEFAULTS
from stream_registry.kafka import fetch_wait
from stream_registry.kafka.consumer_wake import consumer_handle
from stream_registry.kafka.fetch_wait import HURRY_MS, FetchWait
from stream_registry.registry.stream import worker

DEFAULT_MS = int(CONSUMER_DEFAULTS["fetch.wait.max.ms"])   # a stream's fetch wait unless its configs set one


def _running_wait_ms(consumer: Consumer) -> int | None:
    found = consumer_handle(consumer)
    assert found is not None
    lib, rk = found
    return fetch_wait._read(lib, lib.rd_kafka_conf(rk))


def test_the_running_consumer_fetches_short_while_lowered_and_as_configured_once_relaxed(kafka):
    topic = kafka.new_topic(partitions=1)
    consumer = Consumer({"bootstrap.servers": kafka.bootstrap_servers, "group.id": f"g_{topic}",
                         "fetch.wait.max.ms": 7})
    consumer.subscribe([topic])
    wait = FetchWait.of(consumer, "7")
    try:
        assert wait.active and _running_wait_ms(consumer) == 7
        wait.lower()
        assert wait.lowered and _running_wait_ms(consumer) == HURRY_MS
        wait.relax(busy=True)
        assert _running_wait_ms(consumer) == HURRY_MS, "kept short while busy (a call coming, a partition moving)"
        wait.relax()
        assert not wait.lowered and _running_wait_ms(consumer) == 7
    finally:
        wait.close()
        wait.lower()   # closed: nothing (the consumer may be gone)
        assert _running_wait_ms(consumer) == 7
        consumer.close()
    assert not wait.active
    assert not FetchWait.of(Consumer({"bootstrap.servers": kafka.bootstrap_servers, "group.id": "g_x",
                                      "fetch.wait.max.ms": 1}), 1).active, "nothing to lower"


def test_an_offset_change_shortens_the_fetch_wait_until_its_partitions_delivered(kafka, registry, memory_sinks,
                                                                               monkeypatch):
    made: list[tuple[FetchWait, Consumer]] = []
    lowered: list[int] = []

    class Watched(FetchWait):
        @classmethod
        def of(cls, consumer, configured):
            wait = super().of(consumer, configured)
            made.append((wait, consumer))
            return wait

        def lower(self):
            lowered.append(1)
            super().lower()

    monkeypatch.setattr(worker, "FetchWait", Watched)
    topic = kafka.new_topic(partitions=2)
    kafka.produce(topic, 40, partitions=2)
    registry.create(StreamConfig(name="hurried", topics=[topic], bootstrap_servers=kafka.bootstrap_servers,
                                 transform="stream_helpers.offsets_transform", sink="memory://hurried",
                                 consumer_group=f"g_{topic}", batch_size=20, configs=FAST_REJOIN))
    registry.set_offset("hurried", 0)
    registry.start("hurried")
    sink = memory_sinks["hurried"]
    wait_until(lambda: len(sink.delivered()) >= 40, 60, what="both partitions read to their end")
    [(wait, consumer)] = made
    assert wait.active and not wait.lowered and _running_wait_ms(consumer) == DEFAULT_MS
    seen = len(sink.delivered())
    changes = registry.set_offset("hurried", 15, timeout=30)
    assert {c.status for c in changes} == {ChangeStatus.APPLIED}, changes
    assert lowered, "the change lowered the fetch wait"
    wait_until(lambda: {tp: offsets[0] for tp, offsets in by_partition(sink.delivered()[seen:]).items()} ==
               {(topic, 0): 15, (topic, 1): 15}, 30, what="the first record at the target on each partition")
    wait_until(lambda: not wait.lowered, 30, what="the configured fetch wait back once both delivered",
               describe=lambda: (wait.lowered, _running_wait_ms(consumer)))
    assert _running_wait_ms(consumer) == DEFAULT_MS
