"""The `mgstreams_kafka` source's streaming reader: micro-batches of Kafka offsets whose position can be moved
while the query runs.

    spark.readStream.format("mgstreams_kafka").option("kafka.bootstrap.servers", ...)
        .option("subscribe", "orders").option("controlDir", "/var/lib/mgstreams/spark/orders")
        .option("maxOffsetsPerTrigger", 5000).load()

Spark calls, on the driver side (the driver's Python worker; under Spark Connect the server's):
- `initialOffset` for a query without a checkpoint: `resumeOffsets` (the graph's stored offsets or the
  group's committed ones, as the stream's owner read them) else `startingOffsets`;
- `latestOffset(start, limit)` before each micro-batch: it takes the changes queued in the control channel
  (stream_control) and plans the batch's end (stream_offsets.plan_next: a new epoch starts at each moved
  partition's target); on its first call after a restart from a checkpoint it states, in the channel's
  notes, where the checkpoint and the group (or the graph) disagree, and for `resumeFrom=graph` it realigns
  to the graph's offsets (exactly-once: the graph holds what was written);
- `partitions(start, end)`: one input partition per Kafka partition range; the first batch of an epoch
  records each change's answer (`applied` when the batch is planned from the target);
- `commit(end)`, and `latestOffset(start)` (Spark defers commit() until it plans the next batch, so an idle
  query would never commit its last one): the group's committed offsets become those of the last completed
  micro-batch (so lag tools and the lag verdicts see the stream);
- `read` runs on the executors (RangeReader, Arrow batches).
"""
from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping, Sequence

from confluent_kafka import Consumer, KafkaException, TopicPartition
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows

from stream_registry.kafka.client import new_consumer
from stream_registry.kafka.queries import PartitionQuery
from stream_registry.model import PartitionKey
from stream_registry.offset_spec import Latest, OffsetSpec
from stream_registry.redaction import redact
from stream_registry.registry.state.state_store import stored_config

from .micro_batch import GraphOffsets
from .range_plan import OffsetRange, resolve_bounds
from .range_reader import RangeReader
from .source_options import SourceOptions
from .stream_control import Applied, ControlChannel
from .stream_offsets import Move, StreamOffset, moved_partitions, offsets_to_json, plan_next, ranges_between

log = logging.getLogger(__name__)


class KafkaRangePartition(InputPartition):
    """One offset range; `value` is the OffsetRange (None only for Spark's filler partition)."""

    def __init__(self, value: OffsetRange | None):
        super().__init__(value)


def read_partition(options: SourceOptions, partition: InputPartition) -> Iterator:
    """An input partition's records as Arrow batches (executor side; batch and streaming reads alike)."""
    r = partition.value
    if r is None:
        return
    with RangeReader(options.consumer_config(), fail_on_data_loss=options.fail_on_data_loss,
                     poll_timeout_ms=options.poll_timeout_ms) as reader:
        yield from reader.record_batches(r, options.include_headers)


class KafkaStreamReader(DataSourceStreamReader):
    def __init__(self, options: SourceOptions):
        self.options = options
        self._query: PartitionQuery | None = None
        self._committer: Consumer | None = None
        self._resume_checked = False
        self._latest: dict[PartitionKey, int] = {}
        self._commit_failed = False
        self._group_at: dict[PartitionKey, int] = {}

    # -- Spark's calls (driver side) ---------------------------------------------------------------------
    def initialOffset(self) -> dict:
        self._resume_checked = True     # a fresh query starts where the stream's truth says: nothing to compare
        start = self._starting_offsets()
        resume = self._resume_offsets(list(start))
        if resume:
            self._channel().note("started", resumes=offsets_to_json(resume), authority=self.options.resume_from)
        return StreamOffset(0, {**start, **resume}).to_json()

    def getDefaultReadLimit(self) -> ReadLimit:
        limit = self.options.max_offsets_per_trigger
        return ReadMaxRows(limit) if limit else ReadAllAvailable()

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        begin = StreamOffset.from_json(start)
        moves: list[Move] = []
        if not self._resume_checked:     # before the group follows `start`: that would hide what it held
            self._resume_checked = True
            moves += self._check_resume(begin)
        self._follow_group(begin.next)    # `start` ends the last completed micro-batch (the commit log's)
        watermarks = self._watermarks()
        moves += self._channel().take(begin.epoch)
        max_rows = limit.max_rows if isinstance(limit, ReadMaxRows) else None
        return plan_next(begin, watermarks, moves, max_rows).to_json()

    def reportLatestOffset(self) -> dict | None:
        return offsets_to_json(self._latest) if self._latest else None

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        first, last = StreamOffset.from_json(start), StreamOffset.from_json(end)
        ranges = ranges_between(first, last)
        if last.origin and self.options.resume_from == "graph":
            self._persist_move(last)
        if last.begins_epoch(first) and last.changes:
            self._record_applied(first, last)
        return [KafkaRangePartition(r) for r in ranges]

    def read(self, partition: InputPartition) -> Iterator:
        return read_partition(self.options, partition)

    def commit(self, end: dict) -> None:
        """Spark's word that the micro-batch up to `end` is done (it says so only when it plans the next one)."""
        self._follow_group(StreamOffset.from_json(end).next)

    def stop(self) -> None:
        if self._committer is not None:
            self._committer.close()
            self._committer = None
        if self._query is not None:
            self._query.close()
            self._query = None

    # -- internals -------------------------------------------------------------------------------------
    def _follow_group(self, offsets: Mapping[PartitionKey, int]) -> None:
        """The group's committed offsets become those of the last completed micro-batch (so lag tools and the
        lag verdicts see the stream); a failure is logged and noted once, not raised: the checkpoint, or the
        graph, is the query's truth."""
        if offsets == self._group_at:
            return
        try:
            self._commit_group(offsets)
            self._group_at, self._commit_failed = dict(offsets), False
        except KafkaException as exc:
            if not self._commit_failed:
                self._commit_failed = True
                said = redact(str(exc), self.options.secrets)
                log.warning("group %s: committing the micro-batch's offsets failed: %s", self.options.group_id, said)
                self._channel().note("group_commit_failed", group=self.options.group_id, error=said)

    def _resume_offsets(self, tps: list[PartitionKey]) -> dict[PartitionKey, int]:
        """Where the stream's truth says it resumes: the graph's stored offsets (exactly-once) or the group's
        committed ones, where it has any; {} for resumeFrom=checkpoint."""
        o = self.options
        if o.resume_from == "graph":
            return self._graph().stored(tps)
        if o.resume_from == "group":
            return {tp: c for tp, c in self._group_committed(tps).items() if c is not None}
        return {}

    def _check_resume(self, begin: StreamOffset) -> list[Move]:
        """A query restarted from its checkpoint (after Spark replayed its last planned micro-batch): say where
        the checkpoint disagrees with the group or the graph; for `resumeFrom=graph` (exactly-once) the graph
        wins, by a realignment epoch."""
        o = self.options
        truth = self._resume_offsets(list(begin.next))
        differ = {tp: offset for tp, offset in truth.items() if begin.next[tp] != offset}
        if not differ:
            return []
        checkpoint = {tp: begin.next[tp] for tp in differ}
        if o.resume_from == "graph":
            epoch = self._channel().new_epoch()
            self._channel().note("realigned", epoch=epoch, checkpoint=offsets_to_json(checkpoint),
                                 graph=offsets_to_json(differ), resumes=offsets_to_json(differ))
            return [Move(None, epoch, differ)]
        self._channel().note("resume", checkpoint=offsets_to_json(checkpoint), group=offsets_to_json(differ),
                             resumes=offsets_to_json(checkpoint))
        return []

    def _persist_move(self, last: StreamOffset) -> None:
        """Exactly-once: store where the moved (or new) partitions start in the graph before their micro-batch
        is read, once (a replayed planning finds the mark and leaves the graph alone: it may be past the start)."""
        channel = self._channel()
        if channel.mark_moved(last.epoch, last.origin):
            self._graph().persist_move(last.origin)
            channel.moved_done(last.epoch, last.origin)

    def _graph(self) -> GraphOffsets:
        o = self.options
        assert o.sink is not None and o.sink_stream is not None   # parse_source_options checks it
        return GraphOffsets(o.sink, o.sink_stream, self._sink_credentials())

    def _sink_credentials(self) -> dict[str, str]:
        """A registered stream's sink credentials, read from its host's state (never an option)."""
        o = self.options
        if not (o.stream and o.state_dir):
            return {}
        return dict(stored_config(o.state_dir, o.stream).sink_credentials())

    def _record_applied(self, first: StreamOffset, last: StreamOffset) -> None:
        """Each change's answer per partition. An onward target the partition already stood past (`stayed`) is
        `applied` where it stood, and says so (as a host stream's gate does: a move to the end or onward never
        goes back)."""
        channel = self._channel()
        targets = {change: channel.targets_of(change) for change in last.changes}
        for change, statuses in moved_partitions(first, last, targets).items():
            partitions: dict[PartitionKey, tuple[str, int | None, int | None]] = {}
            notes: dict[PartitionKey, str] = {}
            for tp, status in statuses.items():
                previous = first.next.get(tp)
                if status == "stayed":
                    where = last.origin.get(tp, previous)
                    partitions[tp] = ("applied", where, where)
                    notes[tp] = (f"the partition already stood at {where}, past {targets[change][tp]} (computed when "
                                 f"the call was made): a move to the end or onward never goes back, it stays at "
                                 f"{where}")
                else:
                    partitions[tp] = (status, last.origin.get(tp) if status in ("applied", "clamped") else None,
                                      previous)
            channel.record_applied(Applied(change, last.epoch, None, partitions, notes))

    # -- what the reader asks of Kafka (a model test replaces these four) ------------------------------------
    def _starting_offsets(self) -> dict[PartitionKey, int]:
        """startingOffsets resolved for every partition the stream reads."""
        o = self.options
        bounds = resolve_bounds(self._partition_query(), o.topics, o.starting, OffsetSpec(default=Latest()),
                                fail_on_data_loss=o.fail_on_data_loss)
        return {PartitionKey(b.topic, b.partition): b.from_offset for b in bounds}

    def _group_committed(self, tps: list[PartitionKey]) -> dict[PartitionKey, int | None]:
        return self._partition_query().committed(tps)

    def _commit_group(self, offsets: Mapping[PartitionKey, int]) -> None:
        self._group_committer().commit(offsets=[TopicPartition(t, p, o) for (t, p), o in offsets.items()],
                                       asynchronous=False)

    def _watermarks(self) -> dict[PartitionKey, tuple[int, int]]:
        query = self._partition_query()
        topics = self.options.topics
        if isinstance(topics, dict):
            tps = [PartitionKey(t, p) for t, ps in topics.items() for p in ps]
        else:
            tps = [PartitionKey(t, p) for t, ps in query.partitions(topics).items() for p in ps]
        marks = query.watermarks(tps)
        self._latest = {tp: high for tp, (_low, high) in marks.items()}
        return marks

    def _partition_query(self) -> PartitionQuery:
        if self._query is None:
            o = self.options
            self._query = PartitionQuery(o.bootstrap_servers, o.group_id, o.client_config, secrets=o.secrets)
        return self._query

    def _group_committer(self) -> Consumer:
        if self._committer is None:
            self._committer = new_consumer({**self.options.consumer_config(), "enable.auto.commit": False},
                                           self.options.secrets, field="kafka.*")
        return self._committer

    def _channel(self) -> ControlChannel:
        assert self.options.control_dir is not None   # parse_source_options(streaming=True) requires it
        return ControlChannel(self.options.control_dir)
