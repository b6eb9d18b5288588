"""Where a stream process spends its time per message: a table of the ingestion path's stages.

    .venv/bin/python bench/stream_profile.py [--messages 300000] [--sink null|cypherl] [--transform T]
    .venv/bin/python bench/stream_profile.py --cprofile 25      # also the 25 costliest functions (cProfile)

The messages are produced once to a 6-partition topic on the embedded 3-broker cluster (as
bench/ingest_throughput.py does). A child process (spawned, as a host spawns a stream process) runs what a
stream process runs, a StreamWorker with the stream's transformation and sink, over the whole topic. Its stages
are timed per batch (a timer around each stage's call, never around each message, so the timers cost about
nothing):

- consume: the consumer's consume() calls, waiting included (librdkafka's fetch queue);
- collect (gate): the rest of collecting a batch (the offset gate's check of each delivered record);
- wrapping: the messages wrapped for the transformation, and the batch's bookkeeping (its next offsets);
- decode: key.format / value.format decoding (decode_all);
- transformation: the user's function itself;
- statement building: what it returned normalised to statements (run_transformation minus the function);
- rendering: statements to what the sink writes (cypherl lines; Bolt folding and parameters);
- sink: the sink's write minus rendering (the file append, the null sink's count);
- commit: the synchronous commit of the batch's next offsets;
- loop (rest): everything else on the poll thread (control requests, stats, the loop itself).

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
from collections import defaultdict
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench_data import check_topic, produce  # noqa: E402

from mgstreams.embedded_kafka import EmbeddedKafka  # noqa: E402

TOPIC = "profile"
PARTITIONS = 6
TRANSFORM = "stream_registry.builtin_transformations.merge_messages"
STAGES = ("consume", "collect (gate)", "wrapping", "decode", "transformation", "statement building",
          "rendering", "sink", "commit", "loop (rest)")


class Timers:
    """Seconds per stage, added by the wrappers below (the poll thread only)."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)
        self.cpu: dict[str, float] = defaultdict(float)   # the poll thread's CPU time in each stage
        self.messages = 0

    def timed(self, stage: str, fn):
        seconds, cpu = self.seconds, self.cpu

        def run(*args, **kwargs):
            started, cpu_started = time.perf_counter(), time.thread_time()
            try:
                return fn(*args, **kwargs)
            finally:
                seconds[stage] += time.perf_counter() - started
                cpu[stage] += time.thread_time() - cpu_started
        run.__wrapped__ = fn
        return run


class _TimedConsumer:
    """The worker's consumer with consume() timed; everything else passes through."""

    def __init__(self, consumer, timers: Timers):
        self._consumer = consumer
        self.consume = timers.timed("consume", consumer.consume)

    def __getattr__(self, name):
        return getattr(self._consumer, name)


def _instrument(worker, timers: Timers) -> None:
    """Timers around the worker's stages, by the names its parts use (the batch's delivery on the worker or on
    its `writer`, the commit on the worker or on its `commits`); a stage not found stays at 0."""
    open_consumer = worker._open_consumer
    worker._open_consumer = lambda: _TimedConsumer(open_consumer(), timers)
    worker._collect_batch = timers.timed("collect", worker._collect_batch)
    writer = getattr(worker, "writer", worker)
    process = "process" if hasattr(writer, "process") else "_process"
    setattr(writer, process, timers.timed("process", getattr(writer, process)))
    commits = getattr(worker, "commits", None)
    if commits is not None and hasattr(commits, "commit_batch"):
        commits.commit_batch = timers.timed("commit", commits.commit_batch)
    elif hasattr(worker, "_commit"):
        worker._commit = timers.timed("commit", worker._commit)
    module = sys.modules[type(writer).__module__]
    for name, stage in (("decode_all", "decode"), ("run_transformation", "run_transformation")):
        if hasattr(module, name):
            setattr(module, name, timers.timed(stage, getattr(module, name)))
    writer._transformation = timers.timed("transformation", writer._transformation)
    sink = writer._sink
    for name in ("_render", "_prepare"):   # cypherl's lines; a Bolt sink's statements
        if hasattr(sink, name):
            setattr(sink, name, timers.timed("rendering", getattr(sink, name)))
    sink.write = timers.timed("sink", sink.write)


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


def _table(seconds: dict[str, float]) -> dict[str, float]:
    """The stages of STAGES from the timers' (nested) totals."""
    s = defaultdict(float, seconds)
    out = {
        "consume": s["consume"],
        "collect (gate)": s["collect"] - s["consume"],
        "decode": s["decode"],
        "transformation": s["transformation"],
        "statement building": s["run_transformation"] - s["transformation"],
        "rendering": s["rendering"],
        "sink": s["sink"] - s["rendering"],
        "commit": s["commit"],
    }
    inner = s["decode"] + s["run_transformation"] + s["sink"] + s["commit"]
    out["wrapping"] = s["process"] - inner
    out["loop (rest)"] = s["loop"] - s["collect"] - s["process"]
    return out


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
    _instrument(worker, timers)
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
    table, cpu = _table(result["seconds"]), _table(result["cpu"])
    total, cpu_total = sum(table.values()), sum(cpu.values())
    print(f"{'stage':<20} {'us/msg':>8} {'share':>7} {'cpu us/msg':>11}")
    for stage in STAGES:
        print(f"{stage:<20} {table[stage] / n * 1e6:8.2f} {table[stage] / total:7.1%} {cpu[stage] / n * 1e6:11.2f}")
    print(f"{'total (poll thread)':<20} {total / n * 1e6:8.2f} {'':>7} {cpu_total / n * 1e6:11.2f}")
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
