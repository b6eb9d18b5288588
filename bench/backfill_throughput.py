"""Backfill throughput: Spark local[N] against a single-process replay, in one run.

    .venv/bin/python bench/backfill_throughput.py               # 2M x 200 B over 8 partitions
    .venv/bin/python bench/backfill_throughput.py --messages 200000

Both sides replay the same offset ranges from the embedded cluster through the
same transformation into the same kind of sink (cypherl files): Spark writes
one file per range, the single-process replay (one confluent-kafka consumer,
one Python process) one file. Session start is timed and printed separately and is not part of the
Spark rate: `getOrCreate()` plus one trivial Python job on no data, which is
when Spark lazily starts its Python worker daemon and JIT-compiles the Arrow
and Python runner paths (about 7 s here; a long-lived session or cluster has
paid it already). Everything of the backfill job itself (planning in the
driver, tasks, result collection) is in the Spark rate.
Prints both rates and `ratio: X` (Spark rate / single-process rate); with
`--repeat N` both sides run N times, alternating, and the best of each counts
(other processes on a shared machine make single runs noisy).
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench_data import produce  # noqa: E402

from spark_bridge.backfill import BackfillJob, plan_job, rebatch, run_backfill  # noqa: E402
from spark_bridge.range_reader import RangeReader  # noqa: E402
from spark_bridge.spark_session import build_session  # noqa: E402
from mgstreams.embedded_kafka import EmbeddedKafka  # noqa: E402
from stream_registry.offset_spec import parse_offset_spec  # noqa: E402
from stream_registry.graph.sinks import open_sink  # noqa: E402
from stream_registry.graph.transform import Message, load_transformation, run_transformation  # noqa: E402

FLOOR = 1.4


def single_process(job: BackfillJob, ranges, out_file: Path) -> tuple[int, int, float]:
    """One consumer, one process: every range in turn, same transformation, same sink."""
    started = time.perf_counter()
    fn = load_transformation(job.transform)
    sink = open_sink(f"cypherl://{out_file}")
    records = statements = 0
    with RangeReader(job.consumer_config()) as reader:
        for r in ranges:
            messages = ([Message.from_kafka(m) for m in batch] for batch in reader.messages(r))
            for chunk in rebatch(messages, job.batch_size):
                produced = run_transformation(fn, chunk)
                sink.write(produced)
                records, statements = records + len(chunk), statements + len(produced)
    sink.close()
    return records, statements, time.perf_counter() - started


def _no_rows(batches):
    import pyarrow as pa

    for _ in batches:
        pass
    yield pa.RecordBatch.from_pydict({"n": pa.array([0], pa.int64())})


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=2_000_000)
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--size", type=int, default=200, help="payload bytes")
    parser.add_argument("--batch-size", type=int, default=1000)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--min-partitions", type=int, default=None)
    parser.add_argument("--transform", default="stream_registry.builtin_transformations.merge_messages")
    parser.add_argument("--repeat", type=int, default=1, help="run both sides N times, keep the best of each")
    parser.add_argument("--out", default=None, help="output directory (default: a temporary one, removed)")
    args = parser.parse_args()

    out = Path(args.out or tempfile.mkdtemp(prefix="mgstreams-bench-"))
    shutil.rmtree(out / "spark", ignore_errors=True)
    (out / "single.cypherl").unlink(missing_ok=True)
    with EmbeddedKafka(brokers=1) as cluster:
        topic = "bench_backfill"
        cluster.create_topic(topic, args.partitions, 1)
        t0 = time.perf_counter()
        produce(cluster.bootstrap_servers, topic, args.messages, args.partitions, args.size)
        print(f"produced: {args.messages} messages of {args.size} B over {args.partitions} partitions "
              f"in {time.perf_counter() - t0:.1f} s")

        job = BackfillJob(cluster.bootstrap_servers, (topic,), parse_offset_spec("earliest"),
                          parse_offset_spec("latest"), args.transform, f"cypherl://{out / 'spark'}",
                          batch_size=args.batch_size, min_partitions=args.min_partitions)
        plan = plan_job(job)
        if plan.total_offsets != args.messages:
            print(f"bench: the cluster holds {plan.total_offsets} of {args.messages} offsets "
                  f"(the embedded broker keeps 5 MiB per partition); use fewer --messages")
            return 1

        t0 = time.perf_counter()
        spark = build_session(args.master, "mgstreams-bench")
        session_start = time.perf_counter() - t0
        t0 = time.perf_counter()
        spark.range(0, 2, 1, 2).mapInArrow(_no_rows, "n long").collect()
        warm_up = time.perf_counter() - t0
        print(f"spark session start: {session_start:.1f} s + first-job warm-up {warm_up:.1f} s "
              f"(both excluded from the Spark rate)")
        spark_runs, single_runs = [], []
        try:
            for _ in range(args.repeat):
                shutil.rmtree(out / "spark", ignore_errors=True)
                report = run_backfill(spark, job, plan)
                spark_runs.append(report.seconds)
                print(f"spark {args.master} backfill: {report.records} records, {report.statements} statements "
                      f"in {report.seconds:.1f} s = {report.records / report.seconds:,.0f} records/s "
                      f"({len(plan.ranges)} tasks)")
                (out / "single.cypherl").unlink(missing_ok=True)
                records, statements, seconds = single_process(job, plan.ranges, out / "single.cypherl")
                single_runs.append(seconds)
                print(f"single-process replay: {records} records, {statements} statements in {seconds:.1f} s "
                      f"= {records / seconds:,.0f} records/s")
        finally:
            spark.stop()
        spark_rate, single_rate = args.messages / min(spark_runs), args.messages / min(single_runs)

    if report.records != args.messages or records != args.messages:
        print(f"bench: record counts differ (spark {report.records}, single {records}, "
              f"produced {args.messages})")
        return 1
    ratio = spark_rate / single_rate
    with_start = args.messages / (min(spark_runs) + session_start + warm_up) / single_rate
    print(f"spark rate {spark_rate:,.0f} records/s, single-process rate {single_rate:,.0f} records/s"
          f"{' (best of %d)' % args.repeat if args.repeat > 1 else ''}")
    print(f"ratio including session start and warm-up: {with_start:.2f}")
    print(f"ratio: {ratio:.2f}  (floor {FLOOR}: {'met' if ratio >= FLOOR else 'NOT met'}; "
          f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f})")
    if not args.out:
        shutil.rmtree(out, ignore_errors=True)
    return 0 if ratio >= FLOOR else 2


if __name__ == "__main__":
    sys.exit(main())
