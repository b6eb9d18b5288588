"""The soak's fault menu: what can go wrong, drawn at random, and put right on time.

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
promise is duplicates 0 (at-least-once keeps its duplicates at commit points)."""
from __future__ import annotations

import heapq
import os
import signal
import threading
import time
from collections import Counter
from datetime import UTC, datetime, timedelta

from confluent_kafka import Consumer, KafkaError

from mgstreams.client import HostUnavailable
from stream_registry.errors import StreamError

from .evidence import Call
from .plan import BROKERS, PARTITIONS, STREAMS, StreamPlan

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
SET_OFFSET_TIMEOUT_S = 3.0
KILL_MIN_GAP_S = 25.0
MAX_INJECTED_BATCH_FAILURES = 2     # below the host's retry attempts (4): transient by construction


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


class FaultMenu:
    """The fault loop and the faults, mixed into `Soak` (runner.py): they act on its cluster, host, client,
    random generator and event log, and count into its `faults`."""

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

    def fired(self) -> Counter:
        """The batch failures and ambiguous commits that fired (the transformation appends to ctl/<topic>.fired)."""
        out: Counter = Counter()
        for path in self.ctl.glob("*.fired"):
            for line in path.read_text().split():
                out["ambiguous_commit" if line == "kill" else f"{line}_failure"] += 1
        return out
