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
- foreign_member (at-least-once): the same for 4-7 s on a stream with short
  batches (up to 10 s longer until it has committed once), but it also
  commits what it consumed every ~0.5 s: the stream must take its partitions over from where
  it committed (records it consumed and committed past are legitimately not
  the stream's to deliver: the oracle counts them as `foreign`, and only while
  it held the partition; the ranges are in events.jsonl, `foreign_left`);
- transform_failure / sink_failure: the next 1-2 batches of a stream raise in
  the transformation, or are refused whole by the cypherl sink (see
  bench/soak_transform.py); counted when they fired;
- set_offset: the host API's PATCH with a random spec (an absolute offset in or
  just past the log, earliest, latest, "-N", "+N", a recent datetime, or a map
  naming some partitions), timeout 3 s; per-partition results, the wall time
  and the sink file's size before the call and after it returned are kept;
- revert: POST .../history/{id}/revert of one of a stream's last applied
  changes, timeout 3 s; its rows are judged like a set_offset's;
- cancel: DELETE .../pending of a stream with pending rows if any; every row it says it cancelled must never show
  applied in the history (a contradiction otherwise);
- alter: PATCH /streams/{name} with a new batch size or interval (the stream
  restarts with it);
- leader_move / coordinator_move: a partition's leader or a group's
  coordinator moves to another broker;
- host_kill: SIGKILL the host, start a new one on the same state directory
  (the streams resume by themselves); at most one every 25 s;
- task_kill: SIGKILL one task process of the `tasks: 2` stream (one of the
  `pids` GET /streams/{name} shows): the group gives its partitions to the
  other task at once and the restart policy brings it back; nothing is lost
  (and on exactly-once nothing is written twice: the Bolt sink's
  compare-and-set is per partition; FalkorDB's stated limit aside, a batch
  whose data the kill let through and whose offsets it cut off, which the
  oracle tells by the offsets the graph stored right after the kill).
The tasks stream writes to a real FalkorDB server over Bolt (a cypherl file has
one writer at a time), so file_cut and ambiguous_commit (which act on a cypherl
file) skip it, and so does sink_change; with `--delivery exactly_once`,
graph_sink_change moves it to a second FalkorDB server (and back, next time),
always followed by a cancel (below).
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
import time
from collections import Counter

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from stream_registry.errors import StreamError

from .graph import Kill
from .members import CutMove, SecondMember, cut_file
from .offset_faults import OffsetFaults
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
    "host_kill": 0.4, "revert": 1.0, "cancel": 0.7, "alter": 0.5, "task_kill": 0.5,
}
AT_LEAST_ONCE_FAULTS = {"foreign_member": 1.0}
EXACTLY_ONCE_FAULTS = {"stream_kill": 0.6, "ambiguous_commit": 0.6, "file_cut": 0.6, "sink_change": 0.4,
                       "graph_sink_change": 0.3}
KILL_MIN_GAP_S = 25.0
MAX_INJECTED_BATCH_FAILURES = 2     # below the host's retry attempts (4): transient by construction


class FaultMenu(OffsetFaults):
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

    def fault_member_join(self, kind: str, commits: bool = False) -> None:
        free = [p for p in STREAMS if p.name not in self.members or not self.members[p.name].is_alive()]
        if commits:     # the streams with short batches: the group rebalances in time for it to read and commit
            free = [p for p in free if p.batch_interval_ms <= 300]
        if not free:
            return self.fault_set_offset("set_offset")
        plan = self.rng.choice(free)
        seconds = self.rng.uniform(4, 7) if commits else self.rng.uniform(2, 6)
        member = SecondMember(self.cluster.bootstrap_servers, plan, seconds, commits=commits,
                              size=lambda: self.sink_size(plan))
        member.start()
        self.members[plan.name] = member
        if commits:
            self.foreign_members.append(member)
        self.faults[kind] += 1
        self.event(kind, stream=plan.name, strategy=plan.strategy, seconds=round(member.seconds, 2))

    def fault_foreign_member(self, kind: str) -> None:
        """A member_join that also commits what it read (at-least-once: the stream owes nothing below it)."""
        self.fault_member_join(kind, commits=True)

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
        self.event(kind, stream=plan.name, pid=pid, **self.killed(plan, [pid]))

    def fault_task_kill(self, kind: str) -> None:
        """SIGKILL one task process of a stream of several (any of the pids GET /streams/{name} shows): its
        partitions go to the other tasks at once, the restart policy brings it back."""
        plan = self.rng.choice([p for p in STREAMS if p.tasks > 1])
        try:
            pids = [p for p in self.client.get(plan.name).pids if p and p != self.host.proc.pid]
        except StreamError:
            pids = []
        if not pids:
            return self.fault_set_offset("set_offset")
        task = self.rng.randrange(len(pids))
        try:
            os.kill(pids[task], signal.SIGKILL)
        except ProcessLookupError:
            return self.fault_set_offset("set_offset")
        self.faults[kind] += 1
        self.event(kind, stream=plan.name, pid=pids[task], pids=pids, **self.killed(plan, [pids[task]]))

    def killed(self, plan: StreamPlan, pids: list[int]) -> dict:
        """After a kill of processes of a stream that writes to the graph: what the graph stores for it now (the
        oracle tells a batch the kill cut short by it: graph.graph_records); {} for a cypherl stream."""
        if not plan.bolt or self.graph is None:
            return {}
        stored = self.graph.stored(plan.name)
        self.kills += [(plan.name, Kill(pid, stored)) for pid in pids]
        return {"stored": stored}

    def stream_pids(self) -> dict[str, list[int]]:
        """The processes of each stream that writes to the graph (before a host kill takes them down)."""
        out = {}
        for plan in STREAMS:
            if plan.bolt:
                try:
                    out[plan.name] = [p for p in self.client.get(plan.name).pids if p]
                except StreamError:
                    out[plan.name] = []
        return out

    def _arm_batch_failure(self, kind: str, what: str, count: int | None = None) -> None:
        # an ambiguous commit's kill watches a sink file grow (soak_transform): not the graph stream's
        plan = self.rng.choice([p for p in STREAMS if not (what == "kill" and p.bolt)])
        path = self.ctl / f"{plan.topic}.fail"
        if path.exists():
            return
        count = count or self.rng.randint(1, MAX_INJECTED_BATCH_FAILURES)
        tmp = self.ctl / f"{plan.topic}.fail.soak.tmp"
        tmp.write_text(f"{what} {count}")
        os.replace(tmp, path)
        self.event(kind, stream=plan.name, batches=count)   # counted when fired (ctl/<topic>.fired)

    def fault_file_cut(self, kind: str) -> None:
        """Exactly-once: cut a stream's cypherl file back 1-3 whole batches (to a frame's end, under the file's
        lock, as an operator restoring an earlier copy would) while the stream runs. The stream must realign to
        what the file stores and deliver the cut records again; each partition whose stored offset went back
        must get a `realigned` history row. The soak keeps the sizes it measures monotonic (bytes cut are
        added back: `sink_size`), so the oracle's windows stay comparable with positions after the cut."""
        batches = self.rng.randint(1, 3)
        with self._lock:
            for plan in self.rng.sample(STREAMS, len(STREAMS)):   # a file long enough to cut
                if plan.bolt:       # no file: its sink is Bolt (a cypherl file refuses tasks > 1)
                    continue
                cut = cut_file(self.sink_path(plan), plan.name, batches)
                if cut is not None:
                    break
            else:
                return self.fault_set_offset("set_offset")
            to, removed, moves = cut
            self.removed[plan.name] = self.removed.get(plan.name, 0) + removed
            index = self.sink_changes.get(plan.name, 0)
            self.cuts.setdefault((plan.name, index), []).append((to, self.removed[plan.name]))
            at = self.sink_size(plan)        # the logical size right after the cut
            when = time.time()
        committed = self.group_committed(plan)
        self.cut_moves.append(CutMove(plan.name, when, at, moves, committed))
        self.faults[kind] += 1
        self.event(kind, stream=plan.name, to=to, removed=removed, logical=at,
                   moves={f"{t}:{p}": m for (t, p), m in moves.items()},
                   committed=None if committed is None else {f"{t}:{p}": o for (t, p), o in committed.items()})

    def fault_sink_change(self, kind: str) -> None:
        """Exactly-once: PATCH the stream's sink to a new cypherl file while it runs. The new sink must continue
        where the stream stood (its first frame carries the offsets over): a replay from the log start would
        be duplicates, a jump past the stream's position lost records. The oracle reads the files in order."""
        # Not the tasks stream: a cypherl sink refuses tasks > 1 (one writer per file); graph_sink_change moves it
        plan = self.rng.choice([p for p in STREAMS if not p.bolt])
        index = self.sink_changes.get(plan.name, 0) + 1
        path = self.sink_file(plan, index)
        self.sink_changed_at.append((plan.name, time.time()))
        self.client.alter(plan.name, sink=f"cypherl://{path}")   # returns once the stream restarted on it
        with self._lock:
            old = self.sink_size(plan)                              # the old file's final logical size
            self.bases.setdefault(plan.name, [0]).append(old)
            self.sink_changes[plan.name] = index
            self.removed[plan.name] = 0
        tmp = self.ctl / f"{plan.topic}.sink.soak.tmp"
        tmp.write_text(str(path))
        os.replace(tmp, self.ctl / f"{plan.topic}.sink")
        self.faults[kind] += 1
        self.event(kind, stream=plan.name, sink=str(path), logical=old)
        if self.faults[kind] == 1 or self.rng.random() < 0.5:   # the first one always, then half of them
            self.cancel_during_sink_change(plan)

    def fault_graph_sink_change(self, kind: str) -> None:
        """Exactly-once: the tasks stream's sink change, to the other FalkorDB server (a cypherl sink refuses
        tasks > 1). Both tasks stop, the old graph's stored offsets are carried over (each partition's first write
        into the other graph stores them), and a cancel right after must not end that carry-over: the host
        refuses it while the carry-over is pending. The oracle reads both graphs (positions are on one clock, so
        no bases)."""
        plan = self.rng.choice([p for p in STREAMS if p.bolt])
        self.sink_changed_at.append((plan.name, time.time()))
        uri = self.graph.switch()
        try:
            self.client.alter(plan.name, sink=uri)
        except StreamError:
            self.graph.switch()      # refused: it still writes to the graph it had
            raise
        self.faults[kind] += 1
        self.event(kind, stream=plan.name, sink=uri)
        self.cancel_during_sink_change(plan)

    def cancel_during_sink_change(self, plan: StreamPlan) -> None:
        """Issue 42: DELETE .../pending right after a sink change, its carry-over maybe still pending. The host
        refuses (409) while it is in flight, or cancels what else is pending; a carry-over cancelled would leave
        the new sink storing nothing, refilled from the log start (duplicates, stale rows)."""
        self._cancel("sink_change_cancel", plan, refusal_expected=True)

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
        graph_pids = self.stream_pids()
        self.host.kill()
        self.exit_codes.append(("SIGKILL", self.host.proc.returncode))
        self.host.stop()
        stored = {name: self.killed(next(p for p in STREAMS if p.name == name), pids)
                  for name, pids in graph_pids.items()}
        self.client.close()
        self.faults[kind] += 1
        self.event(kind, pid=pid, graph_pids=graph_pids, stored=stored)
        self.start_host()
        self.last_kill = time.monotonic()
        self.event("host_restarted", pid=self.host.proc.pid, url=self.host.url)

    def group_committed(self, plan: StreamPlan) -> dict | None:
        """The stream's group's committed offsets now ((topic, partition) -> offset), None when not read."""
        reader = Consumer({"bootstrap.servers": self.cluster.bootstrap_servers, "group.id": plan.group,
                           "enable.auto.commit": False, "log_level": 2})
        try:
            found = reader.committed([TopicPartition(plan.topic, p) for p in range(PARTITIONS)], timeout=5)
        except KafkaException:
            return None
        finally:
            reader.close()
        return {(tp.topic, tp.partition): tp.offset for tp in found if tp.error is None}

    def log_ends_estimate(self) -> list[tuple[str, int, int]]:
        return [(t, p, e) for (t, p), e in dict(self.producer.ends).items()]

    def fired(self) -> Counter:
        """The batch failures and ambiguous commits that fired (the transformation appends to ctl/<topic>.fired)."""
        out: Counter = Counter()
        for path in self.ctl.glob("*.fired"):
            for line in path.read_text().split():
                out["ambiguous_commit" if line == "kill" else f"{line}_failure"] += 1
        return out
