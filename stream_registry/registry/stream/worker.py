"""One running stream: a confluent-kafka consumer and the one thread that polls it.

The worker is the loop; parts with one job each own the rest, all on the poll
thread, sharing a PollContext (poll_context.py: config, events, consumer, the
offset gate, the sink's stored offsets):

- assignment.py: the partitions held and what happens at assign/revoke (start
  points, resume from the sink, held-back partitions, data loss);
- batch_writer.py: the delivery of a batch (transform, write, retries, set-aside
  messages, realignment, the first-record split after an offset change);
- group_commits.py: the group's commits (bounded, owed, marked);
- health.py: status, error, cluster outage;
- offset_gate.py: offset changes, the one place a partition's status is decided.
  The worker is its consumer port (seek, reassign, persist), handing each to the
  part that owns it.

Every librdkafka call for the consumer happens on the poll thread. Other threads
hand it requests (offset changes, cancels, stop) through a queue it drains
between batches, so nothing races the poll loop, and wake it out of consume() at
once (kafka/consumer_wake.py; where that is not available, within one consume slice).
"""
from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable, Mapping

from confluent_kafka import Consumer, KafkaException
from confluent_kafka import Message as KafkaMessage

from ...config import CONSUMER_DEFAULTS, StreamConfig
from ...errors import StreamError
from ...kafka.client import new_consumer
from ...kafka.consumer_wake import ConsumerWake
from ...kafka.embedded_fit import embedded_fit
from ...kafka.fetch_wait import FetchWait
from ...model import (
    DEFAULT_RETRY,
    GateEvent,
    MoveState,
    PartitionKey,
    PendingMove,
    RetryPolicy,
    StreamStatus,
    WorkerSnapshot,
)
from .assignment import Assignment
from .batch_writer import BatchWriter, Outcome
from .calls_coming import CallsComing
from .change_marks import ChangeMark, MarkKey
from .change_records import ChangeRecords
from .collector import BatchCollector
from .control_requests import AbandonRequest as _AbandonRequest
from .control_requests import CancelRequest as _CancelRequest
from .control_requests import OffsetRequest as _OffsetRequest
from .group_commits import GroupCommits
from .health import ClusterProbe, Health
from .offset_gate import OffsetGate
from .poll_context import PollContext
from .realign import explain_resume
from .stream_events import StreamEvents

log = logging.getLogger("mgstreams.worker")

OUTAGE_PROBE_TIMEOUT_S = 0.5
COMMIT_WAIT_SLICE_S = 0.05  # a commit in flight is waited for in slices this long (a stop is seen between them)


class StreamWorker:
    """The poll loop of one stream over its parts (see the module docstring)."""

    def __init__(self, config: StreamConfig, transformation: Callable, sink, *,
                 pending: Mapping[PartitionKey, PendingMove] | None = None, events: StreamEvents | None = None,
                 retry: RetryPolicy = DEFAULT_RETRY, marks: MarkKey | None = None):
        self.config = config
        self._sink = sink
        events = events or StreamEvents()
        self._ctx = ctx = PollContext(config, events)
        self._control: queue.SimpleQueue = queue.SimpleQueue()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._started = threading.Event()
        self._start_error: BaseException | None = None
        self._wake = ConsumerWake()   # the consumer's: made with it, closed before it (poll thread)
        self._fetch_wait = FetchWait()   # short while a change is coming (kafka/fetch_wait.py): made, closed as _wake
        self._records = ChangeRecords()   # changes handed before their record was durable (RecordsMeanwhile)
        # offset calls the host is resolving (any thread): partitions assigned meanwhile wait (calls_coming.py); the
        # consumer's fetches are held short meanwhile (kafka/fetch_wait.py)
        self.calls = CallsComing(wake=lambda: self._wake.wake(), on_coming=lambda: self._fetch_wait.lower())
        self.health = Health(config.name, events, ClusterProbe(config.client_config(), config.secret_values(),
                                                               OUTAGE_PROBE_TIMEOUT_S), ctx.redact)
        self.commits = GroupCommits(config.name, ctx.consumer, give_up=self.health.outage_confirmed,
                                    in_rebalance=lambda: self.assignment.rebalancing, redact=ctx.redact,
                                    mark_key=marks,
                                    pipelined=True,   # a batch's commit is answered while the next one is read
                                    cadence_s=config.commit_interval_ms / 1000,   # commit.interval.ms (0: each batch)
                                    # batch commits wait while an offset call is coming, or its change waits to be taken
                                    hold=lambda: self.calls.any() or not self._control.empty())
        self.assignment = Assignment(ctx, self.health, self.commits, sink=sink,
                                     on_revoked=self._on_revoked, before_assign=self._drain_control,
                                     coming=self.calls.any)
        self.writer = BatchWriter(ctx, transformation, sink, retry=retry, commits=self.commits,
                                  assignment=self.assignment, stop=self._stop, fail=self._fail, quiet=self._quiet)
        ctx.gate = self._gate = OffsetGate(self, self._on_gate_event, pending=pending)
        self._collector = BatchCollector(ctx, self.health, self.assignment, self._control, self._stop,
                                         deferred=lambda: self.commits.deferred or self.writer.behind)

    @property
    def status(self) -> StreamStatus:
        return self.health.status

    @property
    def error(self) -> str | None:
        return self.health.error

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
        self._wake.wake()
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
        return WorkerSnapshot(assigned=self._gate.assigned(), positions=self._gate.positions(),
                              pending=self._gate.waiting(), stored=self._ctx.stored.copy())

    def request_offsets(self, change_id: int, offsets: Mapping[PartitionKey, int],
                        onward: frozenset[PartitionKey] = frozenset(), supersedes: int | None = None,
                        recorded: bool = True) -> None:
        """Hand one call's offsets to the poll thread's gate (`onward`: those never moved back; `supersedes`: a
        change whose waiting moves end, a revert's); what becomes of them comes as on_change events.
        `recorded=False`: the host is still committing the change's record; recorded() follows, and until it
        said ok nothing of the change is persisted (the gate may seek meanwhile: the fetch overlaps the fsync)."""
        self._fetch_wait.lower()
        if not recorded:
            self._records.handed(change_id)
        self._control.put(_OffsetRequest(change_id, dict(offsets), frozenset(onward), supersedes))
        self._wake.wake()

    def recorded(self, change_id: int, ok: bool) -> None:
        """The host's record of a change handed with recorded=False is durable (ok), or was not written: then the
        gate drops the change (moved back if it was moved), never applied."""
        self._records.recorded(change_id, ok)
        if not ok:
            self._control.put(_AbandonRequest(change_id))
            self._wake.wake()

    def forget(self, change_id: int, tps: frozenset[PartitionKey]) -> None:
        """Another task persisted the change on `tps` (task_runner): the gate drops it, from this thread."""
        self._gate.forget(change_id, tps)

    def cancel_pending(self, timeout: float, up_to: int | None = None) -> list[GateEvent] | None:
        """Have the poll thread cancel every change not persisted yet; the cancelled ones, or None when it did
        not get to it within `timeout` (it still will, between batches). A change persisted before the cancel
        was reported (on_change) before this returns. `up_to`: only the changes of calls up to that change id."""
        request = _CancelRequest(up_to)
        self._control.put(request)
        self._wake.wake()
        return list(request.cancelled) if request.done.wait(max(timeout, 0.0)) else None

    # -- the poll thread ----------------------------------------------------
    def _run(self) -> None:
        try:
            self._ctx.open_consumer = self._open_consumer()
        except BaseException as exc:  # reported to start()'s caller
            self._start_error = exc
            self._started.set()
            return
        self.health.set_status(StreamStatus.STARTING)
        self._started.set()
        # persisted before a host died?
        self._gate.reconcile(self.assignment.read_committed(sorted(self._gate.waiting())) or {})
        trimmed = getattr(self._sink, "trimmed", 0)
        if trimmed:
            log.warning("stream %s: the sink's file ended in a batch a kill left unfinished: %d byte(s) cut on "
                        "open (%s)", self.config.name, trimmed, self._sink)
        try:
            while not self._stop.is_set():
                if self.commits.in_flight:   # any call on the consumer would wait for it (commits.py)
                    self.commits.await_in_flight(COMMIT_WAIT_SLICE_S)
                    continue
                if not self._written_unless_quiet():
                    return   # went to ERROR; consumer already closed
                self._between_batches()
                batch = self._collect_batch()
                if self.health.fatal:
                    self._fail(self.health.fatal)
                    return
                if batch:   # the history has a resume's realignment before its records are written (realign.py)
                    explain_resume(self._ctx, self.assignment.resumed)
                if not batch:   # idle: what the cadence deferred committed (held while a control request waits:
                    # group_commits), and answered now (one in flight while consume() waits on an idle consumer was
                    # seen not to be answered until it returned)
                    if self.writer.finish() is Outcome.FAILED:   # the write in flight first (write_behind.py)
                        return
                    self.commits.flush()
                    self.commits.settle()
                elif not self._collector.deliver(batch, self.writer):
                    return  # went to ERROR; consumer already closed
                self.writer.report_stats()
        except BaseException as exc:  # never let a stream thread die silently
            log.exception("stream %s: poll loop failed", self.config.name)
            self._fail(f"poll loop failed: {exc}")
            return
        self.writer.report_stats(final=True)
        self._close_consumer()
        self.health.set_status(StreamStatus.STOPPED)

    def _quiet(self) -> bool:
        """Nothing between batches would act (no control request, no offset change under way, no partition held
        or to reset, no call coming, no stop): a batch's write may stay in flight meanwhile (write_behind.py)."""
        return self._control.empty() and not self._stop.is_set() and not self._gate.moved and \
            not self._gate.waiting() and not self.assignment.held and not self.assignment.resets and \
            not self.calls.any()

    def _written_unless_quiet(self) -> bool:
        """Before the work between batches: the write in flight done, unless nothing would act
        (write_behind.py). False when the stream went to ERROR."""
        return not self.writer.behind or self._quiet() or self.writer.finish() is not Outcome.FAILED

    def _on_revoked(self, revoked: set[PartitionKey]) -> None:
        """A revoke's first step (in its callback): the write in flight done, committed with what the cadence
        deferred while the partitions are ours (a failed one is read again: the messages of its partitions
        collected after it leave the batch, write_behind.py); the revoked partitions' messages leave it too."""
        self._collector.drop_revoked(revoked | self.writer.finish_now())

    def _between_batches(self) -> None:
        """Each part's turn between batches, in this order."""
        self._drain_control()
        self._fetch_wait.relax(busy=self._gate.moved or self.calls.any())
        self._gate.retry()
        self.assignment.start_held()
        self.assignment.follow_sink()
        self.commits.answered()   # a batch commit in flight that failed is owed now, not at the next batch
        self.commits.retry_owed(self._gate.assigned())
        self.health.check_cluster()
        self.assignment.decide_resets()

    def _open_consumer(self) -> Consumer:
        secrets = self.config.secret_values()
        conf = {
            **CONSUMER_DEFAULTS,
            **embedded_fit(self.config.client_config(), secrets),   # the embedded cluster's timings
            **self.config.client_config(),
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "enable.partition.eof": False,
            "auto.offset.reset": "error",   # never moved silently: data_loss.py decides, and counts what left the log
            "error_cb": self.health.on_error,
            "logger": logging.getLogger("mgstreams.librdkafka"),
        }
        consumer = new_consumer(conf, secrets)
        try:
            consumer.subscribe(list(self.config.topics), **self.assignment.callbacks())
        except (KafkaException, ValueError, TypeError, RuntimeError) as exc:
            consumer.close()
            raise StreamError(f"topics: the Kafka client cannot subscribe: {self._ctx.redact(exc)}") from None
        self._wake = ConsumerWake.of(consumer)
        self._fetch_wait = FetchWait.of(consumer, conf.get("fetch.wait.max.ms"))
        return consumer

    def _collect_batch(self, carried: list[KafkaMessage] | None = None) -> list[KafkaMessage]:
        return self._collector.collect(carried)   # a method of its own: bench/stream_profile.py times it

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
            elif isinstance(request, _AbandonRequest):
                self._gate.abandon(request.change_id)
            else:
                self._gate.request(request.change_id, request.offsets, request.onward, request.supersedes)

    def _on_gate_event(self, event: GateEvent) -> None:
        """What the host records: a persisted change, why a change is held back, one that was superseded (the
        host keeps its pending row until told). A cancel is answered to the host's own request."""
        if event.state in (MoveState.PERSISTED, MoveState.SUPERSEDED, MoveState.CANCELLED) or \
                (event.state == MoveState.WAITING and event.reason):
            self._ctx.events.on_change(event)

    # -- the gate's consumer port (poll thread), each handed to its part ----------
    def seek(self, tp: PartitionKey, offset: int) -> bool:
        return self.assignment.seek(tp, offset)

    def reassign(self, tp: PartitionKey, offset: int | None) -> None:
        self.assignment.reassign(tp, offset)

    def persist(self, offsets: Mapping[PartitionKey, int], marks: Mapping[PartitionKey, ChangeMark]) -> str | None:
        """Commit a change, its mark with it (exactly-once: stored in the sink first): group_commits.persist.
        Not before the host's record of each change is durable (RECORD_WAIT_S at most: else it fails, and the
        gate moves the partitions back and retries)."""
        not_yet = self._records.why_not(mark.change_id for mark in marks.values())
        if not_yet is not None:
            return not_yet
        return self.commits.persist(offsets, marks, store=self.writer.store_offsets if self._ctx.exactly_once
                                    else None)

    # -- the end ----------------------------------------------------------------
    def _fail(self, reason: str) -> None:
        self._close_consumer()
        self.health.set_status(StreamStatus.ERROR, reason)

    def _close_consumer(self) -> None:
        self.writer.close()
        consumer = self._ctx.open_consumer
        if consumer is None:
            return
        self.commits.flush(closing=True)    # what the cadence deferred, committed
        self.commits.settle()   # the last batch's commit answered (owed is forgotten with the consumer)
        self._wake.close()   # its queue handle goes before the consumer does
        self._fetch_wait.close()
        if self.commits.in_flight:   # it still waits for the cluster: close() would wait for it (commits.py)
            log.warning("stream %s: a commit still waits for the group coordinator: stopping without it; the "
                        "consumer is closed once it returns, the uncommitted records are read again at the next "
                        "start", self.config.name)
            self.commits.close_after_commit(consumer)
        else:
            try:
                consumer.close()   # its last rebalance callbacks run inside, the consumer still set
            except (KafkaException, RuntimeError) as exc:
                log.warning("stream %s: close failed: %s", self.config.name, self._ctx.redact(exc))
        self._ctx.open_consumer = None
        self._gate.lost_consumer()
