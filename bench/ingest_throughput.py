"""Live ingestion throughput: a running mgstreams stream against a raw confluent-kafka loop, in one run.

    .venv/bin/python bench/ingest_throughput.py                      # 1M x 200 B over 6 partitions, cypherl
    .venv/bin/python bench/ingest_throughput.py --sink null --messages 200000

The messages are produced once to a 6-partition topic on the embedded 3-broker
cluster. Then, alternately (raw, stream, stream, raw, ...: `--rounds` pairs), each
side consumes the whole topic from the beginning with its own consumer group:

- raw: one confluent-kafka Consumer in the main thread doing exactly what the
  stream does per batch: consume(batch_size) -> run_transformation(fn,
  Messages.from_kafka(batch)) -> sink.write(statements) -> synchronous commit
  of the next offsets;
- stream: `StreamRegistry.create(StreamConfig(...))` + `start()`, same
  transformation, same kind of sink, same batch size; the main thread only
  polls the group's committed offsets every POLL_S (a consumer that never
  joins the group, waiting in librdkafka with the GIL released).

Each side is timed from the start (consumer creation / `start()`) until all N
messages were written and committed; consumer close / stream stop are not
timed. The cypherl sink writes to tmpfs (/dev/shm), and every file is checked
to hold N lines. Prints every run with the process CPU time it used (embedded
broker threads included; unlike wall time, it does not move with other load on
the machine), the best rate of each side and `ratio: X` (best stream rate /
best raw rate). Floor: 0.85.

With `--delivery exactly_once` the two sides are instead the same stream in
each delivery mode (`at_least_once`, then `exactly_once`: each batch's offsets
written with the batch), on the same sink; the cypherl files are checked to
hold N statements plus the offsets statements and frame lines, and `ratio: X`
is exactly-once / at-least-once. Floor: 0.9. (`bench/describe_cost.py` prints
what reading an exactly-once file's stored offsets costs at 1 GB.)

With `--poison-every N` the two sides are the same stream (errors.tolerance
'all', a dead-letter topic, the `json_nodes` transformation) on two topics of
the same size: a clean one, and one where one message in N is not JSON. Each
poison message costs its batch a bisection and a dead-letter produce; the files
are checked to hold every other message, the dead-letter topic every poison
one, and `ratio: X` is poisoned / clean. Floor: 0.8.
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

from bench_data import check_topic, poison_count, produce  # noqa: E402
from confluent_kafka import Consumer, TopicPartition  # noqa: E402

from stream_registry import StreamConfig, StreamRegistry  # noqa: E402
from mgstreams.embedded_kafka import EmbeddedKafka  # noqa: E402
from stream_registry.graph.cypherl_frames import FRAME_PREFIX  # noqa: E402
from stream_registry.graph.sinks import OUTPUT_DIRS_ENV, open_sink  # noqa: E402
from stream_registry.graph.transform import Messages, load_transformation, run_transformation  # noqa: E402
from stream_registry.registry.worker import CONSUMER_DEFAULTS  # noqa: E402

FLOOR = 0.85
EXACTLY_ONCE_FLOOR = 0.9
POISON_FLOOR = 0.8
TOPIC = "ingest"
POISONED_TOPIC = "ingest_poisoned"
DEAD_LETTER_TOPIC = "ingest_dlq"
POISON_TRANSFORM = "stream_registry.builtin_transformations.json_nodes"
PARTITIONS = 6
BATCH_SIZE = 1000
BATCH_INTERVAL_MS = 100
POLL_S = 0.05
TRANSFORM = "stream_registry.builtin_transformations.merge_messages"


def sink_uri(kind: str, out_dir: Path, label: str) -> str:
    return "null://" if kind == "null" else f"cypherl://{out_dir / (label + '.cypherl')}"


def count_lines(path: Path) -> int:
    lines = 0
    with open(path, "rb") as f:
        while chunk := f.read(1 << 22):
            lines += chunk.count(b"\n")
    return lines


def count_offset_lines(path: Path) -> int:
    """The lines that are not the transformation's: exactly-once offsets statements (offset_store) and the
    batches' frame lines (cypherl_frames)."""
    with open(path, "rb") as f:
        return sum(1 for line in f if line.startswith((b"MERGE (o:MgstreamsOffset", FRAME_PREFIX)))


def dead_lettered(bootstrap: str) -> int:
    """Messages on the dead-letter topic (every run appends its poison messages)."""
    watcher = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench_dlq"})
    try:
        low, high = watcher.get_watermark_offsets(TopicPartition(DEAD_LETTER_TOPIC, 0), timeout=10)
    finally:
        watcher.close()
    return high - low


def verify_and_clean(uri: str, count: int, label: str) -> None:
    if not uri.startswith("cypherl://"):
        return
    path = Path(uri[len("cypherl://"):])
    lines = count_lines(path) - count_offset_lines(path)
    path.unlink()
    if lines != count:
        raise SystemExit(f"bench: {label} wrote {lines} statements, expected {count}")


def run_raw(bootstrap: str, count: int, transform: str, uri: str, group: str) -> float:
    """The baseline: the stream's per-batch work written as a plain confluent-kafka loop."""
    started = time.perf_counter()
    fn = load_transformation(transform)
    sink = open_sink(uri)
    consumer = Consumer({**CONSUMER_DEFAULTS, "bootstrap.servers": bootstrap, "group.id": group,
                         "enable.auto.commit": False, "enable.auto.offset.store": False,
                         "enable.partition.eof": False})   # the stream's own fetch settings: a fair baseline
    consumer.subscribe([TOPIC])
    done = 0
    try:
        while done < count:
            batch = consumer.consume(BATCH_SIZE, BATCH_INTERVAL_MS / 1000)
            batch = [m for m in batch if m.error() is None]
            if not batch:
                continue
            statements = run_transformation(fn, Messages.from_kafka(batch))
            sink.write(statements)
            next_offsets = {}
            for m in batch:
                next_offsets[(m.topic(), m.partition())] = m.offset() + 1
            consumer.commit(offsets=[TopicPartition(t, p, o) for (t, p), o in next_offsets.items()],
                            asynchronous=False)
            done += len(batch)
        elapsed = time.perf_counter() - started
    finally:
        consumer.close()
        sink.close()
    if done != count:
        raise SystemExit(f"bench: raw loop consumed {done} messages, expected {count}")
    return elapsed


def run_stream(registry: StreamRegistry, bootstrap: str, count: int, transform: str, uri: str,
               name: str, timeout_s: float, delivery: str = "at_least_once", topic: str = TOPIC,
               **settings) -> float:
    """A running stream; done when its group's committed offsets cover all `count` messages."""
    registry.create(StreamConfig(name=name, topics=[topic], bootstrap_servers=bootstrap, transform=transform,
                                 sink=uri, consumer_group=name, batch_size=BATCH_SIZE,
                                 batch_interval_ms=BATCH_INTERVAL_MS, delivery=delivery, **settings))
    watcher = Consumer({"bootstrap.servers": bootstrap, "group.id": name, "enable.auto.commit": False})
    tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
    try:
        started = time.perf_counter()
        registry.start(name)
        while True:
            committed = sum(max(tp.offset, 0) for tp in watcher.committed(tps, timeout=10))
            now = time.perf_counter()
            if committed >= count:
                elapsed = now - started
                break
            info = registry.get(name)
            if info.error or now - started > timeout_s:
                raise SystemExit(f"bench: stream stuck at {committed}/{count} committed "
                                 f"(status {info.status.value}, error {info.error})")
            time.sleep(POLL_S)
    finally:
        watcher.close()
        registry.drop(name)
    if committed != count:
        raise SystemExit(f"bench: stream committed {committed} messages, expected {count}")
    return elapsed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=1_000_000, help="messages to produce (default 1M)")
    parser.add_argument("--size", type=int, default=200, help="payload bytes per message (default 200)")
    parser.add_argument("--sink", choices=("cypherl", "null"), default="cypherl",
                        help="cypherl: a file on tmpfs (/dev/shm); null: discard (default cypherl)")
    parser.add_argument("--rounds", type=int, default=2, help="raw/stream pairs, run alternately (default 2)")
    parser.add_argument("--transform", default=TRANSFORM, help=f"transformation (default {TRANSFORM})")
    parser.add_argument("--delivery", choices=("exactly_once",), default=None,
                        help="compare an exactly-once stream with an at-least-once one instead of stream/raw")
    parser.add_argument("--poison-every", type=int, default=0, metavar="N",
                        help="compare a stream on a topic where 1 message in N is poison with one on a clean topic")
    args = parser.parse_args(argv)
    if args.delivery and args.poison_every:
        parser.error("give --delivery or --poison-every, not both")
    sides = ("at_least_once", "exactly_once") if args.delivery else \
        ("clean", "poisoned") if args.poison_every else ("raw", "stream")
    if args.messages < 1 or args.rounds < 1 or args.poison_every < 0:
        parser.error("--messages, --rounds and --poison-every must be positive")
    if args.poison_every and args.transform == TRANSFORM:
        args.transform = POISON_TRANSFORM   # poison: a payload that is not JSON
    poisons = poison_count(args.messages, args.poison_every)

    shm = Path("/dev/shm")
    out_dir = Path(tempfile.mkdtemp(prefix="mgstreams-bench-", dir=shm if shm.is_dir() else None))
    state_dir = Path(tempfile.mkdtemp(prefix="mgstreams-bench-state-"))
    timeout_s = max(120.0, args.messages / 2_000)
    print(f"ingest throughput: {args.messages:,} messages x {args.size} B over {PARTITIONS} partitions, "
          f"embedded 3-broker cluster, sink {args.sink}"
          + (f" ({out_dir})" if args.sink == "cypherl" else "")
          + f", batch {BATCH_SIZE}, transform {args.transform}", flush=True)
    rates: dict[str, list[float]] = {side: [] for side in sides}
    cpus: dict[str, list[float]] = {side: [] for side in sides}
    try:
        with EmbeddedKafka(brokers=3, initial_rebalance_delay_ms=0) as cluster:
            bootstrap = cluster.bootstrap_servers
            cluster.create_topic(TOPIC, PARTITIONS, 3)
            t = time.perf_counter()
            produce(bootstrap, TOPIC, args.messages, PARTITIONS, args.size)
            check_topic(bootstrap, TOPIC, PARTITIONS, args.messages)
            if args.poison_every:
                cluster.create_topic(POISONED_TOPIC, PARTITIONS, 3)
                cluster.create_topic(DEAD_LETTER_TOPIC, 1, 3)
                produce(bootstrap, POISONED_TOPIC, args.messages, PARTITIONS, args.size, args.poison_every)
                check_topic(bootstrap, POISONED_TOPIC, PARTITIONS, args.messages)
                print(f"{poisons} poison messages (1 in {args.poison_every:,}) on {POISONED_TOPIC}", flush=True)
            print(f"produced in {time.perf_counter() - t:.1f} s", flush=True)
            # the stream's cypherl files go to out_dir (tmpfs), outside the registry's default <state>/output
            os.environ[OUTPUT_DIRS_ENV] = os.pathsep.join(filter(None, (os.environ.get(OUTPUT_DIRS_ENV), str(out_dir))))
            registry = StreamRegistry(state_dir)
            try:
                for round_no in range(1, args.rounds + 1):
                    # ABBA order (raw, stream, stream, raw, ...): neither side always goes first.
                    for side in sides if round_no % 2 else sides[::-1]:
                        label = f"bench_{side}_{round_no}"
                        uri = sink_uri(args.sink, out_dir, label)
                        cpu = time.process_time()
                        if side == "raw":
                            elapsed = run_raw(bootstrap, args.messages, args.transform, uri, label)
                        elif args.poison_every:
                            before = dead_lettered(bootstrap)
                            elapsed = run_stream(registry, bootstrap, args.messages, args.transform, uri, label,
                                                 timeout_s, topic=POISONED_TOPIC if side == "poisoned" else TOPIC,
                                                 errors_tolerance="all", dead_letter_topic=DEAD_LETTER_TOPIC)
                            expected = poisons if side == "poisoned" else 0
                            if dead_lettered(bootstrap) - before != expected:
                                raise SystemExit(f"bench: {label} dead-lettered {dead_lettered(bootstrap) - before}"
                                                 f" messages, expected {expected}")
                        else:
                            elapsed = run_stream(registry, bootstrap, args.messages, args.transform, uri,
                                                 label, timeout_s, "at_least_once" if side == "stream" else side)
                        cpu = time.process_time() - cpu
                        verify_and_clean(uri, args.messages - (poisons if side == "poisoned" else 0), label)
                        rate = args.messages / elapsed
                        rates[side].append(rate)
                        cpus[side].append(cpu / args.messages * 1e6)
                        print(f"  round {round_no} {side:<13}  {elapsed:7.2f} s  {rate:12,.0f} msgs/s   "
                              f"(process cpu {cpu:6.2f} s, {cpu / args.messages * 1e6:5.1f} us/msg)", flush=True)
            finally:
                registry.close()
    finally:
        shutil.rmtree(out_dir, ignore_errors=True)
        shutil.rmtree(state_dir, ignore_errors=True)

    base, measured = sides
    ratio = max(rates[measured]) / max(rates[base])
    floor = EXACTLY_ONCE_FLOOR if args.delivery else POISON_FLOOR if args.poison_every else FLOOR
    for side in sides:
        print(f"{side} rate: {max(rates[side]):12,.0f} msgs/s (best of {len(rates[side])})")
    print(f"cpu per message: " + ", ".join(f"{side} {min(cpus[side]):.2f} us" for side in sides) + " (lowest of each)")
    print(f"ratio: {ratio:.3f}  ({measured} / {base}; floor {floor}: {'ok' if ratio >= floor else 'BELOW FLOOR'})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
