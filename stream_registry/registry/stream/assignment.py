"""The partitions one stream process holds, and what happens when the group gives or takes them.

At assignment each partition gets its start point: exactly-once, where the sink
stores (the truth; read within a bound: a sink that does not answer holds the
partitions back, shown in the stream's error, and is asked again between
batches); at-least-once, where the group committed; a waiting offset change's
target wins either way (the gate decides: offset_gate.py). A partition assigned
where the sink stores rather than where the group committed is a realignment,
reported between batches (realign.py), and the group's offset then follows the
sink. At revoke (or loss) a partition's uncollected messages leave the batch and
everything this process knew of it is forgotten. A partition librdkafka found no
offset to fetch from goes on where the stream's auto.offset.reset says, counting
the records that left the log (data_loss.py). The group's protocol (eager or
incremental) is guessed from the config and learned from librdkafka's refusal.
Everything here runs on the poll thread, the rebalance callbacks inside consume().
"""
from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from ...config import CONSUMER_DEFAULTS
from ...graph.sink_faults import Fault, classify
from ...graph.sinks.protocol import Sink
from ...graph.sinks.stored_offsets import read_stored_offsets_within
from ...model import PartitionKey, StreamStatus
from .change_marks import Committed
from .committed_reads import keys_text, read_committed
from .data_loss import ResetDecision, start_new
from .data_loss import decide as decide_reset
from .group_commits import GroupCommits
from .health import Health
from .poll_context import PollContext
from .realign import explain_resume, note_resume

log = logging.getLogger("mgstreams.worker")

ASSIGN_STORED_DEADLINE_S = 2.0   # exactly-once: how long a rebalance callback retries reading the sink's offsets
HELD_RETRY_S = 0.5          # then between batches, this often, while the partitions wait for the sink
RESET_WATERMARKS_TIMEOUT_S = 1.0   # a partition librdkafka could not fetch from: its watermarks, asked this long
OFFSET_BEGINNING = -2       # librdkafka's raw constants
OFFSET_STORED = -1000

Callback = Callable[[Consumer, list[TopicPartition]], None]


class Assignment:
    """The partitions held, their start points, held-back and out-of-range ones (see the module docstring)."""

    def __init__(self, ctx: PollContext, health: Health, commits: GroupCommits, *, sink: Sink,
                 on_revoked: Callable[[set[PartitionKey]], None], before_assign: Callable[[], None] = lambda: None,
                 coming: Callable[[], bool] = lambda: False, clock: Callable[[], float] = time.monotonic):
        self._ctx, self._health, self._commits, self._sink, self._clock = ctx, health, commits, sink, clock
        self._on_revoked = on_revoked   # the worker drops the revoked partitions' messages from its batch
        # the worker hands the gate the requests queued meanwhile; is an offset call resolved in the host?
        self._before_assign, self._coming = before_assign, coming
        self.held: set[PartitionKey] = set()   # assigned to us, not started: the sink (exactly-once) or their commit
        # (an offset change waits for them) did not answer, or an offset call is coming
        self.unread_reason = ""
        self._next_held_try = 0.0
        self._commit_stored: set[PartitionKey] = set()   # exactly-once, just assigned: group offsets follow the sink's
        self.resumed: dict[PartitionKey, tuple] = {}   # exactly-once, just assigned elsewhere than the group's commit
        self.resets: dict[PartitionKey, int] = {}   # partitions with no offset to fetch from, not decided yet
        config = ctx.config
        self._reset_policy = config.configs.get("auto.offset.reset", CONSUMER_DEFAULTS["auto.offset.reset"])
        self.rebalancing = False   # inside a rebalance callback
        # cooperative-sticky and KIP-848's `consumer` protocol assign incrementally: a first guess (the Python client
        # has no rd_kafka_rebalance_protocol()); librdkafka refuses the wrong kind with _STATE, and change() switches.
        self.incremental = ("cooperative" in str(config.configs.get("partition.assignment.strategy", ""))
                            or str(config.configs.get("group.protocol", "classic")) == "consumer")

    # -- the callbacks handed to subscribe() ------------------------------------
    def callbacks(self) -> dict[str, Callback]:
        return {"on_assign": self._marked(self._on_assign), "on_revoke": self._marked(self._on_revoke),
                "on_lost": self._marked(lambda consumer, partitions: self._on_revoke(consumer, partitions, lost=True))}

    def _marked(self, callback: Callback) -> Callback:
        """A rebalance callback, marked while it runs: a commit inside it is made directly (commits.py)."""
        def run(consumer: Consumer, partitions: list[TopicPartition]) -> None:
            self.rebalancing = True
            try:
                callback(consumer, partitions)
            finally:
                self.rebalancing = False
        return run

    def _on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        # A change requested before the assignment arrived is where the partitions start: the gate has it before
        # it decides their starts (else the records the same consume() returns from the group's offset go first:
        # KIP-848 assigns at once); a call still resolved in the host may name them: held for it (calls_coming.py).
        coming = self._coming()   # before the drain: a call seen ended has its request queued
        self._before_assign()
        keys = [PartitionKey(tp.topic, tp.partition) for tp in partitions]
        if keys and coming:   # an empty assign (else confluent-kafka assigns them): start_held starts them
            self.change(lambda: consumer.incremental_assign([]), lambda: consumer.assign([]))
            self.held.update(keys)
            self._next_held_try = 0.0
            return
        starts: dict[PartitionKey, int | None] = dict.fromkeys(keys)
        if self._ctx.exactly_once:
            stored = self._resume_from_sink(keys, ASSIGN_STORED_DEADLINE_S)
            if stored is None:   # an empty assign, or confluent-kafka assigns them where Kafka says
                self.change(lambda: consumer.incremental_assign([]), lambda: consumer.assign([]))
                if not self._health.fatal:
                    self.held.update(keys)   # the group gave them to us: start them once the sink answers
                    self._health.set_status(StreamStatus.RUNNING)   # running, and the error says why they wait
                return
            starts = {key: stored.get(key, OFFSET_BEGINNING) for key in keys}
        self._start_partitions(consumer, partitions, starts)

    def _on_revoke(self, consumer: Consumer, partitions: list[TopicPartition], lost: bool = False) -> None:
        """Give the partitions up: their written batches committed (not when `lost`), their uncollected messages
        leave the batch (uncommitted, the next owner reads them again), their positions forgotten."""
        revoked = {PartitionKey(tp.topic, tp.partition) for tp in partitions}
        self._on_revoked(revoked)   # first: the worker's write in flight is done (committed below with the rest)
        if not lost:
            self._commits.flush_revoked(revoked)
        self._ctx.gate.on_revoke(revoked)
        started = [tp for tp in partitions if (tp.topic, tp.partition) not in self.held]   # held: never assigned
        self.held -= revoked
        if not self.held and self._health.waiting:
            self._health.waiting = None
            self._health.refresh()
        # the next owner may move them: read again at the next assignment
        self._ctx.stored.forget(revoked)
        for tp in revoked:
            self.resumed.pop(tp, None)
        self._commits.forget(revoked)
        try:
            self.change(lambda: consumer.incremental_unassign(started), consumer.unassign)
        except KafkaException:
            pass

    def _start_partitions(self, consumer: Consumer, partitions: list[TopicPartition],
                          starts: Mapping[PartitionKey, int | None],
                          committed: Mapping[PartitionKey, Committed] | None = None) -> None:
        """Assign `partitions` to the consumer at their starts (or a waiting change's target), the gate told. A
        partition an offset change waits for is held back while its commit (and mark) cannot be read: whether an
        earlier run of the stream applied that change is known only from it (change_marks), and applying it
        again would deliver its records again; it starts once the read answers (start_held)."""
        gate = self._ctx.gate
        keys = [PartitionKey(tp.topic, tp.partition) for tp in partitions]
        if committed is None:
            committed = self.read_committed(sorted(keys))
        if committed is None:
            unknown = {key for key in keys if key in gate.waiting()}
            if unknown:
                self._hold_unread(unknown)
                partitions = [tp for tp in partitions if (tp.topic, tp.partition) not in unknown]
                keys = [key for key in keys if key not in unknown]
                starts = {key: start for key, start in starts.items() if key not in unknown}
            committed = {}
        if not self._ctx.exactly_once:   # no reset for a new group's partitions (data_loss.start_new)
            starts = start_new(starts, {key for key, seen in committed.items() if seen.nothing}, self._reset_policy)
        offsets = gate.on_assign(starts, committed)   # where they stand, and our marks
        for tp, key in zip(partitions, keys, strict=True):
            offset = offsets[key]
            if offset is not None:
                tp.offset = offset
        try:
            self.change(lambda: consumer.incremental_assign(partitions), lambda: consumer.assign(partitions))
        except KafkaException as exc:
            # the group thinks they are ours: leave it (from the poll loop, not the callback) for another member
            gate.assign_failed(keys)
            self._health.fatal = f"assigning {keys_text(keys)} failed: {self._ctx.redact(exc)}"
            return
        gate.after_assign()
        self._health.set_status(StreamStatus.RUNNING)

    def read_committed(self, keys: list[PartitionKey]) -> dict[PartitionKey, Committed] | None:
        """committed_reads.read_committed: None when unread (`unread_reason` says why)."""
        found, self.unread_reason = read_committed(self._ctx, self._commits, self._sink, keys,
                                                   ASSIGN_STORED_DEADLINE_S)
        return found

    def _hold_unread(self, keys: set[PartitionKey]) -> None:
        """Hold back partitions an offset change waits for while their commit cannot be read (_start_partitions)."""
        self.held.update(keys)
        self._next_held_try = self._clock() + HELD_RETRY_S
        self._health.waiting = (f"reading the committed offsets of {keys_text(sorted(keys))} failed "
                                f"({self.unread_reason}); an offset change waits for them and whether an earlier "
                                f"run applied it is known only from their commit: they wait, asked again every "
                                f"{HELD_RETRY_S:g} s")
        self._health.refresh()

    def _resume_from_sink(self, keys: list[PartitionKey], deadline_s: float) -> dict[PartitionKey, int] | None:
        """Exactly-once: the sink's stored offsets are the truth (ahead of the group's commit after a crash,
        behind it after a snapshot restore); a partition the graph holds nothing of starts at the beginning.
        Read within `deadline_s` while the sink fails transiently; None when it could not be read: a transient
        failure is shown as the stream's error (held partitions wait for the sink), any other fails the stream."""
        try:
            found = read_stored_offsets_within(self._sink, self._ctx.name, keys, deadline_s=deadline_s)
        except Exception as exc:
            reason = f"reading the offsets stored in the sink for {keys_text(keys)} failed: {self._ctx.redact(exc)}"
            if classify(exc) is not Fault.TRANSIENT:
                self._health.fatal = reason
            else:
                self._next_held_try = self._clock() + HELD_RETRY_S
                if self._health.waiting is None:   # the first failure is shown until the sink answers
                    log.warning("stream %s: %s; the partitions wait, asked again every %g s", self._ctx.name,
                                reason, HELD_RETRY_S)
                    self._health.waiting = f"{reason}; its partitions wait for the sink"
            return None
        stored = {PartitionKey(*tp): offset for tp, offset in found.items()}
        self._ctx.stored.learn(keys, stored)
        self._commit_stored.update(key for key in keys if key in stored)
        note_resume(self._ctx, keys, stored, self.resumed)
        return stored

    # -- between batches --------------------------------------------------------
    def follow_sink(self) -> None:
        """Exactly-once, after an assignment: commit what the sink stores, so the group's offsets (what lag tools
        read) are not left behind it by a crash between a batch's write and its commit, with nothing more to
        read. Between batches, not in the rebalance callback; a failed commit is not retried (the next batch's
        commit carries it). First, where the sink resumed a partition elsewhere than the group's commit, say so."""
        explain_resume(self._ctx, self.resumed)   # (reported with the first batch after the assignment, if sooner)
        if not self._commit_stored:
            return
        tps, self._commit_stored = self._commit_stored, set()
        assigned = self._ctx.gate.assigned()
        stored = self._ctx.stored.copy()   # as stored now: a change applied at the assignment stored its own offset
        self._commits.commit({tp: stored[tp] for tp in tps if tp in assigned and tp in stored}, deadline_s=0.0)

    def start_held(self) -> None:
        """Ask the sink again for the stored offsets of the partitions held back; once it answers, start them
        there and clear the error."""
        if not self.held or self._coming() or self._clock() < self._next_held_try:
            return
        self._before_assign()   # a call just seen ended: its request is queued (calls_coming.py)
        self._next_held_try = self._clock() + HELD_RETRY_S
        keys = sorted(self.held)
        committed = None
        if self._ctx.exactly_once:
            stored = self._resume_from_sink(keys, 0.0)
            if stored is None:
                self._health.refresh()   # the error says so (a non-transient one fails it: the poll loop sees fatal)
                return
            starts: dict[PartitionKey, int | None] = {key: stored.get(key, OFFSET_BEGINNING) for key in keys}
        else:   # at-least-once: held while their commit could not be read (_start_partitions)
            committed = self.read_committed(keys)
            if committed is None:
                return
            starts = dict.fromkeys(keys)
        self.held.clear()
        log.info("stream %s: %s; starting %s", self._ctx.name, "the sink answers again" if self._ctx.exactly_once
                 else "their committed offsets are read", keys_text(keys))
        self._health.waiting = None
        consumer = self._ctx.consumer()
        if self.incremental:
            self._start_partitions(consumer, [TopicPartition(t, p) for t, p in keys], starts, committed)
        else:   # eager: the whole assignment, the running partitions where they stand
            running = self._ctx.gate.assigned()
            self._start_partitions(consumer, [TopicPartition(t, p) for t, p in sorted(running | set(keys))],
                                   {**{tp: self._eager_start(tp) for tp in running}, **starts})
        self._health.refresh()

    def decide_resets(self) -> None:
        """Partitions librdkafka found no offset to fetch from (data_loss.py): go on where the stream's
        auto.offset.reset says, counting the records that left the log on the way (or fail, on_data_loss stop)."""
        gate = self._ctx.gate
        for tp, at in list(self.resets.items()):
            if tp not in gate.assigned():
                del self.resets[tp]
                continue
            watermarks = None
            if at >= 0 and self._health.outage:
                continue   # asked once the cluster answers again
            if at >= 0:
                try:
                    watermarks = self._ctx.consumer().get_watermark_offsets(
                        TopicPartition(*tp), timeout=RESET_WATERMARKS_TIMEOUT_S, cached=False)
                except KafkaException as exc:
                    log.warning("stream %s: %s:%d: offset %d is out of range; its watermarks: %s", self._ctx.name,
                                tp.topic, tp.partition, at, self._ctx.redact(exc))
            decision = decide_reset(tp, at, watermarks, self._reset_policy, self._ctx.config.on_data_loss)
            known = gate.positions().get(tp)
            if at < 0 and known is not None and known >= 0:
                # "nothing committed", from a committed-offset lookup an explicit start raced (KIP-848's
                # incremental assignment): the partition goes on from where the stream stands
                decision = ResetDecision(start=known)
            if decision.fail:
                self._health.fatal = decision.fail
                return
            if decision.start is None:
                continue   # the watermarks did not answer: asked again before the next batch
            del self.resets[tp]
            if decision.lost is not None:
                log.warning("stream %s: %s; going on from %d", self._ctx.name, decision.lost.describe(),
                            decision.start)
                self._ctx.events.on_lost(decision.lost)
            self.move(tp, decision.start)
            if decision.start >= 0:
                gate.rewound({tp: decision.start})
            if decision.lost is not None:   # the group's offset leaves the records that are gone (lag tools)
                self._commits.commit({tp: decision.start}, deadline_s=0.0)

    # -- moving a partition (the gate's port, a realignment, a reset) ------------
    def move(self, tp: PartitionKey, offset: int) -> None:
        """Seek the partition, or assign it again there when the consumer cannot seek it now."""
        if not self.seek(tp, offset):
            self.reassign(tp, offset)

    def seek(self, tp: PartitionKey, offset: int) -> bool:
        try:
            self._ctx.consumer().seek(TopicPartition(tp[0], tp[1], offset))
            return True
        except KafkaException:
            return False

    def reassign(self, tp: PartitionKey, offset: int | None) -> None:
        """Assign one partition again at `offset` (None: where the group or the sink resumes it)."""
        start = OFFSET_STORED if offset is None else offset
        if offset is None and self._ctx.exactly_once:
            start = self._ctx.stored.get_or(tp, OFFSET_BEGINNING)
        consumer = self._ctx.consumer()

        def incremental() -> None:
            consumer.incremental_unassign([TopicPartition(*tp)])
            consumer.incremental_assign([TopicPartition(tp[0], tp[1], start)])

        def eager() -> None:
            consumer.assign([TopicPartition(t, p, start if (t, p) == tp else self._eager_start(PartitionKey(t, p)))
                             for (t, p) in self._ctx.gate.assigned()])
        self.change(incremental, eager)

    def _eager_start(self, tp: PartitionKey) -> int:
        """Where a running partition resumes when an eager assign() names it again: where it stands, else where
        the group (exactly-once: the sink) says."""
        position = self._ctx.gate.positions().get(tp)
        if position is not None:
            return position
        return self._ctx.stored.get_or(tp, OFFSET_BEGINNING) if self._ctx.exactly_once else OFFSET_STORED

    def change(self, incremental: Callable[[], None], eager: Callable[[], None]) -> None:
        """Change the assignment the way the group's protocol wants; learn the protocol from a refusal."""
        try:
            (incremental if self.incremental else eager)()
        except KafkaException as exc:
            error = exc.args[0] if exc.args else None
            if not isinstance(error, KafkaError) or error.code() != KafkaError._STATE:
                raise
            self.incremental = not self.incremental
            log.info("stream %s: the group runs the %s protocol", self._ctx.name,
                     "incremental" if self.incremental else "eager")
            (incremental if self.incremental else eager)()

