"""The first record at or after given offsets, for many partitions in one go: how old unprocessed data is.

A `FirstRecords` reader is a consumer that never joins a group: `assign()`
at the wanted offsets, then one consume loop takes the first record of every
partition (librdkafka fetches all partitions of a leader in one request), pauses
each partition once it has its record, and stops at a deadline. A partition
that reaches its end (partition EOF) or only shows records at or past the given
log end has nothing to read there: its offsets below the log end are
transaction markers or aborted records.
"""
from __future__ import annotations

import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from confluent_kafka import TIMESTAMP_NOT_AVAILABLE, Consumer, KafkaError, TopicPartition

from ..model import PartitionKey
from .client import new_consumer
from .messages import message_key, message_offset

PROBE_GROUP = "mgstreams-lag-probe"   # never joined, never committed to: assign() only


@dataclass(frozen=True)
class FirstRecord:
    """What lies at or after an offset, below a log end: a record (`timestamp_ms`, None if the record has no
    timestamp), or nothing (`found` False)."""
    found: bool
    offset: int | None = None
    timestamp_ms: int | None = None


class FirstRecords:
    """One reader for one cluster and client configuration; thread-safe; close() when done."""

    def __init__(self, bootstrap_servers: str, client_config: Mapping[str, object] | None = None,
                 secrets: Iterable[str] = ()):
        config = dict(client_config or {})
        self._consumer: Consumer | None = new_consumer({
            **config, "bootstrap.servers": bootstrap_servers, "group.id": PROBE_GROUP,
            "enable.auto.commit": False, "enable.auto.offset.store": False, "enable.partition.eof": True,
            "auto.offset.reset": "error", "fetch.wait.max.ms": 10, "fetch.message.max.bytes": 65536,
            "queued.max.messages.kbytes": 1024,
            "isolation.level": config.get("isolation.level", "read_committed")}, secrets)
        self._lock = threading.Lock()

    def close(self) -> None:
        with self._lock:
            if self._consumer is not None:
                self._consumer.close()
                self._consumer = None

    def read(self, wanted: Mapping[PartitionKey, tuple[int, int]], timeout: float) -> dict[PartitionKey, FirstRecord]:
        """For each partition, (offset, log end) → the first record at or after offset and below log end.

        Partitions without an answer by the deadline (a leader away, an offset
        deleted by retention) are left out: the caller falls back for them.
        """
        if not wanted:
            return {}
        with self._lock:
            consumer = self._consumer
            if consumer is None:
                return {}
            found: dict[PartitionKey, FirstRecord] = {}
            partitions = [TopicPartition(t, p, offset) for (t, p), (offset, _) in wanted.items()]
            consumer.assign(partitions)
            consumer.resume(partitions)   # librdkafka keeps a partition paused across assignments
            deadline = time.monotonic() + timeout
            try:
                while len(found) < len(wanted) and (left := deadline - time.monotonic()) > 0:
                    for msg in consumer.consume(max(len(wanted), 1) * 4, min(left, 0.1)):
                        tp = message_key(msg)
                        if tp is None or tp not in wanted or tp in found:
                            continue
                        error = msg.error()
                        end = wanted[tp][1]
                        if error is not None:
                            if error.code() == KafkaError._PARTITION_EOF:
                                found[tp] = FirstRecord(False)
                            continue   # another error (offset out of range): no answer for it
                        offset = message_offset(msg)
                        if offset >= end:
                            found[tp] = FirstRecord(False)
                        else:
                            kind, ts = msg.timestamp()
                            found[tp] = FirstRecord(True, offset,
                                                    None if kind == TIMESTAMP_NOT_AVAILABLE or ts < 0 else ts)
                        consumer.pause([TopicPartition(*tp)])
            finally:
                consumer.unassign()
            return found
