"""One running stream: a confluent-kafka consumer and the one thread that polls it.

Every librdkafka call for the consumer happens on the poll thread. Other threads
hand it requests (offset changes, stop) through a queue it drains between
batches, so nothing races the poll loop. Offset changes belong to the offset
gate (offset_gate.py): the worker calls it at its seams (drain, the rebalance
callbacks, each delivered message, after each batch) and the gate alone decides
a partition's status.

The ingestion loop is at-least-once: poll a batch, transform, write to the sink,
then commit the next offsets synchronously. A failed batch is retried from
memory with backoff and never committed; when retries run out the stream goes to
ERROR and leaves the group, so a restart resumes at the failed batch. With
errors.tolerance 'all', the messages a batch fails on are found and set aside
(poison.py, dead_letter.py) and the rest is written. What a failure leads to is
decided by its type (sink_faults.classify): a transient one is retried, one the
messages may have caused is bisected, one of the sink as a whole fails the
stream at once.

Exactly-once: each chunk of a batch is written with the offsets that follow it
and a compare-and-set on the offsets it continues from (`expect`, the worker's
running view of what the sink stores: `_stored`). A retried chunk whose first
attempt was applied (a lost acknowledgement) is ALREADY_APPLIED, never applied
twice. A StoredOffsetsConflict (someone else moved the stored offsets: a zombie
writer, a restored snapshot, a cut-back file) drops the batch uncommitted and
seeks the partitions to what the sink stores; that, and a partition assigned
where the sink stores rather than where the group committed, is a realignment:
logged and sent to the host for the history (realign.py), never silent. The stored offsets are read at
assignment within a bound; a sink that does not answer holds the partitions
back (shown in `error`) and is asked again between batches.

Why one module over 400 lines: everything here runs on, or hands work to, the
one poll thread that owns the consumer, and its state (batch, gate, stored view,
held partitions) is shared by the loop and the rebalance callbacks inside it.
"""
from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import Enum
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
from confluent_kafka import Message as KafkaMessage

from ..config import CONSUMER_DEFAULTS, Delivery, ErrorsTolerance, StreamConfig
from ..errors import StoredOffsetsConflict, StreamError, StreamStateError
from ..formats import Decoder
from ..graph.offset_store import offset_statements
from ..graph.sink_faults import Fault, classify
from ..graph.sinks.stored_offsets import read_stored_offsets_within
from ..graph.transform import Message, decode_all, run_transformation, wrap
from ..kafka.client import new_consumer
from ..kafka.embedded_fit import embedded_fit
from ..kafka.messages import message_offset, record_key
from ..model import (
    DEFAULT_RETRY,
    GateEvent,
    MoveState,
    PartitionKey,
    PendingMove,
    Realignment,
    RecordsLost,
    RetryPolicy,
    SetAside,
    StreamStatus,
    WorkerSnapshot,
)
from ..redaction import redact
from .batch_stats import BatchStats
from .change_marks import ChangeMark, Committed, MarkKey
from .commits import BoundedCommitter, CommitUnanswered
from .data_loss import ResetDecision
from .data_loss import decide as decide_reset
from .dead_letter import DeadLetterQueue
from .offset_gate import OffsetGate
from .poison import BatchDelivery
from .realign import explain_conflict, explain_resume, note_resume

log = logging.getLogger("mgstreams.worker")

CONTROL_SLICE_S = 0.002     # longest a batch wait goes without looking at control requests
COMMIT_RETRY_S = 0.05
COMMIT_DEADLINE_S = 10.0    # transient commit errors are retried this long
COMMIT_MIN_WAIT_S = 2.0     # the least a commit's answer is waited for (commits.py; an outage cuts it short)
OUTAGE_PROBE_S = 1.0        # between metadata probes while an outage is suspected or on
OUTAGE_PROBE_TIMEOUT_S = 0.5
STATS_EVERY_S = 1.0         # batch counts are reported at most this often (and when the stream stops)
ASSIGN_STORED_DEADLINE_S = 2.0   # exactly-once: how long a rebalance callback retries reading the sink's offsets
HELD_RETRY_S = 0.5          # then between batches, this often, while the partitions wait for the sink
OWED_RETRY_S = 1.0          # a failed batch commit is tried again between batches, this often
RESET_WATERMARKS_TIMEOUT_S = 1.0   # a partition librdkafka could not fetch from: its watermarks, asked this long
OFFSET_BEGINNING = -2       # librdkafka's raw constants
OFFSET_STORED = -1000
UNREACHABLE = frozenset({KafkaError._ALL_BROKERS_DOWN, KafkaError._TRANSPORT, KafkaError._RESOLVE})
# Commit errors only the next poll can resolve: retrying them in a loop stalls the poll thread.
NEEDS_POLL = frozenset({KafkaError.UNKNOWN_MEMBER_ID, KafkaError.ILLEGAL_GENERATION,
                        KafkaError.REBALANCE_IN_PROGRESS, KafkaError._STATE, KafkaError._NO_OFFSET})
RETRIABLE_COMMIT = frozenset({KafkaError.NOT_COORDINATOR, KafkaError.COORDINATOR_NOT_AVAILABLE,
                              KafkaError.COORDINATOR_LOAD_IN_PROGRESS, KafkaError.REQUEST_TIMED_OUT,
                              KafkaError._TRANSPORT, KafkaError._TIMED_OUT, KafkaError._WAIT_COORD})


class _Outcome(Enum):
    """What became of a batch given to _process."""
    WRITTEN = "written"   # written, and committed (or its commit owed)
    AGAIN = "again"       # sought back (a stop during its retries, the sink's realign): its messages come again
    FAILED = "failed"     # the stream went to ERROR


@dataclass(frozen=True)
class StreamEvents:
    """What a running stream tells whoever runs it (the registry, or a stream process's pipe)."""
    on_status: Callable[[StreamStatus, str | None], None] = lambda status, error: None
    on_change: Callable[[GateEvent], None] = lambda event: None   # an offset change persisted, or held back
    on_set_aside: Callable[[list[SetAside]], None] = lambda records: None     # poison messages
    on_stats: Callable[[BatchStats], None] = lambda stats: None               # since this worker started
    on_realign: Callable[[list[Realignment]], None] = lambda moves: None     # exactly-once: the sink decided
    on_lost: Callable[[RecordsLost], None] = lambda lost: None                # records that left the log unread
    on_outage: Callable[[datetime | None], None] = lambda since: None         # no broker answers, since (None: over)


@dataclass(frozen=True)
class _OffsetRequest:
    """One call's offsets, for the poll thread's gate."""
    change_id: int
    offsets: Mapping
    onward: frozenset = frozenset()
    supersedes: int | None = None


class _CancelRequest:
    """Cancel every change not persisted yet (poll thread); `cancelled` holds them once `done` is set."""

    def __init__(self, up_to: int | None):
        self.up_to = up_to
        self.cancelled: list[GateEvent] = []
        self.done = threading.Event()


class StreamWorker:
    def __init__(self, config: StreamConfig, transformation: Callable, sink, *,
                 pending: Mapping[PartitionKey, PendingMove] | None = None, events: StreamEvents = StreamEvents(),
                 retry: RetryPolicy = DEFAULT_RETRY, marks: MarkKey | None = None):
        self.config = config
        self._transformation = transformation
        self._sink = sink
        self._events = events
        self._retry = retry
        self._secrets = config.secret_values()
        self._tolerant = config.errors_tolerance == ErrorsTolerance.ALL
        decoder = Decoder.for_stream(config)   # key.format / value.format (stream_registry.formats)
        self._decoder = decoder if decoder.active else None   # None: bytes as they are, nothing asked per record
        self._dead_letters = DeadLetterQueue(config, self._redact) if config.dead_letter_topic else None
        self._control: queue.SimpleQueue = queue.SimpleQueue()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._started = threading.Event()
        self._start_error: BaseException | None = None
        # Owned by the poll thread; read by others through snapshot().
        self._gate = OffsetGate(self, self._on_gate_event, pending=pending)
        self._stored: dict[PartitionKey, int] = {}
        self._exactly_once = config.delivery == Delivery.EXACTLY_ONCE
        self._held: set[PartitionKey] = set()   # exactly-once: assigned to us, not started: the sink did not answer
        self._held_error: str | None = None     # why, shown as the stream's error until the sink answers
        self._next_held_try = 0.0
        self._commit_stored: set[PartitionKey] = set()   # exactly-once, just assigned: group offsets follow the sink's
        self._resumed: dict[PartitionKey, tuple] = {}   # exactly-once, just assigned elsewhere than the group's commit
        self._marks: dict[PartitionKey, ChangeMark] = {}   # last change persisted per partition (each commit)
        self._mark_key = marks or MarkKey.new()   # none given: no mark written before is believed (change_marks)
        self._owed: dict[PartitionKey, int] = {}   # a batch's offsets whose commit failed: retried between batches
        self._next_owed_try = 0.0
        self._batch: list[KafkaMessage] = []   # the batch being collected (poll thread)
        self._after_move = False   # the batch collected last is the first after an offset change (_deliver)
        self._fatal: str | None = None          # set in a callback; the poll loop fails the stream
        self._suspect: str | None = None        # an error callback hinted at an outage: probe
        self._outage: str | None = None         # confirmed: shown as the stream's error until it clears
        self._outage_since: datetime | None = None
        self._next_probe = 0.0
        self._resets: dict[PartitionKey, int] = {}   # partitions with no offset to fetch from, not decided yet
        self._reset_policy = config.configs.get("auto.offset.reset", CONSUMER_DEFAULTS["auto.offset.reset"])
        self._state_lock = threading.Lock()
        self._consumer: Consumer | None = None
        self._committer = BoundedCommitter(config.name)   # a commit never holds the poll thread past its deadline
        self._rebalancing = False   # inside a rebalance callback (poll thread)
        self.status = StreamStatus.CREATED
        self.error: str | None = None
        self._stats = BatchStats()
        self._stats_reported_at = 0.0
        # cooperative-sticky and the KIP-848 `consumer` protocol change assignments incrementally. This
        # is a first guess from the config: the Python client does not expose rd_kafka_rebalance_protocol(),
        # but librdkafka refuses the wrong kind of assign with _STATE, and _assignment() then switches.
        self._incremental = ("cooperative" in str(config.configs.get("partition.assignment.strategy", ""))
                             or str(config.configs.get("group.protocol", "classic")) == "consumer")

    # -- control (any thread) ---------------------------------------------
    def start(self, timeout: float = 30.0) -> None:
        """Create the consumer and subscribe on a new poll thread; raise if that fails."""
        self._thread = threading.Thread(target=self._run, name=f"mgstreams-{self.config.name}", daemon=True)
        self._thread.start()
        if not self._started.wait(timeout):
            raise StreamError(f"stream {self.config.name!r}: consumer did not start within {timeout} s")
        if self._start_error is not None:
            raise self._start_error

    def stop(self, timeout: float = 30.0) -> None:
        """Finish the in-flight batch, commit, close the consumer (the group rebalances at once)."""
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout)
            if self._thread.is_alive():
                raise StreamError(f"stream {self.config.name!r}: did not stop within {timeout} s")

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    @property
    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def snapshot(self) -> WorkerSnapshot:
        with self._state_lock:
            stored = dict(self._stored)
        return WorkerSnapshot(assigned=self._gate.assigned(), positions=self._gate.positions(),
                              pending=self._gate.waiting(), stored=stored)

    def request_offsets(self, change_id: int, offsets: Mapping[PartitionKey, int],
                        onward: frozenset[PartitionKey] = frozenset(), supersedes: int | None = None) -> None:
        """Hand one call's offsets to the poll thread's gate (`onward`: those never moved back; `supersedes`: a
        change whose waiting moves end, a revert's); what becomes of them comes as on_change events."""
        self._control.put(_OffsetRequest(change_id, dict(offsets), frozenset(onward), supersedes))

    def forget(self, change_id: int, tps: frozenset[PartitionKey]) -> None:
        """Another task persisted the change on `tps` (task_runner): the gate drops it, from this thread."""
        self._gate.forget(change_id, tps)

    def cancel_pending(self, timeout: float, up_to: int | None = None) -> list[GateEvent] | None:
        """Have the poll thread cancel every change not persisted yet; the cancelled ones, or None when it did
        not get to it within `timeout` (it still will, between batches). A change persisted before the cancel
        was reported (on_change) before this returns. `up_to`: only the changes of calls up to that change id."""
        request = _CancelRequest(up_to)
        self._control.put(request)
        return list(request.cancelled) if request.done.wait(max(timeout, 0.0)) else None

    # -- the poll thread ----------------------------------------------------
    def _run(self) -> None:
        try:
            self._consumer = self._open_consumer()
        except BaseException as exc:  # reported to start()'s caller
            self._start_error = exc
            self._started.set()
            return
        self._set_status(StreamStatus.STARTING)
        self._started.set()
        self._gate.reconcile(self._committed(sorted(self._gate.waiting())))   # persisted before a host died?
        trimmed = getattr(self._sink, "trimmed", 0)
        if trimmed:
            log.warning("stream %s: the sink's file ended in a batch a kill left unfinished: %d byte(s) cut on "
                        "open (%s)", self.config.name, trimmed, self._sink)
        try:
            while not self._stop.is_set():
                self._drain_control()
                self._gate.retry()
                self._start_held()
                self._follow_sink()
                self._retry_owed()
                self._check_cluster()
                self._decide_resets()
                batch = self._collect_batch()
                if self._fatal:
                    self._fail(self._fatal)
                    return
                if batch and not self._deliver(batch):
                    return  # went to ERROR; consumer already closed
                self._report_stats()
        except BaseException as exc:  # never let a stream thread die silently
            log.exception("stream %s: poll loop failed", self.config.name)
            self._fail(f"poll loop failed: {exc}")
            return
        self._report_stats(final=True)
        self._close_consumer()
        self._set_status(StreamStatus.STOPPED)

    def _open_consumer(self) -> Consumer:
        conf = {
            **CONSUMER_DEFAULTS,
            **embedded_fit(self.config.client_config(), self._secrets),   # the embedded cluster's timings
            **self.config.client_config(),
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "enable.partition.eof": False,
            "auto.offset.reset": "error",   # never moved silently: data_loss.py decides, and counts what left the log
            "error_cb": self._on_error,
            "logger": logging.getLogger("mgstreams.librdkafka"),
        }
        consumer = new_consumer(conf, self._secrets)
        try:
            consumer.subscribe(list(self.config.topics), on_assign=self._rebalance(self._on_assign),
                               on_revoke=self._rebalance(self._on_revoke), on_lost=self._rebalance(self._on_lost))
        except (KafkaException, ValueError, TypeError, RuntimeError) as exc:
            consumer.close()
            raise StreamError(f"topics: the Kafka client cannot subscribe: {self._redact(exc)}") from None
        return consumer

    def _collect_batch(self) -> list[KafkaMessage]:
        """Up to batch_size messages or batch_interval_ms, cut short when a control request arrives.

        The batch lives on the worker while it is collected: a rebalance callback
        (run inside consume()) takes the messages of revoked partitions out of it,
        so nothing from a partition this consumer no longer owns is written or
        committed. Within one consume() call librdkafka itself drops messages made
        outdated by the rebalance (the version barrier of rd_kafka_q_serve_rkmessages).
        """
        size, deadline = self.config.batch_size, time.monotonic() + self.config.batch_interval_ms / 1000
        consumer = self._live_consumer()
        batch: list[KafkaMessage] = []
        self._batch = batch
        hurry = False   # a batch with the first messages after an offset change goes once each moved partition
        # delivered (or the queue drained)
        while len(batch) < size and not self._stop.is_set() and self._control.empty():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            hurry = hurry or self._gate.moved
            messages = consumer.consume(size - len(batch), min(remaining, CONTROL_SLICE_S))
            if not messages and batch and hurry:
                break
            for msg in messages:
                error = msg.error()
                if error is None:
                    if self._gate.check_delivery(record_key(msg), message_offset(msg)):
                        batch.append(msg)
                elif error.code() == KafkaError._AUTO_OFFSET_RESET:
                    at = msg.offset()   # the offset it could not fetch from; None: nothing committed
                    self._resets[record_key(msg)] = -1 if at is None else at
                elif error.fatal():
                    raise KafkaException(error)
                elif error.code() != KafkaError._PARTITION_EOF:
                    log.warning("stream %s: %s", self.config.name, self._redact(error.str()))
            if hurry and batch and not self._gate.moved:
                break   # every moved partition delivered from its target: no wait for the queue to drain
        self._batch = []
        self._after_move = hurry
        return batch

    def _deliver(self, batch: list[KafkaMessage]) -> bool:
        """Process a batch; the first one after an offset change in two, the first record of each of its
        partitions, then the rest, so that the change shows in the graph as soon as it is applied, not once the
        whole batch is. False when the stream went to ERROR."""
        first, rest = _first_of_each_partition(batch) if self._after_move else (batch, [])
        outcome = self._process(first)
        if outcome is _Outcome.WRITTEN and rest:
            outcome = self._process(rest)
        # AGAIN after the first part: its seeks covered every partition of the rest, which comes again too
        return outcome is not _Outcome.FAILED

    def _process(self, batch: list[KafkaMessage]) -> _Outcome:
        """Transform, write, commit."""
        started = time.perf_counter()
        next_offsets = _next_offsets(batch)
        delivery = BatchDelivery([(m, wrap(m, self._decoder)) for m in batch], self._write,
                                 self._set_aside, tolerate=self._tolerant)
        attempt = 0
        while True:
            try:
                delivery.run()   # a retry continues after what an earlier attempt delivered
                if self._exactly_once and delivery.set_aside:   # stored offsets pass the last ones set aside too
                    self._write_offsets(next_offsets)
                break
            except StoredOffsetsConflict as exc:   # the sink stores other offsets: go on from them
                self._realign(batch, exc)
                return _Outcome.AGAIN
            except Exception as exc:  # transformation, sink or dead-letter topic: retry, never skip
                attempt += 1
                reason = self._redact(exc)
                if classify(exc) is Fault.SINK:   # no batch can be written now: retrying the same one helps not
                    self._rewind(batch)
                    self._fail(f"batch at {_first_offsets_text(batch)} failed: {reason}")
                    return _Outcome.FAILED
                if attempt >= self._retry.attempts or self._stop.is_set():
                    self._rewind(batch)
                    self._fail(f"batch at {_first_offsets_text(batch)} failed {attempt} time(s): {reason}")
                    return _Outcome.FAILED
                log.warning("stream %s: batch failed (attempt %d), retrying: %s", self.config.name, attempt, reason)
                if self._stop.wait(self._retry.backoff(attempt)):
                    self._rewind(batch)  # stopping: the batch stays uncommitted for the next start
                    return _Outcome.AGAIN
        if self._commit(next_offsets) is not None:   # exactly-once too: lag tools read the group's offsets
            self._owed.update(next_offsets)   # retried between batches: nothing more may come to carry it
        self._gate.after_batch(next_offsets)
        self._stats = self._stats.add_batch(len(batch), time.perf_counter() - started)
        return _Outcome.WRITTEN

    def _report_stats(self, final: bool = False) -> None:
        if self._stats.batches and (final or time.monotonic() - self._stats_reported_at >= STATS_EVERY_S):
            self._stats_reported_at = time.monotonic()
            self._events.on_stats(self._stats)

    def _write(self, chunk: Sequence[tuple[KafkaMessage, Message]]) -> None:
        """Transform and write (part of) a batch; exactly-once, with the offsets that follow it."""
        messages = [message for _, message in chunk]
        decode_all(messages)   # a record that does not decode is its own fault; an unreachable registry is transient
        statements = run_transformation(self._transformation, messages)
        if self._exactly_once:   # the offsets go with the batch, in its transaction or its append
            self._write_offsets(_next_offsets([raw for raw, _ in chunk]), statements)
        else:
            self._sink.write(statements)

    def _write_offsets(self, next_offsets: Mapping[PartitionKey, int], statements: Sequence[Any] = ()) -> None:
        """Exactly-once: write `statements` with the offsets that follow them, if the sink still stores what
        this worker last knew (`expect`: not the first message's offset, gaps of transaction markers and set-aside
        messages lie between). Applied or already applied (a lost acknowledgement), the stored view moves on, so
        the batch's next chunk expects these offsets. StoredOffsetsConflict when the sink stores others."""
        with self._state_lock:
            expect = {tp: self._stored.get(tp) for tp in next_offsets}
        try:
            self._sink.write([*statements, *offset_statements(self.config.name, next_offsets)], expect=expect)
        except StoredOffsetsConflict as exc:   # the view becomes what the sink says it stores
            with self._state_lock:
                for tp in expect:
                    if tp in exc.stored:
                        self._stored[tp] = exc.stored[tp]
                    else:
                        self._stored.pop(tp, None)
            raise
        with self._state_lock:
            self._stored.update(next_offsets)

    def _realign(self, batch: list[KafkaMessage], conflict: StoredOffsetsConflict) -> None:
        """The sink stores other offsets than this worker's view (someone else moved them): drop the batch
        uncommitted, take the sink's offsets as the view, and read each of the batch's partitions from them
        (from the beginning where it stores none)."""
        with self._state_lock:   # _write_offsets took the sink's offsets as the view
            starts = {tp: self._stored.get(tp, OFFSET_BEGINNING) for tp in _first_offsets(batch)}
        assigned = self._gate.assigned()
        for tp, offset in sorted(starts.items()):
            if tp in assigned and not self.seek(tp, offset):
                self.reassign(tp, offset)
        self._gate.rewound({tp: o for tp, o in starts.items() if o >= 0})
        explain_conflict(self, conflict, starts)
        log.warning("stream %s: %s; the batch at %s is dropped, the stream goes on from %s", self.config.name,
                    self._redact(conflict), _first_offsets_text(batch),
                    ", ".join(f"{t}:{p}@{'beginning' if o < 0 else o}" for (t, p), o in sorted(starts.items())))

    def _set_aside(self, item: tuple[KafkaMessage, Message], error: BaseException) -> None:
        """A message the batch fails on (errors.tolerance 'all'): dead-letter it, or skip it; report it."""
        raw = item[0]
        if self._dead_letters is not None:
            self._dead_letters.send(raw, error)   # raises: the batch is retried, nothing is committed
        key = record_key(raw)
        record = SetAside(topic=key.topic, partition=key.partition, offset=message_offset(raw),
                          error=self._redact(error), dead_lettered=self._dead_letters is not None)
        log.warning("stream %s: %s %s:%d@%d: %s", self.config.name,
                    "dead-lettered" if record.dead_lettered else "skipped", record.topic, record.partition,
                    record.offset, record.error)
        self._events.on_set_aside([record])

    def _rewind(self, batch: list[KafkaMessage]) -> None:
        """Seek back to the batch's first offsets so the consumer's position tells the truth."""
        first = _first_offsets(batch)
        consumer = self._live_consumer()
        for (topic, partition), offset in first.items():
            try:
                consumer.seek(TopicPartition(topic, partition, offset))
            except KafkaException:
                pass  # partition no longer ours: its committed offset is still the batch start
        self._gate.rewound(first)

    def _commit(self, offsets: Mapping[PartitionKey, int], deadline_s: float = COMMIT_DEADLINE_S) -> str | None:
        """Synchronous commit; None when it succeeded, else the Kafka error as text.

        Transient errors (a coordinator moving) are retried until the deadline.
        Errors only a poll can fix (the group is rebalancing, this member's
        generation is stale) return at once: retrying them here would stall the
        poll thread, often inside a rebalance callback.
        """
        if not offsets:
            return None
        marks = {tp: self._mark_key.encode(tp, mark) for tp, mark in self._marks.items()}   # each commit carries the last change's
        tps = [TopicPartition(tp[0], tp[1], o, metadata=marks[tp]) if tp in marks else TopicPartition(tp[0], tp[1], o)
               for tp, o in offsets.items()]
        consumer = self._live_consumer()
        deadline = time.monotonic() + deadline_s
        while True:
            try:
                result = self._committer.commit(consumer, tps, max(deadline - time.monotonic(), COMMIT_MIN_WAIT_S),
                                                give_up=self._outage_confirmed, direct=self._rebalancing)
                failed = [tp for tp in result or [] if tp.error is not None]
                if not failed:
                    for tp in offsets:
                        self._owed.pop(tp, None)
                    return None
                raise KafkaException(failed[0].error)
            except CommitUnanswered as exc:   # its outcome is unknown: the next batch's commit carries it
                log.warning("stream %s: commit not answered: %s", self.config.name, exc)
                return f"{exc} (the commit's outcome is unknown)"
            except KafkaException as exc:
                error = exc.args[0] if exc.args and isinstance(exc.args[0], KafkaError) else None
                reason = self._redact(f"{error.name()}: {error.str()}" if error is not None else exc)
                if error is None or error.code() in NEEDS_POLL or time.monotonic() >= deadline or \
                        not (error.retriable() or error.code() in RETRIABLE_COMMIT) or self._outage_confirmed():
                    log.warning("stream %s: commit failed: %s", self.config.name, reason)
                    return reason
                time.sleep(COMMIT_RETRY_S)

    def _retry_owed(self) -> None:
        """Between batches, once a second: commit again the offsets of a batch whose commit failed (a rebalance,
        an outage), for the partitions still assigned, until it succeeds or a later commit carries them. A stream
        with nothing more to read would otherwise leave the group's offset behind what it wrote, for good."""
        if not self._owed or time.monotonic() < self._next_owed_try:
            return
        self._next_owed_try = time.monotonic() + OWED_RETRY_S
        assigned = self._gate.assigned()
        self._owed = {tp: offset for tp, offset in self._owed.items() if tp in assigned}
        self._commit(dict(self._owed), deadline_s=0.0)

    # -- offset changes (poll thread) -----------------------------------------
    def _drain_control(self) -> None:
        while True:
            try:
                request = self._control.get_nowait()
            except queue.Empty:
                break
            if isinstance(request, _CancelRequest):
                request.cancelled = self._gate.cancel(request.up_to)
                request.done.set()
            else:
                self._gate.request(request.change_id, request.offsets, request.onward, request.supersedes)

    def _on_gate_event(self, event: GateEvent) -> None:
        """What the host records: a persisted change, why a change is held back, one that was superseded (the
        host keeps its pending row until told). A cancel is answered to the host's own request."""
        if event.state in (MoveState.PERSISTED, MoveState.SUPERSEDED, MoveState.CANCELLED) or \
                (event.state == MoveState.WAITING and event.reason):
            self._events.on_change(event)

    # -- the gate's port (poll thread) ------------------------------------------
    def seek(self, tp: PartitionKey, offset: int) -> bool:
        consumer = self._live_consumer()
        try:
            consumer.seek(TopicPartition(tp[0], tp[1], offset))
            return True
        except KafkaException:
            return False

    def reassign(self, tp: PartitionKey, offset: int | None) -> None:
        """Assign one partition again at `offset` (None: where the group or the sink resumes it)."""
        start = OFFSET_STORED if offset is None else offset
        if offset is None and self._exactly_once:
            start = self._stored.get(tp, OFFSET_BEGINNING)
        consumer = self._live_consumer()

        def incremental() -> None:
            consumer.incremental_unassign([TopicPartition(*tp)])
            consumer.incremental_assign([TopicPartition(tp[0], tp[1], start)])

        def eager() -> None:
            consumer.assign([TopicPartition(t, p, start if (t, p) == tp else self._eager_start(PartitionKey(t, p)))
                             for (t, p) in self._gate.assigned()])
        self._assignment(incremental, eager)

    def _eager_start(self, tp: PartitionKey) -> int:
        """Where a running partition resumes when an eager assign() names it again: where it stands, else where
        the group (exactly-once: the sink) says."""
        position = self._gate.positions().get(tp)
        if position is not None:
            return position
        return self._stored.get(tp, OFFSET_BEGINNING) if self._exactly_once else OFFSET_STORED

    def persist(self, offsets: Mapping[PartitionKey, int], marks: Mapping[PartitionKey, ChangeMark]) -> str | None:
        """Commit a change (exactly-once: store it in the sink first, the truth a restart resumes from; the
        group's commit then only feeds lag tools), its mark with it (change_marks). A batch's failed commit of these
        partitions is owed no more: the change moved them."""
        for tp in offsets:
            self._owed.pop(tp, None)
        before = dict(self._marks)
        self._marks.update(marks)
        if self._exactly_once:
            try:
                self._sink.write(offset_statements(self.config.name, offsets))
            except Exception as exc:
                self._marks = before
                return f"storing the new offset in the sink failed ({self._redact(exc)})"
            with self._state_lock:
                self._stored.update(offsets)
            self._commit(offsets)
            return None
        error = self._commit(offsets)
        if error is not None:
            self._marks = before
        return None if error is None else f"committing the new offset failed ({error})"

    # -- rebalance callbacks (poll thread, inside consume()) ---------------------
    def _on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        keys = [PartitionKey(tp.topic, tp.partition) for tp in partitions]
        starts: dict[PartitionKey, int | None] = dict.fromkeys(keys)
        if self._exactly_once:
            stored = self._resume_from_sink(keys, ASSIGN_STORED_DEADLINE_S)
            if stored is None:   # an empty assign, or confluent-kafka assigns them where Kafka says
                self._assignment(lambda: consumer.incremental_assign([]), lambda: consumer.assign([]))
                if not self._fatal:
                    self._held.update(keys)   # the group gave them to us: start them once the sink answers
                    self._set_status(StreamStatus.RUNNING)   # running, and the error says why they wait: at once
                return
            starts = {key: stored.get(key, OFFSET_BEGINNING) for key in keys}
        self._start_partitions(consumer, partitions, starts)

    def _start_partitions(self, consumer: Consumer, partitions: list[TopicPartition],
                          starts: Mapping[PartitionKey, int | None]) -> None:
        """Assign `partitions` to the consumer at their starts (or a waiting change's target), the gate told."""
        keys = [PartitionKey(tp.topic, tp.partition) for tp in partitions]
        offsets = self._gate.on_assign(starts, self._committed(sorted(keys)))   # where they stand, and our marks
        for tp, key in zip(partitions, keys, strict=True):
            offset = offsets[key]
            if offset is not None:
                tp.offset = offset
        try:
            self._assignment(lambda: consumer.incremental_assign(partitions), lambda: consumer.assign(partitions))
        except KafkaException as exc:
            # The group thinks these partitions are ours: leave it (from the poll loop, not from
            # inside the callback) so they go to another member, and say why.
            self._gate.assign_failed(keys)
            self._fatal = f"assigning {_tps_text(partitions)} failed: {self._redact(exc)}"
            return
        self._gate.after_assign()
        self._set_status(StreamStatus.RUNNING)

    def _committed(self, keys: list[PartitionKey]) -> dict[PartitionKey, Committed]:
        """The group's committed offsets of partitions being assigned, with their change marks (one batched
        request, in the rebalance callback: where they stand, what a waiting change is judged against). Empty
        when unread."""
        if not keys:
            return {}
        try:
            found = self._live_consumer().committed([TopicPartition(*tp) for tp in keys],
                                                    timeout=ASSIGN_STORED_DEADLINE_S)
        except KafkaException as exc:
            log.warning("stream %s: reading the committed offsets of %s failed: %s", self.config.name,
                        _keys_text(keys), self._redact(exc))
            return {}
        out = {}
        for tp in found:
            key = PartitionKey(tp.topic, tp.partition)
            mark = self._mark_key.decode(key, tp.metadata) if tp.error is None else None   # foreign: None
            if mark is not None:
                self._marks[key] = mark   # carried on: this process's commits must not erase it
            out[key] = Committed(tp.offset if tp.error is None and tp.offset >= 0 else None, mark)
        return out

    def _resume_from_sink(self, keys: list[PartitionKey], deadline_s: float) -> dict[PartitionKey, int] | None:
        """Exactly-once: the sink's stored offsets are the truth (ahead of the group's commit after a crash,
        behind it after a snapshot restore); a partition the graph holds nothing of starts at the beginning.
        Read within `deadline_s` while the sink fails transiently; None when it could not be read: a transient
        failure is shown as the stream's error (held partitions wait for the sink), any other fails the stream."""
        try:
            found = read_stored_offsets_within(self._sink, self.config.name, keys, deadline_s=deadline_s)
        except Exception as exc:
            reason = f"reading the offsets stored in the sink for {_keys_text(keys)} failed: {self._redact(exc)}"
            if classify(exc) is not Fault.TRANSIENT:
                self._fatal = reason
            else:
                self._next_held_try = time.monotonic() + HELD_RETRY_S
                if self._held_error is None:   # the first failure is shown until the sink answers
                    log.warning("stream %s: %s; the partitions wait, asked again every %g s", self.config.name,
                                reason, HELD_RETRY_S)
                    self._held_error = f"{reason}; its partitions wait for the sink"
            return None
        stored = {PartitionKey(*tp): offset for tp, offset in found.items()}
        with self._state_lock:
            for key in keys:
                if key in stored:
                    self._stored[key] = stored[key]
                else:
                    self._stored.pop(key, None)
        self._commit_stored.update(key for key in keys if key in stored)
        note_resume(self, keys, stored)
        return stored

    def _follow_sink(self) -> None:
        """Exactly-once, after an assignment: commit what the sink stores, so the group's offsets (what lag tools
        read) are not left behind it by a crash between a batch's write and its commit, with nothing more to
        read. Between batches, not in the rebalance callback; a failed commit is not retried (the next batch's
        commit carries it). First, where the sink resumed a partition elsewhere than the group's commit, say so."""
        if self._resumed:
            resumed, self._resumed = self._resumed, {}
            explain_resume(self, resumed)
        if not self._commit_stored:
            return
        tps, self._commit_stored = self._commit_stored, set()
        assigned = self._gate.assigned()
        with self._state_lock:   # as stored now: a change applied at the assignment stored its own offset
            offsets = {tp: self._stored[tp] for tp in tps if tp in assigned and tp in self._stored}
        self._commit(offsets, deadline_s=0.0)

    def _start_held(self) -> None:
        """Between batches: ask the sink again for the stored offsets of the partitions held back; once it
        answers, start them there and clear the error."""
        if not self._held or time.monotonic() < self._next_held_try:
            return
        self._next_held_try = time.monotonic() + HELD_RETRY_S
        keys = sorted(self._held)
        stored = self._resume_from_sink(keys, 0.0)
        if stored is None:
            self._set_status(self.status)   # the error says so (a non-transient one fails it: the poll loop sees _fatal)
            return
        self._held.clear()
        log.info("stream %s: the sink answers again; starting %s", self.config.name, _keys_text(keys))
        self._held_error = None
        starts = {key: stored.get(key, OFFSET_BEGINNING) for key in keys}
        consumer = self._live_consumer()
        if self._incremental:
            self._start_partitions(consumer, [TopicPartition(t, p) for t, p in keys], starts)
        else:   # eager: the whole assignment, the running partitions where they stand
            running = self._gate.assigned()
            self._start_partitions(consumer, [TopicPartition(t, p) for t, p in sorted(running | set(keys))],
                                   {**{tp: self._eager_start(tp) for tp in running}, **starts})
        self._set_status(self.status)

    def _on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        """Give the partitions up: their uncollected messages leave the batch (uncommitted, the next
        owner reads them again), and what this consumer knew of their positions is forgotten."""
        revoked = {PartitionKey(tp.topic, tp.partition) for tp in partitions}
        self._batch[:] = [m for m in self._batch if (m.topic(), m.partition()) not in revoked]
        self._gate.on_revoke(revoked)
        started = [tp for tp in partitions if (tp.topic, tp.partition) not in self._held]   # held: never assigned
        self._held -= revoked
        if not self._held and self._held_error:
            self._held_error = None
            self._set_status(self.status)
        with self._state_lock:   # the next owner may move them: read again at the next assignment
            for tp in revoked:
                self._stored.pop(tp, None)
                self._resumed.pop(tp, None)
                self._marks.pop(tp, None)
                self._owed.pop(tp, None)
        try:
            self._assignment(lambda: consumer.incremental_unassign(started), consumer.unassign)
        except KafkaException:
            pass

    _on_lost = _on_revoke

    def _rebalance(self, callback: Callable[[Consumer, list[TopicPartition]], None]
                   ) -> Callable[[Consumer, list[TopicPartition]], None]:
        """A rebalance callback, marked while it runs: a commit inside it is made directly (commits.py)."""
        def run(consumer: Consumer, partitions: list[TopicPartition]) -> None:
            self._rebalancing = True
            try:
                callback(consumer, partitions)
            finally:
                self._rebalancing = False
        return run

    def _assignment(self, incremental: Callable[[], None], eager: Callable[[], None]) -> None:
        """Change the assignment the way the group's protocol wants; learn the protocol from a refusal."""
        try:
            (incremental if self._incremental else eager)()
        except KafkaException as exc:
            error = exc.args[0] if exc.args else None
            if not isinstance(error, KafkaError) or error.code() != KafkaError._STATE:
                raise
            self._incremental = not self._incremental
            log.info("stream %s: the group runs the %s protocol", self.config.name,
                     "incremental" if self._incremental else "eager")
            (incremental if self._incremental else eager)()

    def _decide_resets(self) -> None:
        """Partitions librdkafka found no offset to fetch from (data_loss.py): go on where the stream's
        auto.offset.reset says, counting the records that left the log on the way (or fail, on_data_loss stop)."""
        for tp, at in list(self._resets.items()):
            if tp not in self._gate.assigned():
                del self._resets[tp]
                continue
            watermarks = None
            if at >= 0 and self._outage:
                continue   # asked once the cluster answers again
            if at >= 0:
                try:
                    watermarks = self._live_consumer().get_watermark_offsets(
                        TopicPartition(*tp), timeout=RESET_WATERMARKS_TIMEOUT_S, cached=False)
                except KafkaException as exc:
                    log.warning("stream %s: %s:%d: offset %d is out of range; its watermarks: %s", self.config.name,
                                tp.topic, tp.partition, at, self._redact(exc))
            decision = decide_reset(tp, at, watermarks, self._reset_policy, self.config.on_data_loss)
            known = self._gate.positions().get(tp)
            if at < 0 and known is not None and known >= 0:
                # "nothing committed", from a committed-offset lookup an explicit start raced (KIP-848's
                # incremental assignment): the partition goes on from where the stream stands
                decision = ResetDecision(start=known)
            if decision.fail:
                self._fatal = decision.fail
                return
            if decision.start is None:
                continue   # the watermarks did not answer: asked again before the next batch
            del self._resets[tp]
            if decision.lost is not None:
                log.warning("stream %s: %s; going on from %d", self.config.name, decision.lost.describe(),
                            decision.start)
                self._events.on_lost(decision.lost)
            if not self.seek(tp, decision.start):
                self.reassign(tp, decision.start)
            if decision.start >= 0:
                self._gate.rewound({tp: decision.start})
            if decision.lost is not None:   # the group's offset leaves the records that are gone (lag tools)
                self._commit({tp: decision.start}, deadline_s=0.0)

    def _on_error(self, error: KafkaError) -> None:
        """librdkafka's client-level errors: a suspected outage is confirmed by a probe (_check_cluster)."""
        text = self._redact(error.str())
        log.warning("stream %s: kafka: %s", self.config.name, text)
        if error.code() == KafkaError._AUTHENTICATION:
            self._suspect = f"SASL authentication failed: {text}"
        elif error.code() in UNREACHABLE:
            self._suspect = f"all brokers down since {{since}}: {text}"

    def _outage_confirmed(self) -> bool:
        """While a commit waits or is retried: probe the cluster as the loop does (the error callback that
        hints at an outage runs only inside consume()); give up once no broker answers."""
        if self._suspect is None and self._outage is None:
            self._suspect = "all brokers down since {since}: no broker answers while a commit waits"
        self._check_cluster()
        return self._outage is not None

    def _check_cluster(self) -> None:
        """While an outage is suspected, ask the cluster (at most once a second) whether it answers.

        One unreachable broker of several is not an outage: the status says so
        only when no broker answers, and clears by itself when one does again.
        """
        if not (self._suspect or self._outage) or time.monotonic() < self._next_probe:
            return
        self._next_probe = time.monotonic() + OUTAGE_PROBE_S
        try:
            self._live_consumer().list_topics(timeout=OUTAGE_PROBE_TIMEOUT_S)
        except KafkaException:
            if self._suspect:
                self._outage_since = self._outage_since or datetime.now(UTC)
                self._outage = self._suspect.replace("{since}", self._outage_since.strftime("%Y-%m-%dT%H:%M:%SZ"))
                self._suspect = None
                self._set_status(self.status, self._outage)
                self._events.on_outage(self._outage_since)
            return
        self._suspect = None
        if self._outage:
            log.info("stream %s: the cluster answers again (%s)", self.config.name, self._outage)
            self._outage = self._outage_since = None
            self._set_status(self.status, None)
            self._events.on_outage(None)

    # -- state ----------------------------------------------------------------
    def _set_status(self, status: StreamStatus, error: str | None = None) -> None:
        if error is None and status != StreamStatus.STOPPED:
            error = self._outage or self._held_error  # an outage stays visible until the cluster/sink answers
        if self.status == status and self.error == error:
            return
        self.status, self.error = status, error
        self._events.on_status(status, error)

    def _fail(self, reason: str) -> None:
        self._close_consumer()
        self._set_status(StreamStatus.ERROR, reason)

    def _close_consumer(self) -> None:
        if self._dead_letters is not None:
            self._dead_letters.close()
        if self._consumer is None:
            return
        try:
            self._consumer.close()
        except (KafkaException, RuntimeError) as exc:
            log.warning("stream %s: close failed: %s", self.config.name, self._redact(exc))
        self._consumer = None
        self._gate.lost_consumer()

    def _redact(self, value: object) -> str:
        return redact(str(value), self._secrets)

    def _live_consumer(self) -> Consumer:
        """The consumer, which the poll thread alone uses between opening and closing it."""
        if self._consumer is None:
            raise StreamStateError(f"stream {self.config.name!r}: its consumer is closed")
        return self._consumer


def _first_of_each_partition(batch: list[KafkaMessage]) -> tuple[list[KafkaMessage], list[KafkaMessage]]:
    """The first record of each partition of `batch`, and the rest (each partition's records keep their order)."""
    first: list[KafkaMessage] = []
    rest: list[KafkaMessage] = []
    seen: set[PartitionKey] = set()
    for msg in batch:
        key = record_key(msg)
        if key in seen:
            rest.append(msg)
        else:
            seen.add(key)
            first.append(msg)
    return first, rest


def _next_offsets(batch: Sequence[KafkaMessage]) -> dict[PartitionKey, int]:
    """The offset after each partition's last message: what a commit of `batch` stores."""
    return {record_key(m): message_offset(m) + 1 for m in batch}


def _first_offsets(batch: Sequence[KafkaMessage]) -> dict[PartitionKey, int]:
    first: dict[PartitionKey, int] = {}
    for m in batch:
        first.setdefault(record_key(m), message_offset(m))
    return first


def _tps_text(partitions: list[TopicPartition]) -> str:
    return _keys_text([PartitionKey(tp.topic, tp.partition) for tp in partitions])


def _keys_text(keys: Sequence[PartitionKey]) -> str:
    return ", ".join(f"{t}:{p}" for t, p in keys)


def _first_offsets_text(batch: Sequence[KafkaMessage]) -> str:
    return ", ".join(f"{t}:{p}@{o}" for (t, p), o in sorted(_first_offsets(batch).items()))
