"""What an idle stream costs at a given fetch.wait.max.ms: the price of a short fetch wait.

A stream at the end of its topic (6 partitions on the embedded 3-broker cluster) sends a Fetch to each broker
and the broker holds it up to fetch.wait.max.ms; the shorter the wait, the sooner a seek's fetch goes out
(kafka/fetch_wait.py) and the more Fetch requests an idle stream sends. For each wait, a stream runs in a
process of its own (as the host runs it), reaches the end of its topic, and the CPU of its process and of this
process (which holds the embedded brokers: on a real cluster, the brokers' share) is read over `--seconds`.

    .venv/bin/python bench/idle_fetch_cost.py [--waits 5,3,2] [--seconds 10]

Prints each wait's % of a core (stream process, brokers, both) and `ratio: X` = both at the stream default
(config.CONSUMER_DEFAULTS) / both at the first of `--waits` (the baseline, measured in the same run).
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench_data import produce  # noqa: E402
from process_cpu import cpu_of  # noqa: E402

from mgstreams.embedded_kafka import EmbeddedKafka  # noqa: E402
from stream_registry import StreamConfig  # noqa: E402
from stream_registry.config import CONSUMER_DEFAULTS  # noqa: E402
from stream_registry.registry import Isolation, StreamRegistry  # noqa: E402

TOPIC, PARTITIONS, MESSAGES = "idle", 6, 600
TRANSFORM = "stream_registry.builtin_transformations.merge_messages"


def idle_cost(registry: StreamRegistry, bootstrap: str, wait_ms: int, seconds: float) -> tuple[float, float]:
    """(stream process, this process) CPU as a fraction of a core while a stream at the log end idles."""
    name = f"idle_{wait_ms}"
    registry.create(StreamConfig(name=name, topics=[TOPIC], bootstrap_servers=bootstrap, transform=TRANSFORM,
                                 sink="null://", consumer_group=name, configs={"fetch.wait.max.ms": str(wait_ms)}))
    registry.start(name)
    try:
        deadline = time.monotonic() + 60
        while registry.get(name).records < MESSAGES:   # read to the end: idle from here on
            if time.monotonic() > deadline:
                raise SystemExit(f"bench: stream {name} did not reach the end of {TOPIC} in 60 s")
            time.sleep(0.1)
        pid = registry.get(name).pid
        stream0, here0, wall0 = cpu_of(pid), time.process_time(), time.monotonic()
        time.sleep(seconds)
        stream1, here1, wall1 = cpu_of(pid), time.process_time(), time.monotonic()
        if stream0 is None or stream1 is None:
            raise SystemExit(f"bench: the CPU of stream {name}'s process (pid {pid}) could not be read")
        return (stream1 - stream0) / (wall1 - wall0), (here1 - here0) / (wall1 - wall0)
    finally:
        registry.drop(name)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--waits", default="5,3,2", help="fetch.wait.max.ms values, the first the baseline")
    parser.add_argument("--seconds", type=float, default=10.0, help="how long each idle stream is measured")
    args = parser.parse_args(argv)
    waits = [int(w) for w in args.waits.split(",")]
    default = int(CONSUMER_DEFAULTS["fetch.wait.max.ms"])
    if default not in waits:
        waits.append(default)
    costs: dict[int, float] = {}
    with EmbeddedKafka(brokers=3) as cluster, tempfile.TemporaryDirectory(prefix="idle-fetch-") as tmp:
        cluster.create_topic(TOPIC, PARTITIONS, 3)
        produce(cluster.bootstrap_servers, TOPIC, MESSAGES, PARTITIONS, 100)
        registry = StreamRegistry(Path(tmp) / "state", isolation=Isolation.PROCESS)
        try:
            for wait in waits:
                stream, brokers = idle_cost(registry, cluster.bootstrap_servers, wait, args.seconds)
                costs[wait] = stream + brokers
                print(f"fetch.wait.max.ms={wait}{' (default)' if wait == default else ''}: stream process "
                      f"{stream:.1%} of a core, embedded brokers {brokers:.1%}, both {stream + brokers:.1%}",
                      flush=True)
        finally:
            registry.close()
    print(f"ratio: {costs[default] / costs[waits[0]]:.2f}  (idle CPU at the default {default} ms / at "
          f"{waits[0]} ms, stream process and brokers)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
