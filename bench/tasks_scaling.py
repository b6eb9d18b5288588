"""`tasks: 2` against `tasks: 1`: one stream with a CPU-bound transformation, as one process and as two member
processes of its consumer group, in one run of a real host.

    .venv/bin/python bench/tasks_scaling.py                          # 60k messages over 6 partitions, 2 rounds
    .venv/bin/python bench/tasks_scaling.py --messages 20000 --rounds 1

One topic of `--partitions` partitions on the embedded cluster gets `--messages` messages of 100 B, produced
once. Each run reads the whole topic from the beginning with a fresh consumer group, transformation
`cpu_transform.busy` (bench/cpu_transform.py: pure Python work per message, `--work` steps), sink `null://`,
batch 500. Runs alternate (tasks 1, tasks 2; then tasks 2, tasks 1; ...).

A run is timed twice, from its start call:
- `wall`: until the group's committed offsets cover every message (process start and group join included);
- `steady`: from the moment every task runs and holds partitions (the first assignment, then for tasks 2 the
  rebalance that splits them) until the end, over the messages committed in that window: the rate the stream
  keeps once it runs, which is what tasks buy. With it, the cores the stream's processes used in that window
  (their CPU seconds over its length, psutil): near 1 for one task and near 2 for two on an idle 2-core
  machine; on a machine other work loads, both fall, and the ratio with them (the load average is printed).
The bench polls the committed offsets every POLL_S with a consumer that has the stream's group id and never
joins the group, and GET /streams/{name} and /offsets for the tasks' pids and which task holds each partition.

Prints every run, each variant's best steady and wall rate, and `ratio: X` (best tasks:2 steady rate / best
tasks:1 steady rate; goal >= 1.6 on 2 cores), with `wall ratio: X` beside it.
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
BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(BENCH))

from bench_data import check_topic, produce  # noqa: E402
from confluent_kafka import Consumer, TopicPartition  # noqa: E402
from process_cpu import cpu_of  # noqa: E402

from mgstreams.embedded_kafka import EmbeddedKafka  # noqa: E402
from mgstreams.host_process import HostProcess  # noqa: E402

GOAL = 1.6
TOPIC = "tasks_scaling"
PARTITIONS = 6
SIZE = 100
BATCH_SIZE = 500
POLL_S = 0.05
TRANSFORM = "cpu_transform.busy"


def cpu_of_all(pids) -> float:
    """CPU seconds (user + system) of these processes so far (0 for one that is gone)."""
    return sum(cpu_of(pid) or 0.0 for pid in pids)


def run(client, bootstrap: str, name: str, tasks: int, partitions: int, count: int,
        timeout_s: float) -> tuple[float, float, int, float]:
    """(wall s, steady s, messages in the steady window, cores its processes used in that window) of one stream
    run from the topic's beginning."""
    client.create(name=name, topics=[TOPIC], bootstrap_servers=bootstrap, transform=TRANSFORM, sink="null://",
                  consumer_group=name, batch_size=BATCH_SIZE, batch_interval_ms=100, restart="never", tasks=tasks,
                  configs={"session.timeout.ms": 3000, "heartbeat.interval.ms": 1000})
    watcher = Consumer({"bootstrap.servers": bootstrap, "group.id": name, "enable.auto.commit": False})
    tps = [TopicPartition(TOPIC, p) for p in range(partitions)]

    def committed() -> int:
        return sum(max(tp.offset, 0) for tp in watcher.committed(tps, timeout=10))
    try:
        started = time.perf_counter()
        client.start(name)
        steady_at, steady_from, pids, cpu_from = None, 0, (), 0.0
        while True:
            now = time.perf_counter()
            done = committed()
            if steady_at is None:
                info = client.get(name)
                if info.error:
                    raise SystemExit(f"bench: stream {name} is {info.status.value}: {info.error}")
                holders = {row.task for row in client.describe(name)}
                if info.status.value == "running" and len(info.pids) == tasks and holders == set(range(tasks)):
                    pids, cpu_from = info.pids, cpu_of_all(info.pids)
                    steady_at, steady_from = time.perf_counter(), committed()
            if done >= count:
                end = time.perf_counter()
                if steady_at is None:
                    raise SystemExit(f"bench: stream {name} finished before all its {tasks} tasks held "
                                     f"partitions: give it more --messages")
                return end - started, end - steady_at, count - steady_from, (cpu_of_all(pids) - cpu_from) / (end - steady_at)
            if now - started > timeout_s:
                raise SystemExit(f"bench: stream {name} stuck at {done}/{count} after {timeout_s:.0f} s")
            time.sleep(POLL_S)
    finally:
        watcher.close()
        client.drop(name)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog="\n".join(__doc__.splitlines()[2:]))
    parser.add_argument("--messages", type=int, default=60_000, help="messages in the topic (default 60k)")
    parser.add_argument("--partitions", type=int, default=PARTITIONS, help=f"partitions (default {PARTITIONS})")
    parser.add_argument("--rounds", type=int, default=2, help="rounds of both variants, best of each (default 2)")
    parser.add_argument("--work", type=int, default=3000, help="the transformation's steps per message "
                                                               "(default 3000, about 0.1 ms)")
    args = parser.parse_args(argv)
    if min(args.messages, args.partitions, args.rounds, args.work) < 1 or args.partitions < 2:
        parser.error("--messages, --rounds and --work must be positive, --partitions at least 2")
    count, partitions = args.messages, args.partitions
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"tasks scaling: {count:,} messages x {SIZE} B over {partitions} partitions, embedded cluster, sink "
          f"null://, batch {BATCH_SIZE}, transform {TRANSFORM} ({args.work} steps per message), {cores} cores, "
          f"load average {load:.2f} at start", flush=True)
    work = Path(tempfile.mkdtemp(prefix="mgstreams-bench-tasks-"))
    steady: dict[int, list[float]] = {1: [], 2: []}
    wall: dict[int, list[float]] = {1: [], 2: []}
    try:
        with EmbeddedKafka(brokers=1, initial_rebalance_delay_ms=0) as cluster:
            bootstrap = cluster.bootstrap_servers
            cluster.create_topic(TOPIC, partitions, 1)
            produce(bootstrap, TOPIC, count, partitions, SIZE)
            check_topic(bootstrap, TOPIC, partitions, count)
            path = os.pathsep.join(p for p in (str(BENCH), str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
            host = HostProcess(work / "state", log_path=work / "host.log",
                               env={"MGSTREAMS_TRANSFORM_PACKAGES": "cpu_transform", "PYTHONPATH": path,
                                    "BENCH_CPU_WORK": str(args.work)}).spawn()
            try:
                host.wait_ready()
                client = host.client(timeout=60)
                for round_no in range(1, args.rounds + 1):
                    for tasks in (1, 2) if round_no % 2 else (2, 1):
                        total, window, messages, cores = run(client, bootstrap, f"tasks_r{round_no}_{tasks}", tasks,
                                                      partitions, count, max(120.0, count / 200))
                        steady[tasks].append(messages / window)
                        wall[tasks].append(count / total)
                        print(f"  round {round_no} tasks {tasks}: wall {total:6.2f} s {count / total:9,.0f} msgs/s; "
                              f"steady {window:6.2f} s over {messages:,} messages {messages / window:9,.0f} msgs/s, "
                              f"its processes using {cores:.2f} cores; load average {os.getloadavg()[0]:.2f}",
                              flush=True)
                client.close()
            finally:
                code = host.stop()
            if code != 0:
                raise SystemExit(f"bench: the host exited with status {code} on SIGTERM; log:\n{host.log()[-2000:]}")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    one, two = max(steady[1]), max(steady[2])
    print(f"tasks 1 rate: {one:12,.0f} msgs/s steady, {max(wall[1]):,.0f} msgs/s wall (best of {len(steady[1])})")
    print(f"tasks 2 rate: {two:12,.0f} msgs/s steady, {max(wall[2]):,.0f} msgs/s wall (best of {len(steady[2])})")
    ratio = two / one
    print(f"ratio: {ratio:.2f}  (tasks 2 / tasks 1, steady rates; goal {GOAL}: "
          f"{'ok' if ratio >= GOAL else 'BELOW GOAL'})")
    print(f"wall ratio: {max(wall[2]) / max(wall[1]):.2f}  (start call to the last commit, joins included)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
