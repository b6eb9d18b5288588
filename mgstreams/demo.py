"""`python -m mgstreams.demo --out demo-out`: the main job end to end, driven as its users drive it.

1. start a 3-broker embedded Kafka cluster and a stream host (`mgstreams serve`
   in a child process, state in `<out>/state`); produce a seeded account-transfer
   stream (6 partitions, keyed by source account);
2. `CALL streams.create`: stream `transfers` runs `transfers.transfer` into
   `<out>/live.cypherl` (or into Memgraph over Bolt when MEMGRAPH_URI is set);
3. `CALL streams.start`, then at once `CALL streams.set_stream_offset`, while the
   group has assigned nothing (the rebalance race); then again while running
   (rewind two partitions);
4. `mgstreams describe` and `mgstreams history`: the operator's CLI against the
   same host, checked against `CALL streams.offsets` / `streams.history`;
5. backfill `[backfill_from, committed)` with Spark into `<out>/backfill/` and
   compare its statements with the live ones over the overlapping offsets;
6. `CALL streams.stop`, then SIGTERM to the host, which must exit 0;
7. say where everything is and how to load it into Memgraph.

Cypher goes through the query module file itself (`query_modules/streams.py`,
loaded as Memgraph loads it: a thin HTTP client of the host), each call printed
as the `CALL streams.…` it stands for. Every step is a function returning data;
`run_demo` chains them, telling a `Reporter` (silent by default:
tests/test_demo_e2e.py runs the same path and asserts each `Check`); `main`
prints with rich and exits 1 if a check failed.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from confluent_kafka import Producer
from rich.console import Console
from rich.markup import escape
from rich.padding import Padding
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.text import Text

from spark_bridge.backfill import BackfillJob, BackfillReport, plan_job, run_backfill
from spark_bridge.range_plan import RangePlan
from stream_registry import ChangeStatus, OffsetChange, PartitionOffsets, StreamError, StreamStatus, parse_offset_spec
from stream_registry.graph.cypher_literals import render_statement, to_cypher_literal
from stream_registry.graph.sinks import OUTPUT_DIRS_ENV
from stream_registry.registry.registry import stored_config
from stream_registry.registry.runner import query_module_dirs

from .cli.render import table
from .host_process import HostProcess
from .query_module import STREAMS_MODULE, QueryModule
from .samples import Transfer, generate_transfers
from .settings import URL_ENV

TRANSFORM = "transfers.transfer"
SCHEMA = "CREATE INDEX ON :Account(id);\n"


@dataclass(frozen=True)
class DemoSettings:
    out: Path
    seed: int = 7
    events: int = 3000
    accounts: int = 250
    partitions: int = 6
    topic: str = "transfers"
    stream: str = "transfers"
    live_from: int = 100          # set_offset during the rebalance: every partition starts here
    rewind_by: int = 50           # set_offset while running: these partitions go back this far
    rewind_partitions: tuple[int, ...] = (0, 3)
    backfill_from: int = 50       # the backfill reads [backfill_from, committed)
    batch_size: int = 500
    memgraph_uri: str | None = None   # bolt://host:port: the live stream writes to Memgraph instead
    memgraph_credentials: Mapping[str, str] = field(default_factory=dict, repr=False)
    spark_master: str = "local[2]"
    query_module: Path = STREAMS_MODULE
    timeout_s: float = 60.0
    # librdkafka settings a broker may need (the tests' Tansu leg: short sessions, one record per batch)
    consumer_configs: Mapping[str, object] = field(default_factory=dict)
    producer_configs: Mapping[str, object] = field(default_factory=dict)

    @property
    def out_dir(self) -> Path:
        return Path(self.out).resolve()

    @property
    def live_path(self) -> Path:
        return self.out_dir / "live.cypherl"

    @property
    def backfill_dir(self) -> Path:
        return self.out_dir / "backfill"

    @property
    def state_dir(self) -> Path:
        return self.out_dir / "state"

    @property
    def host_log(self) -> Path:
        return self.out_dir / "host.log"

    @property
    def schema_path(self) -> Path:
        return self.out_dir / "schema.cypherl"

    @property
    def report_path(self) -> Path:
        return self.out_dir / "backfill-report.json"

    @property
    def spark_log(self) -> Path:
        return self.out_dir / "spark.log"

    @property
    def sink(self) -> str:
        return self.memgraph_uri or f"cypherl://{self.live_path}"

    @property
    def bolt(self) -> bool:
        return self.memgraph_uri is not None


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool | None          # None: not observable with this setup (shown as –, never counted as passed)
    reason: str


@dataclass(frozen=True)
class Produced:
    topic: str
    events: int
    accounts: int
    per_partition: Mapping[int, int]      # records produced to each partition
    log_end: Mapping[int, int]            # each partition's next offset after producing
    first_ts: datetime
    last_ts: datetime
    currencies: Mapping[str, int]


@dataclass(frozen=True)
class RaceResult:
    requested: int
    status_before: StreamStatus           # status right before set_stream_offset
    assigned_before: int                  # partitions streams.offsets showed as assigned right after start
    partitions: int
    changes: tuple[OffsetChange, ...]
    seconds: float                        # how long set_stream_offset waited for the group to assign


@dataclass(frozen=True)
class RewindResult:
    spec: Mapping[str, str]
    changes: tuple[OffsetChange, ...]
    records_before: int                   # live records delivered before the call
    seconds: float


@dataclass(frozen=True)
class BackfillResult:
    job: BackfillJob
    plan: RangePlan
    report: BackfillReport
    files: tuple[Path, ...]


@dataclass(frozen=True)
class Record:
    """One delivered statement: where it came from and its normalized text."""
    topic: str
    partition: int
    offset: int
    statement: str


@dataclass
class DemoResult:
    settings: DemoSettings
    checks: list[Check] = field(default_factory=list)
    produced: Produced | None = None
    race: RaceResult | None = None
    rewind: RewindResult | None = None
    backfill: BackfillResult | None = None
    host_url: str | None = None
    host_exit: int | None = None

    @property
    def ok(self) -> bool:
        return bool(self.checks) and all(c.ok is not False for c in self.checks)


class Reporter:
    """Told about each step as it happens; this base class stays silent (the end-to-end test)."""

    def step(self, number: int, title: str) -> None: ...
    def say(self, text: str) -> None: ...
    def call(self, statement: str) -> None: ...                      # a CALL about to run
    def rows(self, rows: Sequence[Mapping[str, Any]]) -> None: ...   # what it returned
    def command(self, argv: Sequence[str], output: str) -> None: ...
    def backfill_plan(self, job: BackfillJob, plan: RangePlan) -> None: ...
    def backfill_progress(self, done: int, total: int) -> None: ...
    def backfill(self, result: BackfillResult) -> None: ...
    def check(self, check: Check) -> None: ...


# -- the operator's CLI; rows of the procedures as the core's values ------------------------
def run_cli(url: str, *args: str, reporter: Reporter = Reporter(), timeout: float = 60.0) -> str:
    """`mgstreams ARGS` in a child process with MGSTREAMS_URL set, as an operator's shell runs it."""
    done = subprocess.run([sys.executable, "-m", "mgstreams", *args], env={**os.environ, URL_ENV: url},
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout)
    reporter.command(("mgstreams", *args), done.stdout + done.stderr)
    if done.returncode != 0:
        raise StreamError(f"mgstreams {' '.join(args)}: exit status {done.returncode}: {done.stderr.strip()}")
    return done.stdout


def offset_change(row: Mapping[str, Any]) -> OffsetChange:
    return OffsetChange(topic=row["topic"], partition=row["partition"], previous_offset=row["previous_offset"],
                        offset=row["offset"],
                        status=ChangeStatus(row["status"]), message=row.get("message") or "")


def partition_offsets(row: Mapping[str, Any]) -> PartitionOffsets:
    return PartitionOffsets(topic=row["topic"], partition=row["partition"], committed_offset=row["committed_offset"],
                            position=row["position"],
                            log_start_offset=row["log_start_offset"], log_end_offset=row["log_end_offset"],
                            lag=row["lag"], assigned=bool(row["assigned"]))


def stream_row(streams: QueryModule, name: str, quiet: bool = False) -> dict[str, Any]:
    """The stream's row of `CALL streams.list()`."""
    for row in streams.call("list", quiet=quiet):
        if row["name"] == name:
            return row
    raise StreamError(f"CALL streams.list(): no stream named {name!r}")


# -- step 1: the event stream ------------------------------------------------------------
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


def check_produced(produced: Produced, settings: DemoSettings) -> Check:
    acked = sum(produced.per_partition.values())
    if acked != settings.events:
        return Check("produce", False, f"{acked} of {settings.events} events acknowledged")
    short = {p: produced.log_end.get(p, 0) for p in range(settings.partitions)
             if produced.log_end.get(p, 0) <= max(settings.live_from, settings.rewind_by)}
    if short:
        return Check("produce", False, f"partitions {sorted(short)} hold too few offsets for this demo ({short})")
    counts = produced.per_partition.values()
    return Check("produce", True, f"{produced.events} events on {len(produced.log_end)} partitions "
                                  f"({min(counts)} to {max(counts)} each)")


# -- step 2: the stream --------------------------------------------------------------------
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
                  reporter: Reporter = Reporter()) -> None:
    if settings.bolt:
        clear_graph(settings)
    reporter.rows(streams.call("create", settings.stream, [settings.topic], bootstrap_servers, TRANSFORM,
                               settings.sink, "", settings.batch_size, 100, dict(settings.consumer_configs),
                               dict(settings.memgraph_credentials),
                               secret_args=(9,)))
    row = stream_row(streams, settings.stream)
    reporter.say(f"→ status {row['status']}, consumer group {row['consumer_group']}, sink {row['sink']}")


# -- step 3: the rebalance race, then a move while running ---------------------------------
def start_and_set_offset(streams: QueryModule, settings: DemoSettings,
                         reporter: Reporter = Reporter()) -> RaceResult:
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


def check_race(race: RaceResult) -> Check:
    if race.status_before != StreamStatus.STARTING or race.assigned_before:
        return Check("rebalance race", False,
                     f"status was {race.status_before.value} with {race.assigned_before} partition(s) assigned "
                     f"when set_stream_offset was called: the race was not exercised")
    wrong = [c for c in race.changes if c.status != ChangeStatus.APPLIED or c.offset != race.requested]
    if wrong or len(race.changes) != race.partitions:
        return Check("rebalance race", False, f"{len(race.changes)} change(s) for {race.partitions} partitions, "
                                              f"expected applied at {race.requested}; got {_changes_text(wrong)}")
    return Check("rebalance race", True, f"called while starting (0 of {race.partitions} assigned); applied at "
                                         f"{race.requested} on all {race.partitions} when the group assigned "
                                         f"them, {race.seconds:.2f} s later")


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


def check_first_delivered(records: Sequence[Record], produced: Produced, requested: int,
                          bolt: bool = False) -> Check:
    """The first offset each partition delivered is exactly the requested one, then every offset to the end.

    Through a Bolt sink delivery order is not observable: the lowest offset in the graph stands in.
    """
    offsets: dict[int, list[int]] = defaultdict(list)
    for r in records:
        offsets[r.partition].append(r.offset)
    problems = []
    for partition, end in sorted(produced.log_end.items()):
        seen = sorted(offsets.get(partition, [])) if bolt else offsets.get(partition, [])
        head = seen[0] if seen else None
        if head != requested:
            problems.append(f"partition {partition}: {'lowest' if bolt else 'first'} offset {head}, "
                            f"expected {requested}")
        elif seen != list(range(requested, end)):
            problems.append(f"partition {partition}: {len(seen)} records, expected offsets "
                            f"{requested}..{end - 1} once each, in order")
    if problems:
        return Check("first delivered", False, "; ".join(problems[:3]))
    where = "lowest offset in the graph" if bolt else "first record delivered"
    return Check("first delivered", True, f"{where} is {requested} on all {len(produced.log_end)} partitions, "
                                          f"then every offset to the end once")


def rewind_running(streams: QueryModule, settings: DemoSettings, records_before: int,
                   reporter: Reporter = Reporter()) -> RewindResult:
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


def check_rewind(rewind: RewindResult, records: Sequence[Record], produced: Produced,
                 settings: DemoSettings) -> Check:
    moved = {p: produced.log_end[p] - settings.rewind_by for p in settings.rewind_partitions}
    got = {c.partition: (c.status, c.offset, c.previous_offset) for c in rewind.changes}
    expected = {p: (ChangeStatus.APPLIED, offset, produced.log_end[p]) for p, offset in moved.items()}
    if got != expected:
        return Check("rewind while running", False, f"set_stream_offset returned {_changes_text(rewind.changes)}; "
                                                    f"expected applied at {moved}, from the log end")
    if settings.bolt:
        return Check("rewind while running", None, f"applied at {moved}; redelivery order is not observable "
                                                   f"through a Bolt sink")
    after: dict[int, list[int]] = defaultdict(list)
    for r in records[rewind.records_before:]:
        after[r.partition].append(r.offset)
    wanted = {p: list(range(offset, produced.log_end[p])) for p, offset in moved.items()}
    if dict(after) != wanted:
        shown = {p: f"{o[0]}..{o[-1]} ({len(o)})" for p, o in sorted(after.items())}
        return Check("rewind while running", False, f"after the call: {shown or 'nothing delivered'}; expected "
                                                    f"partitions {sorted(moved)} from {moved} to the end only")
    return Check("rewind while running", True,
                 f"partitions {', '.join(map(str, sorted(moved)))} redelivered from exactly "
                 f"{', '.join(str(moved[p]) for p in sorted(moved))} to the end; the others did not move")


# -- step 4: the operator's view -----------------------------------------------------------
def check_offsets(rows: Sequence[PartitionOffsets], produced: Produced) -> Check:
    bad = [r for r in rows if not r.assigned or r.lag != 0 or r.committed_offset != produced.log_end[r.partition]]
    if bad or len(rows) != len(produced.log_end):
        shown = ", ".join(f"{r.partition}: committed {r.committed_offset} lag {r.lag} assigned {r.assigned}"
                          for r in bad)
        return Check("offsets and lag", False, f"{len(rows)} rows; not caught up: {shown}")
    return Check("offsets and lag", True, f"all {len(rows)} partitions assigned, committed at the log end, lag 0")


def check_history(entries: Sequence[Mapping[str, Any]], changes: Sequence[OffsetChange]) -> Check:
    """The audit holds exactly the applied changes, newest first."""
    got = Counter((e["topic"], e["partition"], e["previous_offset"], e["offset"]) for e in entries)
    wanted = Counter((c.topic, c.partition, c.previous_offset, c.offset) for c in changes
                     if c.status in (ChangeStatus.APPLIED, ChangeStatus.CLAMPED))
    if got != wanted:
        return Check("history", False, f"{len(entries)} audit entries; expected the {sum(wanted.values())} "
                                       f"applied changes; missing {dict(wanted - got)}, extra {dict(got - wanted)}")
    times = [e["changed_at"] for e in entries]
    if times != sorted(times, reverse=True):
        return Check("history", False, "audit entries are not newest first")
    return Check("history", True, f"the {len(entries)} applied changes (the race's and the rewind's), newest first")


# -- step 5: the Spark backfill ------------------------------------------------------------
def backfill_job(settings: DemoSettings) -> BackfillJob:
    """[backfill_from, committed) of the stream's group, through its transformation; the stream's
    configuration (secrets included, which the host's API never hands out) comes from the state dir."""
    config = stored_config(settings.state_dir, settings.stream)
    return BackfillJob(config.bootstrap_servers, tuple(config.topics), parse_offset_spec(settings.backfill_from),
                       parse_offset_spec("committed"), config.transform, f"cypherl://{settings.backfill_dir}",
                       client_config=config.client_config(), search_dirs=tuple(query_module_dirs()),
                       batch_size=config.batch_size)


def run_backfill_step(spark, job: BackfillJob, settings: DemoSettings,
                      reporter: Reporter = Reporter()) -> BackfillResult:
    range_plan = plan_job(job)
    reporter.backfill_plan(job, range_plan)
    report = run_backfill(spark, job, range_plan, on_progress=reporter.backfill_progress)
    settings.report_path.write_text(json.dumps(report.to_dict(), indent=2) + "\n")
    return BackfillResult(job, range_plan, report, tuple(sorted(settings.backfill_dir.glob("*.cypherl"))))


def check_backfill_range(result: BackfillResult, produced: Produced, records: Sequence[Record],
                         settings: DemoSettings) -> Check:
    """The backfill wrote exactly [backfill_from, committed) of every partition, each offset once."""
    offsets: dict[int, list[int]] = defaultdict(list)
    for r in records:
        offsets[r.partition].append(r.offset)
    problems = []
    for partition, end in sorted(produced.log_end.items()):
        got = sorted(offsets.get(partition, []))
        if got != list(range(settings.backfill_from, end)):
            span = f"{got[0]}..{got[-1]}" if got else "nothing"
            problems.append(f"partition {partition}: {len(got)} statements ({span}), "
                            f"expected {settings.backfill_from}..{end - 1}")
    if result.report.records != len(records):
        problems.append(f"the report counts {result.report.records} records, the files hold {len(records)}")
    if problems:
        return Check("backfill range", False, "; ".join(problems[:3]))
    return Check("backfill range", True, f"{len(records)} statements: offsets {settings.backfill_from} up to the "
                                         f"committed offset on all {len(produced.log_end)} partitions, once each")


def check_backfill_matches_live(live: Sequence[Record], backfill: Sequence[Record]) -> Check:
    """Over the offsets both wrote, the backfilled statement equals the live one (redeliveries included)."""
    live_by_key: dict[tuple[str, int, int], set[str]] = defaultdict(set)
    for r in live:
        live_by_key[(r.topic, r.partition, r.offset)].add(r.statement)
    backfill_by_key = {(r.topic, r.partition, r.offset): r.statement for r in backfill}
    unstable = [k for k, statements in live_by_key.items() if len(statements) > 1]
    if unstable:
        return Check("backfill equals live", False, f"live redeliveries differ at {_key_text(unstable[0])}")
    overlap = sorted(live_by_key.keys() & backfill_by_key.keys())
    if not overlap:
        return Check("backfill equals live", False, "the backfill and the live stream share no offset")
    differ = [k for k in overlap if backfill_by_key[k] not in live_by_key[k]]
    if differ:
        key = differ[0]
        return Check("backfill equals live", False,
                     f"{len(differ)} of {len(overlap)} overlapping statements differ, first at {_key_text(key)}: "
                     f"live {next(iter(live_by_key[key]))[-90:]!r}, backfill {backfill_by_key[key][-90:]!r}")
    spans: dict[int, list[int]] = defaultdict(list)
    for _, partition, offset in overlap:
        spans[partition].append(offset)
    span = " ".join(f"{p}:[{min(o)},{max(o) + 1})" for p, o in sorted(spans.items()))
    return Check("backfill equals live", True, f"{len(overlap)} overlapping statements identical ({span})")


# -- step 6: shutdown ----------------------------------------------------------------------
def shut_down(host: HostProcess, streams: QueryModule | None, settings: DemoSettings,
              reporter: Reporter = Reporter()) -> tuple[int | None, Check]:
    """Stop the stream if it runs (its offsets stay committed), then SIGTERM the host: exit 0 expected."""
    with contextlib.suppress(StreamError):
        host.wait_ready()        # a run that failed early: let the host finish starting, then stop it as usual
    if streams is not None:
        with contextlib.suppress(StreamError):
            if stream_row(streams, settings.stream, quiet=True)["status"] in ("starting", "running"):
                reporter.rows(streams.call("stop", settings.stream))
    started = time.monotonic()
    code = host.stop()
    seconds = time.monotonic() - started
    reporter.say(f"SIGTERM → the host exited with status {code} after {seconds:.1f} s")
    if code == 0:
        return code, Check("host shutdown", True, f"SIGTERM: exit status 0 after {seconds:.1f} s")
    tail = " | ".join(host.log().strip().splitlines()[-2:])
    return code, Check("host shutdown", False, f"SIGTERM: exit status {code} (log {host.log_path}: {tail})")


# -- reading what was written ------------------------------------------------------------
_WHERE = re.compile(r't\.kafka_topic = "(?P<topic>[^"\\]*)", t\.kafka_partition = (?P<partition>\d+), '
                    r't\.kafka_offset = (?P<offset>\d+);$')


def normalize(line: str) -> str:
    return " ".join(line.split())


def read_cypherl(paths: Iterable[Path]) -> list[Record]:
    """Transfer statements in file order; a line without kafka topic/partition/offset is an error."""
    records = []
    for path in paths:
        if not path.exists():
            continue
        with path.open(encoding="utf-8") as handle:
            for number, line in enumerate(handle, 1):
                if not line.strip() or line.startswith("//"):   # a batch's frame line (a comment)
                    continue
                text = normalize(line)
                match = _WHERE.search(text)
                if match is None:
                    raise StreamError(f"{path}:{number}: not a transfer statement with kafka topic/partition/"
                                      f"offset: {text[:120]!r}")
                records.append(Record(match["topic"], int(match["partition"]), int(match["offset"]), text))
    return records


def live_records(settings: DemoSettings) -> list[Record]:
    return read_graph(settings) if settings.bolt else read_cypherl([settings.live_path])


def _bolt_connect(settings: DemoSettings):
    from stream_registry.graph.sinks import connect_mgclient

    parts = urlsplit(settings.memgraph_uri or "")
    kwargs = {"host": parts.hostname or "localhost", "port": parts.port or 7687}
    credentials = settings.memgraph_credentials
    if credentials.get("bolt.username"):
        kwargs.update(username=credentials["bolt.username"], password=credentials.get("bolt.password", ""))
    if parts.scheme.lower() != "bolt":
        import mgclient
        kwargs["sslmode"] = mgclient.MG_SSLMODE_REQUIRE
    connection = connect_mgclient(**kwargs)
    connection.autocommit = True
    return connection


def clear_graph(settings: DemoSettings) -> None:
    """Bolt mode: drop the TRANSFER relationships an earlier run of the demo left (same topic name)."""
    connection = _bolt_connect(settings)
    try:
        connection.cursor().execute("MATCH ()-[t:TRANSFER]->() WHERE t.kafka_topic = $topic DELETE t",
                                    {"topic": settings.topic})
    finally:
        connection.close()


def _transfer_query() -> str:
    from stream_registry.graph.transform import load_transformation

    fn = load_transformation(TRANSFORM, query_module_dirs())
    return sys.modules[fn.__module__].TRANSFER_QUERY


def read_graph(settings: DemoSettings) -> list[Record]:
    """Bolt mode: the live stream's transfers as Memgraph holds them, rendered as the transformation would."""
    query = _transfer_query()
    connection = _bolt_connect(settings)
    try:
        cursor = connection.cursor()
        cursor.execute("MATCH (a:Account)-[t:TRANSFER]->(b:Account) WHERE t.kafka_topic = $topic "
                       "RETURN t.transfer_id, a.id, b.id, t.amount, t.currency, t.ts, t.kafka_topic, "
                       "t.kafka_partition, t.kafka_offset ORDER BY t.kafka_partition, t.kafka_offset",
                       {"topic": settings.topic})
        rows = cursor.fetchall()
    finally:
        connection.close()
    names = ("transfer_id", "from_account", "to_account", "amount", "currency", "ts", "kafka_topic",
             "kafka_partition", "kafka_offset")
    records = []
    for row in rows:
        params = dict(zip(names, row))
        records.append(Record(params["kafka_topic"], params["kafka_partition"], params["kafka_offset"],
                              normalize(render_statement(query, params))))
    return records


# -- the whole run ---------------------------------------------------------------------------
def run_demo(settings: DemoSettings, bootstrap_servers: str, spark_factory: Callable[[], object],
             reporter: Reporter = Reporter()) -> DemoResult:
    """Steps 1 (producing) to 6, on a cluster where `settings.topic` exists. A step that raises
    becomes a failed check and ends the run; the stream is stopped and the host terminated in any case."""
    result = DemoResult(settings)

    def add(check: Check) -> Check:
        result.checks.append(check)
        reporter.check(check)
        return check

    prepare_out(settings)
    # The live sink, <out>/live.cypherl, is outside the host's default output directory (<state>/output).
    output_dirs = os.pathsep.join(filter(None, (os.environ.get(OUTPUT_DIRS_ENV), str(settings.out_dir))))
    host = HostProcess(settings.state_dir, log_path=settings.host_log,
                       env={OUTPUT_DIRS_ENV: output_dirs}).spawn()   # imports while we produce
    streams: QueryModule | None = None
    step = "produce"
    try:
        transfers = generate_transfers(settings.seed, settings.events, settings.accounts)
        result.produced = produced = produce_transfers(bootstrap_servers, settings.topic, transfers,
                                                       configs=settings.producer_configs)
        report_produced(produced, reporter)
        if not add(check_produced(produced, settings)).ok:
            return result

        step = "create stream"
        result.host_url = url = host.wait_ready()
        reporter.step(2, "a stream that builds the graph, created from Cypher")
        reporter.say(f"stream host: `mgstreams serve` (pid {host.proc.pid}) at {url}; "
                     f"the query module {settings.query_module.name} calls it (MGSTREAMS_URL)")
        # the module sends the token the host generated in its state directory (host.token read it there)
        streams = QueryModule(settings.query_module, url, token=host.token, on_call=reporter.call).open()
        create_stream(streams, settings, bootstrap_servers, reporter)

        step = "rebalance race"
        reporter.step(3, "set_stream_offset during the rebalance, then while running")
        result.race = start_and_set_offset(streams, settings, reporter)
        add(check_race(result.race))
        wait_caught_up(streams, settings.stream, produced.log_end, settings.timeout_s)
        live = live_records(settings)
        add(check_first_delivered(live, produced, settings.live_from, settings.bolt))

        step = "rewind while running"
        result.rewind = rewind_running(streams, settings, len(live), reporter)
        wait_caught_up(streams, settings.stream, produced.log_end, settings.timeout_s)
        live = live_records(settings)
        add(check_rewind(result.rewind, live, produced, settings))

        step = "offsets and lag"
        reporter.step(4, "offsets, lag and history: the operator's CLI, the same host")
        run_cli(url, "describe", settings.stream, reporter=reporter)
        add(check_offsets([partition_offsets(r) for r in streams.call("offsets", settings.stream)], produced))
        step = "history"
        run_cli(url, "history", settings.stream, reporter=reporter)
        add(check_history(streams.call("history", settings.stream), result.race.changes + result.rewind.changes))

        step = "backfill"
        reporter.step(5, "Spark backfill up to the committed offsets")
        result.backfill = run_backfill_step(spark_factory(), backfill_job(settings), settings, reporter)
        reporter.backfill(result.backfill)
        backfilled = read_cypherl(result.backfill.files)
        add(check_backfill_range(result.backfill, produced, backfilled, settings))
        add(check_backfill_matches_live(live, backfilled))
    except (StreamError, OSError, subprocess.SubprocessError, KeyError, ValueError) as exc:
        add(Check(step, False, " ".join(str(exc).split())))
    finally:
        reporter.backfill_progress(-1, -1)    # closes a progress bar a failed backfill left open
        reporter.step(6, "shutdown")
        result.host_exit, check = shut_down(host, streams, settings, reporter)
        add(check)
        if streams is not None:
            streams.close()
    return result


def _changes_text(changes: Iterable[OffsetChange]) -> str:
    """Per-partition outcomes on one line, partitions with the same outcome together."""
    groups: dict[tuple, list[int]] = defaultdict(list)
    for c in changes:
        groups[(c.status.value, c.offset, c.message)].append(c.partition)
    parts = []
    for (status, offset, message), partitions in groups.items():
        why = f" ({message[:90]}{'…' if len(message) > 90 else ''})" if message else ""
        parts.append(f"partition(s) {','.join(map(str, partitions))} {status} at {offset}{why}")
    return "; ".join(parts) or "none"


def _key_text(key: tuple[str, int, int]) -> str:
    return f"{key[0]}:{key[1]}@{key[2]}"


# -- printing -------------------------------------------------------------------------------
def _indented(renderable) -> Padding:
    return Padding(renderable, (0, 0, 0, 3), expand=False)


def _cell(value: Any) -> str:
    """A result value as Memgraph's clients show it."""
    if value is None or isinstance(value, bool):
        return to_cypher_literal(value)
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, (dict, list)):
        return json.dumps(value)
    return str(value)


class RichReporter(Reporter):
    def __init__(self, console):
        self.console = console
        self._progress = None
        self._task = None

    def say(self, text: str) -> None:
        self.console.print(f"   {text}", soft_wrap=True, markup=False)

    def step(self, number: int, title: str) -> None:
        self.console.print()
        self.console.print(f"[bold]{number} · {title}[/]")

    def call(self, statement: str) -> None:
        self.console.print(Text(f"   {statement};", style="cyan"), soft_wrap=True)

    def rows(self, rows: Sequence[Mapping[str, Any]]) -> None:
        if rows:
            self.console.print(_indented(table(rows[0].keys(), ([_cell(v) for v in r.values()] for r in rows))))

    def command(self, argv: Sequence[str], output: str) -> None:
        self.console.print(Text(f"   $ {' '.join(argv)}", style="cyan"), soft_wrap=True)
        for line in output.rstrip().splitlines():
            self.console.print(f"   {line.rstrip()}", soft_wrap=True, markup=False, highlight=False)

    def backfill_plan(self, job: BackfillJob, plan: RangePlan) -> None:
        self.say(f"replay offsets [{job.start.default.describe()}, committed) of group {job.group_id} through "
                 f"{job.transform} into {job.sink} (the stream's config read from its state dir)")
        self.say(f"plan: {len(plan.ranges)} ranges, one Spark task each, {plan.total_offsets:,} offsets")
        for note in plan.notes:
            self.say(f"  note: {note}")
        self._progress = Progress(TextColumn("   backfill"), BarColumn(bar_width=40), MofNCompleteColumn(),
                                  TextColumn("ranges"), TimeElapsedColumn(), console=self.console)
        self._task = self._progress.add_task("backfill", total=len(plan.ranges))
        self._progress.start()

    def backfill_progress(self, done: int, total: int) -> None:
        if self._progress is None:
            return
        if done < 0:
            self._progress.stop()
            self._progress = None
        else:
            self._progress.update(self._task, completed=done, total=total)

    def backfill(self, result: BackfillResult) -> None:
        self.backfill_progress(-1, -1)
        report = result.report
        self.console.print(_indented(table(
            ("RANGE", "RECORDS", "STATEMENTS", "BATCHES", "SECONDS", "RECORDS/S", "FILE"),
            ((p.range, p.records, p.statements, p.batches, f"{p.seconds:.2f}", f"{p.rate:,.0f}",
              shown_path(Path(p.output))) for p in report.partitions))))
        self.say(f"{report.records:,} records → {report.statements:,} statements in {report.seconds:.1f} s "
                 f"({report.rate:,.0f} records/s)")

    def check(self, check: Check) -> None:
        mark = {True: "[green]✓[/]", False: "[red]✗[/]", None: "[yellow]–[/]"}[check.ok]
        self.console.print(f"   {mark} [bold]{check.name}[/]: {escape(check.reason)}", soft_wrap=True)


def shown_path(path: Path) -> str:
    """Relative to the working directory when under it (./demo-out/...), else absolute."""
    with contextlib.suppress(ValueError):
        return "./" + str(Path(path).resolve().relative_to(Path.cwd()))
    return str(path)


def print_outputs(console, settings: DemoSettings) -> None:
    """Step 7: where everything is, and how to load it into Memgraph."""
    out = shown_path(settings.out_dir)
    rows = [(shown_path(settings.schema_path), "CREATE INDEX ON :Account(id): load it first")]
    if settings.bolt:
        rows.append((settings.memgraph_uri, "the live stream's writes (Bolt)"))
    else:
        rows.append((shown_path(settings.live_path),
                     f"{_lines(settings.live_path):,} statements from the live stream, in delivery order "
                     f"(the rewind redelivered some)"))
    files = sorted(settings.backfill_dir.glob("*.cypherl"))
    rows.append((shown_path(settings.backfill_dir) + "/",
                 f"{len(files)} files, one per offset range: {sum(_lines(f) for f in files):,} statements"))
    for path, what in ((settings.report_path, "the backfill report (per range: records, seconds, file)"),
                       (settings.state_dir, "the host's state (SQLite): the stream, offset history; "
                                            "`mgstreams serve --state-dir` it again"),
                       (settings.host_log, "the host's log"),
                       (settings.spark_log, "Spark's log")):
        if path.exists():
            rows.append((shown_path(path) + ("/" if path.is_dir() else ""), what))
    console.print(_indented(table(("PATH", "WHAT"), rows)))
    console.print()
    lines = ["Load it into Memgraph (mgconsole reads one statement per line on stdin):",
             f"  mgconsole < {out}/schema.cypherl"]
    if not settings.bolt:
        lines.append(f"  mgconsole < {out}/live.cypherl")
    lines += [f"  cat {out}/backfill/*.cypherl | mgconsole --import-mode=batched-parallel",
              "or into the docker-compose stack (Memgraph MAGE with the plugin):",
              "  docker compose up -d --build",
              f"  docker compose exec -T memgraph mgconsole < {out}/schema.cypherl",
              f"  docker compose exec -T memgraph mgconsole < {out}/live.cypherl",
              f"  cat {out}/backfill/*.cypherl | docker compose exec -T memgraph mgconsole "
              f"--import-mode=batched-parallel",
              "or let the live stream write there itself: MEMGRAPH_URI=bolt://localhost:7687 make demo",
              "Every statement MERGEs on account id and transfer_id: loading live and backfill both, "
              "or twice, gives the same graph."]
    for line in lines:
        console.print(f"   {line}", soft_wrap=True, highlight=False, markup=False)


def _lines(path: Path) -> int:
    if not path.exists():
        return 0
    with path.open("rb") as handle:
        return sum(1 for line in handle if line.strip() and not line.startswith(b"//"))


@contextlib.contextmanager
def stderr_to(path: Path):
    """Point fd 2 at `path` while the Spark JVM starts; the JVM keeps it for its own logs."""
    sys.stderr.flush()
    saved = os.dup(2)
    target = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.dup2(target, 2)
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)
        os.close(target)


def console_width() -> int:
    """Tables are never cut: at least 120 columns on a terminal, 200 when piped (like the CLI)."""
    if not sys.stdout.isatty():
        return 200
    return max(shutil.get_terminal_size().columns, 120)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m mgstreams.demo",
                                     description="The mgstreams main job on an embedded Kafka cluster.")
    parser.add_argument("--out", default="demo-out",
                        help="directory for everything the demo writes (default: %(default)s)")
    parser.add_argument("--seed", type=int, default=DemoSettings.seed, help="event generator seed (default: 7)")
    parser.add_argument("--events", type=int, default=DemoSettings.events, help="transfers (default: 3000)")
    parser.add_argument("--memgraph-uri", default=os.environ.get("MEMGRAPH_URI") or None,
                        help="write the live stream to Memgraph over Bolt, e.g. bolt://localhost:7687 "
                             "(default: $MEMGRAPH_URI; credentials from $MEMGRAPH_USERNAME, $MEMGRAPH_PASSWORD)")
    parser.add_argument("--master", default=DemoSettings.spark_master,
                        help="Spark master for the backfill (default: %(default)s)")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    from spark_bridge.spark_session import build_session

    from .embedded_kafka import EmbeddedKafka

    args = parse_args(argv)
    credentials = {key: value for key, value in (("bolt.username", os.environ.get("MEMGRAPH_USERNAME")),
                                                 ("bolt.password", os.environ.get("MEMGRAPH_PASSWORD"))) if value}
    settings = DemoSettings(out=Path(args.out), seed=args.seed, events=args.events,
                            memgraph_uri=args.memgraph_uri, memgraph_credentials=credentials,
                            spark_master=args.master)
    console = Console(highlight=False, width=console_width())
    reporter = RichReporter(console)
    began = time.monotonic()
    console.print(f"[bold]mgstreams demo[/] · seed {settings.seed} · {settings.events:,} transfers · "
                  f"output in {shown_path(settings.out_dir)}/")
    settings.out_dir.mkdir(parents=True, exist_ok=True)
    settings.spark_log.unlink(missing_ok=True)
    spark = None

    def spark_factory():
        nonlocal spark
        with console.status(f"starting Spark {settings.spark_master} (log: {shown_path(settings.spark_log)})"), \
                stderr_to(settings.spark_log):
            spark = build_session(settings.spark_master, app_name="mgstreams-demo",
                                  conf={"spark.ui.enabled": "false"})
        return spark

    reporter.step(1, "embedded Kafka, a stream host and an account-transfer stream")
    try:
        with EmbeddedKafka(brokers=3) as cluster:
            cluster.create_topic(settings.topic, settings.partitions, replication=3)
            reporter.say(f"embedded Kafka: {cluster.broker_count} brokers at {cluster.bootstrap_servers} "
                         f"(librdkafka's mock cluster; initial rebalance delay 3 s, as on brokers)")
            reporter.say(f"topic {settings.topic}: {settings.partitions} partitions, "
                         f"replication {min(3, cluster.broker_count)}")
            result = run_demo(settings, cluster.bootstrap_servers, spark_factory, reporter)
    finally:
        if spark is not None:
            with stderr_to(settings.spark_log):
                spark.stop()
    reporter.step(7, f"what the demo wrote ({shown_path(settings.out_dir)}/)")
    print_outputs(console, settings)
    console.print()
    failed = [c for c in result.checks if c.ok is False]
    skipped = [c for c in result.checks if c.ok is None]
    passed = len(result.checks) - len(failed) - len(skipped)
    elapsed = time.monotonic() - began
    if result.ok:
        console.print(f"[green bold]✓ {passed} checks passed[/]"
                      + (f", {len(skipped)} not observable here" if skipped else "") + f" ({elapsed:.0f} s)")
        return 0
    console.print(f"[red bold]✗ {len(failed)} of {len(result.checks)} checks failed[/] ({elapsed:.0f} s): "
                  + ", ".join(c.name for c in failed))
    return 1


if __name__ == "__main__":
    sys.exit(main())
