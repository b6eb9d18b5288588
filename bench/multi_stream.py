"""Streams side by side: one stream alone, then two at once, each in its own process of a real host, and as threads.

    .venv/bin/python bench/multi_stream.py                      # 2 topics x 1M x 200 B over 6 partitions each
    .venv/bin/python bench/multi_stream.py --messages 100000 --rounds 1
    .venv/bin/python bench/multi_stream.py --config fetch.queue.backoff.ms=1000   # a consumer setting, every stream

Two topics (A, B) of `--partitions` partitions on the embedded 3-broker cluster
each get `--messages` messages of 200 B, produced once. Every run below reads
whole topics from the beginning with fresh consumer groups, transformation
`merge_messages_batched`, sink `null://`, batch 1000:

- one: one stream on A in a stream host (`mgstreams serve` in a child process,
  driven over HTTP; the host runs each stream in a child process of its own);
- two: two streams at once in the same host, on A and on B;
- threads: the same two streams as threads of one process (a
  `StreamRegistry(isolation=Isolation.THREAD)` in the bench process, which
  also holds the embedded brokers).

`--rounds` rounds run the three alternately (one, two, threads; then threads,
two, one; ...). The calls of one run are issued together; the bench looks at
each stream's group's committed offsets every POLL_S (a consumer with the
stream's group id that never joins the group). What a user feels is a stream's
throughput once it runs, so a run's rate is **steady, start-up excluded**:
while all its streams run (from the look at which every one of them had
committed a batch: its process spawned, its group joined, its first fetch
done; to the first look at which one had read its whole topic), each stream's
messages committed between two of its own commits, over that time, summed
(steady_rate: committed offsets move only at each commit, every 500 ms while a
stream reads a backlog). The time from the start calls
to the last stream's end (start-up included) is printed beside it, and its
two / one ratio once, as figures about start-up: with a stream reading 500k
messages in about 1.5 s, spawning a process and joining a group (1-3 s on a
loaded machine) were most of what that time measured. Create, stop and drop
are not timed. Each stream's line also shows when its start call returned.
While streams run, each stream's pid and RSS are sampled from GET
/streams/{name} (the max is reported); the threads run reports the bench
process's RSS once, when its streams finished. CPU seconds per run: each
stream process (psutil, when it finished; of it, its librdkafka threads: a
partition fetched twice shows there), the host, and the bench process
(the embedded brokers' threads; for the threads run also both streams). Each
run's line ends with the machine's load average (1 minute) before and after.

The streams keep their own consumer settings unless `--config` overrides one.
Streams default to `fetch.queue.backoff.ms=50` (config.CONSUMER_DEFAULTS);
with librdkafka's 1000 (`--config fetch.queue.backoff.ms=1000`), on this data
(compressed batches of 200 B messages, each fetch past `queued.min.messages`)
a stream mostly waits for its next fetch: it is then not CPU-bound, and two
threads look as good as two processes.

Prints every run, each variant's best steady aggregate rate, the per-stream
RSS, `ratio: X` (best steady two-stream aggregate / best steady one-stream
rate) and, for comparison, `threads ratio: X` (best two-thread aggregate / the
same one-stream rate), and what bounds the ratio: in the one-stream run, the CPU a message cost the stream's
poll thread (all its Python, holding the GIL: one stream's rate is at most one over it) and its librdkafka
threads beside it (fetching, zstd, parsing); two such streams on C cores reach at most C / (both) messages a
second, C x poll / (poll + librdkafka) times one. Floor: ratio >= 1.6 on 2 cores.
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import psutil  # noqa: E402
from bench_data import check_topic, produce  # noqa: E402
from confluent_kafka import Consumer, TopicPartition  # noqa: E402
from process_cpu import cpu_of, thread_cpu_of  # noqa: E402
from steady_rate import steady_rate  # noqa: E402

from mgstreams.embedded_kafka import EmbeddedKafka  # noqa: E402
from mgstreams.host_process import HostProcess  # noqa: E402
from stream_registry import StreamConfig, StreamInfo  # noqa: E402
from stream_registry.registry import Isolation, StreamRegistry  # noqa: E402

FLOOR = 1.6
TOPICS = ("multi_a", "multi_b")
PARTITIONS = 6
SIZE = 200
BATCH_SIZE = 1000
BATCH_INTERVAL_MS = 100
POLL_S = 0.02
RSS_EVERY_S = 0.25
SINK = "null://"
TRANSFORM = "stream_registry.builtin_transformations.merge_messages_batched"
VARIANTS = ("one", "two", "threads")
MB = 1024 * 1024


@dataclass
class Tracked:
    """One stream of a run: what the bench saw of it."""
    label: str                     # "a" or "b"
    name: str                      # stream name = consumer group
    topic: str
    elapsed: float | None = None   # start call -> every message committed
    start_s: float | None = None   # start call -> it returned (for the host: its process runs the consumer)
    pid: int | None = None
    rss_max: int = 0
    cpu_s: float | None = None     # the stream process's CPU when it finished
    rdkafka_s: float | None = None   # ... of which librdkafka's threads (fetching, decompressing, parsing)
    poll_s: float | None = None      # ... and its busiest other thread: the poll thread, all its Python
    watcher: Consumer | None = None
    tps: list = field(default_factory=list)

    def committed(self) -> int:
        return sum(max(tp.offset, 0) for tp in self.watcher.committed(self.tps, timeout=10))


@dataclass
class Driver:
    """How a variant creates, starts, looks at and drops its streams."""
    create: Callable[[str, str], None]
    start: Callable[[int, str], object]    # (the stream's index in its run, its name)
    info: Callable[[str], StreamInfo]
    drop: Callable[[str], object]
    per_process: bool              # each stream in a process of its own (the host) or threads of this one


def stream_cpu(s: Tracked) -> str:
    if s.cpu_s is None:
        return f"stream {s.label} ?"
    return f"stream {s.label} {s.cpu_s:.2f} s" + (f" (librdkafka {s.rdkafka_s:.2f} s)" if s.rdkafka_s is not None
                                                   else "")


def run_variant(driver: Driver, streams: list[Tracked], bootstrap: str, partitions: int, count: int,
                timeout_s: float, host_pid: int | None) -> tuple[float, float | None, float, float | None, int]:
    """Start every stream at once, wait until each has committed its whole topic.

    (wall s, steady aggregate rate (steady_rate), bench process cpu s, host cpu s, bench process RSS when the
    last stream finished)."""
    for s in streams:
        driver.create(s.name, s.topic)
        s.watcher = Consumer({"bootstrap.servers": bootstrap, "group.id": s.name, "enable.auto.commit": False})
        s.tps = [TopicPartition(s.topic, p) for p in range(partitions)]
    pool = ThreadPoolExecutor(max_workers=len(streams), thread_name_prefix="bench-start")
    try:
        host_cpu = cpu_of(host_pid)
        bench_cpu = time.process_time()
        started = time.perf_counter()

        def start(index: int, s: Tracked) -> None:
            driver.start(index, s.name)
            s.start_s = time.perf_counter() - started

        starts = [pool.submit(start, index, s) for index, s in enumerate(streams)]
        next_sample = started
        looks: list[tuple[float, list[int]]] = []   # (seconds since the start calls, committed per stream)
        while True:
            now = time.perf_counter()
            done = [count if s.elapsed is not None else s.committed() for s in streams]
            looks.append(((now + time.perf_counter()) / 2 - started, done))
            for s, committed in zip(streams, done, strict=True):
                if s.elapsed is None and committed >= count:
                    s.elapsed = time.perf_counter() - started
                    sample(driver, s)          # at least one sample each, while it still runs
                    if driver.per_process:
                        s.cpu_s, split = cpu_of(s.pid), thread_cpu_of(s.pid)
                        s.rdkafka_s, s.poll_s = split if split is not None else (None, None)
            if all(s.elapsed is not None for s in streams):
                bench_rss = psutil.Process().memory_info().rss   # before the streams stop
                break
            if now >= next_sample:
                next_sample = now + RSS_EVERY_S
                for s in streams:
                    if s.elapsed is None and (not driver.per_process or starts[streams.index(s)].done()):
                        sample(driver, s)
            for future in starts:
                if future.done() and future.exception() is not None:
                    raise SystemExit(f"bench: start failed: {future.exception()}")
            if now - started > timeout_s:
                stuck = ", ".join(f"{s.name} {s.committed()}/{count}" for s in streams if s.elapsed is None)
                raise SystemExit(f"bench: streams stuck after {timeout_s:.0f} s: {stuck}")
            time.sleep(POLL_S)
        wall = time.perf_counter() - started
        bench_cpu = time.process_time() - bench_cpu
        if host_cpu is not None:
            host_now = cpu_of(host_pid)
            host_cpu = None if host_now is None else host_now - host_cpu
        for future in starts:
            future.result()
        return wall, steady_rate(looks, count), bench_cpu, host_cpu, bench_rss
    finally:
        pool.shutdown(wait=True)
        for s in streams:
            if s.watcher is not None:
                s.watcher.close()
                s.watcher = None
            try:
                driver.drop(s.name)
            except Exception as exc:  # a stream that never got created: nothing to drop
                print(f"  (drop {s.name}: {exc})", file=sys.stderr)


def sample(driver: Driver, s: Tracked) -> None:
    info = driver.info(s.name)
    if info.error:
        raise SystemExit(f"bench: stream {s.name} is {info.status.value}: {info.error}")
    if info.pid is not None:
        s.pid = info.pid
    if info.rss_bytes:
        s.rss_max = max(s.rss_max, info.rss_bytes)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog="\n".join(__doc__.splitlines()[2:]))
    parser.add_argument("--messages", type=int, default=1_000_000, help="messages per topic (default 1M)")
    parser.add_argument("--partitions", type=int, default=PARTITIONS, help=f"partitions per topic "
                                                                             f"(default {PARTITIONS})")
    parser.add_argument("--rounds", type=int, default=2, help="rounds of the three variants, best of each "
                                                              "counts (default 2)")
    parser.add_argument("--config", action="append", default=[], metavar="KEY=VALUE",
                        help="a consumer setting for every stream (repeatable; default: none, the stream's own), "
                             "e.g. fetch.queue.backoff.ms=50")
    args = parser.parse_args(argv)
    if args.messages < 1 or args.rounds < 1 or args.partitions < 1:
        parser.error("--messages, --partitions and --rounds must be positive")
    if any("=" not in item for item in args.config):
        parser.error("--config takes KEY=VALUE")
    configs = dict(item.split("=", 1) for item in args.config)

    count, partitions = args.messages, args.partitions
    work = Path(tempfile.mkdtemp(prefix="mgstreams-bench-multi-"))
    timeout_s = max(120.0, count / 2_000)
    cpu_count = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    print(f"multi-stream: {len(TOPICS)} topics x {count:,} messages x {SIZE} B over {partitions} partitions each, "
          f"embedded 3-broker cluster, sink {SINK}, batch {BATCH_SIZE}, transform {TRANSFORM}, {cpu_count} cores"
          + (f", consumer configs {configs}" if configs else ""),
          flush=True)
    rates: dict[str, list[float]] = {v: [] for v in VARIANTS}   # steady (steady_rate)
    walls: dict[str, list[float]] = {v: [] for v in VARIANTS}   # start call to the last stream's end
    cpu_us: dict[str, list[float]] = {v: [] for v in VARIANTS}   # stream processes' CPU per message
    cores: dict[str, list[float]] = {v: [] for v in VARIANTS}    # their CPU over the run's wall time
    splits: list[tuple[float, float, float]] = []   # one-stream runs: (rate, poll thread us, librdkafka us a message)
    short: set[str] = set()   # variants with a run too short for a steady rate (its rate includes start-up)
    rss: dict[str, tuple[int, int | None]] = {}      # "one/a" -> (max bytes, pid)
    try:
        with EmbeddedKafka(brokers=3, initial_rebalance_delay_ms=0) as cluster:
            bootstrap = cluster.bootstrap_servers
            host = HostProcess(work / "host-state", log_path=work / "host.log").spawn()
            registry = None
            clients = []
            try:
                t = time.perf_counter()
                for topic in TOPICS:
                    cluster.create_topic(topic, partitions, 3)
                    produce(bootstrap, topic, count, partitions, SIZE)
                    check_topic(bootstrap, topic, partitions, count)
                print(f"produced in {time.perf_counter() - t:.1f} s", flush=True)
                client = host.client(timeout=60)
                print(f"host: pid {host.proc.pid} at {host.wait_ready()}", flush=True)

                def config(name: str, topic: str) -> dict:
                    return dict(name=name, topics=[topic], bootstrap_servers=bootstrap, transform=TRANSFORM,
                                sink=SINK, consumer_group=name, batch_size=BATCH_SIZE,
                                batch_interval_ms=BATCH_INTERVAL_MS, configs=configs, restart="never")

                starters = [host.client(timeout=60) for _ in TOPICS]   # an HTTP client per concurrent start
                clients += [client, *starters]
                in_host = Driver(create=lambda name, topic: client.create(**config(name, topic)),
                                 start=lambda index, name: starters[index].start(name),
                                 info=client.get, drop=client.drop, per_process=True)
                registry = StreamRegistry(work / "thread-state", isolation=Isolation.THREAD)
                in_threads = Driver(create=lambda name, topic: registry.create(StreamConfig(**config(name, topic))),
                                    start=lambda index, name: registry.start(name),
                                    info=registry.get, drop=registry.drop, per_process=False)

                for round_no in range(1, args.rounds + 1):
                    for variant in VARIANTS if round_no % 2 else tuple(reversed(VARIANTS)):
                        labels = ("a",) if variant == "one" else ("a", "b")
                        streams = [Tracked(label, f"multi_r{round_no}_{variant}_{label}", topic)
                                   for label, topic in zip(labels, TOPICS, strict=False)]
                        driver = in_host if variant != "threads" else in_threads
                        host_pid = host.proc.pid if driver.per_process else None
                        load = os.getloadavg()[0]
                        wall, steady, bench_cpu, host_cpu, bench_rss = run_variant(
                            driver, streams, bootstrap, partitions, count, timeout_s, host_pid)
                        total = count * len(streams)
                        walls[variant].append(total / wall)
                        if steady is None:   # too few messages for a window: start-up included, and said
                            short.add(variant)
                        rates[variant].append(steady if steady is not None else total / wall)
                        each = ", ".join(f"{s.label} {s.elapsed:.2f} s {count / s.elapsed:,.0f} msgs/s, "
                                         f"started in {s.start_s:.2f} s" for s in streams)
                        if driver.per_process:
                            cpu = ", ".join(stream_cpu(s) for s in streams)
                            cpu += f", host {host_cpu:.2f} s" if host_cpu is not None else ""
                            cpu += f", bench process (brokers) {bench_cpu:.2f} s"
                            for s in streams:
                                key = f"{variant}/{s.label}"
                                if s.rss_max > rss.get(key, (0, None))[0]:
                                    rss[key] = (s.rss_max, s.pid)
                        else:
                            cpu = f"bench process (both streams + brokers) {bench_cpu:.2f} s"
                            key = "threads/a+b"
                            if bench_rss > rss.get(key, (0, None))[0]:
                                rss[key] = (bench_rss, os.getpid())
                        shown = f"{steady:12,.0f} msgs/s steady" if steady is not None else \
                            f"{total / wall:12,.0f} msgs/s (too short for a steady window)"
                        if driver.per_process and all(st.cpu_s is not None for st in streams):
                            cpu_us[variant].append(sum(st.cpu_s for st in streams) / total * 1e6)
                            cores[variant].append(sum(st.cpu_s for st in streams) / wall)
                        if variant == "one" and streams[0].poll_s and streams[0].rdkafka_s is not None:
                            splits.append((rates[variant][-1], streams[0].poll_s / count * 1e6,
                                           streams[0].rdkafka_s / count * 1e6))
                        print(f"  round {round_no} {variant:<7} {shown}{' aggregate' if len(streams) > 1 else ''}"
                              f", {total / wall:10,.0f} with start-up ({wall:.2f} s)  ({each}; cpu: {cpu}; "
                              f"load {load:.2f} -> {os.getloadavg()[0]:.2f})", flush=True)
            finally:
                for c in clients:
                    c.close()
                if registry is not None:
                    registry.close()
                code = host.stop()
            if code != 0:
                raise SystemExit(f"bench: the host exited with status {code} on SIGTERM; log:\n"
                                 f"{host.log()[-2000:]}")
    finally:
        shutil.rmtree(work, ignore_errors=True)

    if short:
        print(f"NOTE: too few messages for a steady window in a run of {', '.join(sorted(short))}: its rate "
              f"includes start-up (give more --messages)")
    one, two, threads = (max(rates[v]) for v in VARIANTS)
    ratio, threads_ratio = two / one, threads / one
    print(f"one stream rate:          {one:12,.0f} msgs/s steady (best of {len(rates['one'])})")
    print(f"two streams rate:         {two:12,.0f} msgs/s steady aggregate, a process each (best of "
          f"{len(rates['two'])})")
    print(f"two threads rate:         {threads:12,.0f} msgs/s steady aggregate, threads of one process "
          f"(best of {len(rates['threads'])})")
    print("per-stream RSS (stream processes: max sampled from GET /streams/{name} while running; "
          "threads: the bench process when its streams finished):")
    for key in ("one/a", "two/a", "two/b"):
        size, pid = rss.get(key, (0, None))
        print(f"  rss {key}: {size / MB:.1f} MB (stream process, pid {pid})")
    size, pid = rss["threads/a+b"]
    print(f"  rss threads/a+b: {size / MB:.1f} MB (the bench process, pid {pid}: both streams and the embedded "
          f"brokers holding every message)")
    if cpu_us["one"] and cpu_us["two"]:   # contention between the processes shows here, load much less
        print(f"stream process cpu per message (whole run, start-up included; best run): one "
              f"{min(cpu_us['one']):.2f} us, two {min(cpu_us['two']):.2f} us (each message read by one of them)")
        print(f"cores the stream processes got (their CPU over the run's time, start-up included; best run): one "
              f"{max(cores['one']):.2f}, two {max(cores['two']):.2f} together (on a machine with cores to spare, two "
              f"get about twice one's; their ratio bounds the two / one ratio)")
    if splits:
        _, poll_us, rdkafka_us = max(splits)   # the run whose rate counted
        print(f"what bounds the ratio: one stream's poll thread spent {poll_us:.2f} us a message (the whole of its "
              f"Python: its rate's limit), its librdkafka threads {rdkafka_us:.2f} us beside it (fetch, zstd, "
              f"parse); two such streams on {cpu_count} cores reach at most {cpu_count} / "
              f"{poll_us + rdkafka_us:.2f} us together, {cpu_count * poll_us / (poll_us + rdkafka_us):.2f} times "
              f"one (less what the host, the brokers and the bench take)")
    wall_ratio = max(walls["two"]) / max(walls["one"])
    print(f"with start-up (start call to the last stream's end, process spawn and group join included): "
          f"{wall_ratio:.2f} (two / one; {count:,} messages a stream)")
    print(f"ratio: {ratio:.2f}  (two process streams / one stream, steady: start-up excluded; floor {FLOOR}: "
          f"{'ok' if ratio >= FLOOR else 'BELOW FLOOR'})")
    print(f"threads ratio: {threads_ratio:.2f}  (two thread streams in one process / one stream, for comparison)")
    print(f"floor: {FLOOR}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
