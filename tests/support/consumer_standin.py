"""A stand-in for the few confluent_kafka.Consumer calls the worker's parts make, for their unit tests.

It behaves as librdkafka does where the parts depend on it (the docs of confluent-kafka-python's Consumer):
`assign`/`incremental_assign` refuse the wrong kind for the group's protocol with KafkaError._STATE,
`seek` fails (KafkaException) for a partition not assigned, `commit(asynchronous=False)` returns the committed
TopicPartitions or raises the KafkaException it is told to, `committed` answers what was committed with its
metadata. Every call is recorded in `calls`.
"""
from __future__ import annotations

from collections.abc import Callable

from confluent_kafka import KafkaError, KafkaException, TopicPartition

from stream_registry.config import StreamConfig
from stream_registry.graph.sinks.null import NullSink
from stream_registry.registry.stream.stream_events import StreamEvents
from stream_registry.registry.stream.worker import StreamWorker


class RecordStandIn:
    """A record as consume() returns it: topic `t`, a 2-byte `{}` value, no key, headers or error."""

    def __init__(self, offset: int, partition: int = 0):
        self._offset, self._partition = offset, partition

    def error(self):
        return None

    def topic(self):
        return "t"

    def partition(self):
        return self._partition

    def offset(self):
        return self._offset

    def key(self):
        return None

    def value(self):
        return b"{}"

    def timestamp(self):
        return (1, 0)

    def headers(self):
        return None

    def __len__(self):
        return 2


class ConsumerStandIn:
    def __init__(self, *, incremental: bool = True, committed: dict | None = None,
                 watermarks: dict | None = None):
        self.incremental = incremental          # the group's real protocol
        self.assigned: dict[tuple[str, int], int] = {}
        self.committed_offsets: dict[tuple[str, int], tuple[int, str | None]] = dict(committed or {})
        self.watermarks = dict(watermarks or {})
        self.commit_errors: list[KafkaError] = []   # raised by the next commits, in order
        self.reachable = True
        self.calls: list[tuple] = []

    def _refuse(self, incremental: bool) -> None:
        if incremental != self.incremental:
            raise KafkaException(KafkaError(KafkaError._STATE, "wrong assign kind for the protocol"))

    def assign(self, partitions: list[TopicPartition]) -> None:
        self._refuse(False)
        self.calls.append(("assign", [(tp.topic, tp.partition, tp.offset) for tp in partitions]))
        self.assigned = {(tp.topic, tp.partition): tp.offset for tp in partitions}

    def unassign(self) -> None:
        self._refuse(False)
        self.calls.append(("unassign",))
        self.assigned = {}

    def incremental_assign(self, partitions: list[TopicPartition]) -> None:
        self._refuse(True)
        self.calls.append(("incremental_assign", [(tp.topic, tp.partition, tp.offset) for tp in partitions]))
        self.assigned.update({(tp.topic, tp.partition): tp.offset for tp in partitions})

    def incremental_unassign(self, partitions: list[TopicPartition]) -> None:
        self._refuse(True)
        self.calls.append(("incremental_unassign", [(tp.topic, tp.partition) for tp in partitions]))
        for tp in partitions:
            self.assigned.pop((tp.topic, tp.partition), None)

    def seek(self, tp: TopicPartition) -> None:
        if (tp.topic, tp.partition) not in self.assigned:
            raise KafkaException(KafkaError(KafkaError._STATE, "partition not assigned"))
        self.calls.append(("seek", tp.topic, tp.partition, tp.offset))

    def commit(self, offsets: list[TopicPartition], asynchronous: bool = True) -> list[TopicPartition]:
        assert asynchronous is False
        self.calls.append(("commit", [(tp.topic, tp.partition, tp.offset, tp.metadata or None) for tp in offsets]))
        if self.commit_errors:
            raise KafkaException(self.commit_errors.pop(0))
        for tp in offsets:
            self.committed_offsets[(tp.topic, tp.partition)] = (tp.offset, tp.metadata or None)
        return offsets

    def committed(self, partitions: list[TopicPartition], timeout: float | None = None) -> list[TopicPartition]:
        out = []
        for tp in partitions:
            offset, metadata = self.committed_offsets.get((tp.topic, tp.partition), (-1001, None))
            out.append(TopicPartition(tp.topic, tp.partition, offset) if metadata is None else
                       TopicPartition(tp.topic, tp.partition, offset, metadata=metadata))
        return out

    def get_watermark_offsets(self, tp: TopicPartition, timeout: float | None = None,
                              cached: bool = False) -> tuple[int, int]:
        return self.watermarks[(tp.topic, tp.partition)]

    def close(self) -> None:
        self.calls.append(("close",))

    def list_topics(self, timeout: float | None = None) -> object:
        if not self.reachable:
            raise KafkaException(KafkaError(KafkaError._TRANSPORT, "all brokers down"))
        return object()


class Recorded:
    """What a worker's parts told the registry."""

    def __init__(self):
        self.statuses, self.realigned, self.lost, self.set_aside = [], [], [], []

    def events(self) -> StreamEvents:
        return StreamEvents(on_status=lambda s, e: self.statuses.append((s, e)), on_realign=self.realigned.extend,
                            on_lost=self.lost.append, on_set_aside=self.set_aside.extend)


def worker_on(consumer: ConsumerStandIn, sink=None, transformation: Callable = lambda messages: [],
              **options) -> tuple[StreamWorker, Recorded]:
    """A worker's parts wired as in production, not started: its consumer is `consumer`, its sink `sink`
    (a null:// one by default), its retries quick unless `retry` says otherwise."""
    from configs import FAST_RETRY

    recorded = Recorded()
    retry = options.pop("retry", FAST_RETRY)
    config = StreamConfig("orders", ["t"], "localhost:9092", "stream_helpers.offsets_transform", "null://",
                          **options)
    worker = StreamWorker(config, transformation, sink if sink is not None else NullSink(),
                          events=recorded.events(), retry=retry)
    worker._ctx.open_consumer = consumer
    return worker, recorded
