"""What the parts of one running stream share on its poll thread.

The worker (worker.py) is a loop over parts with one job each: the partitions it
holds (assignment.py), the delivery of a batch (batch_writer.py), the group's
commits (group_commits.py) and its health (health.py). They share this context,
as Kafka Connect's WorkerSinkTask shares its WorkerSinkTaskContext: the stream's
config and events, the consumer (the poll thread alone uses it), the offset gate
(the one place that decides a partition's status) and the view of the offsets
the sink stores (exactly-once). Nothing here decides anything.
"""
from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping

from confluent_kafka import Consumer

from ...config import Delivery, StreamConfig
from ...errors import StoredOffsetsConflict, StreamStateError
from ...model import PartitionKey
from ...redaction import redact
from .offset_gate import OffsetGate
from .stream_events import StreamEvents


class StoredView:
    """Exactly-once: the offsets this process knows the sink stores, per partition (what the next write's
    compare-and-set expects). Written on the poll thread, read by snapshot() from others: hence the lock."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._offsets: dict[PartitionKey, int] = {}

    def get_or(self, tp: PartitionKey, default: int) -> int:
        """What the sink stores of `tp`, `default` when nothing."""
        with self._lock:
            return self._offsets.get(tp, default)

    def copy(self) -> dict[PartitionKey, int]:
        with self._lock:
            return dict(self._offsets)

    def expect(self, tps: Iterable[PartitionKey]) -> dict[PartitionKey, int | None]:
        """What a write of `tps` continues from (None: the sink stores nothing of it)."""
        with self._lock:
            return {tp: self._offsets.get(tp) for tp in tps}

    def update(self, offsets: Mapping[PartitionKey, int]) -> None:
        with self._lock:
            self._offsets.update(offsets)

    def learn(self, tps: Iterable[PartitionKey], stored: Mapping[PartitionKey, int]) -> None:
        """The sink said what it stores of `tps` (`stored`; absent: nothing): the view becomes that."""
        with self._lock:
            for tp in tps:
                if tp in stored:
                    self._offsets[tp] = stored[tp]
                else:
                    self._offsets.pop(tp, None)

    def learn_conflict(self, expected: Iterable[PartitionKey], conflict: StoredOffsetsConflict) -> None:
        """A compare-and-set failed: the view of `expected` becomes what the sink says it stores."""
        self.learn(expected, {tp: conflict.stored[tp] for tp in expected if tp in conflict.stored})

    def forget(self, tps: Iterable[PartitionKey]) -> None:
        with self._lock:
            for tp in tps:
                self._offsets.pop(tp, None)


class PollContext:
    """One running stream's shared state (see the module docstring); its consumer is set while it is open."""

    def __init__(self, config: StreamConfig, events: StreamEvents):
        self.config = config
        self.name = config.name
        self.events = events
        self.exactly_once = config.delivery == Delivery.EXACTLY_ONCE
        self.stored = StoredView()
        self.gate: OffsetGate   # set by the worker, which is the gate's consumer port
        self.open_consumer: Consumer | None = None
        self._secrets = config.secret_values()

    def consumer(self) -> Consumer:
        """The consumer, which the poll thread alone uses between opening and closing it."""
        if self.open_consumer is None:
            raise StreamStateError(f"stream {self.name!r}: its consumer is closed")
        return self.open_consumer

    def redact(self, value: object) -> str:
        return redact(str(value), self._secrets)
