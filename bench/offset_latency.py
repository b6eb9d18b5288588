"""How fast does set_stream_offset take effect on a running stream?

A running, assigned stream over 6 partitions on the embedded cluster. For each
change, the time from the `set_offset` call to the first message at the new
offset on EVERY partition (median and p99 over >= 20 changes), against the
stop -> set -> start path that Memgraph's built-in streams require
(`mg.kafka_set_stream_offset` needs a stopped stream), measured in the same run
on the same topic and stream.

    .venv/bin/python bench/offset_latency.py [--changes 20] [--baseline-changes 5]

Prints `ratio: X` = baseline median / set_offset median.
"""
from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench_data import produce  # noqa: E402

from stream_registry import StreamConfig, StreamRegistry  # noqa: E402
from stream_registry import sinks  # noqa: E402
from mgstreams.embedded_kafka import EmbeddedKafka  # noqa: E402

PARTITIONS = 6
TOPIC = "latency"


class ArrivalSink:
    """Records when each (partition, offset) first reaches the sink after `arm()`."""

    def __init__(self):
        self.lock = threading.Lock()
        self.cond = threading.Condition(self.lock)
        self.targets: dict[int, int] = {}
        self.arrived: dict[int, float] = {}
        self.count = 0

    def arm(self, offset: int) -> None:
        with self.lock:
            self.targets = {p: offset for p in range(PARTITIONS)}
            self.arrived = {}

    def write(self, statements) -> None:
        now = time.perf_counter()
        with self.cond:
            self.count += len(statements)
            for s in statements:
                p, o = s.parameters["partition"], s.parameters["offset"]
                if self.targets.get(p) == o and p not in self.arrived:
                    self.arrived[p] = now
            if len(self.arrived) == len(self.targets) and self.targets:
                self.cond.notify_all()

    def wait_all(self, timeout: float) -> float:
        """Time at which the last partition delivered its target offset."""
        with self.cond:
            if not self.cond.wait_for(lambda: len(self.arrived) == len(self.targets), timeout):
                missing = sorted(set(self.targets) - set(self.arrived))
                raise RuntimeError(f"partitions {missing} never delivered the target offset")
            return max(self.arrived.values())

    def close(self) -> None:
        pass


def record(messages):
    """Trivial transformation: where each message came from."""
    return [{"query": "CREATE (:M {partition: $partition, offset: $offset})",
             "parameters": {"partition": m.partition(), "offset": m.offset()}}
            for m in (messages.message_at(i) for i in range(messages.total_messages()))]


def wait_caught_up(sink: ArrivalSink, total: int, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while sink.count < total:
        if time.monotonic() > deadline:
            raise RuntimeError(f"stream delivered {sink.count} of {total}")
        time.sleep(0.05)


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--changes", type=int, default=20, help="set_offset changes to time (>= 20 for p99)")
    parser.add_argument("--baseline-changes", type=int, default=5, help="stop/set/start cycles to time")
    parser.add_argument("--per-partition", type=int, default=2000, help="messages per partition")
    parser.add_argument("--rewind", type=int, default=200,
                        help="targets are drawn from the last N offsets of each partition, so the figure is the "
                             "offset change itself, not the time to re-read a long backlog")
    args = parser.parse_args(argv)
    rng = random.Random(7)
    sink = ArrivalSink()
    sinks.SCHEMES["arrivals"] = sinks.Scheme(parse=lambda parts, query, uri: None,
                                             open=lambda settings, credentials: sink)
    with EmbeddedKafka(brokers=3) as cluster, tempfile.TemporaryDirectory() as state:
        cluster.create_topic(TOPIC, PARTITIONS, 3)
        produce(cluster.bootstrap_servers, TOPIC, args.per_partition * PARTITIONS, PARTITIONS, 100)
        registry = StreamRegistry(state)
        registry.create(StreamConfig(
            name="latency", topics=[TOPIC], bootstrap_servers=cluster.bootstrap_servers,
            transform=f"{Path(__file__).stem}.record", sink="arrivals://", batch_size=1000,
            batch_interval_ms=100, configs={"session.timeout.ms": 6000}))
        sys.modules.setdefault(Path(__file__).stem, sys.modules[__name__])
        registry.start("latency")
        total = args.per_partition * PARTITIONS
        wait_caught_up(sink, total)

        ours = []
        for _ in range(args.changes):
            target = rng.randrange(args.per_partition - args.rewind, args.per_partition - 1)
            sink.arm(target)
            start = time.perf_counter()
            changes = registry.set_offset("latency", target, timeout=10)
            assert all(c.status.value == "applied" for c in changes), changes
            ours.append(sink.wait_all(10) - start)
            time.sleep(0.05)

        baseline = []
        for _ in range(args.baseline_changes):
            target = rng.randrange(args.per_partition - args.rewind, args.per_partition - 1)
            sink.arm(target)
            start = time.perf_counter()
            registry.stop("latency")
            registry.set_offset("latency", target, timeout=10)
            registry.start("latency")
            baseline.append(sink.wait_all(120) - start)
        registry.close()

    ms = lambda seconds: seconds * 1000  # noqa: E731
    print(f"targets: random offsets among the last {args.rewind} of each partition "
          f"({args.per_partition} per partition)")
    print(f"set_offset on a running stream ({len(ours)} changes, {PARTITIONS} partitions): "
          f"median {ms(statistics.median(ours)):.1f} ms, p99 {ms(pct(ours, 0.99)):.1f} ms, "
          f"max {ms(max(ours)):.1f} ms")
    print(f"stop -> set -> start baseline ({len(baseline)} changes): median "
          f"{ms(statistics.median(baseline)):.1f} ms, p99 {ms(pct(baseline, 0.99)):.1f} ms")
    print("  (the baseline waits for the group to rebalance: the broker's initial rebalance delay, and on the"
          " embedded cluster the old member's session timeout, as it ignores LeaveGroup)")
    print(f"ratio: {statistics.median(baseline) / statistics.median(ours):.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
