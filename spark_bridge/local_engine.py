"""The local engine: a backfill replayed in this process, without Spark.

The same plan, reader, transformation and sinks as a Spark task (`job.load_range`),
one range after the other with one Kafka consumer: no session to start and no
Python workers, so a small backfill is done before Spark would have started.
Writes one output per range exactly as Spark does (cypherl: one file per range).
Imports neither pyspark nor pyarrow.
"""
from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime

from .job import BackfillJob, BackfillReport, load_range, plan_job
from .range_plan import RangePlan
from .range_reader import RangeReader


def run_local(job: BackfillJob, range_plan: RangePlan | None = None,
              on_progress: Callable[[int, int], None] | None = None) -> BackfillReport:
    """Plan (unless given), read, transform and write every range here; returns per-range stats."""
    job.validate()
    range_plan = range_plan or plan_job(job)
    started_at, t0 = datetime.now(UTC), time.perf_counter()
    ranges = tuple(range_plan.ranges)
    loading = job.loading()
    stats = []
    with RangeReader(job.consumer_config(), fail_on_data_loss=job.fail_on_data_loss) as reader:
        for index, r in enumerate(ranges):
            stats.append(load_range(reader, index, r, loading))
            if on_progress is not None:
                on_progress(index + 1, len(ranges))
    return BackfillReport(range_plan, tuple(stats), started_at, time.perf_counter() - t0)
