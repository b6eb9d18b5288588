"""Where a stream process spends its time per message: a table of the ingestion path's stages.

    .venv/bin/python bench/stream_profile.py [--messages 300000] [--sink null|cypherl] [--transform T]
    .venv/bin/python bench/stream_profile.py --cprofile 25      # also the 25 costliest functions (cProfile)

The messages are produced once to a 6-partition topic on the embedded 3-broker cluster (as
bench/ingest_throughput.py does). A child process (spawned, as a host spawns a stream process) runs what a
stream process runs, a StreamWorker with the stream's transformation and sink, over the whole topic. Its stages
are timed per batch (a timer around each stage's call, never around each message, so the timers cost about
nothing):

The stages are bench/stage_timers.py's (consume, collect, wrapping, decode, transformation, statement
building, rendering, sink, commit, commit wait, between batches, loop).

Printed: per stage, microseconds per message and its share, and the poll thread's CPU time in it per message
(time.thread_time around the same calls: the column least touched by a loaded machine); then the poll
thread's and the whole process's CPU time per message (time.thread_time / resource.getrusage), and the
machine's load average (1 minute) at the start and the end of the pass. With `--cprofile N` a second pass runs under cProfile (which slows every Python call:
read it for which functions, not for how long) and prints its top N by own time.
"""
from __future__ import annotations

import argparse
import cProfile
import io
import multiprocessing
import os
import pstats
import resource
import sys
import tempfile
import threading
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench_data import check_topic, produce  # noqa: E402
from stage_timers import Timers, instrument  # noqa: E402
from stage_timers import print_table as print_stages

from mgstreams.embedded_kafka import EmbeddedKafka  # noqa: E402

TOPIC = "profile"
PARTITIONS = 6
TRANSFORM = "stream_registry.builtin_transformations.merge_messages"


def _counting(worker, count: int, counted: dict, done: threading.Event) -> None:
    """Count the messages of each batch delivered; `done` once `count` were."""
    writer = getattr(worker, "writer", worker)
    name = "process" if hasattr(writer, "process") else "_process"
    process = getattr(writer, name)

    def counting(batch, *args, **kwargs):
        outcome = process(batch, *args, **kwargs)
        counted["n"] += len(batch)
        if counted["n"] >= count:
            done.set()
        return outcome
    setattr(writer, name, counting)


def _run_child(bootstrap: str, count: int, transform: str, sink_uri: str, group: str, profile: bool) -> dict:
    """In a spawned child, as a stream process: a StreamWorker over the whole topic, timed (or profiled)."""
    from stream_registry.config import StreamConfig
    from stream_registry.graph.sinks import open_sink
    from stream_registry.graph.transform import load_transformation
    from stream_registry.registry.stream.worker import StreamWorker

    config = StreamConfig(name=group, topics=[TOPIC], bootstrap_servers=bootstrap, transform=transform,
                          sink=sink_uri, consumer_group=group, batch_size=1000, batch_interval_ms=100)
    timers = Timers()
    done = threading.Event()
    sink = open_sink(sink_uri)
    worker = StreamWorker(config, load_transformation(transform), sink)
    instrument(worker, timers)
    counted = {"n": 0, "thread_cpu": 0.0}
    _counting(worker, count, counted, done)
    profiler = cProfile.Profile() if profile else None
    run = worker._run

    def poll_thread() -> None:
        cpu0, started = time.thread_time(), time.perf_counter()
        try:
            if profiler is not None:
                profiler.runcall(run)
            else:
                run()
        finally:
            timers.seconds["loop"] += time.perf_counter() - started
            counted["thread_cpu"] = timers.cpu["loop"] = time.thread_time() - cpu0
    worker._run = poll_thread
    usage0 = resource.getrusage(resource.RUSAGE_SELF)
    worker.start()
    started = time.perf_counter()
    if not done.wait(max(120.0, count / 2000)):
        raise SystemExit(f"bench: the stream processed {counted['n']} of {count} messages")
    elapsed = time.perf_counter() - started
    worker.stop()
    usage = resource.getrusage(resource.RUSAGE_SELF)
    sink.close()
    result = {"seconds": dict(timers.seconds), "cpu": dict(timers.cpu), "messages": counted["n"], "elapsed": elapsed,
              "thread_cpu": counted["thread_cpu"],
              "process_cpu": (usage.ru_utime + usage.ru_stime) - (usage0.ru_utime + usage0.ru_stime)}
    if profiler is not None:
        out = io.StringIO()
        pstats.Stats(profiler, stream=out).sort_stats("tottime").print_stats(profile)
        result["cprofile"] = out.getvalue()
    return result


def run_child(*args) -> dict:
    load = os.getloadavg()
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as child:
        return {**child.submit(_run_child, *args).result(), "load": load}


def print_table(result: dict) -> None:
    n = result["messages"]
    print_stages(result["seconds"], result["cpu"], n)
    print(f"messages {n:,} in {result['elapsed']:.2f} s: {n / result['elapsed']:,.0f} msgs/s; cpu per message: "
          f"poll thread {result['thread_cpu'] / n * 1e6:.2f} us, whole process (librdkafka's threads too) "
          f"{result['process_cpu'] / n * 1e6:.2f} us; load average {result['load'][0]:.2f} -> "
          f"{os.getloadavg()[0]:.2f}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=300_000)
    parser.add_argument("--size", type=int, default=200, help="payload bytes per message (default 200)")
    parser.add_argument("--sink", choices=("null", "cypherl"), default="null")
    parser.add_argument("--transform", default=TRANSFORM)
    parser.add_argument("--cprofile", type=int, default=0, metavar="N",
                        help="also a pass under cProfile, printing its N costliest functions")
    args = parser.parse_args(argv)
    with EmbeddedKafka(brokers=3, initial_rebalance_delay_ms=0) as cluster, \
            tempfile.TemporaryDirectory(prefix="mgstreams-profile-", dir="/dev/shm") as out_dir:
        bootstrap = cluster.bootstrap_servers
        cluster.create_topic(TOPIC, PARTITIONS, 3)
        produce(bootstrap, TOPIC, args.messages, PARTITIONS, args.size)
        check_topic(bootstrap, TOPIC, PARTITIONS, args.messages)
        print(f"stream process profile: {args.messages:,} messages x {args.size} B over {PARTITIONS} partitions, "
              f"sink {args.sink}, transform {args.transform}, batch 1000", flush=True)
        passes = [("timers", False)] + ([("cProfile", args.cprofile)] if args.cprofile else [])
        for number, (label, profile) in enumerate(passes):
            uri = "null://" if args.sink == "null" else f"cypherl://{out_dir}/profile_{number}.cypherl"
            result = run_child(bootstrap, args.messages, args.transform, uri, f"profile_{number}", profile)
            if label == "timers":
                print_table(result)
            else:
                print(f"cProfile, top {args.cprofile} by own time (slowed by the profiler):")
                print(result["cprofile"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
