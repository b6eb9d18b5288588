"""Collecting a batch on the poll thread, and the first records after an offset change written at once.

The batch lives here while it is collected: a rebalance callback (run inside consume()) takes the messages of
revoked partitions out of it (drop_revoked), so nothing from a partition this consumer no longer owns is written
or committed. Within one consume() call librdkafka itself drops messages made outdated by the rebalance (the
version barrier of rd_kafka_q_serve_rkmessages). Every consume() is cut short when a control request arrives
(the worker drains them between batches); a wait never lasts longer than CONTROL_SLICE_S without looking.

After an offset change (the gate's `moved`: a moved partition has not delivered from its target yet) consume()
runs in HURRY_SLICE_S slices, and the first records from a target go to the sink as soon as they come: each
broker's fetch after the seek comes on its own (the one in flight at the seek first comes back), so the batch is
cut when a partition not in it yet delivers, and `deliver` writes the first record of each of its partitions
(batch_writer.deliver_first) while the rest waits, collected once more with the records still coming (up to
LATE_WAIT_S of quiet, FIRST_ROUNDS times): a late partition's first record then goes before the rest of the
first one's batch, not behind hundreds of records (bench/offset_latency.py's tail, tests/unit/
test_offset_late_partition.py). Nothing is committed that was not written, and the rest goes before anything
else happens between batches (a control request cuts the collection short, it does not overtake it).
"""
from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka import Message as KafkaMessage

from ...kafka.messages import message_offset, record_key, record_partitions
from ...model import PartitionKey
from .assignment import Assignment
from .batch_writer import BatchWriter
from .health import Health
from .poll_context import PollContext

log = logging.getLogger("mgstreams.worker")

CONTROL_SLICE_S = 0.002     # longest a batch wait goes without looking at control requests
# after an offset change, until each moved partition delivered: consume(n, t) returns only with n messages or at t,
# so the first records from a target reach the sink this soon after librdkafka has them
HURRY_SLICE_S = 0.0005
FIRST_ROUNDS = 4    # after a move, the first records are written in at most this many rounds (a broker's each)
LATE_WAIT_S = 0.02  # ... the rest of the first batch waiting this long (of quiet) for a moved partition to deliver


class BatchCollector:
    """The batch being collected (poll thread): collect(), then deliver() through the writer."""

    def __init__(self, ctx: PollContext, health: Health, assignment: Assignment, control: queue.SimpleQueue,
                 stop: threading.Event, deferred: Callable[[], bool] = lambda: False):
        self._ctx, self._health, self._assignment = ctx, health, assignment
        self._control, self._stop = control, stop
        self._deferred = deferred   # written batches' offsets wait for the commit cadence (group_commits)
        self._batch: list[KafkaMessage] = []   # the batch being collected
        self.after_move = False   # the batch collected last is the first after an offset change
        self._arrived = False   # the last collection ended as a partition not in it before delivered (a hurry)

    def deliver(self, batch: list[KafkaMessage], writer: BatchWriter) -> bool:
        """Write a batch; False when the stream went to ERROR. The first after a move that lacks a moved partition:
        its first records now, the rest collected once more (the module docstring)."""
        for _ in range(FIRST_ROUNDS):
            if not (self.after_move and self._ctx.gate.moved):
                break
            ok, rest = writer.deliver_first(batch)
            if not ok or not rest:
                return ok
            batch = self.collect(rest)
            if not self._arrived:
                break   # no other partition came meanwhile: the rest goes now, a late one in a batch of its own
        return writer.deliver(batch, self.after_move)

    def collect(self, carried: list[KafkaMessage] | None = None) -> list[KafkaMessage]:
        """Up to batch_size messages or batch_interval_ms, cut short when a control request arrives (`carried`:
        messages of the batch before, checked by the gate already, not written yet: they go first)."""
        config, gate = self._ctx.config, self._ctx.gate
        size, deadline = config.batch_size, time.monotonic() + config.batch_interval_ms / 1000
        consumer = self._ctx.consumer()
        batch: list[KafkaMessage] = list(carried or ())
        self._batch = batch
        known = {(m.topic(), m.partition()) for m in batch}
        self._arrived = False
        heard = time.monotonic()   # when a consume() last returned messages
        gap = CONTROL_SLICE_S if carried is None else LATE_WAIT_S   # a hurry's batch goes after this long quiet
        hurry = False   # a batch with the first messages after an offset change goes once each moved partition
        # delivered (or the queue drained)
        while len(batch) < size and not self._stop.is_set() and self._control.empty():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            hurry = hurry or gate.moved
            messages = consumer.consume(size - len(batch), min(remaining, HURRY_SLICE_S if hurry else CONTROL_SLICE_S))
            if messages:
                self._health.heard()
                heard = time.monotonic()
            elif batch and hurry and time.monotonic() - heard >= gap:
                break   # the queue drained: the moved partitions that delivered go now (not the short slice's gap)
            elif not batch and self._deferred():
                break   # caught up: what the commit cadence deferred is committed now (worker), not after the interval
            through: set[tuple[str | None, int | None]] = set()   # partitions the gate let a record of this consume() through
            partitions = record_partitions(messages) if messages else None
            if partitions is not None and gate.lets_through(partitions):
                batch.extend(messages)   # records only, of partitions the gate has nothing to decide for
                through, messages = set(partitions), []
            for msg in messages:
                error = msg.error()
                if error is None:
                    # within one consume() a partition's later records go where its first went: the gate has
                    # nothing to decide for them (its expected offset was met, nothing ran in between)
                    where = (msg.topic(), msg.partition())
                    if where in through or gate.check_delivery(record_key(msg), message_offset(msg)):
                        through.add(where)
                        batch.append(msg)
                elif error.code() == KafkaError._AUTO_OFFSET_RESET:
                    at = msg.offset()   # the offset it could not fetch from; None: nothing committed
                    self._assignment.resets[record_key(msg)] = -1 if at is None else at
                elif error.fatal():
                    raise KafkaException(error)
                elif error.code() != KafkaError._PARTITION_EOF:
                    log.warning("stream %s: %s", config.name, self._ctx.redact(error.str()))
            if hurry and batch and not gate.moved:
                break   # every moved partition delivered from its target: no wait for the queue to drain
            if hurry and not through <= known:
                self._arrived = True
                break   # first records from a target: written now (deliver), the others' are collected after
        self._batch = []
        self.after_move = hurry
        return batch

    def drop_revoked(self, revoked: set[PartitionKey]) -> None:
        """A rebalance callback took `revoked`: their messages leave the batch being collected."""
        self._batch[:] = [m for m in self._batch if (m.topic(), m.partition()) not in revoked]
