"""The first offset at or after a time, found by reading record timestamps: for brokers whose ListOffsets by time
says "none" although the partition holds later records (no time index, as the embedded cluster).

Binary search over record timestamps: O(log n) probes, each bounded by the caller's deadline. Offsets are not
contiguous (transaction markers, aborted or compacted records): a probe at `mid` answers the first record at or
after it, so each step either finds the records of [mid, hi) to start at or after the time (the answer is that
record or lies below mid) or moves `lo` past `mid`; the interval shrinks every step whatever the gaps.
"""
from __future__ import annotations

import time
from collections.abc import Iterator

from confluent_kafka import Consumer, KafkaError, TopicPartition

from ..errors import KafkaOperationError


class RecordReader:
    """(offset, timestamp) of one partition's records, read through `consumer` (assigned for each probe) by
    `deadline` (time.monotonic()), each poll at most `poll_s`."""

    def __init__(self, consumer: Consumer, topic: str, partition: int, deadline: float, poll_s: float):
        self._consumer, self._topic, self._partition = consumer, topic, partition
        self._deadline, self._poll_s = deadline, poll_s

    def records(self, offset: int, end: int) -> Iterator[tuple[int, int]]:
        """The records in [offset, end), read from one assignment."""
        if offset >= end:
            return
        where = f"offset by time of {self._topic}:{self._partition}"
        self._consumer.assign([TopicPartition(self._topic, self._partition, offset)])
        while True:
            left = self._deadline - time.monotonic()
            if left <= 0:
                raise KafkaOperationError(f"{where}: not found within the deadline (reading at offset {offset})",
                                          code="_TIMED_OUT", topic=self._topic, partition=self._partition)
            msg = self._consumer.poll(min(left, self._poll_s))
            if msg is None:
                continue
            error = msg.error()
            if error is None:
                at = msg.offset()
                if at is None or at >= end:   # a fetched record always has its offset
                    return
                yield at, msg.timestamp()[1]
                if at + 1 >= end:
                    return
            elif error.code() == KafkaError._PARTITION_EOF:
                return
            elif not error.retriable():
                raise KafkaOperationError(f"{where}: {error.str()}", code=error.name(), topic=self._topic,
                                          partition=self._partition)

    def first_from(self, offset: int, end: int) -> tuple[int, int] | None:
        """The first record at or after `offset` and below `end`, None if there is none."""
        return next(self.records(offset, end), None)

    def last_below(self, low: int, high: int) -> tuple[int, int] | None:
        """The last record in [low, high), in windows ending where the last one began, doubling (the last offsets
        of a partition may be transaction markers or aborted records): O(log n) probes."""
        end, width = high, 1
        while end > low:
            start = max(low, end - width)
            found = None
            for record in self.records(start, end):
                found = record   # the window's last record
            if found is not None:
                return found
            end, width = start, width * 2
        return None


def first_at_or_after(reader: RecordReader, ts: int, low: int, high: int) -> int | None:
    """The offset of the first record in [low, high) with a timestamp at or after `ts`, None if there is none."""
    last = reader.last_below(low, high)
    if last is None or last[1] < ts:
        return None
    best, lo, hi = last[0], low, last[0]   # the answer is `best` or a record in [lo, hi)
    while lo < hi:
        mid = (lo + hi) // 2
        record = reader.first_from(mid, hi)
        if record is None:            # [mid, hi) holds no record
            hi = mid
        elif record[1] >= ts:         # [mid, record) holds none: the answer is record or below mid
            best, hi = record[0], mid
        else:
            lo = record[0] + 1
    return best
