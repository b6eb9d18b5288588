"""The reliability figure: a chaos soak of a real stream host on the embedded 3-broker cluster.

    .venv/bin/python bench/soak.py --minutes 2 [--seed N] [--keep DIR]
    .venv/bin/python bench/soak.py --seconds 20          # the short run the test suite makes
    .venv/bin/python bench/soak.py --delivery exactly_once --minutes 2

A `mgstreams serve` child process (state in a temporary directory) runs four
streams over 16 partitions: topics soak_a..soak_d of 4 partitions each, one
cypherl sink per stream, eager `range` assignment on two streams,
`cooperative-sticky` on the third (6 s sessions, 0.5 s heartbeats) and the
KIP-848 `consumer` protocol on the fourth. Every
stream carries secrets the embedded brokers ignore (credential `bolt.password`,
config `ssl.key.password`). A producer thread writes keyed payloads
`seq=<n>;...` at a steady rate and keeps, from its delivery reports, which
sequence number sits at each (topic, partition, offset).

Faults are injected at random every few seconds (`--seed` fixes the choice and
order; the first ones go through every kind once, and a run lasts at least
that long, so even a short run sees them all), each counted by kind:
- broker_down: one broker down for 1-4 s, then up;
- errors:OffsetCommit / Heartbeat / JoinGroup / Fetch: 1-4 transient Kafka
  errors pushed onto the next requests of that API (NOT_COORDINATOR,
  REBALANCE_IN_PROGRESS, REQUEST_TIMED_OUT, ...), whichever client sends them;
- member_join: a plain confluent_kafka Consumer joins a stream's group for
  2-6 s and leaves (it polls, never commits, writes nothing): rebalances
  mid-batch under both protocols; its partitions come back to the stream after
  it leaves (a classic group waits out its session: the embedded brokers ignore
  LeaveGroup);
- transform_failure / sink_failure: the next 1-2 batches of a stream raise in
  the transformation, or are refused whole by the cypherl sink (see
  bench/soak_transform.py); counted when they fired;
- set_offset: the host API's PATCH with a random spec (an absolute offset in or
  just past the log, earliest, latest, "-N", "+N", a recent datetime, or a map
  naming some partitions), timeout 3 s; per-partition results, the wall time
  and the sink file's size before the call and after it returned are kept;
- leader_move / coordinator_move: a partition's leader or a group's
  coordinator moves to another broker;
- host_kill: SIGKILL the host, start a new one on the same state directory
  (the streams resume by themselves); at most one every 25 s.
With `--delivery exactly_once` the streams store their offsets with each
batch in the sink file, and two more faults kill stream processes:
- stream_kill: SIGKILL a stream's process at a random moment (busy streams
  are often appending); the host restarts it, the sink file is cut back to its
  last whole batch, and the stream resumes from the offsets the file stores;
- ambiguous_commit: the next batch of a stream kills its own process
  (bench/soak_transform.py) as soon as its append reaches the file, before
  the Kafka commit: the cypherl form of a commit whose outcome is unknown.
Then every re-delivery within a continuation counts against the run: the
promise is duplicates 0 (at-least-once keeps its duplicates at commit points).
Streams that go to ERROR on their own are restarted through the API and
listed (a finding, not a fault).

At the end: faults stop, the producer stops, every stream must catch up
(committed = log end on every partition), the host gets SIGTERM (exit 0
expected), and `check_partition` (below) reads each sink file independently.
The host's log is searched for the configured secrets. The last line is

    soak: N records, F faults (kind n, ...), lost L, stale S, contradictions C, duplicates D, secrets in logs X

(N = records produced; C = set_offset results the host's history contradicts:
a partition told applied whose change the history lacks or shows otherwise,
or told superseded/cancelled that the history shows applied) and the exit
status is non-zero if lost, stale, contradictions, duplicates (exactly-once),
secrets, corrupt or mismatched lines, a catch-up timeout or a SIGTERM exit
other than 0 occurred. On failure the work directory (state, host log, sink
files, events.jsonl with every fault and call) is kept and named.
"""
from __future__ import annotations

import argparse
import heapq
import json
import os
import random
import re
import secrets
import shutil
import signal
import sys
import tempfile
import threading
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
sys.path.insert(0, str(ROOT))

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition  # noqa: E402

from mgstreams.client import HostUnavailable  # noqa: E402
from mgstreams.embedded_kafka import EmbeddedKafka  # noqa: E402
from mgstreams.host_process import HostProcess  # noqa: E402
from stream_registry.errors import StreamError  # noqa: E402
from stream_registry.graph.cypherl_frames import FRAME_PREFIX  # noqa: E402
from stream_registry.graph.offset_store import OFFSET_LABEL  # noqa: E402

TRANSFORM_MODULE = "soak_transform"
TRANSFORM = f"{TRANSFORM_MODULE}.record"
PARTITIONS = 4
BROKERS = (1, 2, 3)
GROUP_CONFIG = {"session.timeout.ms": 6000, "heartbeat.interval.ms": 500}
SET_OFFSET_TIMEOUT_S = 3.0
KILL_MIN_GAP_S = 25.0
CATCH_UP_TIMEOUT_S = 120.0
MAX_INJECTED_BATCH_FAILURES = 2     # below the host's retry attempts (4): transient by construction


@dataclass(frozen=True)
class StreamPlan:
    name: str
    topic: str
    strategy: str
    batch_size: int
    batch_interval_ms: int

    @property
    def group(self) -> str:
        return f"soak_group_{self.name}"

    def group_config(self) -> dict:
        """The protocol's settings: KIP-848 (`consumer`) takes its session from the broker, not the client."""
        if self.strategy == "consumer":
            return {"group.protocol": "consumer"}
        return {**GROUP_CONFIG, "partition.assignment.strategy": self.strategy}


STREAMS = (
    StreamPlan("soak_a", "soak_a", "range", 100, 100),
    StreamPlan("soak_b", "soak_b", "cooperative-sticky", 50, 300),
    StreamPlan("soak_c", "soak_c", "range", 200, 500),     # long batches: rebalances land mid-batch
    StreamPlan("soak_d", "soak_d", "consumer", 100, 200),  # KIP-848: the broker assigns incrementally
)

# Transient errors a healthy cluster answers with now and then; none of them moves an offset by itself.
REQUEST_ERRORS = {
    "OffsetCommit": (KafkaError.NOT_COORDINATOR, KafkaError.REBALANCE_IN_PROGRESS, KafkaError.REQUEST_TIMED_OUT,
                     KafkaError.COORDINATOR_LOAD_IN_PROGRESS, KafkaError.COORDINATOR_NOT_AVAILABLE),
    "Heartbeat": (KafkaError.REBALANCE_IN_PROGRESS, KafkaError.NOT_COORDINATOR,
                  KafkaError.COORDINATOR_NOT_AVAILABLE),
    "JoinGroup": (KafkaError.COORDINATOR_LOAD_IN_PROGRESS, KafkaError.NOT_COORDINATOR,
                  KafkaError.REQUEST_TIMED_OUT, KafkaError.COORDINATOR_NOT_AVAILABLE),
    "Fetch": (KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.REQUEST_TIMED_OUT,
              KafkaError.LEADER_NOT_AVAILABLE),
}
FAULT_WEIGHTS = {
    "set_offset": 3.0, "broker_down": 1.0, "member_join": 1.5, "transform_failure": 1.0, "sink_failure": 1.0,
    **{f"errors:{api}": 0.7 for api in REQUEST_ERRORS}, "leader_move": 0.5, "coordinator_move": 0.5,
    "host_kill": 0.4,
}
EXACTLY_ONCE_FAULTS = {"stream_kill": 0.6, "ambiguous_commit": 0.6}
OFFSET_LINE_PREFIX = f"MERGE (o:{OFFSET_LABEL} ".encode()   # an exactly-once batch's stored offsets

_LINE = re.compile(rb'CREATE \(:SoakMsg \{topic: "(?P<topic>[A-Za-z0-9._-]+)", partition: (?P<partition>\d+), '
                   rb'offset: (?P<offset>\d+), seq: (?P<seq>-?\d+), batch: "(?P<batch>[0-9-]+)"\}\);')


# ======================================================================================
# The checker: pure functions over what the sink files hold and what the soak recorded.
# ======================================================================================
@dataclass(frozen=True)
class Rec:
    """One statement of a sink file: the message it records and where in the file it starts."""
    offset: int
    seq: int
    batch: str
    pos: int


@dataclass(frozen=True)
class Change:
    """An offset change of one partition that the stream may have applied.

    `lo`: the sink file's size when the call started (the change cannot act on
    anything written before). `hi`: a size by which it had surely been applied
    (the call returned `applied`/`clamped`, or the host's history showed it), or
    None when that is unknown (returned `pending` and never seen applied; a
    pending move whose commit failed may still have moved the stream).
    `claim`: the stream's position or committed offset that the call reported as
    `previous_offset` when it resolved this change, kept only when the change
    before it was surely applied before this call started: then every offset
    below it was written before (or the stream would have committed or
    reported a position past a record it never wrote).
    """
    offset: int
    lo: int
    hi: int | None = None
    claim: int | None = None


@dataclass
class Verdict:
    records: int = 0
    lost: int = 0            # expected offsets never delivered anywhere
    skipped: int = 0         # expected in a continuation, missing there, delivered only in another
    stale: int = 0           # delivered outside the continuation
    duplicates: int = 0      # re-delivered within a continuation, from a commit point (uncommitted batches)
    replayed: int = 0        # delivered again because a change moved the stream back
    mismatched: int = 0      # the payload's seq is not what the producer wrote at that offset
    problems: list[str] = field(default_factory=list)

    def note(self, text: str) -> None:
        if len(self.problems) < 12:
            self.problems.append(text)

    def add(self, other: Verdict) -> None:
        for name in ("records", "lost", "skipped", "stale", "duplicates", "replayed", "mismatched"):
            setattr(self, name, getattr(self, name) + getattr(other, name))


def check_partition(records: list[Rec], changes: list[Change], log_end: int,
                    seqs: dict[int, int] | None = None, where: str = "") -> Verdict:
    """Check one partition's deliveries (its records in sink file order) against at-least-once.

    Continuations. The stream's deliveries form continuations: the first starts
    at offset 0 (a new group, auto.offset.reset=earliest); each applied offset
    change starts a new one at its offset. A record belongs to the continuation
    of the last change applied before it was written. Which one that is comes
    from the file order and the changes' windows: a record that starts at or
    past a change's `hi` comes after that change; a record at or past `lo`
    whose offset is the change's offset is taken as the first record of that
    change's continuation (the earliest such change; a chain of changes to the
    same offset is taken together). The worker applies changes between batches
    and commits a change before the call returns, so in a correct stream the
    first record after a change is its offset.

    What a correct at-least-once stream must deliver (the expected set). In
    each continuation that starts at offset o: every offset of [o, end), where
    end is the highest offset delivered in it plus one, for the last
    continuation the partition's log end at the finish, and for a continuation
    a later change resolved against, at least that change's `claim` (the
    position or committed offset the stream reported: it writes before it
    commits, so everything below was written). Offsets a forward change jumped
    over - from the position the stream had reached to the new offset - are
    skipped on purpose and not expected; offsets a backward change re-reads are
    expected again in the new continuation.
      lost    = expected offsets (per continuation) never delivered anywhere;
      skipped = expected in a continuation, missing from it, but delivered in
                another (a continuation that did not start exactly at its offset
                or has a hole): a violation as well, reported with lost.

    Stale: a record of a continuation below its start offset (for a change that
    returned `applied`, any such record written after the call returned is
    stale: nothing from the old position may follow); and a re-delivery that
    does not start at a commit point. A stream re-reads only from its committed
    offset (after a restart, a rebalance, a failed batch): the committed offset
    is the change's offset or the end of a batch written in the continuation.
    Batches are visible in the file (each record names its batch), so every run
    of re-delivered records must start at such a point; a run that does not is
    stale, record by record.

    Duplicates: records re-delivered within a continuation from a commit point,
    i.e. batches written but not (yet) committed when the stream restarted or
    rebalanced. Replayed: records delivered again because a change moved the
    stream back (on purpose, not duplicates).
    """
    v = Verdict(records=len(records))
    starts = [0] + [c.offset for c in changes]
    delivered = [set() for _ in starts]
    frontier = list(starts)                 # per continuation: highest offset delivered + 1
    commit_points = [{s} for s in starts]
    entered = [False] * len(starts)
    entered[0] = True
    seen: set[int] = set()                  # every offset delivered anywhere so far
    cur = 0
    prev: Rec | None = None
    bad_run = False
    for r in records:
        x = r.offset
        was_seen = x in seen
        if seqs is not None and x in seqs and seqs[x] != r.seq:
            v.mismatched += 1
            v.note(f"{where}@{x}: payload seq {r.seq}, the producer wrote seq {seqs[x]} there")
        nxt = _continuation_of(r, cur, changes)
        new_run = prev is None or nxt != cur or r.batch != prev.batch or x != prev.offset + 1
        if new_run and prev is not None and r.batch != prev.batch:
            commit_points[cur].add(prev.offset + 1)     # the end of a batch: a point the stream may commit
        if nxt != cur:
            forced = _forced(r, changes)
            if starts[nxt] < 0:
                # Not an offset (the host applied OFFSET_INVALID or the like): reported by the soak as an
                # invalid change; here the continuation is taken to start wherever the stream went.
                v.note(f"{where}: change #{nxt} to {starts[nxt]} (not an offset) was applied; the stream went on "
                       f"from {x}")
                starts[nxt] = frontier[nxt] = x
                commit_points[nxt] = {x}
            elif forced > cur and nxt == forced and x != starts[nxt]:
                v.note(f"{where}: change #{nxt} to {starts[nxt]} was applied (call returned or history showed "
                       f"it before byte {changes[nxt - 1].hi}) but the next record is offset {x} (byte {r.pos})")
            cur = nxt
            entered[cur] = True
        prev = r
        start = starts[cur]
        if new_run:
            # A run re-delivering below what the continuation reached must start at a commit point.
            bad_run = x < frontier[cur] and x not in commit_points[cur]
            if bad_run and x >= start:
                v.note(f"{where}@{x} (byte {r.pos}): re-delivery in continuation #{cur} (start {start}, reached "
                       f"{frontier[cur]}) from {x}, which is not a commit point (the start or a batch end)")
        seen.add(x)
        if x < start:
            v.stale += 1
            v.note(f"{where}@{x} (byte {r.pos}): below the continuation of change #{cur} to {start}")
            continue
        if bad_run and x < frontier[cur]:
            v.stale += 1
        elif x in delivered[cur]:
            v.duplicates += 1
        elif was_seen:
            v.replayed += 1
        delivered[cur].add(x)
        frontier[cur] = max(frontier[cur], x + 1)
    # A change surely applied after the last record starts a (possibly empty) last continuation.
    last = max([cur] + [j for j, c in enumerate(changes, 1) if c.hi is not None and j > cur], default=cur)
    entered[last] = True
    claims = {j - 1: c.claim for j, c in enumerate(changes, 1) if c.claim is not None}
    for i, start in enumerate(starts):
        if not entered[i] or start < 0:
            continue
        end = max(frontier[i], log_end) if i == last else frontier[i]
        claimed = claims.get(i)
        expected = set(range(start, end))
        for o in sorted(expected - delivered[i]):
            if o in seen:
                v.skipped += 1
            else:
                v.lost += 1
        if claimed is not None and claimed > end:
            missing = [o for o in range(end, claimed) if o not in seen]
            v.lost += len(missing)
            if missing:
                v.note(f"{where}: the stream reported position/committed {claimed} in continuation #{i} "
                       f"(start {start}) but offsets {_ranges(missing)} were never delivered")
        holes = sorted(expected - delivered[i])
        if holes:
            v.note(f"{where}: continuation #{i} (start {start}, end {end}) misses {_ranges(holes)}")
    return v


def _forced(r: Rec, changes: list[Change]) -> int:
    """The last change surely applied before `r` was written (0: none)."""
    return max((j for j, c in enumerate(changes, 1) if c.hi is not None and r.pos >= c.hi), default=0)


def _continuation_of(r: Rec, cur: int, changes: list[Change]) -> int:
    forced = _forced(r, changes)
    lowest = max(cur + 1, forced)
    candidate = None
    for j in range(lowest, len(changes) + 1):
        c = changes[j - 1]
        if c.lo > r.pos:
            break
        if c.offset == r.offset:
            candidate = j
            break
    if candidate is None:
        return max(cur, forced)
    while candidate < len(changes) and changes[candidate].lo <= r.pos and changes[candidate].offset == r.offset:
        candidate += 1                      # a chain of changes to one offset: the last of them
    return candidate


def _ranges(offsets: list[int]) -> str:
    out, first, last = [], None, None
    for o in offsets:
        if first is not None and o == last + 1:
            last = o
            continue
        if first is not None:
            out.append(f"{first}" if first == last else f"{first}-{last}")
        first = last = o
    if first is not None:
        out.append(f"{first}" if first == last else f"{first}-{last}")
    shown = ", ".join(out[:6])
    return shown + (f" (+{len(out) - 6} more ranges)" if len(out) > 6 else "")


def read_sink(path: Path) -> tuple[dict[tuple[str, int], list[Rec]], int]:
    """Records per (topic, partition) in file order, and the number of lines that are not a whole statement."""
    out: dict[tuple[str, int], list[Rec]] = defaultdict(list)
    corrupt = 0
    if not path.exists():
        return out, 0
    data = path.read_bytes()
    pos = 0
    for line in data.split(b"\n"):
        if line and not line.startswith((FRAME_PREFIX, OFFSET_LINE_PREFIX)):   # a batch's frame, its offsets
            m = _LINE.fullmatch(line)
            if m is None:
                corrupt += 1
            else:
                out[(m["topic"].decode(), int(m["partition"]))].append(
                    Rec(int(m["offset"]), int(m["seq"]), m["batch"].decode(), pos))
        pos += len(line) + 1
    return out, corrupt


# ======================================================================================
# The soak: cluster, host, producer, faults.
# ======================================================================================
@dataclass
class Call:
    """One set_offset call through the host API."""
    stream: str
    spec: object
    started: float
    size_before: int
    returned: float | None = None
    size_after: int | None = None
    rows: list | None = None          # OffsetChange rows; None when refused or unknown
    error: str | None = None
    unknown: bool = False             # no answer: it may or may not have acted


class SteadyProducer(threading.Thread):
    """Keyed payloads `seq=<n>;...` at `rate` per second, round-robin over the topics."""

    def __init__(self, bootstrap: str, topics: list[str], rate: float, seed: int):
        super().__init__(daemon=True, name="soak-producer")
        self.bootstrap, self.topics, self.rate = bootstrap, topics, rate
        self.rng = random.Random(seed)
        self.written: dict[tuple[str, int, int], int] = {}
        self.ends: dict[tuple[str, int], int] = {}
        self.failed: list[str] = []
        self.sent = 0
        self._halt = threading.Event()
        self.error: BaseException | None = None

    def stop(self) -> None:
        self._halt.set()
        self.join(120)

    def run(self) -> None:
        try:
            self._run()
        except BaseException as exc:   # reported by the soak
            self.error = exc

    def _run(self) -> None:
        producer = Producer({"bootstrap.servers": self.bootstrap, "linger.ms": 5,
                             "message.timeout.ms": 300_000, "log_level": 2})

        def delivered(err, msg):
            if err is not None:
                self.failed.append(str(err))
            else:
                tp = (msg.topic(), msg.partition())
                self.written[(*tp, msg.offset())] = int(msg.value()[4:].split(b";")[0])
                self.ends[tp] = max(self.ends.get(tp, 0), msg.offset() + 1)

        started = time.monotonic()
        while not self._halt.is_set():
            due = int((time.monotonic() - started) * self.rate)
            while self.sent < due:
                seq = self.sent
                topic = self.topics[seq % len(self.topics)]
                value = b"seq=%d;user=u%04d;pad=%s" % (seq, self.rng.randrange(10_000), b"x" * 40)
                try:
                    producer.produce(topic, value=value, key=b"key-%d" % self.rng.randrange(500),
                                     on_delivery=delivered)
                except BufferError:
                    producer.poll(0.05)
                    continue
                self.sent += 1
            producer.poll(0.02)
        left = producer.flush(120)
        if left:
            self.failed.append(f"{left} messages not delivered at the end")


class SecondMember(threading.Thread):
    """A plain consumer in a stream's group for a while: polls (rebalances), never commits, writes nothing."""

    def __init__(self, bootstrap: str, plan: StreamPlan, seconds: float):
        super().__init__(daemon=True, name=f"soak-member-{plan.name}")
        self.plan, self.seconds = plan, seconds
        self.config = {"bootstrap.servers": bootstrap, "group.id": plan.group, "enable.auto.commit": False,
                       "auto.offset.reset": "earliest", "log_level": 2, **plan.group_config()}
        self.taken: set[int] = set()
        self.consumed = 0

    def run(self) -> None:
        consumer = Consumer(self.config)
        try:
            consumer.subscribe([self.plan.topic])
            deadline = time.monotonic() + self.seconds
            while time.monotonic() < deadline:
                msg = consumer.poll(0.1)
                if msg is not None and msg.error() is None:
                    self.consumed += 1
                self.taken.update(tp.partition for tp in consumer.assignment())
        finally:
            consumer.close()


class Soak:
    def __init__(self, args, work: Path):
        self.args = args
        self.rng = random.Random(args.seed)
        self.work = work
        self.state = work / "state"
        self.out = work / "out"
        self.ctl = work / "ctl"
        self.log_path = work / "host.log"
        self.events_path = work / "events.jsonl"
        for d in (self.out, self.ctl):
            d.mkdir(parents=True, exist_ok=True)
        self.exactly_once = args.delivery == "exactly_once"
        self.weights = {**FAULT_WEIGHTS, **(EXACTLY_ONCE_FAULTS if self.exactly_once else {})}
        self.secrets = {"bolt.password": f"soak-secret-bolt-{secrets.token_hex(8)}",
                        "ssl.key.password": f"soak-secret-ssl-{secrets.token_hex(8)}"}
        self.faults: Counter = Counter()
        self.calls: list[Call] = []
        self.stream_errors: list[tuple[float, str, str]] = []
        self.describe_errors: Counter = Counter()
        self.sightings: dict[tuple, int] = {}           # history entry -> sink size after it was first seen
        self.history: dict[str, list] = {}
        self.undo: list[tuple[float, int, str, object]] = []
        self.members: dict[str, SecondMember] = {}
        self.down: set[int] = set()
        self.last_kill = time.monotonic()
        self.host: HostProcess | None = None
        self.client = None
        self.cluster: EmbeddedKafka | None = None
        self.producer: SteadyProducer | None = None
        self.exit_codes: list = []
        self._events = open(self.events_path, "a")
        self._undo_seq = 0
        self._lock = threading.RLock()
        self._undo_halt = threading.Event()
        self._undo_thread = threading.Thread(target=self._undo_loop, daemon=True, name="soak-undo")

    # -- plumbing ------------------------------------------------------------------
    def event(self, kind: str, **details) -> None:
        line = json.dumps({"t": round(time.time(), 3), "kind": kind, **details}, default=str) + "\n"
        with self._lock:
            self._events.write(line)
            self._events.flush()

    def say(self, text: str) -> None:
        print(text, flush=True)

    def sink_path(self, plan: StreamPlan) -> Path:
        return self.out / f"{plan.name}.cypherl"

    def sink_size(self, plan: StreamPlan) -> int:
        try:
            return self.sink_path(plan).stat().st_size
        except FileNotFoundError:
            return 0

    def host_env(self) -> dict[str, str]:
        path = os.pathsep.join(p for p in (str(BENCH), os.environ.get("PYTHONPATH", "")) if p)
        return {"MGSTREAMS_OUTPUT_DIRS": str(self.out), "MGSTREAMS_TRANSFORM_PACKAGES": TRANSFORM_MODULE,
                "SOAK_SINK_DIR": str(self.out),
                "MGSTREAMS_QUERY_MODULES_DIR": str(BENCH), "SOAK_CONTROL_DIR": str(self.ctl), "PYTHONPATH": path}

    def start_host(self) -> None:
        self.host = HostProcess(self.state, log_path=self.log_path, env=self.host_env()).start(60)
        self.client = self.host.client(timeout=30)

    # -- setup ---------------------------------------------------------------------
    def setup(self) -> None:
        self.cluster = EmbeddedKafka(brokers=len(BROKERS))
        for plan in STREAMS:
            self.cluster.create_topic(plan.topic, PARTITIONS, 3)
        self._undo_thread.start()
        self.start_host()
        for plan in STREAMS:
            self.client.create(name=plan.name, topics=[plan.topic], bootstrap_servers=self.cluster.bootstrap_servers,
                               transform=TRANSFORM, sink=f"cypherl://{self.sink_path(plan)}",
                               consumer_group=plan.group, batch_size=plan.batch_size,
                               batch_interval_ms=plan.batch_interval_ms, delivery=self.args.delivery,
                               configs={**plan.group_config(),
                                        "ssl.key.password": self.secrets["ssl.key.password"]},
                               credentials={"bolt.password": self.secrets["bolt.password"]})
            self.client.start(plan.name)
        self.producer = SteadyProducer(self.cluster.bootstrap_servers, [p.topic for p in STREAMS], self.args.rate,
                                       self.args.seed)
        self.producer.start()
        deadline = time.monotonic() + 40
        while time.monotonic() < deadline:
            if all(all(row.assigned for row in self.client.describe(p.name)) for p in STREAMS):
                return
            time.sleep(0.3)
        raise SystemExit("soak: the streams did not get their partitions within 40 s")

    # -- the fault loop ----------------------------------------------------------------
    def run_faults(self, seconds: float) -> None:
        kinds = list(self.weights)
        first = kinds[:]
        self.rng.shuffle(first)
        first.remove("host_kill")
        first.insert(len(first) // 2, "host_kill")    # once in every run, with streams busy on both sides
        end = time.monotonic() + seconds
        step = 0
        while time.monotonic() < end or step < len(first):      # every kind at least once, however short
            kind = first[step] if step < len(first) else self.rng.choices(kinds, [self.weights[k] for k in kinds])[0]
            step += 1
            if kind == "host_kill" and step > len(first) and time.monotonic() - self.last_kill < KILL_MIN_GAP_S:
                kind = "set_offset"
            try:
                getattr(self, "fault_" + kind.split(":")[0])(kind)
            except StreamError as exc:
                self.event("fault_failed", fault=kind, error=str(exc))
            self.observe()
            pause = self.rng.uniform(0.5, 1.5) * self.args.interval
            self.wait(pause if step < len(first) else min(pause, max(0.0, end - time.monotonic())))
        self.event("faults_end", counts=dict(self.faults))

    def wait(self, seconds: float) -> None:
        time.sleep(max(seconds, 0.0))

    def schedule(self, delay: float, what: str, arg) -> None:
        with self._lock:
            self._undo_seq += 1
            heapq.heappush(self.undo, (time.monotonic() + delay, self._undo_seq, what, arg))

    def _undo_loop(self) -> None:
        """Undo faults on time (a broker comes back up while the fault loop waits on a call)."""
        while not self._undo_halt.wait(0.02):
            self.run_undos()

    def run_undos(self, everything: bool = False) -> None:
        while True:
            with self._lock:
                if not self.undo or not (everything or self.undo[0][0] <= time.monotonic()):
                    return
                _, _, what, arg = heapq.heappop(self.undo)
                if what == "broker_up":
                    self.cluster.broker_up(arg)
                    self.down.discard(arg)
            self.event(what, broker=arg)

    # -- the faults ----------------------------------------------------------------------
    def fault_broker_down(self, kind: str) -> None:
        with self._lock:
            busy = bool(self.down)
        if busy:
            return self.fault_set_offset("set_offset")
        with self._lock:
            broker = self.rng.choice(BROKERS)
            seconds = self.rng.uniform(1, 4)
            self.cluster.broker_down(broker)
            self.down.add(broker)
            self.schedule(seconds, "broker_up", broker)
        self.faults[kind] += 1
        self.event(kind, broker=broker, seconds=round(seconds, 2))

    def fault_errors(self, kind: str) -> None:
        api = kind.split(":", 1)[1]
        codes = [self.rng.choice(REQUEST_ERRORS[api]) for _ in range(self.rng.randint(1, 4))]
        self.cluster.push_request_errors(api, *codes)
        self.faults[kind] += 1
        self.event(kind, codes=[KafkaError(c).name() for c in codes])

    def fault_member_join(self, kind: str) -> None:
        free = [p for p in STREAMS if p.name not in self.members or not self.members[p.name].is_alive()]
        if not free:
            return self.fault_set_offset("set_offset")
        plan = self.rng.choice(free)
        member = SecondMember(self.cluster.bootstrap_servers, plan, self.rng.uniform(2, 6))
        member.start()
        self.members[plan.name] = member
        self.faults[kind] += 1
        self.event(kind, stream=plan.name, strategy=plan.strategy, seconds=round(member.seconds, 2))

    def fault_transform_failure(self, kind: str) -> None:
        self._arm_batch_failure(kind, "transform")

    def fault_sink_failure(self, kind: str) -> None:
        self._arm_batch_failure(kind, "sink")

    def fault_ambiguous_commit(self, kind: str) -> None:
        self._arm_batch_failure(kind, "kill", 1)

    def fault_stream_kill(self, kind: str) -> None:
        """SIGKILL one stream's process (not the host's) wherever it is: often in the middle of an append."""
        plan = self.rng.choice(STREAMS)
        try:
            pid = self.client.get(plan.name).pid
        except StreamError:
            pid = None
        if not pid or pid == self.host.proc.pid:
            return self.fault_set_offset("set_offset")
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            return self.fault_set_offset("set_offset")
        self.faults[kind] += 1
        self.event(kind, stream=plan.name, pid=pid)

    def _arm_batch_failure(self, kind: str, what: str, count: int | None = None) -> None:
        plan = self.rng.choice(STREAMS)
        path = self.ctl / f"{plan.topic}.fail"
        if path.exists():
            return
        count = count or self.rng.randint(1, MAX_INJECTED_BATCH_FAILURES)
        tmp = self.ctl / f"{plan.topic}.fail.soak.tmp"
        tmp.write_text(f"{what} {count}")
        os.replace(tmp, path)
        self.event(kind, stream=plan.name, batches=count)   # counted when fired (ctl/<topic>.fired)

    def fault_leader_move(self, kind: str) -> None:
        plan = self.rng.choice(STREAMS)
        partition, broker = self.rng.randrange(PARTITIONS), self.rng.choice(BROKERS)
        self.cluster.set_partition_leader(plan.topic, partition, broker)
        self.faults[kind] += 1
        self.event(kind, topic=plan.topic, partition=partition, broker=broker)

    def fault_coordinator_move(self, kind: str) -> None:
        plan = self.rng.choice(STREAMS)
        broker = self.rng.choice(BROKERS)
        self.cluster.set_group_coordinator(plan.group, broker)
        self.faults[kind] += 1
        self.event(kind, group=plan.group, broker=broker)

    def fault_host_kill(self, kind: str) -> None:
        pid = self.host.proc.pid
        self.host.kill()
        self.exit_codes.append(("SIGKILL", self.host.proc.returncode))
        self.host.stop()
        self.client.close()
        self.faults[kind] += 1
        self.event(kind, pid=pid)
        self.start_host()
        self.last_kill = time.monotonic()
        self.event("host_restarted", pid=self.host.proc.pid, url=self.host.url)

    def fault_set_offset(self, kind: str) -> None:
        plan = self.rng.choice(STREAMS)
        spec = self.random_spec(plan)
        call = Call(plan.name, spec, time.time(), self.sink_size(plan))
        self.calls.append(call)
        try:
            rows = self.client.set_offset(plan.name, spec, timeout=SET_OFFSET_TIMEOUT_S)
        except StreamError as exc:
            call.error = str(exc)
            call.unknown = isinstance(exc, HostUnavailable)
        else:
            call.rows = rows
        call.size_after = self.sink_size(plan)
        call.returned = time.time()
        self.faults[kind] += 1
        self.event(kind, stream=plan.name, spec=spec, size_before=call.size_before, size_after=call.size_after,
                   started=call.started, returned=call.returned, error=call.error,
                   rows=[(r.partition, r.previous_offset, r.offset, r.status.value) for r in call.rows or []])

    def random_spec(self, plan: StreamPlan) -> object:
        def one() -> object:
            ends = [e for (t, _, e) in self.log_ends_estimate() if t == plan.topic] or [0]
            pick = self.rng.random()
            if pick < 0.30:
                return self.rng.randint(0, max(ends) + 20)          # absolute; past the end is clamped
            if pick < 0.45:
                return "earliest"
            if pick < 0.55:
                return "latest"
            if pick < 0.75:
                return f"-{self.rng.randint(1, 300)}"
            if pick < 0.90:
                return f"+{self.rng.randint(1, 100)}"
            moment = datetime.now(UTC) - timedelta(seconds=self.rng.uniform(1, 20))
            return moment.isoformat(timespec="milliseconds")
        if self.rng.random() < 0.35:
            chosen = self.rng.sample(range(PARTITIONS), self.rng.randint(1, 2))
            return {f"{plan.topic}:{p}": one() for p in chosen}
        return one()

    def log_ends_estimate(self) -> list[tuple[str, int, int]]:
        return [(t, p, e) for (t, p), e in dict(self.producer.ends).items()]

    # -- watching the host ------------------------------------------------------------
    def observe(self) -> None:
        """Record when each applied change was first seen in the history; restart streams that went to ERROR."""
        for plan in STREAMS:
            try:
                entries = self.client.history(plan.name)
            except StreamError:
                continue
            size = self.sink_size(plan)
            for e in entries:
                key = (plan.name, e.changed_at.isoformat(), e.topic, e.partition, e.previous_offset, e.offset)
                self.sightings.setdefault(key, size)
        try:
            infos = self.client.list()
        except StreamError:
            return
        for info in infos:
            if info.status.value == "error":
                self.stream_errors.append((time.time(), info.name, info.error or ""))
                self.event("stream_error", stream=info.name, error=info.error)
                try:
                    self.client.start(info.name)
                except StreamError as exc:
                    self.event("restart_failed", stream=info.name, error=str(exc))

    # -- the end --------------------------------------------------------------------------
    def quiesce(self) -> None:
        self._undo_halt.set()
        self._undo_thread.join(10)
        self.run_undos(everything=True)
        for api in REQUEST_ERRORS:
            self.cluster.clear_request_errors(api)
        for broker in sorted(self.down):
            self.cluster.broker_up(broker)
        self.down.clear()
        for member in self.members.values():
            member.join(30)
        # Batch failures still armed fire during the catch-up (1-2 batches each, as during the run).
        self.producer.stop()
        if self.producer.error is not None:
            raise SystemExit(f"soak: the producer failed: {self.producer.error}")

    def catch_up(self) -> tuple[bool, dict[tuple[str, int], int]]:
        """Until every stream has committed the log end of every partition (what the producer wrote).

        Judged independently of the host: the groups' committed offsets read with plain consumers
        (OffsetFetch) against the producer's delivery reports. Done when the host's describe also shows
        every partition held by its stream, or, if describe keeps failing (a finding, printed), when the
        committed offsets have stayed at the log end for longer than a session timeout (a pending change
        waiting for an assignment would have moved them meanwhile).
        """
        ends = {(t, p): e for t, p, e in self.log_ends_estimate()}
        for plan in STREAMS:
            for partition in range(PARTITIONS):
                ends.setdefault((plan.topic, partition), 0)
        readers = {plan.name: Consumer({"bootstrap.servers": self.cluster.bootstrap_servers, "group.id": plan.group,
                                        "enable.auto.commit": False, "log_level": 2}) for plan in STREAMS}
        started = time.monotonic()
        deadline = started + CATCH_UP_TIMEOUT_S
        settled_since = None
        committed: dict = {}
        rows: dict = {}
        next_report = started + 10
        try:
            while time.monotonic() < deadline:
                self.observe()
                try:
                    committed = {(tp.topic, tp.partition): tp.offset for plan in STREAMS for tp in
                                 readers[plan.name].committed([TopicPartition(plan.topic, p)
                                                               for p in range(PARTITIONS)], timeout=5)}
                except KafkaException:
                    committed = {}
                settled = bool(committed) and all(committed.get(tp) == end for tp, end in ends.items())
                settled_since = (settled_since or time.monotonic()) if settled else None
                held = None
                try:
                    rows = {(r.topic, r.partition): r for p in STREAMS for r in self.client.describe(p.name)}
                    held = all(r.assigned for r in rows.values())
                except StreamError as exc:
                    self.describe_errors[str(exc)] += 1
                if settled and (held or (held is None and time.monotonic() - settled_since > 8)):
                    self.event("caught_up", seconds=round(time.monotonic() - started, 2),
                               judged_by="describe" if held else "committed offsets stable for 8 s")
                    return True, ends
                if time.monotonic() >= next_report:
                    next_report += 10
                    self.event("catching_up", behind=self._behind(ends, committed, rows))
                time.sleep(0.5)
        finally:
            for reader in readers.values():
                reader.close()
        behind = self._behind(ends, committed, rows)
        try:
            statuses = {i.name: (i.status.value, i.error) for i in self.client.list()}
        except StreamError as exc:
            statuses = {"?": str(exc)}
        self.event("catch_up_timeout", behind=behind, statuses=statuses)
        self.say(f"soak: catch-up timed out after {CATCH_UP_TIMEOUT_S:g} s; behind (committed, log end, held by "
                 f"the stream per describe): {behind}; streams: {statuses}")
        return False, ends

    @staticmethod
    def _behind(ends: dict, committed: dict, rows: dict) -> dict:
        out = {}
        for tp, end in sorted(ends.items()):
            held = getattr(rows.get(tp), "assigned", None)
            if committed.get(tp) != end or held is False:
                out[f"{tp[0]}:{tp[1]}"] = (committed.get(tp), end, held)
        return out

    def final_history(self) -> None:
        self.observe()
        for plan in STREAMS:
            self.history[plan.name] = list(reversed(self.client.history(plan.name)))   # oldest first

    def contradictions(self) -> list[str]:
        """What a set_offset call was told that the host's history contradicts: a partition reported applied
        (or clamped) whose change has no such history row, or one with another offset, previous offset, status
        or message; one reported superseded or cancelled that the history shows applied."""
        out = []
        for call in self.calls:
            history = {(h.change_id, h.topic, h.partition): h for h in self.history.get(call.stream, [])}
            for row in call.rows or []:
                if row.change_id is None:
                    continue
                entry = history.get((row.change_id, row.topic, row.partition))
                told = row.status.value
                if told in ("applied", "clamped"):
                    seen = None if entry is None else \
                        (entry.offset, entry.previous_offset, entry.status.value, entry.message or "")
                    if seen != (row.offset, row.previous_offset, told, row.message):
                        out.append(f"{call.stream} {row.topic}:{row.partition} change {row.change_id}: the call "
                                   f"said {told} {row.previous_offset}->{row.offset} {row.message!r}, the history "
                                   f"{seen}")
                elif told in ("superseded", "cancelled") and entry is not None:
                    out.append(f"{call.stream} {row.topic}:{row.partition} change {row.change_id}: the call said "
                               f"{told}, the history shows it {entry.status.value}")
        return out

    def fired(self) -> Counter:
        out: Counter = Counter()
        for path in self.ctl.glob("*.fired"):
            for line in path.read_text().split():
                out["ambiguous_commit" if line == "kill" else f"{line}_failure"] += 1
        return out

    # -- building the checker's input --------------------------------------------------
    def changes_for(self, plan: StreamPlan, partition: int, verdict_notes: list[str]) -> list[Change]:
        tp = (plan.topic, partition)
        calls = []
        for call in self.calls:
            if call.stream != plan.name or call.rows is None:
                continue
            for row in call.rows:
                if (row.topic, row.partition) == tp and row.offset is not None and \
                        row.status.value in ("applied", "clamped", "pending"):
                    calls.append((call, row))
        hi: dict[int, int] = {}
        for i, (call, row) in enumerate(calls):
            if row.status.value in ("applied", "clamped"):
                hi[i] = call.size_after
        pointer = 0
        for entry in self.history.get(plan.name, []):
            if (entry.topic, entry.partition) != tp:
                continue
            key = (plan.name, entry.changed_at.isoformat(), entry.topic, entry.partition, entry.previous_offset,
                   entry.offset)
            seen_at = self.sightings.get(key)
            match = next((i for i in range(pointer, len(calls)) if calls[i][1].offset == entry.offset
                          and (seen_at is None or seen_at >= calls[i][0].size_before)), None)
            if match is None:
                verdict_notes.append(f"{plan.topic}:{partition}: history shows a change to {entry.offset} at "
                                     f"{entry.changed_at.isoformat()} that no set_offset call asked for")
                continue
            pointer = match + 1
            if seen_at is not None:
                hi[match] = min(hi.get(match, seen_at), seen_at)
        changes: list[Change] = []
        previous_sure_before: int | None = 0     # the first change resolves against continuation 0
        unknown_before = False
        for i, (call, row) in enumerate(calls):
            claim = row.previous_offset if (previous_sure_before is not None and
                                            previous_sure_before <= call.size_before and
                                            not unknown_before) else None
            changes.append(Change(row.offset, call.size_before, hi.get(i), claim))
            previous_sure_before = hi.get(i)
        # Calls whose outcome is unknown make every later claim unsafe for the stream's partitions.
        if any(c.unknown and c.stream == plan.name for c in self.calls):
            changes = [Change(c.offset, c.lo, c.hi, None) for c in changes]
        return changes

    def check(self, log_ends: dict[tuple[str, int], int]) -> tuple[Verdict, int, dict]:
        total = Verdict()
        corrupt_total = 0
        per_stream = {}
        seqs: dict[tuple[str, int], dict[int, int]] = defaultdict(dict)
        for (t, p, o), seq in self.producer.written.items():
            seqs[(t, p)][o] = seq
        for plan in STREAMS:
            records, corrupt = read_sink(self.sink_path(plan))
            corrupt_total += corrupt
            stream_verdict = Verdict()
            for partition in range(PARTITIONS):
                tp = (plan.topic, partition)
                notes: list[str] = []
                changes = self.changes_for(plan, partition, notes)
                v = check_partition(records.get(tp, []), changes, log_ends.get(tp, 0), seqs.get(tp, {}),
                                    where=f"{plan.topic}:{partition}")
                v.problems = notes + v.problems
                stream_verdict.add(v)
                stream_verdict.problems += v.problems
            per_stream[plan.name] = stream_verdict
            total.add(stream_verdict)
            total.problems += stream_verdict.problems
        return total, corrupt_total, per_stream

    def invalid_offsets(self) -> list[str]:
        """set_offset results and history rows whose offset is not an offset (e.g. librdkafka's -1001)."""
        out = []
        for call in self.calls:
            for row in call.rows or []:
                if row.offset is not None and row.offset < 0:
                    out.append(f"set_offset({call.stream}, {call.spec!r}) at "
                               f"{datetime.fromtimestamp(call.started).strftime('%H:%M:%S.%f')[:-3]} returned "
                               f"{row.topic}:{row.partition} -> {row.offset} ({row.status.value}; previous "
                               f"{row.previous_offset}; {row.message or 'no message'})")
        for name, entries in self.history.items():
            for e in entries:
                if e.offset < 0:
                    out.append(f"history of {name}: {e.topic}:{e.partition} {e.previous_offset} -> {e.offset} "
                               f"{e.status.value} at {e.changed_at.isoformat()}")
        return out

    def secrets_in_log(self) -> dict[str, int]:
        text = self.log_path.read_text(errors="replace") if self.log_path.exists() else ""
        return {key: text.count(value) for key, value in self.secrets.items()}

    def close(self) -> None:
        try:
            if self.host is not None:
                self.host.stop(30)
        finally:
            if self.client is not None:
                self.client.close()
            if self.cluster is not None:
                self.cluster.close()
            self._events.close()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog="\n".join(__doc__.splitlines()[2:]))
    length = parser.add_mutually_exclusive_group()
    length.add_argument("--minutes", type=float, help="how long faults are injected (default 2)")
    length.add_argument("--seconds", type=float, help="the same in seconds (short runs)")
    parser.add_argument("--seed", type=int, default=None, help="fault choice and order (default: random, printed)")
    parser.add_argument("--rate", type=float, default=150.0, help="messages per second, all topics (default 150)")
    parser.add_argument("--interval", type=float, default=1.5, help="mean seconds between faults (default 1.5)")
    parser.add_argument("--delivery", choices=("at_least_once", "exactly_once"), default="at_least_once",
                        help="the streams' delivery (exactly_once adds stream process kills and ambiguous commits)")
    parser.add_argument("--keep", metavar="DIR", help="keep the work directory here (kept anyway on failure)")
    args = parser.parse_args(argv)
    seconds = args.seconds if args.seconds is not None else 60 * (args.minutes if args.minutes is not None else 2)
    if seconds <= 0 or args.rate <= 0 or args.interval <= 0:
        parser.error("--minutes/--seconds, --rate and --interval must be positive")
    if args.seed is None:
        args.seed = random.SystemRandom().randrange(1_000_000)
    if args.keep:
        work = Path(args.keep).resolve()
        work.mkdir(parents=True, exist_ok=True)
    else:
        work = Path(tempfile.mkdtemp(prefix="mgstreams-soak-"))
    print(f"soak: seed {args.seed}, {seconds:g} s of faults, {args.rate:g} msg/s, {args.delivery}, work dir {work}",
          flush=True)
    soak = Soak(args, work)
    failed = True
    try:
        soak.setup()
        soak.say(f"soak: host at {soak.host.url}, {len(STREAMS)} streams x {PARTITIONS} partitions running "
                 f"(eager, cooperative-sticky and KIP-848 groups); injecting faults")
        soak.run_faults(seconds)
        soak.quiesce()
        caught_up, log_ends = soak.catch_up()
        soak.final_history()
        code = soak.host.terminate(60)
        soak.exit_codes.append(("SIGTERM", code))
        verdict, corrupt, per_stream = soak.check(log_ends)
        leaked = soak.secrets_in_log()
        faults = soak.faults + soak.fired()
        produced = sum(log_ends.values())
        for name, v in per_stream.items():
            soak.say(f"  {name}: {v.records} lines; lost {v.lost}, skipped {v.skipped}, stale {v.stale}, "
                     f"duplicates {v.duplicates}, replayed after backward moves {v.replayed}, "
                     f"seq mismatches {v.mismatched}")
        calls = soak.calls
        statuses = Counter(r.status.value for c in calls for r in c.rows or [])
        soak.say(f"  set_offset: {len(calls)} calls ({sum(c.rows is not None for c in calls)} answered, "
                 f"{sum(c.error is not None and not c.unknown for c in calls)} refused, "
                 f"{sum(c.unknown for c in calls)} unanswered); partition results {dict(statuses)}; "
                 f"history rows {sum(len(h) for h in soak.history.values())}")
        soak.say(f"  producer: {soak.producer.sent} sent, {len(soak.producer.failed)} failed; log ends total "
                 f"{produced}; corrupt sink lines {corrupt}")
        soak.say(f"  host: exits {soak.exit_codes}; streams that went to ERROR and were restarted: "
                 f"{len(soak.stream_errors)}")
        for when, name, error in soak.stream_errors[:5]:
            soak.say(f"    {datetime.fromtimestamp(when).strftime('%H:%M:%S')} {name}: {error[:300]}")
        for error, count in soak.describe_errors.most_common(3):
            soak.say(f"  finding: describe failed {count} time(s) during the catch-up: {error[:300]}")
        refusals = Counter(c.error for c in calls if c.error is not None and not c.unknown)
        for error, count in refusals.most_common(5):
            soak.say(f"  set_offset refused {count} time(s): {error[:300]}")
        soak.say(f"  secrets in the host log: {leaked}")
        invalid = soak.invalid_offsets()
        for text in invalid[:10]:
            soak.say(f"  invalid offset: {text}")
        for problem in verdict.problems[:30]:
            soak.say(f"  problem: {problem}")
        contradictions = soak.contradictions()
        for text in contradictions[:10]:
            soak.say(f"  contradiction: {text}")
        lost = verdict.lost + verdict.skipped
        leaked_total = sum(leaked.values())
        sigterm = soak.exit_codes[-1][1]
        failed = bool(lost or verdict.stale or leaked_total or corrupt or verdict.mismatched or not caught_up
                      or sigterm != 0 or invalid or contradictions or (soak.exactly_once and verdict.duplicates))
        by_kind = ", ".join(f"{k} {n}" for k, n in sorted(faults.items()))
        if failed:
            soak.say(f"soak: FAILED (seed {args.seed}); evidence kept in {work}")
        soak.say(f"soak: {produced} records, {sum(faults.values())} faults ({by_kind}), lost {lost}, "
                 f"stale {verdict.stale}, contradictions {len(contradictions)}, duplicates {verdict.duplicates}, "
                 f"secrets in logs {leaked_total}")
        return 1 if failed else 0
    finally:
        soak.close()
        if not failed and not args.keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
