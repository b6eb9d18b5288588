"""`bench/offset_latency.py --engine spark`: how fast `CALL streams.set_stream_offset` takes effect on a stream
with `engine: spark` (a Structured Streaming query, `local[2]`, in the host's process): the change is taken at
the next micro-batch boundary, answered `applied` once that micro-batch is planned, and its first records at
the target reach the sink when it runs. The goal: one micro-batch interval plus the call.

    .venv/bin/python bench/offset_latency.py --engine spark [--changes 10]

The sink follower, the summary and the topic's shape are offset_latency's (passed in as `bench`, so this module
imports nothing of it).
"""
from __future__ import annotations

import os
import random
import tempfile
import time
from pathlib import Path

from bench_data import produce

from mgstreams.embedded_kafka import EmbeddedKafka
from mgstreams.host_process import HostProcess
from mgstreams.query_module import STREAMS_MODULE, QueryModule
from stream_registry.graph.sinks.policy import OUTPUT_DIRS_ENV

ROOT = Path(__file__).resolve().parent.parent


def run_spark(args, bench) -> int:
    """`--engine spark`: the running path on a stream with `engine: spark, spark.master: local[2]` (a Structured
    Streaming query in the host's process, trigger `0 seconds`): CALL streams.set_stream_offset -> host -> the
    change taken at the next micro-batch boundary (answered `applied` once that micro-batch is planned) -> the
    first record at the target on every partition in the cypherl sink. The goal: one micro-batch interval plus
    the call. No baseline and no tasks: 2 run (a Spark stream has neither)."""
    rng = random.Random(7)
    end = args.per_partition
    with EmbeddedKafka(brokers=1) as cluster, tempfile.TemporaryDirectory(prefix="offset-latency-spark-") as tmp:
        host = HostProcess(Path(tmp) / "state", log_path=Path(tmp) / "host.log",
                           env={OUTPUT_DIRS_ENV: tmp, "PYTHONPATH": str(ROOT)}).spawn()
        try:
            cluster.create_topic(bench.TOPIC, bench.PARTITIONS, 1)
            produce(cluster.bootstrap_servers, bench.TOPIC, end * bench.PARTITIONS, bench.PARTITIONS, 100)
            sink_path = Path(tmp) / "sink.cypherl"
            tail = bench.SinkTail(sink_path).start()
            with QueryModule(STREAMS_MODULE, host.wait_ready(), token=host.token) as streams:
                streams.call("create", bench.STREAM, [bench.TOPIC], cluster.bootstrap_servers, "",
                             f"cypherl://{sink_path}", "", 1000, 100, {}, {}, "on-failure",
                             {"engine": "spark", "spark.master": "local[2]"})
                streams.call("start", bench.STREAM)
                tail.wait_end(end, 600)      # the session, the query and the backlog: its first micro-batches
                running, returned = [], []
                for _ in range(args.changes):
                    offset = rng.randrange(end - args.rewind, end - 1)
                    tail.arm(offset)
                    started = time.perf_counter()
                    rows = streams.call("set_stream_offset", bench.STREAM, offset, 60000)
                    returned.append(time.perf_counter() - started)
                    if [r["status"] for r in rows] != ["applied"] * bench.PARTITIONS:
                        raise SystemExit(f"bench: set_stream_offset did not apply on every partition: {rows}")
                    running.append(tail.wait_arrived(120) - started)
                    tail.wait_end(end, 120)
                streams.call("stop", bench.STREAM)
            tail.close()
        finally:
            code = host.stop()
        if code != 0:
            raise SystemExit(f"bench: the host exited with status {code} on SIGTERM; log:\n{host.log()[-2000:]}")
    print(f"engine spark (local[2], trigger 0 seconds): targets among the last {args.rewind} offsets of each "
          f"partition ({end} per partition, {bench.PARTITIONS} partitions); load average {os.getloadavg()[0]:.2f}")
    print(f"running path, CALL streams.set_stream_offset -> host -> applied at the next micro-batch -> first message "
          f"at the new offset on every partition ({len(running)} changes): {bench.summary(running)}")
    print(f"  the call itself returned (applied: the new epoch's first micro-batch planned): "
          f"{bench.summary(returned)}")
    print(f"  from the call's return to the first message at the new offset on every partition (that micro-batch "
          f"run): {bench.summary([r - c for r, c in zip(running, returned, strict=True)])}")
    return 0

