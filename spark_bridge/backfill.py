"""Backfill: replay offset ranges through the live stream's transformation into graph loads.

The driver plans the ranges (range_plan); one Spark task per range reads it
with the data source's reader (RangeReader: assign, stop at the end or EOF),
cuts the messages into batches of `batch_size`, turns them into statements with
the same transformation the stream uses (`stream_registry.graph.transform`) and
writes them with the same sinks (`stream_registry.graph.sinks`). Tasks run as
`DataFrame.mapInArrow` over `spark.range(n)` (DataFrame API only: classic
PySpark and Spark Connect) and each returns one stats row to the driver.
`load_frame` does the same for any DataFrame with the Kafka row schema.

Retries. A Spark task may run more than once (a failure, a lost executor,
speculation). Bolt sinks commit one transaction per batch, so a retried task
replays batches that were already committed: the graph is unchanged only if
the transformation is idempotent (MERGE on topic/partition/offset, e.g.
`merge_messages`, `merge_messages_batched`, `json_nodes`). A `cypherl://DIR`
sink writes one file per range, `<topic>-<partition>-<from>-<until>.cypherl`,
through a temporary name renamed into place when the task succeeds, so a
retried task replaces its own file and never appends a second copy.
"""
from __future__ import annotations

import os
import threading
import time
import uuid
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime, timezone
from typing import Callable, Iterable, Iterator, Mapping
from urllib.parse import quote, unquote, urlsplit

import pyarrow as pa
import pyarrow.compute as pc

from stream_registry.errors import ConfigError, StreamError
from stream_registry.offset_spec import OffsetSpec
from stream_registry.kafka.queries import PartitionQuery
from stream_registry.graph.sinks import open_sink, validate_sink_uri
from stream_registry.graph.transform import Message, load_transformation, run_transformation

from .range_plan import OffsetRange, RangePlan, plan
from .range_reader import RangeReader
from .source_options import check_client_config

STATS_SCHEMA = ("range_index int, topic string, partition int, from_offset long, until_offset long, "
                "records long, statements long, batches long, seconds double, attempt int, output string")
_STATS_ARROW = pa.schema([("range_index", pa.int32()), ("topic", pa.string()), ("partition", pa.int32()),
                          ("from_offset", pa.int64()), ("until_offset", pa.int64()), ("records", pa.int64()),
                          ("statements", pa.int64()), ("batches", pa.int64()), ("seconds", pa.float64()),
                          ("attempt", pa.int32()), ("output", pa.string())])


@dataclass(frozen=True)
class BackfillJob:
    """What to replay and where to write it; `client_config` is librdkafka's (group.id names the
    group whose committed offsets `until=committed` means)."""
    bootstrap_servers: str
    topics: tuple[str, ...]
    start: OffsetSpec
    until: OffsetSpec
    transform: str
    sink: str
    client_config: Mapping[str, str] = field(default_factory=dict, repr=False)
    sink_credentials: Mapping[str, str] = field(default_factory=dict, repr=False)
    search_dirs: tuple[str, ...] = ()
    batch_size: int = 1000
    min_partitions: int | None = None
    fail_on_data_loss: bool = True

    def consumer_config(self) -> dict[str, object]:
        return {**self.client_config, "bootstrap.servers": self.bootstrap_servers, "group.id": self.group_id}

    @property
    def group_id(self) -> str:
        """The group asked for committed offsets (never joined, never committed to)."""
        return str(self.client_config.get("group.id") or "mgstreams-backfill")

    def validate(self) -> None:
        """Everything that can be checked without the cluster or Spark; raises ConfigError."""
        if not self.topics:
            raise ConfigError("topics: no topic given")
        if type(self.batch_size) is not int or self.batch_size < 1:
            raise ConfigError(f"batch_size: expected a positive integer, got {self.batch_size!r}")
        if self.min_partitions is not None and (type(self.min_partitions) is not int or self.min_partitions < 1):
            raise ConfigError(f"min_partitions: expected a positive integer, got {self.min_partitions!r}")
        validate_sink_uri(self.sink)
        load_transformation(self.transform, self.search_dirs)
        check_client_config(self.consumer_config())


@dataclass(frozen=True)
class PartitionStats:
    range_index: int
    topic: str
    partition: int
    from_offset: int
    until_offset: int
    records: int
    statements: int
    batches: int
    seconds: float
    attempt: int
    output: str

    @property
    def range(self) -> OffsetRange:
        return OffsetRange(self.topic, self.partition, self.from_offset, self.until_offset)

    @property
    def rate(self) -> float:
        return self.records / self.seconds if self.seconds > 0 else 0.0


@dataclass(frozen=True)
class BackfillReport:
    plan: RangePlan
    partitions: tuple[PartitionStats, ...]
    started_at: datetime
    seconds: float

    @property
    def records(self) -> int:
        return sum(p.records for p in self.partitions)

    @property
    def statements(self) -> int:
        return sum(p.statements for p in self.partitions)

    @property
    def rate(self) -> float:
        return self.records / self.seconds if self.seconds > 0 else 0.0

    def to_dict(self) -> dict:
        return {
            "started_at": self.started_at.isoformat(),
            "seconds": round(self.seconds, 3),
            "records": self.records,
            "statements": self.statements,
            "records_per_second": round(self.rate, 1),
            "notes": self.plan.notes,
            "partitions": [{**asdict(p), "seconds": round(p.seconds, 3), "records_per_second": round(p.rate, 1)}
                           for p in self.partitions],
        }


# -- driver side -------------------------------------------------------------------
def plan_job(job: BackfillJob) -> RangePlan:
    settings = {k: v for k, v in job.client_config.items() if k not in ("bootstrap.servers", "group.id")}
    with PartitionQuery(job.bootstrap_servers, job.group_id, settings) as query:
        return plan(query, job.topics, job.start, job.until, job.min_partitions,
                    fail_on_data_loss=job.fail_on_data_loss)


def run_backfill(spark, job: BackfillJob, range_plan: RangePlan | None = None,
                 on_progress: Callable[[int, int], None] | None = None) -> BackfillReport:
    """Plan (unless given), read, transform and write; returns per-range stats.

    One Spark task per range: `spark.range(n)` gives task i the number i, and
    the task reads range i itself with the data source's reader (RangeReader),
    so records go from Kafka to the sink inside one Python worker and never
    cross into the JVM and back (on two cores that round trip costs as much
    CPU as the transformation). `on_progress(done, total)` is called from a
    polling thread with finished tasks (classic PySpark only: Spark Connect
    has no status tracker).
    """
    job.validate()
    range_plan = range_plan or plan_job(job)
    started_at, t0 = datetime.now(timezone.utc), time.perf_counter()
    ranges = tuple(range_plan.ranges)
    if not ranges:
        return BackfillReport(range_plan, (), started_at, time.perf_counter() - t0)
    loader = RangeLoader(ranges, job.consumer_config(), job.fail_on_data_loss,
                         Loading(job.transform, tuple(job.search_dirs), job.sink, dict(job.sink_credentials),
                                 job.batch_size))
    result = spark.range(0, len(ranges), 1, len(ranges)).mapInArrow(loader, STATS_SCHEMA)
    with _progress(spark, len(ranges), on_progress):
        rows = result.collect()
    stats = sorted((PartitionStats(**row.asDict()) for row in rows), key=lambda s: s.range_index)
    missing = set(range(len(ranges))) - {s.range_index for s in stats}
    if missing:
        raise StreamError(f"backfill: no result for range(s) {sorted(missing)} (the Spark job lost them)")
    return BackfillReport(range_plan, tuple(stats), started_at, time.perf_counter() - t0)


def load_frame(frame, loading: "Loading"):
    """Load any DataFrame with the Kafka row schema (this package's source, or Spark's JVM
    `format("kafka")`) through a transformation into a sink; one stats row per Spark partition.

    Rows must arrive in offset order within a partition (both sources do so).
    For cypherl, Spark partition i writes `part-<i>.cypherl` (replaced on retry).
    """
    return frame.mapInArrow(FrameLoader(loading), STATS_SCHEMA)


class _progress:
    """Polls Spark's status tracker for finished tasks while the job runs."""

    def __init__(self, spark, total: int, callback):
        self.total, self.callback = total, callback
        self.group = f"mgstreams-backfill-{uuid.uuid4().hex[:12]}"
        self._stop = threading.Event()
        self._sc = _spark_context(spark)

    def __enter__(self):
        if self._sc is not None:
            self._sc.setJobGroup(self.group, "mgstreams backfill")
            if self.callback is not None:
                self._thread = threading.Thread(target=self._poll, name="backfill-progress", daemon=True)
                self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        if self._sc is not None:
            if self.callback is not None:
                self._thread.join()
                if exc[0] is None:
                    self.callback(self.total, self.total)
            self._sc.setLocalProperty("spark.jobGroup.id", None)

    def _poll(self):
        tracker = self._sc.statusTracker()
        while not self._stop.wait(0.25):
            done = 0
            for job_id in tracker.getJobIdsForGroup(self.group):
                info = tracker.getJobInfo(job_id)
                for stage_id in (info.stageIds if info else ()):
                    stage = tracker.getStageInfo(stage_id)
                    if stage is not None:
                        done += stage.numCompletedTasks
            self.callback(min(done, self.total), self.total)


def _spark_context(spark):
    try:
        return spark.sparkContext  # classic PySpark only
    except Exception:
        return None


# -- executor side -------------------------------------------------------------------
@dataclass(frozen=True)
class Loading:
    """How a task turns messages into graph writes: transformation, sink, batch size."""
    transform: str
    search_dirs: tuple[str, ...]
    sink: str
    sink_credentials: Mapping[str, str] = field(repr=False, default_factory=dict)
    batch_size: int = 1000

    def write(self, index: int, r: OffsetRange, output: "PartitionOutput",
              batches: Iterable[list[Message]], attempt: int) -> PartitionStats:
        """Transform and write message batches (already `batch_size` long) into one output."""
        started = time.perf_counter()
        fn = load_transformation(self.transform, self.search_dirs)
        records = statements = written = 0
        sink = open_sink(output.uri, self.sink_credentials)
        try:
            for messages in batches:
                produced = run_transformation(fn, messages, name=self.transform)
                if produced:
                    sink.write(produced)
                    written += 1
                records += len(messages)
                statements += len(produced)
            sink.close()
            output.commit()
        except BaseException:
            sink.close()
            output.abandon()
            raise
        return PartitionStats(index, r.topic, r.partition, r.from_offset, r.until_offset, records, statements,
                              written, time.perf_counter() - started, attempt, output.final)


def _task_attempt() -> int:
    from pyspark import TaskContext

    context = TaskContext.get()
    return context.attemptNumber() if context is not None else 0


def _stats_batch(stats: PartitionStats) -> pa.RecordBatch:
    return pa.RecordBatch.from_pylist([asdict(stats)], schema=_STATS_ARROW)


class RangeLoader:
    """mapInArrow function over `spark.range(n)`: the task given number i reads range i and loads it."""

    def __init__(self, ranges: tuple[OffsetRange, ...], consumer_config: Mapping[str, object],
                 fail_on_data_loss: bool, loading: Loading):
        self.ranges, self.consumer_config = ranges, dict(consumer_config)
        self.fail_on_data_loss, self.loading = fail_on_data_loss, loading

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        attempt = _task_attempt()
        for batch in batches:
            for index in batch.column(0).to_pylist():
                yield _stats_batch(self.load(index, attempt))

    def load(self, index: int, attempt: int = 0) -> PartitionStats:
        """Read range `index` and write it; plain Python, callable without Spark."""
        r = self.ranges[index]
        output = PartitionOutput(self.loading.sink, r.name, attempt)
        with RangeReader(self.consumer_config, fail_on_data_loss=self.fail_on_data_loss) as reader:
            messages = ([Message.from_kafka(m) for m in batch] for batch in reader.messages(r))
            return self.loading.write(index, r, output, rebatch(messages, self.loading.batch_size), attempt)


class FrameLoader:
    """mapInArrow function over a DataFrame with the Kafka row schema: one output per Spark partition."""

    def __init__(self, loading: Loading):
        self.loading = loading

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from pyspark import TaskContext

        index, attempt = TaskContext.get().partitionId(), _task_attempt()
        seen: list[OffsetRange] = []
        output = PartitionOutput(self.loading.sink, f"part-{index:05d}", attempt)
        messages = rebatch(_arrow_messages(batches, seen), self.loading.batch_size)
        stats = self.loading.write(index, OffsetRange("", -1, 0, 0), output, messages, attempt)
        if seen:  # report the span of the first topic-partition the task saw
            first = seen[0]
            stats = replace(stats, topic=first.topic, partition=first.partition, from_offset=first.from_offset,
                            until_offset=max(s.until_offset for s in seen if s.partition == first.partition
                                             and s.topic == first.topic))
        yield _stats_batch(stats)


class PartitionOutput:
    """Where one task's statements go: for cypherl, `<dir>/<name>.cypherl` through a temporary file."""

    def __init__(self, sink_uri: str, name: str, attempt: int):
        parts = urlsplit(sink_uri)
        self.uri, self.final, self._temp = sink_uri, "", None
        if parts.scheme.lower() == "cypherl":
            directory = unquote(parts.path)
            self.final = os.path.join(directory, f"{name}.cypherl")
            self._temp = os.path.join(directory, f".{name}.attempt{attempt}-{uuid.uuid4().hex[:8]}.tmp")
            self.uri = f"cypherl://{quote(self._temp)}" + (f"?{parts.query}" if parts.query else "")

    def commit(self) -> None:
        if self._temp is not None:
            if not os.path.exists(self._temp):  # nothing was written: still one file per range
                open(self._temp, "wb").close()
            os.replace(self._temp, self.final)

    def abandon(self) -> None:
        if self._temp is not None:
            try:
                os.unlink(self._temp)
            except FileNotFoundError:
                pass


def rebatch(batches: Iterable[list], size: int) -> Iterator[list]:
    """Re-cut a stream of lists into lists of `size` (the last may be shorter)."""
    pending: list = []
    for batch in batches:
        pending.extend(batch)
        while len(pending) >= size:
            yield pending[:size]
            del pending[:size]
    if pending:
        yield pending


def _arrow_messages(batches: Iterator[pa.RecordBatch], seen: list[OffsetRange]) -> Iterator[list[Message]]:
    """Kafka rows as Messages, one list per Arrow batch; records the offset span per batch in `seen`."""
    for batch in batches:
        if batch.num_rows == 0:
            continue
        topics = batch.column("topic").to_pylist()
        partitions = batch.column("partition").to_pylist()
        offsets = batch.column("offset").to_pylist()
        stamps = pc.divide(batch.column("timestamp").cast(pa.int64()), 1000).to_pylist()
        rows = zip(topics, partitions, offsets, batch.column("key").to_pylist(),
                   batch.column("value").to_pylist(), stamps)
        yield [Message(*row) for row in rows]
        seen.append(OffsetRange(topics[0], partitions[0], offsets[0], offsets[-1] + 1))
