"""Steps 1 to 5 of the demo, each a function that acts through a user's interface and returns data.

1. produce the seeded transfers; 2. create the stream from Cypher; 3. start it and
set its offset during the first rebalance, then rewind while it runs; 4. wait until
it caught up; 5. the Spark backfill. The checks on what they return are in checks.py.
"""
from __future__ import annotations

import json
import shutil
import time
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence

from confluent_kafka import Producer

from spark_bridge.backfill import BackfillJob, plan_job, run_backfill
from stream_registry import PartitionOffsets, StreamError, StreamStatus, parse_offset_spec
from stream_registry.registry.registry import stored_config
from stream_registry.registry.runners.runner import query_module_dirs

from ..query_module import QueryModule
from ..samples import Transfer
from .calls import offset_change, partition_offsets, stream_row
from .graph import clear_graph, read_graph
from .records import read_cypherl
from .reporter import SILENT, Reporter
from .results import BackfillResult, Produced, RaceResult, Record, RewindResult
from .settings import SCHEMA, TRANSFORM, DemoSettings


def produce_transfers(bootstrap_servers: str, topic: str, transfers: Sequence[Transfer],
                      timeout_s: float = 30.0, configs: Mapping[str, object] = {}) -> Produced:
    """Produce keyed by source account (the default partitioner keeps an account on one partition),
    with the transfer time as the record timestamp."""
    delivered: dict[int, list[int]] = defaultdict(list)
    errors: list[str] = []

    def on_delivery(err, msg):
        if err is not None:
            errors.append(str(err))
        else:
            delivered[msg.partition()].append(msg.offset())

    producer = Producer({"bootstrap.servers": bootstrap_servers, "linger.ms": 20, "acks": "all", **configs})
    for t in transfers:
        producer.produce(topic, key=t.source.encode(), value=t.payload(),
                         timestamp=int(t.ts.timestamp() * 1000), on_delivery=on_delivery)
        producer.poll(0)
    remaining = producer.flush(timeout_s)
    if remaining or errors:
        raise StreamError(f"produce: {remaining} message(s) not delivered within {timeout_s:g} s"
                          + (f"; first error: {errors[0]}" if errors else ""))
    accounts = {t.source for t in transfers} | {t.target for t in transfers}
    return Produced(topic, len(transfers), len(accounts),
                    {p: len(o) for p, o in sorted(delivered.items())},
                    {p: max(o) + 1 for p, o in sorted(delivered.items())},
                    transfers[0].ts, transfers[-1].ts, dict(Counter(t.currency for t in transfers)))


def report_produced(produced: Produced, reporter: Reporter) -> None:
    currencies = ", ".join(f"{c} {n}" for c, n in sorted(produced.currencies.items(), key=lambda kv: -kv[1]))
    reporter.say(f"produced {produced.events:,} transfers between {produced.accounts} accounts, "
                 f"{produced.first_ts:%Y-%m-%d %H:%M} to {produced.last_ts:%Y-%m-%d %H:%M} UTC ({currencies}), "
                 f"keyed by source account")
    reporter.say("records per partition: " + "  ".join(f"{p}: {n}" for p, n in produced.per_partition.items()))


def prepare_out(settings: DemoSettings) -> None:
    """Remove what an earlier run wrote (only the demo's own files: the cypherl sink appends)."""
    settings.out_dir.mkdir(parents=True, exist_ok=True)
    # the host writes only into an output directory no one else can write (a umask of 002 would leave it open)
    settings.out_dir.chmod(settings.out_dir.stat().st_mode & ~0o022)
    for path in (settings.live_path, settings.schema_path, settings.report_path, settings.host_log):
        path.unlink(missing_ok=True)
    for path in (settings.backfill_dir, settings.state_dir):
        shutil.rmtree(path, ignore_errors=True)
    settings.schema_path.write_text(SCHEMA)


def create_stream(streams: QueryModule, settings: DemoSettings, bootstrap_servers: str,
                  reporter: Reporter = SILENT) -> None:
    if settings.bolt:
        clear_graph(settings)
    reporter.rows(streams.call("create", settings.stream, [settings.topic], bootstrap_servers, TRANSFORM,
                               settings.sink, "", settings.batch_size, 100, dict(settings.consumer_configs),
                               dict(settings.memgraph_credentials),
                               secret_args=(9,)))
    row = stream_row(streams, settings.stream)
    reporter.say(f"→ status {row['status']}, consumer group {row['consumer_group']}, sink {row['sink']}")


def start_and_set_offset(streams: QueryModule, settings: DemoSettings,
                         reporter: Reporter = SILENT) -> RaceResult:
    """Start, then set every partition to `live_from` before the group has assigned any."""
    name = settings.stream
    reporter.rows(streams.call("start", name))
    early = [partition_offsets(r) for r in streams.call("offsets", name)]
    assigned = sum(r.assigned for r in early)
    reporter.say(f"→ {assigned} of {len(early)} partitions assigned (the group has not rebalanced yet)")
    status = StreamStatus(stream_row(streams, name)["status"])
    reporter.say(f"→ status {status.value}; set_stream_offset({settings.live_from}) on every partition now: "
                 f"it waits for the group to assign them (up to its timeout, else says pending)")
    started = time.monotonic()
    rows = streams.call("set_stream_offset", name, settings.live_from, 15000)
    seconds = time.monotonic() - started
    reporter.rows(rows)
    reporter.say(f"returned after {seconds:.2f} s")
    return RaceResult(settings.live_from, status, assigned, len(early), tuple(map(offset_change, rows)), seconds)


def wait_caught_up(streams: QueryModule, name: str, log_end: Mapping[int, int],
                   timeout_s: float) -> list[PartitionOffsets]:
    """Until every partition's committed offset is the end the producer left (polling streams.offsets, unprinted)."""
    deadline = time.monotonic() + timeout_s
    while True:
        rows = [partition_offsets(r) for r in streams.call("offsets", name, quiet=True)]
        behind = {r.partition: r.committed_offset for r in rows if r.committed_offset != log_end.get(r.partition)}
        if not behind:
            return rows
        row = stream_row(streams, name, quiet=True)
        if row["status"] == StreamStatus.ERROR.value:
            raise StreamError(f"stream {name!r} failed: {row['error']}")
        if time.monotonic() >= deadline:
            raise StreamError(f"stream {name!r} did not catch up within {timeout_s:g} s "
                              f"(committed offsets still behind: {behind})")
        time.sleep(0.1)


def rewind_running(streams: QueryModule, settings: DemoSettings, records_before: int,
                   reporter: Reporter = SILENT) -> RewindResult:
    """Move some partitions back by `rewind_by` while the stream runs (a per-partition map of "-N")."""
    spec = {f"{settings.topic}:{p}": f"-{settings.rewind_by}" for p in settings.rewind_partitions}
    reporter.say(f"while running, move partitions {', '.join(map(str, settings.rewind_partitions))} "
                 f"back by {settings.rewind_by}:")
    started = time.monotonic()
    rows = streams.call("set_stream_offset", settings.stream, spec, 15000)
    seconds = time.monotonic() - started
    reporter.rows(rows)
    reporter.say(f"returned after {seconds:.2f} s")
    return RewindResult(spec, tuple(map(offset_change, rows)), records_before, seconds)


def backfill_job(settings: DemoSettings) -> BackfillJob:
    """[backfill_from, committed) of the stream's group, through its transformation; the stream's
    configuration (secrets included, which the host's API never hands out) comes from the state dir."""
    config = stored_config(settings.state_dir, settings.stream)
    return BackfillJob(config.bootstrap_servers, tuple(config.topics), parse_offset_spec(settings.backfill_from),
                       parse_offset_spec("committed"), config.transform, f"cypherl://{settings.backfill_dir}",
                       client_config=config.client_config(), search_dirs=tuple(query_module_dirs()),
                       batch_size=config.batch_size)


def run_backfill_step(spark, job: BackfillJob, settings: DemoSettings,
                      reporter: Reporter = SILENT) -> BackfillResult:
    range_plan = plan_job(job)
    reporter.backfill_plan(job, range_plan)
    report = run_backfill(spark, job, range_plan, on_progress=reporter.backfill_progress)
    settings.report_path.write_text(json.dumps(report.to_dict(), indent=2) + "\n")
    return BackfillResult(job, range_plan, report, tuple(sorted(settings.backfill_dir.glob("*.cypherl"))))


def live_records(settings: DemoSettings) -> list[Record]:
    return read_graph(settings) if settings.bolt else read_cypherl([settings.live_path])
