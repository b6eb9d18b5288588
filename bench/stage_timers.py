"""Timers around a stream worker's stages, shared by bench/stream_profile.py (a bare StreamWorker) and
bench/profile_hook (a stream process of a real host, bench/ingest_throughput.py --profile).

A timer wraps each stage's call, never each message, so the timers cost about nothing. Each stage gets its
wall time and the poll thread's CPU time (time.thread_time). Stages, as `table()` names them:

- consume: the consumer's consume() calls, waiting included (librdkafka's fetch queue);
- collect (gate): the rest of collecting a batch (the offset gate's check of each delivered record);
- wrapping: the messages wrapped for the transformation, and the batch's bookkeeping (its next offsets);
- decode: key.format / value.format decoding (decode_all);
- transformation: the user's function itself;
- statement building: what it returned normalised to statements (run_transformation minus the function);
- rendering: statements to what the sink writes (cypherl lines; Bolt folding and parameters);
- sink: the sink's write minus rendering (the file append, the null sink's count, a graph server's reply);
- commit: the batch commit's call (a pipelined one: handing it over);
- commit wait: the poll thread waiting for a batch commit in flight (it calls nothing on the consumer meanwhile);
- between batches: each part's turn between batches (control requests, retries, health);
- loop (rest): everything else on the poll thread (stats, the loop itself).

Imports nothing of the bench's harness (a stream process imports this through the hook).
"""
from __future__ import annotations

import sys
import time
from collections import defaultdict

STAGES = ("consume", "collect (gate)", "wrapping", "decode", "transformation", "statement building",
          "rendering", "sink", "commit", "commit wait", "between batches", "loop (rest)")


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


def instrument(worker, timers: Timers) -> None:
    """Timers around the worker's stages, by the names its parts use (the batch's delivery on the worker or on
    its `writer`, the commit on the worker or on its `commits`); a stage not found stays at 0."""
    open_consumer = worker._open_consumer
    worker._open_consumer = lambda: _TimedConsumer(open_consumer(), timers)
    worker._collect_batch = timers.timed("collect", worker._collect_batch)
    if hasattr(worker, "_between_batches"):
        worker._between_batches = timers.timed("between", worker._between_batches)
    writer = getattr(worker, "writer", worker)
    process = "process" if hasattr(writer, "process") else "_process"
    setattr(writer, process, timers.timed("process", getattr(writer, process)))
    commits = getattr(worker, "commits", None)
    if commits is not None and hasattr(commits, "commit_batch"):
        commits.commit_batch = timers.timed("commit", commits.commit_batch)
        if hasattr(commits, "await_in_flight"):
            commits.await_in_flight = timers.timed("commit wait", commits.await_in_flight)
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


def table(seconds: dict[str, float]) -> dict[str, float]:
    """The stages of STAGES from the timers' (nested) totals; `loop` is the poll thread's whole time."""
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
        "commit wait": s["commit wait"],
        "between batches": s["between"],
    }
    inner = s["decode"] + s["run_transformation"] + s["sink"] + s["commit"]
    out["wrapping"] = s["process"] - inner
    out["loop (rest)"] = s["loop"] - s["collect"] - s["process"] - s["commit wait"] - s["between"]
    return out


def print_table(seconds: dict[str, float], cpu: dict[str, float], messages: int, indent: str = "") -> None:
    """Per stage: microseconds per message, its share of the poll thread's time, and the poll thread's CPU."""
    wall, used = table(seconds), table(cpu)
    total, cpu_total = sum(wall.values()), sum(used.values())
    print(f"{indent}{'stage':<20} {'us/msg':>8} {'share':>7} {'cpu us/msg':>11}")
    for stage in STAGES:
        print(f"{indent}{stage:<20} {wall[stage] / messages * 1e6:8.2f} {wall[stage] / max(total, 1e-12):7.1%} "
              f"{used[stage] / messages * 1e6:11.2f}")
    print(f"{indent}{'total (poll thread)':<20} {total / messages * 1e6:8.2f} {'':>7} "
          f"{cpu_total / messages * 1e6:11.2f}")
