"""How fast does `CALL streams.set_stream_offset` take effect on a running stream?

The Cypher path end to end: the query module's procedure (the file itself,
loaded as Memgraph loads it) → HTTP → the stream host (`mgstreams serve`, a
child process) → applied on every partition → the first message at the new
offset, on EVERY partition, in the stream's sink (a .cypherl file this script
follows). A running, assigned stream over 6 partitions on the embedded cluster;
median and p95 over >= 20 changes. Baseline, same run, same host, stream and
procedures: stop -> set -> start, the path Memgraph's built-in streams require
(`mg.kafka_set_stream_offset` needs a stopped stream).

Then the same running-path changes on a `tasks: 2` stream (two member processes of
its group, each holding three partitions). A cypherl file has one writer at a
time, so that stream writes to Bolt: the host's stream processes import the
pymgclient stand-in (tests/support/mgclient_standin) as `mgclient`, which
journals each committed transaction, and the script follows that journal.

    .venv/bin/python bench/offset_latency.py [--changes 20] [--baseline-changes 5] [--tasks-changes N]
    .venv/bin/python bench/offset_latency.py --trace     # also the running path hop by hop
    .venv/bin/python bench/offset_latency.py --trace --baseline-changes 0 --tasks-changes 0   # the trace alone
    .venv/bin/python bench/offset_latency.py --engine spark   # a Spark stream instead (offset_latency_spark.py)

The machine's load average is printed with the figures (at the start and at the end): on a shared machine the
figures follow it.

Prints `ratio: X` = baseline median / running-path median, and whether the running path's median and p95
(single stream and `tasks: 2`) are within the floors (10 ms, 15 ms).

`--trace` times one running-path call hop by hop: the query module's HTTP request (http.client, in this
process), then in the host and its stream processes (bench/trace_hooks, first on their PYTHONPATH, wraps the
methods at each hop and stamps CLOCK_MONOTONIC, one clock for every process): the host's handler, the call
announced to the stream process (from then on it holds its fetches to 1 ms: kafka/fetch_wait.py), resolving
against the cluster, the SQLite write of the change, the hand-off over the pipe, the stream process receiving
it, the poll thread taking it, the seek, the commit, the event back, the SQLite write of the outcome, the
waiting call's answer, the reply, the first record of a moved partition consumed (and of the last one), the
sink's writes and the batch commits, and the first record at the target in the sink. The `tasks: 2` calls are
traced too (a second table, the stamps of both tasks); `--trace-raw FILE` keeps every stamp, for single calls. The change is handed to the stream process inside the transaction that records it (before its commit's
fsync), so the hand-off comes before "SQLite write done"; the stream's commit of the change waits for the word
that the record is durable. Printed: each hop's median time since the call started, and since the hop before.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import re
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "support"))

from bench_data import produce  # noqa: E402
from host_helpers import standin_files  # noqa: E402
from mgclient_standin import mgclient as standin  # noqa: E402
from offset_trace import Trace, pct  # noqa: E402

from mgstreams.embedded_kafka import EmbeddedKafka  # noqa: E402
from mgstreams.host_process import HostProcess  # noqa: E402
from mgstreams.query_module import STREAMS_MODULE, QueryModule  # noqa: E402
from stream_registry.graph.sinks.policy import OUTPUT_DIRS_ENV  # noqa: E402
from stream_registry.sandbox import WRITE_PATHS_ENV  # noqa: E402

PARTITIONS = 6
TOPIC = "latency"
STREAM = "latency"
TASKS_STREAM = "latency_tasks"
BOLT_URI = "bolt://memgraph.standin:7687"
MEDIAN_FLOOR_MS = 10.0
P95_FLOOR_MS = 15.0
TRACE_HOOKS = ROOT / "bench" / "trace_hooks"
POLL_S = 0.0005     # how often the sink file is looked at: the resolution of every figure
# merge_messages renders `MERGE (m:KafkaMessage {topic: "latency", partition: P, offset: O}) SET ...`
_WHERE = re.compile(rb'\{topic: "' + TOPIC.encode() + rb'", partition: (\d+), offset: (\d+)\}')


class SinkTail:
    """Follows the stream's .cypherl sink: when each partition first wrote its target offset after arm()."""

    def __init__(self, path: Path):
        self.path = path
        self._cond = threading.Condition()
        self._targets: dict[int, int] = {}
        self.arrived: dict[int, float] = {}
        self.last: dict[int, int] = {}          # highest offset written per partition since arm()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._follow, daemon=True, name="sink-tail")

    def start(self) -> SinkTail:
        self._thread.start()
        return self

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)

    def arm(self, offset: int | None) -> None:
        with self._cond:
            self._targets = {} if offset is None else {p: offset for p in range(PARTITIONS)}
            self.arrived, self.last = {}, {}

    def wait_arrived(self, timeout: float) -> float:
        """perf_counter() at which the last partition wrote its target offset."""
        with self._cond:
            if not self._cond.wait_for(lambda: len(self.arrived) == len(self._targets), timeout):
                missing = sorted(set(self._targets) - set(self.arrived))
                raise RuntimeError(f"partitions {missing} never wrote offset {self._targets[missing[0]]}")
            return max(self.arrived.values())

    def wait_end(self, end: int, timeout: float) -> None:
        """Until every partition wrote offset end - 1 since arm(): the stream is idle again."""
        with self._cond:
            if not self._cond.wait_for(lambda: all(self.last.get(p) == end - 1 for p in range(PARTITIONS)),
                                       timeout):
                raise RuntimeError(f"the stream did not reach the log end {end} within {timeout:g} s "
                                   f"(last offsets written: {self.last})")

    def _follow(self) -> None:
        while not self.path.exists():
            if self._stop.wait(POLL_S):
                return
        with self.path.open("rb") as handle:
            pending = b""
            while not self._stop.is_set():
                chunk = handle.read()
                if not chunk:
                    time.sleep(POLL_S)
                    continue
                now = time.perf_counter()
                complete, _, pending = (pending + chunk).rpartition(b"\n")
                with self._cond:
                    for partition, offset in self._written(complete):
                        partition, offset = int(partition), int(offset)
                        self.last[partition] = max(offset, self.last.get(partition, -1))
                        if self._targets.get(partition) == offset and partition not in self.arrived:
                            self.arrived[partition] = now
                    self._cond.notify_all()


    def _written(self, complete: bytes) -> list[tuple[bytes, bytes]]:
        return _WHERE.findall(complete)


class JournalTail(SinkTail):
    """Follows the Bolt stand-in's journal (one JSON line per committed transaction, its statements' rows)."""

    def _written(self, complete: bytes) -> list[tuple[int, int]]:
        return [(params["partition"], params["offset"]) for line in complete.splitlines() if line
                for _, params in json.loads(line)["statements"] if params.get("topic") == TOPIC]


def summary(values: list[float]) -> str:
    ms = [v * 1000 for v in values]
    return f"median {statistics.median(ms):.1f} ms, p95 {pct(ms, 0.95):.1f} ms, max {max(ms):.1f} ms"


def floors(label: str, values: list[float]) -> str:
    median, p95 = statistics.median(values) * 1000, pct(values, 0.95) * 1000
    ok = median <= MEDIAN_FLOOR_MS and p95 <= P95_FLOOR_MS
    return (f"{label}: median {median:.1f} ms (floor {MEDIAN_FLOOR_MS:g}), p95 {p95:.1f} ms (floor "
            f"{P95_FLOOR_MS:g}): {'ok' if ok else 'BELOW FLOOR'}")


def tasks_path(streams, bootstrap: str, tail: JournalTail, end: int, changes: int, target,
               trace: Trace | None = None) -> list[float]:
    """The running path's changes on a `tasks: 2` stream writing to the Bolt stand-in (its journal followed)."""
    if not changes:
        return []
    streams.call("create", TASKS_STREAM, [TOPIC], bootstrap, "", BOLT_URI, "", 1000, 100,
                 {"session.timeout.ms": 6000}, {}, "on-failure", {"tasks": 2})
    streams.call("start", TASKS_STREAM)
    tail.wait_end(end, 60)
    split = time.monotonic() + 60
    while {r["task"] for r in streams.call("offsets", TASKS_STREAM)} != {0, 1}:
        if time.monotonic() > split:
            raise SystemExit("bench: the tasks:2 stream's partitions were not split between its tasks")
        time.sleep(0.1)
    running = []
    for _ in range(changes):
        offset = target()
        tail.arm(offset)
        started = time.perf_counter()
        rows = streams.call("set_stream_offset", TASKS_STREAM, offset, 10000)
        returned = time.perf_counter()
        if [r["status"] for r in rows] != ["applied"] * PARTITIONS:
            raise SystemExit(f"bench: set_stream_offset did not apply on every partition: {rows}")
        running.append(tail.wait_arrived(10) - started)
        if trace is not None:
            trace.tasks_calls.append((int(started * 1e9), int(returned * 1e9), int((started + running[-1]) * 1e9)))
        tail.wait_end(end, 30)
    streams.call("stop", TASKS_STREAM)
    return running


def load() -> str:
    return "load average " + " ".join(f"{x:.2f}" for x in os.getloadavg())


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog="\n".join(__doc__.splitlines()[2:]))
    parser.add_argument("--changes", type=int, default=20, help="running-path changes to time (>= 20 for p95)")
    parser.add_argument("--baseline-changes", type=int, default=5,
                        help="stop -> set -> start cycles to time (0: no baseline, no ratio)")
    parser.add_argument("--tasks-changes", type=int, default=None,
                        help="running-path changes on the tasks: 2 stream (default: --changes; 0: not run)")
    parser.add_argument("--per-partition", type=int, default=2000, help="messages per partition")
    parser.add_argument("--rewind", type=int, default=200,
                        help="targets are drawn from the last N offsets of each partition, so the figure is the "
                             "offset change itself, not the time to re-read a long backlog")
    parser.add_argument("--trace", action="store_true", help="also time one running-path call hop by hop")
    parser.add_argument("--trace-raw", type=Path, default=None, metavar="FILE",
                        help="with --trace: also write every stamp (label, ns, pid) and each call's (started, "
                             "returned, first record) to FILE, to look at single calls")
    parser.add_argument("--engine", choices=("host", "spark"), default="host",
                        help="spark: the running path on an `engine: spark` stream instead (offset_latency_spark)")
    args = parser.parse_args(argv)
    tasks_changes = args.changes if args.tasks_changes is None else args.tasks_changes
    if args.changes < 1 or args.baseline_changes < 0 or tasks_changes < 0 or \
            not 1 < args.rewind < args.per_partition:
        parser.error("--changes must be >= 1, --baseline-changes and --tasks-changes >= 0, and "
                     "1 < --rewind < --per-partition")
    if args.engine == "spark":
        from offset_latency_spark import run_spark
        return run_spark(args, sys.modules[__name__])
    rng = random.Random(7)
    end = args.per_partition

    def target() -> int:
        return rng.randrange(end - args.rewind, end - 1)

    loads = [load()]
    with EmbeddedKafka(brokers=3) as cluster, tempfile.TemporaryDirectory(prefix="offset-latency-") as tmp:
        journal = Path(tmp) / "standin.jsonl"
        trace = Trace(Path(tmp) / "trace.tsv") if args.trace else None
        path = ((str(TRACE_HOOKS),) if trace else ()) + (standin.PYTHONPATH_ENTRY, str(ROOT))
        host = HostProcess(Path(tmp) / "state", log_path=Path(tmp) / "host.log",
                           env={OUTPUT_DIRS_ENV: tmp,   # the sink file below may be written there
                                **(trace.env() if trace else {}),
                                "PYTHONPATH": os.pathsep.join(path),
                                "MGCLIENT_STANDIN_JOURNAL": str(journal), "MGCLIENT_STANDIN_RECORD": "rows",
                                WRITE_PATHS_ENV: standin_files(journal),   # the stand-in's database
                                "MGCLIENT_STANDIN_RTT_MS": "0",
                                "MGSTREAMS_ALLOWED_HOSTS": "memgraph.standin,localhost,127.0.0.0/8"}).spawn()
        try:
            cluster.create_topic(TOPIC, PARTITIONS, 3)
            produce(cluster.bootstrap_servers, TOPIC, end * PARTITIONS, PARTITIONS, 100)
            sink_path = Path(tmp) / "sink.cypherl"
            tail = SinkTail(sink_path).start()
            with QueryModule(STREAMS_MODULE, host.wait_ready(), token=host.token) as streams:
                # "" transform: merge_messages; a short session timeout keeps the baseline's wait small
                streams.call("create", STREAM, [TOPIC], cluster.bootstrap_servers, "", f"cypherl://{sink_path}",
                             "", 1000, 100, {"session.timeout.ms": 6000}, {})
                streams.call("start", STREAM)
                tail.wait_end(end, 60)

                running, returned = [], []
                for _ in range(args.changes):
                    offset = target()
                    tail.arm(offset)
                    started = time.perf_counter()
                    rows = streams.call("set_stream_offset", STREAM, offset, 10000)
                    returned.append(time.perf_counter() - started)
                    if [r["status"] for r in rows] != ["applied"] * PARTITIONS:
                        raise SystemExit(f"bench: set_stream_offset did not apply on every partition: {rows}")
                    running.append(tail.wait_arrived(10) - started)
                    if trace is not None:   # perf_counter is CLOCK_MONOTONIC here, as the stamps are
                        trace.calls.append((int(started * 1e9), int((started + returned[-1]) * 1e9),
                                            int((started + running[-1]) * 1e9)))
                    tail.wait_end(end, 30)

                baseline = []
                for _ in range(args.baseline_changes):
                    offset = target()
                    tail.arm(offset)
                    started = time.perf_counter()
                    streams.call("stop", STREAM)
                    streams.call("set_stream_offset", STREAM, offset, 10000)
                    streams.call("start", STREAM)
                    baseline.append(tail.wait_arrived(120) - started)
                    tail.wait_end(end, 60)
                streams.call("stop", STREAM)
                tail.close()

                tail = JournalTail(journal).start()
                tasks_running = tasks_path(streams, cluster.bootstrap_servers, tail, end, tasks_changes, target,
                                           trace)
            tail.close()
        except (RuntimeError, SystemExit):
            print(f"bench: the host's log, last lines:\n{host.log()[-3000:]}", file=sys.stderr)
            raise
        finally:
            code = host.stop()
        loads.append(load())
        trace_table = trace.table() if trace is not None else None
        if trace is not None and args.trace_raw is not None:
            args.trace_raw.write_text(trace.path.read_text() + "".join(
                f"CALL\t{a}\t{b}\t{c}\t{kind}\n" for kind, calls in (("tasks:1", trace.calls),
                                                                      ("tasks:2", trace.tasks_calls))
                for a, b, c in calls))
        tasks_table = trace.table(trace.tasks_calls) if trace is not None and trace.tasks_calls else None
        if code != 0:
            raise SystemExit(f"bench: the host exited with status {code} on SIGTERM; log:\n{host.log()[-2000:]}")

    print(f"targets: random offsets among the last {args.rewind} of each partition ({end} per partition, "
          f"{PARTITIONS} partitions); sink followed every {POLL_S * 1000:g} ms")
    print(f"running path, CALL streams.set_stream_offset -> host -> applied -> first message at the new offset "
          f"on every partition ({len(running)} changes): {summary(running)}")
    print(f"  the call itself returned (every partition applied): {summary(returned)}")
    print(f"  from the call's return to the first message at the new offset on every partition (the fetch in "
          f"flight, the batch being collected, the write): {summary([r - c for r, c in zip(running, returned, strict=False)])}")
    if baseline:
        print(f"baseline, stop -> set -> start through the same procedures ({len(baseline)} changes): "
              f"{summary(baseline)}")
        print("  (the baseline waits for the group to rebalance: the broker's initial rebalance delay, and on the"
              " embedded cluster the old member's session timeout, as it ignores LeaveGroup)")
    if tasks_running:
        print(f"tasks: 2 running path, the same on a stream of two member processes, three partitions each "
              f"({len(tasks_running)} changes): {summary(tasks_running)}")
    print(floors("running path", running))
    if tasks_running:
        print(floors("tasks: 2 running path", tasks_running))
    print(f"machine: {os.cpu_count()} cores; at the start {loads[0]}, at the end {loads[-1]}")
    if trace_table is not None:
        print(f"trace of the running path ({len(running)} calls; medians):")
        print(trace_table)
    if tasks_table is not None:
        print(f"trace of the tasks: 2 running path ({len(tasks_running)} calls; medians; stamps of both tasks):")
        print(tasks_table)
    if baseline:
        print(f"ratio: {statistics.median(baseline) / statistics.median(running):.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
