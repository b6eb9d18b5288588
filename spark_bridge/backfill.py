"""Backfill with Spark: replay offset ranges through the live stream's transformation into graph loads.

The driver plans the ranges (range_plan); one Spark task per range reads it
with the data source's reader (RangeReader: assign, stop at the end or EOF),
cuts the messages into batches of `batch_size`, turns them into statements with
the same transformation the stream uses (`stream_registry.graph.transform`) and
writes them with the same sinks (`stream_registry.graph.sinks`): `job.load_range`,
which the local engine runs too. Tasks run as `DataFrame.mapInArrow` over
`spark.range(n)` (DataFrame API only: classic PySpark and Spark Connect alike)
and each returns one stats row to the driver. `load_frame` does the same for any
DataFrame with the Kafka row schema. Retries: see `job`.
"""
from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import asdict, replace
from datetime import UTC, datetime

import pyarrow as pa
import pyarrow.compute as pc

from stream_registry.errors import StreamError
from stream_registry.graph.transform import Message

from .job import BackfillJob, BackfillReport, Loading, PartitionOutput, PartitionStats, load_range, plan_job, rebatch
from .range_plan import OffsetRange, RangePlan
from .range_reader import RangeReader

__all__ = ["BackfillJob", "BackfillReport", "Loading", "PartitionOutput", "PartitionStats", "RangeLoader",
           "FrameLoader", "STATS_SCHEMA", "load_frame", "plan_job", "rebatch", "run_backfill"]

STATS_SCHEMA = ("range_index int, topic string, partition int, from_offset long, until_offset long, "
                "records long, statements long, batches long, seconds double, attempt int, output string")
_STATS_ARROW = pa.schema([("range_index", pa.int32()), ("topic", pa.string()), ("partition", pa.int32()),
                          ("from_offset", pa.int64()), ("until_offset", pa.int64()), ("records", pa.int64()),
                          ("statements", pa.int64()), ("batches", pa.int64()), ("seconds", pa.float64()),
                          ("attempt", pa.int32()), ("output", pa.string())])


# -- driver side -------------------------------------------------------------------
def run_backfill(spark, job: BackfillJob, range_plan: RangePlan | None = None,
                 on_progress: Callable[[int, int], None] | None = None) -> BackfillReport:
    """Plan (unless given), read, transform and write; returns per-range stats.

    One Spark task per range: `spark.range(n)` gives task i the number i, and
    the task reads range i itself with the data source's reader (RangeReader),
    so records go from Kafka to the sink inside one Python worker and never
    cross into the JVM and back (on two cores that round trip costs as much
    CPU as the transformation). `on_progress(done, total)` is called with
    finished tasks: from a thread polling the status tracker (classic PySpark),
    or from the client's progress handler (Spark Connect, which has no
    SparkContext and so no status tracker or job groups).
    """
    job.validate()
    range_plan = range_plan or plan_job(job)
    started_at, t0 = datetime.now(UTC), time.perf_counter()
    ranges = tuple(range_plan.ranges)
    if not ranges:
        return BackfillReport(range_plan, (), started_at, time.perf_counter() - t0)
    loader = RangeLoader(ranges, job.consumer_config(), job.fail_on_data_loss, job.loading())
    result = spark.range(0, len(ranges), 1, len(ranges)).mapInArrow(loader, STATS_SCHEMA)
    with _progress(spark, len(ranges), on_progress):
        rows = result.collect()
    stats = sorted((PartitionStats(**row.asDict()) for row in rows), key=lambda s: s.range_index)
    missing = set(range(len(ranges))) - {s.range_index for s in stats}
    if missing:
        raise StreamError(f"backfill: no result for range(s) {sorted(missing)} (the Spark job lost them)")
    return BackfillReport(range_plan, tuple(stats), started_at, time.perf_counter() - t0)


def load_frame(frame, loading: Loading):
    """Load any DataFrame with the Kafka row schema (this package's source, or Spark's JVM
    `format("kafka")`) through a transformation into a sink; one stats row per Spark partition.

    Rows must arrive in offset order within a partition (both sources do so).
    For cypherl, Spark partition i writes `part-<i>.cypherl` (replaced on retry).
    """
    return frame.mapInArrow(FrameLoader(loading), STATS_SCHEMA)


class _progress:
    """Reports finished tasks while the job runs: classic PySpark through a job group and the status
    tracker, Spark Connect through an operation tag and the client's progress handler."""

    def __init__(self, spark, total: int, callback):
        self.spark, self.total, self.callback = spark, total, callback
        self.group = f"mgstreams-backfill-{uuid.uuid4().hex[:12]}"
        self._stop = threading.Event()
        self._sc = _spark_context(spark)
        self._handler: _ConnectProgress | None = None
        self._thread: threading.Thread | None = None

    def __enter__(self):
        if self._sc is not None:
            self._sc.setJobGroup(self.group, "mgstreams backfill")
            if self.callback is not None:
                self._thread = threading.Thread(target=self._poll, name="backfill-progress", daemon=True)
                self._thread.start()
        elif self.callback is not None and hasattr(self.spark, "registerProgressHandler"):
            self.spark.addTag(self.group)
            self._handler = _ConnectProgress(self.total, self.callback)
            self.spark.registerProgressHandler(self._handler)
        return self

    def __exit__(self, *exc):
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        try:
            if self._handler is not None:
                self.spark.removeProgressHandler(self._handler)
                self.spark.removeTag(self.group)
            if self._sc is not None:
                self._sc.setLocalProperty("spark.jobGroup.id", None)
        except Exception:
            if exc[0] is None:
                raise
            # the job's own error says more than a failed clean-up of a broken session
        if self.callback is not None and exc[0] is None:
            self.callback(self.total, self.total)

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


class _ConnectProgress:
    """A Spark Connect progress handler: `(stages, inflight_tasks, operation_id, done)` per update."""

    def __init__(self, total: int, callback):
        self.total, self.callback = total, callback

    def __call__(self, stages, inflight_tasks, operation_id, done, *_):
        completed = sum(getattr(stage, "num_completed_tasks", 0) for stage in (stages or ()))
        self.callback(min(completed, self.total), self.total)


def _spark_context(spark):
    """The SparkContext of a classic session; None under Spark Connect (which has none)."""
    if type(spark).__module__.startswith("pyspark.sql.connect"):
        return None
    try:
        return spark.sparkContext
    except Exception:
        return None


# -- executor side -------------------------------------------------------------------
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
        with RangeReader(self.consumer_config, fail_on_data_loss=self.fail_on_data_loss) as reader:
            return load_range(reader, index, self.ranges[index], self.loading, attempt)


class FrameLoader:
    """mapInArrow function over a DataFrame with the Kafka row schema: one output per Spark partition."""

    def __init__(self, loading: Loading):
        self.loading = loading

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from pyspark import TaskContext

        context = TaskContext.get()
        if context is None:
            raise StreamError("backfill: a partition's loader runs inside a Spark task, and this is none")
        index, attempt = context.partitionId(), _task_attempt()
        seen: list[OffsetRange] = []
        output = PartitionOutput(self.loading.sink, f"part-{index:05d}", attempt)
        messages = rebatch(arrow_messages(batches, seen), self.loading.batch_size)
        stats = self.loading.write(index, OffsetRange("", -1, 0, 0), output, messages, attempt)
        if seen:  # report the span of the first topic-partition the task saw
            first = seen[0]
            stats = replace(stats, topic=first.topic, partition=first.partition, from_offset=first.from_offset,
                            until_offset=max(s.until_offset for s in seen if s.partition == first.partition
                                             and s.topic == first.topic))
        yield _stats_batch(stats)


def arrow_messages(batches: Iterator[pa.RecordBatch], seen: list[OffsetRange] | None = None
                   ) -> Iterator[list[Message]]:
    """Kafka rows as Messages, one list per Arrow batch; records the offset span per batch in `seen` (if given)."""
    for batch in batches:
        if batch.num_rows == 0:
            continue
        topics = batch.column("topic").to_pylist()
        partitions = batch.column("partition").to_pylist()
        offsets = batch.column("offset").to_pylist()
        stamps = pc.divide(batch.column("timestamp").cast(pa.int64()), 1000).to_pylist()
        rows = zip(topics, partitions, offsets, batch.column("key").to_pylist(),
                   batch.column("value").to_pylist(), stamps, strict=True)   # columns of one record batch
        yield [Message(*row) for row in rows]
        if seen is not None:
            seen.append(OffsetRange(topics[0], partitions[0], offsets[0], offsets[-1] + 1))
