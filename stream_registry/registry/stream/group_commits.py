"""The consumer group's offset commits one stream process makes: bounded, owed, marked.

- Bounded: a synchronous commit waits at most until its deadline (commits.py),
  asking `give_up` (the health's outage probe) between slices. Transient errors (a
  coordinator moving) are retried until the deadline, backing off (COMMIT_RETRY_S
  doubled up to COMMIT_RETRY_MAX_S: a blip is retried at once, a coordinator loading
  for minutes gets about one commit a second); errors only a poll can fix
  (a rebalance, a stale generation) return at once: retrying them here would stall
  the poll thread, often inside a rebalance callback.
- Owed: a batch's offsets whose commit failed are committed again between
  batches, until that succeeds or a later commit carries them: a stream with
  nothing more to read would otherwise leave the group's offset behind what it
  wrote, for good.
- Marked: each commit of a partition carries the mark of the last offset change
  persisted on it (change_marks), so a host that died between a persist and its
  record learns what happened; a partition given up forgets its mark.
- Paced (`cadence_s`, the stream's commit.interval.ms, 500 ms by default; 0: each batch): while a stream
  reads a backlog (full batches), its written batches' offsets are merged and committed at most every
  `cadence_s`, not after every batch: each commit costs the poll thread a wait
  for the coordinator's answer (it calls nothing on the consumer meanwhile). A
  batch that was not full (the stream caught up), a consume() that finds
  nothing, a revoke and a close commit what is deferred at once; an offset change drops what is deferred
  of the partitions it moves. Offsets are still committed only after their
  batch was written; a kill re-reads at most `cadence_s` more of a backlog.
- Held (`hold`: the host announced an offset call, calls_coming.py, or its change waits for the poll thread):
  batch commits wait until the change is taken, so that its commit does not queue behind a batch's (one commit
  at a time: a batch commit started while the call resolves cost the change's commit a coordinator round trip,
  ~1.4 ms of bench/offset_latency.py's 10). The change's persist drops what waits of the partitions it moves;
  the rest is committed once no call is coming.
"""
from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from ...model import PartitionKey
from .change_marks import ChangeMark, MarkKey
from .commits import BoundedCommitter, CommitUnanswered, PendingCommit

log = logging.getLogger("mgstreams.worker")

COMMIT_RETRY_S = 0.05       # the first retry of a transient commit error; each next one waits twice as long,
COMMIT_RETRY_MAX_S = 1.0    # at most this: a coordinator still loading is not asked 20 times a second for 10 s
COMMIT_DEADLINE_S = 10.0    # transient commit errors are retried this long
COMMIT_MIN_WAIT_S = 2.0     # the least a commit's answer is waited for (commits.py; an outage cuts it short)
OWED_RETRY_S = 1.0          # a failed batch commit is tried again between batches, this often
# Commit errors only the next poll can resolve: retrying them in a loop stalls the poll thread.
NEEDS_POLL = frozenset({KafkaError.UNKNOWN_MEMBER_ID, KafkaError.ILLEGAL_GENERATION,
                        KafkaError.REBALANCE_IN_PROGRESS, KafkaError._STATE, KafkaError._NO_OFFSET})
RETRIABLE_COMMIT = frozenset({KafkaError.NOT_COORDINATOR, KafkaError.COORDINATOR_NOT_AVAILABLE,
                              KafkaError.COORDINATOR_LOAD_IN_PROGRESS, KafkaError.REQUEST_TIMED_OUT,
                              KafkaError._TRANSPORT, KafkaError._TIMED_OUT, KafkaError._WAIT_COORD})


class GroupCommits:
    """One consumer's commits (poll thread). `consumer` is the live consumer, `give_up` says an outage is
    confirmed, `in_rebalance` whether the poll thread is inside a rebalance callback (a commit there is made
    directly: commits.py)."""

    def __init__(self, name: str, consumer: Callable[[], Consumer], *, give_up: Callable[[], bool],
                 in_rebalance: Callable[[], bool], redact: Callable[[object], str],
                 committer: BoundedCommitter | None = None, clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep, mark_key: MarkKey | None = None,
                 pipelined: bool = False, cadence_s: float = 0.0, hold: Callable[[], bool] = lambda: False):
        self._name, self._consumer, self._give_up, self._in_rebalance = name, consumer, give_up, in_rebalance
        self._redact, self._clock, self._sleep = redact, clock, sleep
        self._committer = committer or BoundedCommitter(name, clock)   # a commit never holds the poll thread past its deadline
        self.marks: dict[PartitionKey, ChangeMark] = {}   # last change persisted per partition (each commit)
        self._mark_key = mark_key or MarkKey.new()   # none given: no mark written before is believed (change_marks)
        self.owed: dict[PartitionKey, int] = {}   # a batch's offsets whose commit failed: retried between batches
        self._next_owed_try = 0.0
        self._pipelined = pipelined
        self._pending: tuple[dict[PartitionKey, int], PendingCommit, float] | None = None   # a batch's, in flight
        self._cadence_s = cadence_s
        self._deferred: dict[PartitionKey, int] = {}   # written batches' offsets the cadence has not committed yet
        self._last_batch_commit = -cadence_s   # when the last batch commit was made (the clock's)
        self._hold = hold   # an offset call is coming: batch commits wait for its change (the module docstring)

    def commit(self, offsets: Mapping[PartitionKey, int], deadline_s: float = COMMIT_DEADLINE_S) -> str | None:
        """Synchronous commit; None when it succeeded, else the Kafka error as text (see the module docstring).
        A batch commit in flight is answered first (inside a rebalance callback it cannot be: the committer
        refuses this one then, and says so)."""
        if not offsets:
            return None
        self.settle(wait=not self._in_rebalance())
        tps = self._marked(offsets)
        consumer = self._consumer()
        deadline = self._clock() + deadline_s
        return self._until_answered(offsets, deadline, lambda: self._committer.commit(
            consumer, tps, max(deadline - self._clock(), COMMIT_MIN_WAIT_S), give_up=self._give_up,
            direct=self._in_rebalance()))

    def _marked(self, offsets: Mapping[PartitionKey, int]) -> list[TopicPartition]:
        marks = {tp: self._mark_key.encode(tp, mark) for tp, mark in self.marks.items()}   # each carries the last change's
        return [TopicPartition(tp[0], tp[1], o, metadata=marks[tp]) if tp in marks else TopicPartition(tp[0], tp[1], o)
                for tp, o in offsets.items()]

    def _until_answered(self, offsets: Mapping[PartitionKey, int], deadline: float, attempt: Callable[[], Any]
                        ) -> str | None:
        """`attempt()` (a commit's result) until it succeeds, fails for good, or the deadline passes."""
        retry_s = COMMIT_RETRY_S
        while True:
            try:
                result = attempt()
                failed = [tp for tp in result or [] if tp.error is not None]
                if not failed:
                    for tp in offsets:
                        self.owed.pop(tp, None)
                    return None
                raise KafkaException(failed[0].error)
            except CommitUnanswered as exc:   # its outcome is unknown: the next batch's commit carries it
                log.warning("stream %s: commit not answered: %s", self._name, exc)
                return f"{exc} (the commit's outcome is unknown)"
            except KafkaException as exc:
                error = exc.args[0] if exc.args and isinstance(exc.args[0], KafkaError) else None
                reason = self._redact(f"{error.name()}: {error.str()}" if error is not None else exc)
                if error is None or error.code() in NEEDS_POLL or self._clock() >= deadline or \
                        not (error.retriable() or error.code() in RETRIABLE_COMMIT) or self._give_up():
                    log.warning("stream %s: commit failed: %s", self._name, reason)
                    return reason
                self._sleep(min(retry_s, max(deadline - self._clock(), 0.0)))
                retry_s = min(retry_s * 2, COMMIT_RETRY_MAX_S)

    def commit_batch(self, next_offsets: Mapping[PartitionKey, int], full: bool = False) -> None:
        """A written batch's commit (exactly-once too: lag tools read the group's offsets); owed when it fails.

        Pipelined (the worker's): the commit is handed over and answered while the next batch is collected and
        written (`settle`, before any other commit: one at a time, in order), not waited for here. Paced
        (`cadence_s`): a `full` batch's offsets wait, merged with the next ones, until `cadence_s` has passed
        since the last batch commit (the module docstring).

        While commits fail (something is owed), a batch's offsets join what is owed instead: the owed retry
        carries them, once a second, rather than one failing commit per batch."""
        self._deferred.update(next_offsets)
        if not self._in_rebalance() and (self._hold() or
                                         (full and self._clock() - self._last_batch_commit < self._cadence_s)):
            return
        self.flush()

    @property
    def deferred(self) -> bool:
        """Written batches' offsets wait for the cadence (the worker commits them once the consumer has nothing),
        not for an offset call coming."""
        return bool(self._deferred) and not self._hold()

    def flush(self, closing: bool = False) -> None:
        """Commit the written batches' offsets the cadence deferred (as commit_batch commits); while an offset call
        is coming they wait for it, unless the consumer is `closing` or inside a rebalance callback."""
        if not closing and not self._in_rebalance() and self._hold():
            return
        next_offsets, self._deferred = self._deferred, {}
        if not self._pipelined or self._in_rebalance():
            if self._owing(next_offsets) or self.commit(next_offsets) is not None:
                self.owed.update(next_offsets)   # retried between batches: nothing more may come to carry it
            return
        self.settle()
        if not next_offsets or self._owing(next_offsets):
            return
        self._last_batch_commit = self._clock()
        try:
            pending = self._committer.start(self._consumer(), self._marked(next_offsets), self._give_up)
        except CommitUnanswered as exc:   # an earlier commit given up on still waits: owed, as a failed one
            log.warning("stream %s: commit not made: %s", self._name, exc)
            self.owed.update(next_offsets)
            return
        self._pending = (dict(next_offsets), pending, self._clock() + COMMIT_DEADLINE_S)

    def flush_revoked(self, tps: Iterable[PartitionKey]) -> None:
        """Inside a revoke callback (not a lost assignment's): what is deferred of `tps` committed now, directly,
        while this member still owns them (after the callback the next owner's commits must not be overwritten)."""
        revoked = {tp: self._deferred.pop(tp) for tp in tps if tp in self._deferred}
        if revoked and self.commit(revoked, deadline_s=0.0) is not None:
            log.warning("stream %s: the commit of revoked partitions failed: their next owner reads their last "
                        "batches again", self._name)

    def _owing(self, offsets: Mapping[PartitionKey, int]) -> bool:
        """A commit-error episode (something owed): `offsets` join what is owed, committed by its next retry."""
        if not self.owed:
            return False
        self.owed.update(offsets)
        return True

    @property
    def in_flight(self) -> bool:
        """A commit runs on the commit thread, not answered yet: the poll thread makes no call on the consumer
        meanwhile (commits.py: confluent-kafka would make it wait for the commit)."""
        return self._committer.busy

    def await_in_flight(self, slice_s: float) -> None:
        """Wait up to `slice_s` for the commit in flight (settled once answered); one that has waited
        COMMIT_MIN_WAIT_S asks `give_up` (the health's probe, through a client of its own: an outage shows)."""
        if not self._committer.wait_running(slice_s) and \
                self._clock() - self._committer.started_at >= COMMIT_MIN_WAIT_S:
            self._give_up()
        self.answered()

    def close_after_commit(self, consumer: Consumer) -> None:
        """The commit in flight still waits (the cluster is down): the consumer is closed after it, on the commit
        thread; the poll thread goes on at once."""
        self._committer.close_after(consumer)

    def answered(self) -> None:
        """Between batches: settle the batch commit in flight if its answer came (a stream with nothing more to
        read learns of a failed one now, and owes it), without waiting for it."""
        if self._pending is not None and self._pending[1].done.is_set():
            self.settle()

    def settle(self, wait: bool = True) -> None:
        """The batch commit in flight (pipelined) answered and handled as a synchronous one: a transient error
        retried until its deadline, a failure owed. `wait=False` (inside a rebalance callback, where another
        thread's commit is not answered until the callback returns): only one answered already, not retried."""
        if self._pending is None:
            return
        offsets, pending, deadline = self._pending
        if not wait:
            if not pending.done.is_set():
                return   # the committer stays busy: a commit now is refused, and its caller retries later
            deadline = self._clock()
        self._pending = None
        started: list[PendingCommit] = [pending]
        tps = self._marked(offsets)
        consumer = self._consumer()

        def attempt() -> Any:
            wait_s = max(deadline - self._clock(), COMMIT_MIN_WAIT_S)
            if started:
                return self._committer.wait(started.pop(), wait_s, give_up=self._give_up)
            return self._committer.commit(consumer, tps, wait_s, give_up=self._give_up)
        if self._until_answered(offsets, deadline, attempt) is not None:
            self.owed.update(offsets)

    def retry_owed(self, assigned: frozenset) -> None:
        """Between batches, once a second: commit again what is owed of the partitions still `assigned`."""
        if not self.owed or self._clock() < self._next_owed_try:
            return
        self._next_owed_try = self._clock() + OWED_RETRY_S
        self.owed = {tp: offset for tp, offset in self.owed.items() if tp in assigned}
        self.commit(dict(self.owed), deadline_s=0.0)

    def persist(self, offsets: Mapping[PartitionKey, int], marks: Mapping[PartitionKey, ChangeMark],
                store: Callable[[Mapping[PartitionKey, int], Mapping[PartitionKey, str]], None] | None = None
                ) -> str | None:
        """Commit an offset change, its mark with it (exactly-once: `store` writes it to the sink first, the truth a
        restart resumes from, with the signed marks beside them: a kill before the commit leaves the mark in the
        sink; the group's commit then only feeds lag tools). A batch's failed commit of these
        partitions is owed no more: the change moved them. None when done, else what failed."""
        self.settle(wait=not self._in_rebalance())   # its failure must not come back owed after the change
        for tp in offsets:
            self.owed.pop(tp, None)
        deferred = {tp: self._deferred.pop(tp) for tp in offsets if tp in self._deferred}   # nor a batch's deferred
        before = dict(self.marks)
        self.marks.update(marks)
        if store is not None:
            try:
                store(offsets, {tp: self._mark_key.encode_stored(tp, mark) for tp, mark in marks.items()})
            except Exception as exc:
                self.marks, self._deferred = before, {**deferred, **self._deferred}   # not moved: still owed a commit
                return f"storing the new offset in the sink failed ({self._redact(exc)})"
            self.commit(offsets)
            return None
        error = self.commit(offsets)
        if error is not None:
            self.marks, self._deferred = before, {**deferred, **self._deferred}
        return None if error is None else f"committing the new offset failed ({error})"

    def read_mark(self, tp: PartitionKey, metadata: str | None) -> ChangeMark | None:
        """The mark in `tp`'s committed metadata when it is this stream's (None: none, or foreign); carried on,
        this process's commits must not erase it."""
        mark = self._mark_key.decode(tp, metadata)
        if mark is not None:
            self.marks[tp] = mark
        return mark

    def read_stored_mark(self, tp: PartitionKey, text: str | None) -> ChangeMark | None:
        """The mark an exactly-once sink stores for `tp` when it is this stream's (None: none, or foreign)."""
        return self._mark_key.decode_stored(tp, text)

    def forget(self, tps: Iterable[PartitionKey]) -> None:
        """Partitions given up: the next owner commits them."""
        for tp in tps:
            self.marks.pop(tp, None)
            self.owed.pop(tp, None)
            self._deferred.pop(tp, None)
