"""Offsets by time end, on partitions whose offsets have gaps (transaction markers).

Issue 21, reproduction 5: with one record per transaction every other offset
is a commit marker, and the old binary search stopped moving (`hi` stuck on a
record whose previous offset is a marker), so a datetime spec never resolved
while the stream's lock was held. The lookup runs in a thread here so that the
old code fails the test instead of hanging the run.
"""
from __future__ import annotations

import datetime as dt
import threading
import time

import pytest
from broker_support import LIST_OFFSETS_BY_TIME
from confluent_kafka import Producer

from stream_registry.errors import KafkaOperationError
from stream_registry.kafka.queries import PartitionQuery
from stream_registry.offset_spec import parse_offset_spec, resolve

BASE_MS = 1_760_000_000_000
STEP_MS = 60_000


def one_record_per_transaction(kafka, count: int = 8) -> str:
    topic = kafka.new_topic(partitions=1)
    producer = Producer({"bootstrap.servers": kafka.bootstrap_servers, "transactional.id": f"tx-{topic}"})
    producer.init_transactions(30)
    for i in range(count):
        producer.begin_transaction()
        producer.produce(topic, value=b"%d" % i, partition=0, timestamp=BASE_MS + i * STEP_MS)
        producer.commit_transaction(30)
    return topic


def in_thread(fn, timeout: float):
    """fn's result, or a failure if it does not return within `timeout` (the old search never did)."""
    result: list = []
    thread = threading.Thread(target=lambda: result.append(_outcome(fn)), daemon=True)
    thread.start()
    thread.join(timeout)
    assert not thread.is_alive(), f"the lookup did not return within {timeout} s"
    ok, value = result[0]
    if not ok:
        raise value
    return value


def _outcome(fn):
    try:
        return True, fn()
    except BaseException as exc:   # handed to the test's thread
        return False, exc


def iso(ms: int) -> str:
    return dt.datetime.fromtimestamp(ms / 1000, dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@LIST_OFFSETS_BY_TIME   # Tansu answers offset 0 at once: no search over record timestamps happens there
def test_a_datetime_resolves_within_its_timeout_over_transaction_markers(kafka):
    topic = one_record_per_transaction(kafka)
    with PartitionQuery(kafka.bootstrap_servers, "time-probe", timeout=10.0) as query:
        [snapshot] = query.snapshots([(topic, 0)])
        assert snapshot.log_end >= 2 * 8 - 1, "every record is followed by a commit marker"
        # the record offsets as a consumer sees them
        records = _record_offsets(kafka, topic)
        assert len(records) == 8 and records != list(range(8))
        for index in (0, 3, 5, 7):
            started = time.monotonic()
            [found] = in_thread(lambda index=index: resolve(parse_offset_spec(iso(BASE_MS + index * STEP_MS)), [snapshot],
                                                query.offsets_for_times, running=False), 15)
            assert found.offset == records[index], (index, found)
            assert time.monotonic() - started < 10.0
        # between two records: the later one; after the last: the end
        [between] = in_thread(lambda: resolve(parse_offset_spec(iso(BASE_MS + 3 * STEP_MS + 1)), [snapshot],
                                              query.offsets_for_times, running=False), 15)
        assert between.offset == records[4]
        [after] = in_thread(lambda: resolve(parse_offset_spec(iso(BASE_MS + 9 * STEP_MS)), [snapshot],
                                            query.offsets_for_times, running=False), 15)
        assert after.offset == snapshot.log_end


@LIST_OFFSETS_BY_TIME
def test_a_lookup_past_its_deadline_raises_saying_so(kafka):
    topic = one_record_per_transaction(kafka, 4)
    with PartitionQuery(kafka.bootstrap_servers, "time-probe", timeout=5.0) as query:
        started = time.monotonic()
        with pytest.raises(KafkaOperationError):
            in_thread(lambda: query.offsets_for_times([(topic, 0, BASE_MS + STEP_MS)],
                                                      deadline=time.monotonic() - 1), 15)
        assert time.monotonic() - started < 5.0, "past its deadline, the lookup stops at once"


def _record_offsets(kafka, topic: str) -> list[int]:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": kafka.bootstrap_servers, "group.id": "time-probe-reader",
                         "enable.partition.eof": True, "isolation.level": "read_committed"})
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        offsets = []
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            msg = consumer.poll(1.0)
            if msg is None:
                continue
            if msg.error() is not None:
                break
            offsets.append(msg.offset())
        return offsets
    finally:
        consumer.close()
