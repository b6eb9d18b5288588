"""A stream on Spark Structured Streaming (`local[2]`) against a host stream with `tasks: 1`, in one run; then the
Spark stream's micro-batch latency (record produced to record in the sink).

    .venv/bin/python bench/spark_stream.py                        # 120k messages over 6 partitions, 2 rounds
    .venv/bin/python bench/spark_stream.py --messages 20000 --per-batch 4000 --latency-records 200

Throughput: one topic of `--partitions` partitions on the embedded cluster gets `--messages` messages of 100 B.
The same CPU-bound transformation (bench/cpu_transform.py, `--work` steps per message) into `null://`, in
`--rounds` rounds of host then Spark (the machine's load moves; each round's figures are printed, and the ratio
is best of each, as bench/tasks_scaling.py does):
- host: a real `mgstreams serve`, stream `tasks: 1`, batch 500 (bench/tasks_scaling.run: steady rate, from
  the moment its task holds partitions until the group's committed offsets cover every message);
- spark: the query spark_bridge.stream_query starts (the mgstreams_kafka streaming reader; each input
  partition's task reads its Kafka range and writes it itself, stream_source) on a classic `local[2]` session,
  maxOffsetsPerTrigger `--per-batch`, `--tasks` tasks per micro-batch (StreamWriting.tasks), batch 500 within
  each partition's share; steady rate from the end of its first micro-batch (session start and the first
  batch's warm-up excluded) until the group's committed offsets (the reader commits them after each
  micro-batch) cover every message. The steady micro-batches' median time and its parts (Spark's durationMs)
  are printed too.
Prints both rates and `ratio: X` (spark / host; goal >= 1.6 on 2 cores).

Latency: with the Spark stream idle, `--latency-records` records are produced one every `--gap-ms`, each holding
its produce time; transformation `spark_stream.stamped` writes one statement per record into a cypherl file,
which the bench watches (every 5 ms): a record's latency is when its line appears minus its produce time.
Prints the median and p95 (and the micro-batch trigger: `0 seconds`, a new batch as soon as one ends).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(BENCH))

GOAL = 1.6
SIZE = 100
BATCH_SIZE = 500
POLL_S = 0.1


def stamped(messages):
    """One statement per record, carrying the produce time the record holds (the latency run's transformation)."""
    out = []
    for i in range(messages.total_messages()):
        sent = json.loads(messages.message_at(i).payload())["sent"]
        out.append({"query": "CREATE (:Stamped {sent: $sent})", "parameters": {"sent": sent}})
    return out


def spark_session(work: int):
    from pyspark.sql import SparkSession

    from spark_bridge.spark_session import ensure_worker_python

    ensure_worker_python()
    path = os.pathsep.join(p for p in (str(BENCH), str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    return (SparkSession.builder.master("local[2]").appName("mgstreams-bench-spark-stream")
            .config("spark.ui.enabled", "false").config("spark.executorEnv.PYTHONPATH", path)
            .config("spark.executorEnv.BENCH_CPU_WORK", str(work))
            .config("spark.executorEnv.MGSTREAMS_TRANSFORM_PACKAGES", "cpu_transform,spark_stream")
            .getOrCreate())


def spark_query(spark, bootstrap: str, topic: str, work_dir: Path, name: str, transform: str, sink: str,
                per_batch: int, tasks: int | None = None):
    from spark_bridge.job import Loading
    from spark_bridge.micro_batch import StreamWriting
    from spark_bridge.stream_query import StreamQuery, start_stream_query

    source = {"kafka.bootstrap.servers": bootstrap, "kafka.group.id": name, "subscribe": topic,
              "startingOffsets": "earliest", "controlDir": str(work_dir / name / "control"),
              "maxOffsetsPerTrigger": str(per_batch)}
    writing = StreamWriting(Loading(transform, (), sink, BATCH_SIZE), name, tasks=tasks)
    return start_stream_query(spark, StreamQuery(source, writing,
                                                 str(work_dir / name / "checkpoint"), name))


def spark_rate(spark, bootstrap: str, topic: str, partitions: int, count: int, work_dir: Path, per_batch: int,
               timeout_s: float, name: str, tasks: int | None) -> tuple[float, int, list[dict], float]:
    """(steady seconds, messages in the steady window, the steady micro-batches' progress, the cores its
    processes used in that window: the JVM and its Python workers) of a Spark stream over the topic."""
    from stream_registry.kafka.queries import PartitionQuery
    from stream_registry.model import PartitionKey

    query = spark_query(spark, bootstrap, topic, work_dir, name, "cpu_transform.busy", "null://", per_batch, tasks)
    tps = [PartitionKey(topic, p) for p in range(partitions)]
    started = time.perf_counter()
    try:
        with PartitionQuery(bootstrap, name) as watcher:
            steady_at, steady_from = None, 0
            while True:
                done = sum(o or 0 for o in watcher.committed(tps).values())
                if query.exception() is not None:
                    raise SystemExit(f"bench: the Spark stream failed: {query.exception()}")
                if steady_at is None and done > 0:
                    steady_at, steady_from, cpu_from = time.perf_counter(), done, spark_cpu(spark)
                if done >= count:
                    if steady_at is None or steady_from >= count:
                        raise SystemExit("bench: the first micro-batch took every message: give it more --messages")
                    batches = [p for p in query.recentProgress if p["numInputRows"]][1:]
                    window = time.perf_counter() - steady_at
                    return window, count - steady_from, batches, (spark_cpu(spark) - cpu_from) / window
                if time.perf_counter() - started > timeout_s:
                    raise SystemExit(f"bench: the Spark stream is stuck at {done}/{count} after {timeout_s:.0f} s")
                time.sleep(POLL_S)
    finally:
        query.stop()


def spark_cpu(spark) -> float:
    """CPU seconds so far of the session's JVM (driver and executors: local mode) and its Python workers."""
    import psutil
    import tasks_scaling

    jvm = psutil.Process(spark.sparkContext._gateway.proc.pid)
    return tasks_scaling.cpu_of([jvm.pid, *(child.pid for child in jvm.children(recursive=True))])


def batch_line(batches: list[dict]) -> str:
    """The steady micro-batches' median trigger time and its parts (Spark's durationMs)."""
    if not batches:
        return "no steady micro-batch reported"
    def median(key: str) -> float:
        return statistics.median(b["durationMs"].get(key, 0) for b in batches)
    from spark_bridge.stream_offsets import offsets_read

    rows = statistics.median(offsets_read(b["sources"][0]["startOffset"], b["sources"][0]["endOffset"]) or 0
                             for b in batches)
    total, work = median("triggerExecution"), median("addBatch")
    return (f"{len(batches)} steady micro-batches of {rows:,.0f} records: median {total:,.0f} ms, of which addBatch "
            f"(the executors' read+transform+write) {work:,.0f} ms, the rest (planning, offset and commit logs) "
            f"{total - work:,.0f} ms")


def latencies(spark, bootstrap: str, cluster, work_dir: Path, records: int, gap_ms: float) -> list[float]:
    """Seconds from each record's produce to its line in the sink, with the stream running idle first."""
    from confluent_kafka import Producer

    topic = "spark_latency"
    cluster.create_topic(topic, 2, 1)
    out = work_dir / "latency.cypherl"
    query = spark_query(spark, bootstrap, topic, work_dir, "spark_latency", "spark_stream.stamped",
                        f"cypherl://{out}", 10_000)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    seen: dict[float, float] = {}
    try:
        deadline = time.monotonic() + 600
        while query.lastProgress is None:     # the first (empty) micro-batch ran: the query is up
            if time.monotonic() > deadline or query.exception() is not None:
                raise SystemExit(f"bench: the latency query did not start: {query.exception()}")
            time.sleep(0.05)
        next_send, sent = time.perf_counter(), 0
        while len(seen) < records:
            now = time.perf_counter()
            if sent < records and now >= next_send:
                producer.produce(topic, json.dumps({"sent": time.time()}).encode(), partition=sent % 2)
                producer.poll(0)
                sent += 1
                next_send = now + gap_ms / 1000
            arrived = time.time()
            if out.exists():
                for line in out.read_text().splitlines():
                    if "sent:" in line:
                        stamp = float(line.split("sent:", 1)[1].split("}", 1)[0])
                        seen.setdefault(stamp, arrived - stamp)
            if time.monotonic() > deadline:
                raise SystemExit(f"bench: {len(seen)}/{records} latency records arrived")
            time.sleep(0.005)
    finally:
        producer.flush(10)
        query.stop()
    return list(seen.values())


def throughput_summary(host_rates: list[float], spark_rates: list[float], host_cpu: list[float],
                       spark_cpu_: list[float]) -> None:
    """The rates (best of the rounds), the ratio, and the CPU each engine spent per message."""
    rounds = len(host_rates)
    host_rate, spark_rate_ = max(host_rates), max(spark_rates)
    ratio = spark_rate_ / host_rate
    print(f"host tasks 1 rate: {host_rate:12,.0f} msgs/s steady (best of {rounds})")
    print(f"spark local[2] rate: {spark_rate_:10,.0f} msgs/s steady (best of {rounds})")
    print(f"ratio: {ratio:.2f}  (spark local[2] / host tasks 1; goal {GOAL}: {'ok' if ratio >= GOAL else 'BELOW GOAL'})")
    host_cost, spark_cost = min(host_cpu) * 1e3, min(spark_cpu_) * 1e3
    print(f"CPU per message (best round): host {host_cost:.3f} ms, spark {spark_cost:.3f} ms (JVM and Python "
          f"workers); with two free cores for Spark and one for the host, that is {2 * host_cost / spark_cost:.2f}x "
          f"(a projection from CPU cost, not a measured rate)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog="\n".join(__doc__.splitlines()[2:]))
    parser.add_argument("--messages", type=int, default=120_000, help="messages in the topic (default 120k)")
    parser.add_argument("--partitions", type=int, default=6, help="partitions (default 6)")
    parser.add_argument("--work", type=int, default=3000, help="the transformation's steps per message")
    parser.add_argument("--per-batch", type=int, default=32_000,
                        help="maxOffsetsPerTrigger (default 32000: a host Spark stream's batch_size 500 x 64, "
                             "spark_runner.MICRO_BATCH_BATCHES)")
    parser.add_argument("--tasks", type=int, default=2, help="Spark tasks per micro-batch, each writing several "
                                                             "partitions' ranges (default 2, local[2]'s cores; 0: one "
                                                             "task per partition)")
    parser.add_argument("--rounds", type=int, default=2, help="rounds of both, host then Spark; best of each "
                                                               "(default 2)")
    parser.add_argument("--latency-records", type=int, default=100, help="records of the latency run (default 100)")
    parser.add_argument("--gap-ms", type=float, default=50.0, help="between latency records (default 50 ms)")
    args = parser.parse_args(argv)
    import tasks_scaling
    from bench_data import check_topic, produce

    from mgstreams.embedded_kafka import EmbeddedKafka
    from mgstreams.host_process import HostProcess

    count, partitions = args.messages, args.partitions
    host_rates: list[float] = []
    spark_rates: list[float] = []
    host_cpu: list[float] = []     # CPU seconds per message, each round
    spark_cpu_: list[float] = []
    print(f"spark stream: {count:,} messages x {SIZE} B over {partitions} partitions, embedded cluster, sink null://, "
          f"transform cpu_transform.busy ({args.work} steps per message); {os.cpu_count()} cores, load average "
          f"{os.getloadavg()[0]:.2f} at start", flush=True)
    work_dir = Path(tempfile.mkdtemp(prefix="mgstreams-bench-spark-stream-"))
    try:
        with EmbeddedKafka(brokers=1, initial_rebalance_delay_ms=0) as cluster:
            bootstrap = cluster.bootstrap_servers
            topic = tasks_scaling.TOPIC
            cluster.create_topic(topic, partitions, 1)
            produce(bootstrap, topic, count, partitions, SIZE)
            check_topic(bootstrap, topic, partitions, count)
            path = os.pathsep.join(p for p in (str(BENCH), str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
            host = HostProcess(work_dir / "state", log_path=work_dir / "host.log",
                               env={"MGSTREAMS_TRANSFORM_PACKAGES": "cpu_transform", "PYTHONPATH": path,
                                    "BENCH_CPU_WORK": str(args.work)}).spawn()
            spark = None
            try:
                host.wait_ready()
                client = host.client(timeout=60)
                spark = spark_session(args.work)
                for i in range(1, args.rounds + 1):
                    _wall, window, messages, cores = tasks_scaling.run(client, bootstrap, f"host_tasks1_r{i}", 1,
                                                                       partitions, count, max(300.0, count / 100))
                    host_rates.append(messages / window)
                    host_cpu.append(cores * window / messages)
                    print(f"  round {i} host tasks 1: steady {window:6.2f} s over {messages:,} messages "
                          f"{host_rates[-1]:9,.0f} msgs/s ({cores:.2f} cores); load average "
                          f"{os.getloadavg()[0]:.2f}", flush=True)
                    window, messages, batches, spark_cores = spark_rate(
                        spark, bootstrap, topic, partitions, count, work_dir, args.per_batch, max(600.0, count / 50),
                        f"spark_rate_r{i}", args.tasks or None)
                    spark_rates.append(messages / window)
                    spark_cpu_.append(spark_cores * window / messages)
                    print(f"  round {i} spark local[2]: steady {window:6.2f} s over {messages:,} messages "
                          f"{spark_rates[-1]:9,.0f} msgs/s ({spark_cores:.2f} cores); load average "
                          f"{os.getloadavg()[0]:.2f}\n"
                          f"    {batch_line(batches)}", flush=True)
                    print(f"  round {i} ratio: {spark_rates[-1] / host_rates[-1]:.2f}", flush=True)
                client.close()
                throughput_summary(host_rates, spark_rates, host_cpu, spark_cpu_)   # printed before the latency part
                seconds = latencies(spark, bootstrap, cluster, work_dir, args.latency_records, args.gap_ms)
                latency_load = os.getloadavg()[0]
            finally:
                host.stop()
                if spark is not None:
                    spark.stop()
    finally:
        shutil.rmtree(work_dir, ignore_errors=True)
    ms = sorted(s * 1000 for s in seconds)
    print(f"micro-batch latency (produced -> in the sink, {len(ms)} records, one every {args.gap_ms:g} ms): "
          f"median {statistics.median(ms):.0f} ms, p95 {ms[int(0.95 * (len(ms) - 1))]:.0f} ms; load average "
          f"{latency_load:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
