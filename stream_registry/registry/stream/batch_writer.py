"""The delivery of one batch: transform, write to the sink, commit; retried, set aside or realigned.

At-least-once: a failed batch is retried from memory with backoff and never
committed; when retries run out the stream goes to ERROR (the worker leaves the
group), so a restart resumes at the failed batch. With errors.tolerance 'all',
the messages a batch fails on are found and set aside (poison.py,
dead_letter.py) and the rest is written. What a failure leads to is decided by
its type (sink_faults.classify): a transient one is retried, one the messages
may have caused is bisected, one of the sink as a whole fails the stream at once.

Exactly-once: each chunk of a batch is written with the offsets that follow it
and a compare-and-set on the offsets it continues from (`expect`: the context's
view of what the sink stores). A retried chunk whose first attempt was applied
(a lost acknowledgement) is ALREADY_APPLIED, never applied twice. A
StoredOffsetsConflict (a zombie writer, a restored snapshot, a cut-back file)
drops the batch uncommitted and seeks its partitions to what the sink stores: a
realignment, logged and sent to the host (realign.py), never silent.

The first batch after an offset change goes in two: the first record of each of
its partitions, then the rest, so the change shows in the graph as soon as it
is applied, not once the whole batch is. When a moved partition is not in it yet
(its broker's fetch came later), the rest waits for one more collection
(deliver_first): the late partition's first record goes before it.
"""
from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from enum import Enum
from typing import Any

from confluent_kafka import KafkaException, TopicPartition
from confluent_kafka import Message as KafkaMessage

from ...config import ErrorsTolerance
from ...errors import StoredOffsetsConflict
from ...formats import Decoder
from ...graph.offset_store import mark_statements, offset_statements
from ...graph.sink_faults import Fault, classify
from ...graph.statement import Statements
from ...graph.transform import Messages, decode_all, run_transformation
from ...kafka.messages import message_offset, partition_key, record_key
from ...model import PartitionKey, RetryPolicy, SetAside
from .assignment import OFFSET_BEGINNING, Assignment
from .batch_stats import BatchStats
from .dead_letter import DeadLetterQueue
from .group_commits import GroupCommits
from .poison import BatchDelivery
from .poll_context import PollContext
from .realign import explain_conflict
from .write_behind import WriteBehind

log = logging.getLogger("mgstreams.worker")

STATS_EVERY_S = 1.0         # batch counts are reported at most this often (and when the stream stops)


class Outcome(Enum):
    """What became of a batch given to process()."""
    WRITTEN = "written"   # written, and committed (or its commit owed)
    AGAIN = "again"       # sought back (a stop during its retries, the sink's realign): its messages come again
    FAILED = "failed"     # the stream went to ERROR


class BatchWriter:
    """Batches from the consumer to the sink (see the module docstring). `fail(reason)` ends the stream in
    ERROR; `stop` is the worker's stop request (a retry's backoff ends at it); `quiet` says whether a batch's
    write may stay in flight while the next is read (write_behind.py; never, unless the worker says so)."""

    def __init__(self, ctx: PollContext, transformation: Callable, sink, *, retry: RetryPolicy,
                 commits: GroupCommits, assignment: Assignment, stop: threading.Event,
                 fail: Callable[[str], None], quiet: Callable[[], bool] = lambda: False):
        config = ctx.config
        self._ctx, self._transformation, self._sink, self._retry = ctx, transformation, sink, retry
        self._commits, self._assignment, self._stop, self._fail = commits, assignment, stop, fail
        self._tolerant = config.errors_tolerance == ErrorsTolerance.ALL
        decoder = Decoder.for_stream(config)   # key.format / value.format (stream_registry.formats)
        self._decoder = decoder if decoder.active else None   # None: bytes as they are, nothing asked per record
        self._dead_letters = DeadLetterQueue(config, ctx.redact) if config.dead_letter_topic else None
        self.stats = BatchStats()
        self._stats_reported_at = 0.0
        self._quiet = quiet
        # write_behind.py: at-least-once, nothing set aside, a sink that prepares its writes apart from sending them
        self._behind = WriteBehind(config.name) if not ctx.exactly_once and not self._tolerant and \
            callable(getattr(sink, "write_prepared", None)) else None

    def deliver(self, batch: list[KafkaMessage], after_move: bool) -> bool:
        """Process a batch; the first one after an offset change (`after_move`) in two (the module docstring).
        False when the stream went to ERROR."""
        first, rest = first_of_each_partition(batch) if after_move else (batch, [])
        outcome = self.process(first)
        if outcome is Outcome.WRITTEN and rest:
            outcome = self.process(rest)
        # AGAIN after the first part: its seeks covered every partition of the rest, which comes again too
        return outcome is not Outcome.FAILED

    def deliver_first(self, batch: list[KafkaMessage]) -> tuple[bool, list[KafkaMessage]]:
        """The first batch after an offset change, while a moved partition has not delivered from its target yet:
        only the first record of each partition is written now; the rest is given back (none of it committed), to
        go with the next batch, so a late partition's first record is not written behind it. (False, []) when
        the stream went to ERROR; after a rewind (AGAIN) nothing is given back: it all comes again."""
        first, rest = first_of_each_partition(batch)
        outcome = self.process(first)
        if outcome is Outcome.WRITTEN:
            return True, rest
        return outcome is not Outcome.FAILED, []

    def process(self, batch: list[KafkaMessage]) -> Outcome:
        """Transform, write, commit; or, writing behind (write_behind.py), transform and prepare it, then hand its
        write over once the write before it is done (WRITTEN: handed; committed once written)."""
        if self._behind is not None and self._quiet() and not self._stop.is_set():
            return self._process_behind(batch)
        outcome, previous = self._finish()
        if outcome is not Outcome.WRITTEN:
            return self._dropped(outcome, previous, batch)
        return self._process_now(batch)

    @property
    def behind(self) -> bool:
        """A batch's write is in flight (write_behind.py)."""
        return self._behind is not None and self._behind.busy

    def finish(self) -> Outcome:
        """The write in flight done (write_behind.py): committed once written; a failed one written again here,
        with the stream's retries (AGAIN: sought back, as when stopping during them; FAILED: the stream went to
        ERROR). WRITTEN when nothing was in flight."""
        return self._finish()[0]

    def finish_now(self) -> set[PartitionKey]:
        """The write in flight done where no retry can be made (a rebalance callback, the close): committed
        once written; a failed one's partitions sought back to its first offsets and returned (read again: the
        messages of theirs collected after it must go)."""
        flight = self._behind.take() if self._behind is not None else None
        if flight is None:
            return set()
        if flight.error is None:
            self._written(flight.batch, flight.started)
            return set()
        log.warning("stream %s: the batch at %s failed, it is read again: %s", self._ctx.name,
                    first_offsets_text(flight.batch), self._ctx.redact(flight.error))
        self._rewind(flight.batch)
        return set(first_offsets(flight.batch))

    def _finish(self) -> tuple[Outcome, Sequence[KafkaMessage]]:
        flight = self._behind.take() if self._behind is not None else None
        if flight is None:
            return Outcome.WRITTEN, ()
        if flight.error is None:
            self._written(flight.batch, flight.started)
            return Outcome.WRITTEN, flight.batch
        return self._process_now(flight.batch, failed=flight.error), flight.batch

    def _process_behind(self, batch: list[KafkaMessage]) -> Outcome:
        started = time.perf_counter()
        try:
            prepared = self._sink.prepare(self._statements(batch))   # while the write before is in flight
        except Exception:   # retried or reported by _process_now, once the write before is done
            prepared = None
        outcome, previous = self._finish()
        if outcome is not Outcome.WRITTEN:
            return self._dropped(outcome, previous, batch)
        if prepared is None:
            return self._process_now(batch)
        assert self._behind is not None
        self._behind.start(batch, started, lambda: self._sink.write_prepared(prepared))
        return Outcome.WRITTEN

    def _dropped(self, outcome: Outcome, previous: Sequence[KafkaMessage], batch: list[KafkaMessage]) -> Outcome:
        """The batch written behind before `batch` was not written: sought back (AGAIN), `batch` is read again
        too, from its first offsets where the one before did not hold its partition; or the stream went to
        ERROR (FAILED: nothing more to do)."""
        if outcome is Outcome.AGAIN:
            self._rewind([*previous, *batch])   # each partition's first offset in the two: the earlier batch's
        return outcome

    def _process_now(self, batch: Sequence[KafkaMessage], failed: BaseException | None = None) -> Outcome:
        """Transform, write (retried), commit, on this thread. `failed`: its first attempt's error (written
        behind)."""
        started = time.perf_counter()
        next_offsets = next_offsets_of(batch)
        delivery = BatchDelivery(list(batch), self._write, self._set_aside, tolerate=self._tolerant)
        attempt = 0
        while True:
            try:
                if failed is not None:   # as if delivery.run() had raised it
                    error, failed = failed, None
                    raise error
                delivery.run()   # a retry continues after what an earlier attempt delivered
                if self._ctx.exactly_once and delivery.set_aside:   # stored offsets pass the last ones set aside too
                    self._write_offsets(next_offsets)
                break
            except StoredOffsetsConflict as exc:   # the sink stores other offsets: go on from them
                self._realign(batch, exc)
                return Outcome.AGAIN
            except Exception as exc:  # transformation, sink or dead-letter topic: retry, never skip
                attempt += 1
                reason = self._ctx.redact(exc)
                if classify(exc) is Fault.SINK:   # no batch can be written now: retrying the same one helps not
                    self._rewind(batch)
                    self._fail(f"batch at {first_offsets_text(batch)} failed: {reason}")
                    return Outcome.FAILED
                if attempt >= self._retry.attempts or self._stop.is_set():
                    self._rewind(batch)
                    self._fail(f"batch at {first_offsets_text(batch)} failed {attempt} time(s): {reason}")
                    return Outcome.FAILED
                log.warning("stream %s: batch failed (attempt %d), retrying: %s", self._ctx.name, attempt, reason)
                if self._stop.wait(self._retry.backoff(attempt)):
                    self._rewind(batch)  # stopping: the batch stays uncommitted for the next start
                    return Outcome.AGAIN
        self._written(batch, started, next_offsets)
        return Outcome.WRITTEN

    def _written(self, batch: Sequence[KafkaMessage], started: float,
                 next_offsets: Mapping[PartitionKey, int] | None = None) -> None:
        """A batch was written: committed (the cadence's), the gate told where the stream stands."""
        next_offsets = next_offsets_of(batch) if next_offsets is None else next_offsets
        self._commits.commit_batch(next_offsets, full=len(batch) >= self._ctx.config.batch_size)
        self._ctx.gate.after_batch(next_offsets)
        self.stats = self.stats.add_batch(len(batch), time.perf_counter() - started)

    def report_stats(self, final: bool = False) -> None:
        if self.stats.batches and (final or time.monotonic() - self._stats_reported_at >= STATS_EVERY_S):
            self._stats_reported_at = time.monotonic()
            self._ctx.events.on_stats(self.stats)

    def store_offsets(self, offsets: Mapping[PartitionKey, int], marks: Mapping[PartitionKey, str]) -> None:
        """Exactly-once: an offset change stored in the sink with its signed change marks, in one write (no
        compare-and-set: the change moves it)."""
        self._sink.write([*mark_statements(self._ctx.name, marks), *offset_statements(self._ctx.name, offsets)])
        self._ctx.stored.update(offsets)

    def close(self) -> None:
        self.finish_now()
        if self._dead_letters is not None:
            self._dead_letters.close()

    def _write(self, chunk: Sequence[KafkaMessage]) -> None:
        """Transform and write (part of) a batch; exactly-once, with the offsets that follow it. The
        transformation reads the consumed messages through a Messages made for the chunk (a wrapper per message
        only when it asks for one, or when the stream decodes)."""
        statements = self._statements(chunk)
        if self._ctx.exactly_once:   # the offsets go with the batch, in its transaction or its append
            self._write_offsets(next_offsets_of(chunk), statements)
        else:
            self._sink.write(statements)

    def _statements(self, chunk: Sequence[KafkaMessage]) -> Statements:
        messages = Messages.of_kafka(chunk, self._decoder)
        if self._decoder is not None:   # a record that does not decode is its own fault; an unreachable registry
            decode_all(messages)        # is transient
        return run_transformation(self._transformation, messages)

    def _write_offsets(self, next_offsets: Mapping[PartitionKey, int], statements: Sequence[Any] = ()) -> None:
        """Exactly-once: write `statements` with the offsets that follow them, if the sink still stores what
        this process last knew (`expect`: not the first message's offset, gaps of transaction markers and set-aside
        messages lie between). Applied or already applied (a lost acknowledgement), the stored view moves on, so
        the batch's next chunk expects these offsets. StoredOffsetsConflict when the sink stores others."""
        expect = self._ctx.stored.expect(next_offsets)
        try:
            self._sink.write(Statements.of(statements) + offset_statements(self._ctx.name, next_offsets),
                             expect=expect)
        except StoredOffsetsConflict as exc:   # the view becomes what the sink says it stores
            self._ctx.stored.learn_conflict(list(expect), exc)
            raise
        self._ctx.stored.update(next_offsets)

    def _realign(self, batch: Sequence[KafkaMessage], conflict: StoredOffsetsConflict) -> None:
        """The sink stores other offsets than this process's view (someone else moved them): drop the batch
        uncommitted, take the sink's offsets as the view, and read each of the batch's partitions from them
        (from the beginning where it stores none)."""
        stored = self._ctx.stored.copy()   # _write_offsets took the sink's offsets as the view
        starts = {tp: stored.get(tp, OFFSET_BEGINNING) for tp in first_offsets(batch)}
        assigned = self._ctx.gate.assigned()
        for tp, offset in sorted(starts.items()):
            if tp in assigned:
                self._assignment.move(tp, offset)
        self._ctx.gate.rewound({tp: o for tp, o in starts.items() if o >= 0})
        explain_conflict(self._ctx, conflict, starts)
        log.warning("stream %s: %s; the batch at %s is dropped, the stream goes on from %s", self._ctx.name,
                    self._ctx.redact(conflict), first_offsets_text(batch),
                    ", ".join(f"{t}:{p}@{'beginning' if o < 0 else o}" for (t, p), o in sorted(starts.items())))

    def _set_aside(self, raw: KafkaMessage, error: BaseException) -> None:
        """A message the batch fails on (errors.tolerance 'all'): dead-letter it, or skip it; report it."""
        if self._dead_letters is not None:
            self._dead_letters.send(raw, error)   # raises: the batch is retried, nothing is committed
        key = record_key(raw)
        record = SetAside(topic=key.topic, partition=key.partition, offset=message_offset(raw),
                          error=self._ctx.redact(error), dead_lettered=self._dead_letters is not None)
        log.warning("stream %s: %s %s:%d@%d: %s", self._ctx.name,
                    "dead-lettered" if record.dead_lettered else "skipped", record.topic, record.partition,
                    record.offset, record.error)
        self._ctx.events.on_set_aside([record])

    def _rewind(self, batch: Sequence[KafkaMessage]) -> None:
        """Seek back to the batch's first offsets so the consumer's position tells the truth."""
        first = first_offsets(batch)
        consumer = self._ctx.consumer()
        for (topic, partition), offset in first.items():
            try:
                consumer.seek(TopicPartition(topic, partition, offset))
            except KafkaException:
                pass  # partition no longer ours: its committed offset is still the batch start
        self._ctx.gate.rewound(first)


def first_of_each_partition(batch: list[KafkaMessage]) -> tuple[list[KafkaMessage], list[KafkaMessage]]:
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


def next_offsets_of(batch: Sequence[KafkaMessage]) -> dict[PartitionKey, int]:
    """The offset after each partition's last message: what a commit of `batch` stores (records only: each has
    its topic, partition and offset; read once per message, the keys made once per partition)."""
    last: dict[tuple[Any, Any], Any] = {}   # a record's topic, partition and offset are never None
    for m in batch:
        last[m.topic(), m.partition()] = m.offset()
    return {partition_key(topic, partition): offset + 1 for (topic, partition), offset in last.items()}


def first_offsets(batch: Sequence[KafkaMessage]) -> dict[PartitionKey, int]:
    first: dict[PartitionKey, int] = {}
    for m in batch:
        first.setdefault(record_key(m), message_offset(m))
    return first


def first_offsets_text(batch: Sequence[KafkaMessage]) -> str:
    return ", ".join(f"{t}:{p}@{o}" for (t, p), o in sorted(first_offsets(batch).items()))
