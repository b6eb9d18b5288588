"""The soak's run: a host on the embedded cluster, its streams and producer, then the catch-up and the verdict.

`Soak` sets everything up, runs the fault menu (faults.py), watches the host
(history sightings, streams that went to ERROR), waits for every stream to
commit the log end, and hands the sink files to the oracle (oracle.py).
"""
from __future__ import annotations

import json
import os
import random
import secrets
import threading
import time
from collections import Counter, defaultdict
from dataclasses import replace
from pathlib import Path

from confluent_kafka import Consumer, KafkaException, TopicPartition

from mgstreams.embedded_kafka import EmbeddedKafka
from mgstreams.host_process import HostProcess
from stream_registry.errors import StreamError
from stream_registry.sandbox import WRITE_PATHS_ENV

from ..soak_transform import GRAPH_TOPICS_ENV
from .evidence import Call, changes_for, logical_positions, with_cuts
from .faults import AT_LEAST_ONCE_FAULTS, EXACTLY_ONCE_FAULTS, FAULT_WEIGHTS, REQUEST_ERRORS, FaultMenu
from .graph import GraphSink, Kill
from .members import SecondMember
from .oracle import Verdict, _ranges, check_partition, read_sink
from .plan import BENCH, BROKERS, PARTITIONS, STREAMS, TRANSFORM, TRANSFORM_MODULE, StreamPlan
from .producer import SteadyProducer

CATCH_UP_TIMEOUT_S = 120.0
QUIET_LOAD_S = 10.0     # the producer's run after the faults and members are gone: past the rebalance a member's
                        # departure brings once its 6 s session has expired (the embedded brokers ignore LeaveGroup)


class Soak(FaultMenu):
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
        self.weights = {**FAULT_WEIGHTS, **(EXACTLY_ONCE_FAULTS if self.exactly_once else AT_LEAST_ONCE_FAULTS)}
        self.secrets = {"bolt.password": f"soak-secret-bolt-{secrets.token_hex(8)}",
                        "ssl.key.password": f"soak-secret-ssl-{secrets.token_hex(8)}"}
        self.faults: Counter = Counter()
        self.calls: list[Call] = []
        self.removed: dict[str, int] = {}                # bytes file cuts removed from the current file
        self.cuts: dict[tuple, list[tuple[int, int]]] = {}  # per (stream, file): (size cut to, bytes removed so far)
        self.sink_changed_at: list[tuple[str, float]] = []  # (stream, when its sink change was asked)
        self.sink_changes: dict[str, int] = {}           # per stream: the index of its current sink file
        self.bases: dict[str, list[int]] = {}             # per stream, per file: its first byte's logical position
        self.cut_moves: list = []
        self.cancelled: list[tuple[str, int | None, str, int]] = []   # what cancel said it cancelled
        self.stream_errors: list[tuple[float, str, str]] = []
        self.describe_errors: Counter = Counter()
        self.sightings: dict[tuple, int] = {}           # history entry -> sink size after it was first seen
        self.history: dict[str, list] = {}
        self.undo: list[tuple[float, int, str, object]] = []
        self.members: dict[str, SecondMember] = {}
        self.foreign_members: list[SecondMember] = []
        self.down: set[int] = set()
        self.last_kill = time.monotonic()
        self.host: HostProcess | None = None
        self.graph: GraphSink | None = None             # the tasks stream's sink (a FalkorDB server)
        self.kills: list[tuple[str, Kill]] = []        # its processes the soak killed, with what the graph stored
        self.torn: dict[str, tuple[int, int]] = {}      # per graph stream: (batches, deliveries) cut short by a kill
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
        """The stream's current sink file (a sink change moves it to the next one)."""
        return self.sink_file(plan, self.sink_changes.get(plan.name, 0))

    def sink_file(self, plan: StreamPlan, index: int) -> Path:
        return self.out / (f"{plan.name}.cypherl" if index == 0 else f"{plan.name}.{index}.cypherl")

    def sink_size(self, plan: StreamPlan) -> int:
        """The current file's size plus every byte a file cut removed and the final sizes of the files before a
        sink change (monotonic: comparable across cuts and sink changes). For the stream that writes to the
        graph server: the wall clock in ns, the clock its records' positions are on (graph.graph_records)."""
        if plan.bolt:
            return time.time_ns()
        with self._lock:
            base = self.removed.get(plan.name, 0) + self.bases.get(plan.name, [0])[-1]
            try:
                return self.sink_path(plan).stat().st_size + base
            except FileNotFoundError:
                return base

    def host_env(self) -> dict[str, str]:
        """The host's environment: the soak's transformation, its control files, the sink directory, and the
        graph server (on loopback) the sink allowlist lets the tasks stream reach."""
        path = os.pathsep.join(p for p in (str(BENCH), os.environ.get("PYTHONPATH", "")) if p)
        return {"MGSTREAMS_OUTPUT_DIRS": str(self.out), "MGSTREAMS_TRANSFORM_PACKAGES": TRANSFORM_MODULE,
                "SOAK_SINK_DIR": str(self.out),
                "MGSTREAMS_QUERY_MODULES_DIR": str(BENCH), "SOAK_CONTROL_DIR": str(self.ctl), "PYTHONPATH": path,
                GRAPH_TOPICS_ENV: ",".join(p.topic for p in STREAMS if p.bolt),
                # the sandboxed stream processes read and rewrite the control files
                WRITE_PATHS_ENV: str(self.ctl),
                "MGSTREAMS_ALLOWED_HOSTS": "localhost,127.0.0.0/8"}

    def start_host(self) -> None:
        self.host = HostProcess(self.state, log_path=self.log_path, env=self.host_env()).start(60)
        self.client = self.host.client(timeout=30)

    # -- setup ---------------------------------------------------------------------
    def setup(self) -> None:
        self.cluster = EmbeddedKafka(brokers=len(BROKERS))
        for plan in STREAMS:
            self.cluster.create_topic(plan.topic, PARTITIONS, 3)
        self.graph = GraphSink(self.work / "graph", self.secrets["bolt.password"])
        self._undo_thread.start()
        self.start_host()
        for plan in STREAMS:
            self.client.create(name=plan.name, topics=[plan.topic], bootstrap_servers=self.cluster.bootstrap_servers,
                               transform=TRANSFORM,
                               sink=self.graph.uri if plan.bolt else f"cypherl://{self.sink_path(plan)}",
                               tasks=plan.tasks, consumer_group=plan.group, batch_size=plan.batch_size,
                               batch_interval_ms=plan.batch_interval_ms, delivery=self.args.delivery,
                               configs={**plan.group_config(),
                                        "ssl.key.password": self.secrets["ssl.key.password"]},
                               credentials=self.graph.credentials if plan.bolt else
                               {"bolt.password": self.secrets["bolt.password"]})
            self.client.start(plan.name)
        self.producer = SteadyProducer(self.cluster.bootstrap_servers, [p.topic for p in STREAMS], self.args.rate,
                                       self.args.seed)
        self.producer.start()
        deadline = time.monotonic() + 40
        while time.monotonic() < deadline:
            described = {p: self.client.describe(p.name) for p in STREAMS}
            # a stream of several tasks: its partitions split between all of them (the group spreads them)
            if all(all(row.assigned for row in rows) and {row.task for row in rows} >= set(range(p.tasks))
                   for p, rows in described.items()):
                return
            time.sleep(0.3)
        raise SystemExit("soak: the streams did not get their partitions (split between the tasks of a stream of "
                         "several) within 40 s")

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
        for member in self.foreign_members:
            member.join(30)
            self.event("foreign_left", stream=member.plan.name, lo=member.lo, hi=member.hi, consumed=member.consumed,
                       read={p: _spans(sorted(o)) for p, o in member.read.items()},
                       committed={p: sorted(c) for p, c in member.committed.items()})
        # Batch failures still armed fire during the catch-up (1-2 batches each, as during the run).
        # The load runs on past the rebalance the last member's departure brings: a stream whose last batch's
        # commit failed in that rebalance never commits that batch again if nothing more arrives (a finding of
        # issue 30's soak, left to the worker: see the lead's notes), and the catch-up would wait for it forever.
        time.sleep(QUIET_LOAD_S)
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
                    self.event("catching_up", behind=behind_of(ends, committed, rows))
                time.sleep(0.5)
        finally:
            for reader in readers.values():
                reader.close()
        behind = behind_of(ends, committed, rows)
        try:
            statuses = {i.name: (i.status.value, i.error) for i in self.client.list()}
        except StreamError as exc:
            statuses = {"?": str(exc)}
        self.event("catch_up_timeout", behind=behind, statuses=statuses)
        self.say(f"soak: catch-up timed out after {CATCH_UP_TIMEOUT_S:g} s; behind (committed, log end, held by "
                 f"the stream per describe): {behind}; streams: {statuses}")
        return False, ends

    def final_history(self) -> None:
        self.observe()
        for plan in STREAMS:
            self.history[plan.name] = list(reversed(self.client.history(plan.name)))   # oldest first

    # -- judging ------------------------------------------------------------------------
    def check(self, log_ends: dict[tuple[str, int], int]) -> tuple[Verdict, int, dict]:
        total = Verdict()
        corrupt_total = 0
        per_stream = {}
        seqs: dict[tuple[str, int], dict[int, int]] = defaultdict(dict)
        for (t, p, o), seq in self.producer.written.items():
            seqs[(t, p)][o] = seq
        for plan in STREAMS:
            records: dict = defaultdict(list)
            corrupt = 0
            for index, base in enumerate(self.bases.get(plan.name, [0])):
                if plan.bolt:   # a batch cut short by a kill: the exactly-once limit (at-least-once keeps them all)
                    graph = self.graph.read(plan.topic, [k for n, k in self.kills if n == plan.name and self.exactly_once])
                    held, torn, self.torn[plan.name] = graph.held, graph.corrupt, (graph.torn_batches, graph.torn)
                else:
                    held, torn = read_sink(self.sink_file(plan, index))
                corrupt += torn
                for tp, recs in held.items():
                    records[tp] += [replace(r, pos=r.pos + base)
                                    for r in logical_positions(recs, self.cuts.get((plan.name, index), []))]
            corrupt_total += corrupt
            stream_verdict = Verdict()
            for partition in range(PARTITIONS):
                tp = (plan.topic, partition)
                notes: list[str] = []
                changes = changes_for(self.calls, self.history, self.sightings, plan, partition, notes,
                                      [t for name, t in self.sink_changed_at if name == plan.name], self.cancelled)
                changes = with_cuts(changes, [m for m in self.cut_moves if m.stream == plan.name], tp)
                foreign = [f for m in self.foreign_members if m.plan is plan
                           for f in [m.foreign(partition)] if f is not None]
                v = check_partition(records.get(tp, []), changes, log_ends.get(tp, 0), seqs.get(tp, {}),
                                    where=f"{plan.topic}:{partition}", foreign=foreign)
                v.problems = notes + v.problems
                stream_verdict.add(v)
                stream_verdict.problems += v.problems
            per_stream[plan.name] = stream_verdict
            total.add(stream_verdict)
            total.problems += stream_verdict.problems
        return total, corrupt_total, per_stream

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
            if self.graph is not None:
                self.graph.close()
            self._events.close()


def _spans(offsets: list[int]) -> str:
    return _ranges(offsets) if offsets else ""


def behind_of(ends: dict, committed: dict, rows: dict) -> dict:
    """The partitions not caught up: `topic:partition` -> (committed, log end, held by the stream per describe)."""
    out = {}
    for tp, end in sorted(ends.items()):
        held = getattr(rows.get(tp), "assigned", None)
        if committed.get(tp) != end or held is False:
            out[f"{tp[0]}:{tp[1]}"] = (committed.get(tp), end, held)
    return out
