"""Issue 45, the offset latency's tail: after an offset change, a partition whose broker's fetch comes a little
later than the others' is written from its target before the rest of the first batch, not behind it.

The poll loop over a consumer stand-in whose two partitions live on two brokers: once both are moved, partition 0's
records from the target come at the next consume() and partition 1's at the one after (its broker's fetch was in
flight). By consume() calls, not by the clock: a loaded machine (CI) once let the poll thread sleep past a 10 ms
wall-clock delay, and the test then measured the scheduler. Before,
the first batch (partition 0's only) went whole, its first record and then its rest, before partition 1's first
record was even collected: with hundreds of records (and a slow sink) that was most of the tail of
bench/offset_latency.py's tasks: 2 run. Now its rest waits (LATE_WAIT_S at most) for partition 1, whose first
record goes first.
"""
from __future__ import annotations

import threading
import time

from confluent_kafka import TopicPartition
from consumer_standin import ConsumerStandIn, RecordStandIn, worker_on
from stream_helpers import offsets_transform, wait_until

from stream_registry.graph.sinks.null import NullSink
from stream_registry.model import PartitionKey

TARGET, END = 10, 40


class _TwoBrokers(ConsumerStandIn):
    """Assigns t:0 and t:1 at the first consume(); once both were moved to TARGET, serves partition 0's records
    at the next consume() and partition 1's at the one after; idle consumes wait their timeout, as librdkafka's
    do."""

    def __init__(self):
        super().__init__()
        self._callbacks: dict = {}
        self._assigned_once = False
        self._moved: set[int] = set()
        self._queue: list[list[RecordStandIn]] = []   # what the next consume() calls answer, in turn
        self._lock = threading.Lock()

    def subscribe(self, topics, **callbacks):
        self._callbacks = callbacks

    def seek(self, tp: TopicPartition) -> None:
        super().seek(tp)
        self._moved_to(tp)

    def incremental_assign(self, partitions: list[TopicPartition]) -> None:
        super().incremental_assign(partitions)
        for tp in partitions:
            self._moved_to(tp)

    def _moved_to(self, tp: TopicPartition) -> None:
        if tp.offset != TARGET:
            return
        with self._lock:
            self._moved.add(tp.partition)
            if self._moved == {0, 1}:
                self._queue = [[RecordStandIn(o, p) for o in range(TARGET, END)] for p in (0, 1)]

    def consume(self, num_messages=1, timeout=-1):
        if not self._assigned_once:
            self._assigned_once = True
            self._callbacks["on_assign"](self, [TopicPartition("t", 0), TopicPartition("t", 1)])
            return []
        with self._lock:
            if self._queue:
                return self._queue.pop(0)
        time.sleep(max(min(timeout, 0.05), 0))
        return []


class _Writes(NullSink):
    """Each write's (partition, offset) pairs, in order."""

    def __init__(self):
        super().__init__()
        self.writes: list[list[tuple[int, int]]] = []

    def write(self, statements, *, expect=None):
        self.writes.append([(s.parameters["partition"], s.parameters["offset"]) for s in statements])
        return super().write(statements, expect=expect)

    def order(self) -> list[tuple[int, int]]:
        return [where for write in self.writes for where in write]


def test_a_late_partitions_first_record_is_written_before_the_rest_of_the_first_batch():
    consumer = _TwoBrokers()
    sink = _Writes()
    worker, _ = worker_on(consumer, sink, offsets_transform, batch_size=1000, batch_interval_ms=1000)
    worker._open_consumer = lambda: consumer
    consumer.subscribe(["t"], **worker.assignment.callbacks())
    worker.start()
    try:
        wait_until(lambda: worker.snapshot().assigned == {PartitionKey("t", 0), PartitionKey("t", 1)}, 30,
                   what="both partitions assigned")
        worker.request_offsets(1, {PartitionKey("t", 0): TARGET, PartitionKey("t", 1): TARGET})
        wait_until(lambda: {(1, END - 1), (0, END - 1)} <= set(sink.order()), 30,
                   what="both partitions written to their end", describe=lambda: sink.writes)
    finally:
        worker.stop(timeout=10.0)
    order = sink.order()
    assert order.index((1, TARGET)) < order.index((0, END - 1)), (
        f"partition 1's first record was written after all of partition 0's: {sink.writes}")
    assert [o for p, o in order if p == 0] == list(range(TARGET, END))
    assert [o for p, o in order if p == 1] == list(range(TARGET, END))
