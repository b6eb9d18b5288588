"""The micro-batch engine against a model: the offset gate's invariants, for a stream run as a Spark query.

Hypothesis drives the real streaming reader (spark_bridge.stream_reader: latestOffset, partitions, commit),
its real control channel (a directory) and the real micro-batch writer (micro_batch.ShareWriter.write_range, as
an executor's task runs it: exactly-once) through Spark's micro-batch protocol as MicroBatchExecution runs it: plan a batch's end (latestOffset), write
it to the offset log, plan its partitions, run it, write the commit log, commit the source. The driver is
killed between any two of those steps (and in the middle of a batch's writes); a restarted driver replays the
batch its offset log holds without a commit, as Spark does. Only Kafka is simulated (watermarks of a log
that grows, the group's committed offsets) and the graph (a sink that keeps exactly-once offsets with the
real compare-and-set, offset_store.continuation).

Invariants, checked as the writes happen and after every step:
- one call = one change: a change that was cancelled is never applied; an applied one has exactly one answer,
  with one status per partition it targeted;
- nothing from the old position after `applied`: the first record a moved partition writes after the answer
  is the target, and what follows comes from there;
- an onward target (`latest`: the log end when the call was made; `+N`) never moves a partition back: one the
  query has read past by the boundary where the change applies stays where it stands, answered `applied` there
  with a note saying so (as the host gate does);
- exactly-once: every record the graph takes for a partition continues from the last one (or is a change's
  target): no duplicates and no gaps, across query restarts, driver kills and changes between micro-batches;
- the group's committed offsets follow the committed micro-batches (lag tools see the stream);
- liveness: once the driver stays up, every change not cancelled is answered and the stream catches up.
"""
from __future__ import annotations

import shutil
import tempfile

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)
from pyspark.sql.streaming.datasource import ReadMaxRows
from stream_helpers import RECORD_QUERY

from spark_bridge.job import Loading
from spark_bridge.micro_batch import ShareWriter, StreamWriting
from spark_bridge.source_options import parse_source_options
from spark_bridge.stream_control import ControlChannel
from spark_bridge.stream_offsets import StreamOffset
from spark_bridge.stream_reader import KafkaStreamReader
from stream_registry.graph import sinks
from stream_registry.graph.offset_store import Continuation, continuation, offsets_in_statements
from stream_registry.graph.sinks.protocol import Closing, Written
from stream_registry.graph.transform import Message
from stream_registry.model import PartitionKey

TPS = [PartitionKey("t", 0), PartitionKey("t", 1)]
STREAM = "s"
KILLS = ("none", "after_latest", "after_offset_log", "mid_write", "after_commit_log")
COUNTS = {"examples": 0, "batches": 0, "kills": 0, "replays": 0, "applied": 0, "cancelled": 0, "late_cancels": 0,
          "several_per_batch": 0, "stayed": 0, "onward_moved": 0}
GRAPHS: dict[str, Graph] = {}


class Graph:
    """The exactly-once graph: stored offsets and, per partition, the records it took in order; each append is
    checked against what the model expects next there."""

    def __init__(self):
        self.stored: dict[tuple[str, str, int], int] = {}
        self.records: dict[PartitionKey, list[int]] = {tp: [] for tp in TPS}
        self.expected: dict[PartitionKey, int] = {}

    def append(self, tp: PartitionKey, offsets: list[int]) -> None:
        want = self.expected.get(tp)
        assert want is None or offsets[0] == want, \
            f"{tp}: the graph takes {offsets[0]}.. but the stream stood at {want} (a duplicate or a gap)"
        assert offsets == list(range(offsets[0], offsets[0] + len(offsets))), f"{tp}: not contiguous: {offsets}"
        self.records[tp] += offsets
        self.expected[tp] = offsets[-1] + 1


class GraphSink(Closing):
    def __init__(self, graph: Graph):
        self.graph = graph

    def write(self, statements, *, expect=None):
        end = offsets_in_statements(statements)
        if continuation(self.graph.stored, end, expect) == Continuation.DONE:
            return Written.ALREADY_APPLIED
        rows = [s.parameters for s in statements if s.query == RECORD_QUERY]
        if rows:
            tp = PartitionKey(rows[0]["topic"], rows[0]["partition"])
            self.graph.append(tp, [r["offset"] for r in rows])
        self.graph.stored.update(end)
        return Written.APPLIED

    def stored_offsets(self, stream, partitions=None):
        wanted = None if partitions is None else set(partitions)
        return {PartitionKey(t, p): o for (s, t, p), o in self.graph.stored.items()
                if s == stream and (wanted is None or (t, p) in wanted)}

    def close(self):
        pass


class ModelReader(KafkaStreamReader):
    """The real reader; what it would ask Kafka comes from the model."""

    def __init__(self, options, world: MicroBatchMachine):
        super().__init__(options)
        self.world = world

    def _starting_offsets(self):
        return dict.fromkeys(TPS, 0)

    def _group_committed(self, tps):
        return {tp: self.world.group.get(tp) for tp in tps}

    def _commit_group(self, offsets):
        self.world.group.update(offsets)

    def _watermarks(self):
        return {tp: (0, self.world.log_end[tp]) for tp in TPS}


def kafka_read(r) -> list[list[Message]]:
    """The simulated log's records of a range (every offset holds one), as the task's RangeReader gives them."""
    return [[Message(r.topic, r.partition, o, None, b"v", 0) for o in range(r.from_offset, r.until_offset)]]


class MicroBatchMachine(RuleBasedStateMachine):
    @initialize(max_rows=st.sampled_from([3, 7, 1000]), batch_size=st.sampled_from([2, 5]))
    def setup(self, max_rows, batch_size):
        COUNTS["examples"] += 1
        self.dir = tempfile.mkdtemp(prefix="mb-model-")
        self.graph_name = f"g{COUNTS['examples']}"
        GRAPHS[self.graph_name] = self.graph = Graph()
        self.graph.expected = dict.fromkeys(TPS, 0)      # startingOffsets: earliest
        self.options = parse_source_options({
            "kafka.bootstrap.servers": "127.0.0.1:9", "subscribe": "t", "controlDir": self.dir,
            "resumeFrom": "graph", "sink": f"memory://{self.graph_name}", "sinkStream": STREAM}, streaming=True)
        self.channel = ControlChannel(self.dir)
        self.writer = ShareWriter(StreamWriting(
            Loading("stream_helpers.offsets_transform", (), f"memory://{self.graph_name}", batch_size=batch_size),
            STREAM, exactly_once=True))
        self.max_rows = max_rows
        self.log_end = dict.fromkeys(TPS, 10)
        self.group: dict[PartitionKey, int] = {}
        self.offset_log: dict[int, tuple[dict, dict]] = {}
        self.committed_batch = -1
        self.reader: ModelReader | None = None
        self.next_change = 1
        self.requested: dict[int, dict[PartitionKey, int]] = {}
        self.onward: dict[int, frozenset[PartitionKey]] = {}
        self.cancelled: set[int] = set()
        self.answered: dict[int, object] = {}

    def teardown(self):
        if hasattr(self, "dir"):
            shutil.rmtree(self.dir, ignore_errors=True)
            GRAPHS.pop(self.graph_name, None)

    # -- the world ------------------------------------------------------------------------------------------
    @rule(tp=st.sampled_from(TPS), count=st.integers(1, 8))
    def produce(self, tp, count):
        self.log_end[tp] += count

    @rule(moves=st.dictionaries(st.sampled_from(TPS), st.integers(0, 60), min_size=1), onward=st.booleans())
    def set_offset(self, moves, onward):
        """An explicit target, or (onward) one computed "on from here" (+N) from a position the call read."""
        self.request(dict(moves), frozenset(moves) if onward else frozenset())

    @rule(tps=st.sets(st.sampled_from(TPS), min_size=1))
    def set_latest(self, tps):
        """`latest`: the log end as the call reads it; the query goes on reading until the change applies."""
        self.request({tp: self.log_end[tp] for tp in tps}, frozenset(tps))

    @rule(tps=st.sets(st.sampled_from(TPS), min_size=1), delta=st.integers(0, 3))
    def shift(self, tps, delta):
        """`+N` from the position the call reads: the end of the last micro-batch Spark reported done (the
        group's commit here), while a later one may be planned already."""
        self.request({tp: self.group.get(tp, 0) + delta for tp in tps}, frozenset(tps))

    def request(self, targets, onward):
        change = self.next_change
        self.next_change += 1
        self.channel.request(change, targets, onward)
        self.requested[change] = targets
        self.onward[change] = onward

    @rule(data=st.data())
    def cancel(self, data):
        open_changes = [c for c in self.requested if c not in self.cancelled and c not in self.answered]
        if not open_changes:
            return
        change = data.draw(st.sampled_from(open_changes))
        if self.channel.cancel(change):
            self.cancelled.add(change)
            COUNTS["cancelled"] += 1
        else:
            COUNTS["late_cancels"] += 1      # taken into a planned micro-batch: it will be applied

    # -- Spark's micro-batch protocol ----------------------------------------------------------------------
    @rule(kill=st.sampled_from(KILLS))
    def trigger(self, kill):
        reader = self.driver()
        start = self.start_of(self.committed_batch + 1)
        end = reader.latestOffset(start, ReadMaxRows(self.max_rows))
        if kill == "after_latest":
            return self.die()
        if end == start:
            return None
        batch = self.committed_batch + 1
        self.offset_log[batch] = (start, end)   # (the start is kept for reading only)
        if kill == "after_offset_log":
            return self.die()
        self.run_batch(batch, partial=kill == "mid_write")
        if kill == "mid_write":
            return self.die()
        self.committed_batch = batch
        if kill == "after_commit_log":
            return self.die()
        reader.commit(end)
        assert self.group == StreamOffset.from_json(end).next, "the group's offsets do not follow the batches"
        return None

    @precondition(lambda self: self.reader is not None)
    @rule()
    def restart_query(self):
        self.reader.stop()
        self.die()

    def driver(self) -> ModelReader:
        """The reader of the running query; a restarted one first replays the batch its offset log holds
        without a commit (MicroBatchExecution's recovery)."""
        if self.reader is None:
            self.reader = ModelReader(self.options, self)
            pending = self.committed_batch + 1
            if pending in self.offset_log:
                COUNTS["replays"] += 1
                self.run_batch(pending)
                self.committed_batch = pending
                self.reader.commit(self.offset_log[pending][1])
        return self.reader

    def die(self) -> None:
        COUNTS["kills"] += 1
        self.reader = None

    def start_of(self, batch: int) -> dict:
        """Where a batch starts: the previous batch's end in the offset log; batch 0 from initialOffset (Spark's
        offset log keeps ends only)."""
        return self.offset_log[batch - 1][1] if batch > 0 else self.reader.initialOffset()

    def run_batch(self, batch: int, partial: bool = False) -> None:
        end = self.offset_log[batch][1]
        parts = self.reader.partitions(self.start_of(batch), end)
        self.take_answers()
        COUNTS["batches"] += 1
        for part in parts[:1] if partial else parts:
            self.writer.write_range(part.value, kafka_read)

    def take_answers(self) -> None:
        """The changes answered by the planning just made: from now on each moved partition must write from
        its target (the graph checks it at its next append)."""
        fresh = [c for c in self.requested if c not in self.answered and self.channel.applied(c) is not None]
        if len(fresh) > 1:
            COUNTS["several_per_batch"] += 1
        for change in fresh:
            answer = self.answered[change] = self.channel.applied(change)
            assert change not in self.cancelled, f"change {change} was cancelled, then applied: {answer}"
            assert set(answer.partitions) == set(self.requested[change]), (change, answer, self.requested[change])
            COUNTS["applied"] += 1
            for tp, (status, offset, previous) in answer.partitions.items():
                assert status in ("applied", "clamped", "superseded"), (change, tp, status)
                if status == "superseded":
                    continue
                target = self.requested[change][tp]
                if tp in self.onward[change]:
                    assert previous is None or offset >= previous, \
                        f"change {change}: an onward target moved {tp} back from {previous} to {offset}: {answer}"
                if tp in answer.notes:     # an onward target it stood past: it stays where it stood
                    assert tp in self.onward[change] and status == "applied" and offset == previous > target, \
                        (change, tp, answer)
                    assert "never goes back" in answer.notes[tp], answer
                    COUNTS["stayed"] += 1
                else:
                    assert offset == target if status == "applied" else offset < target, (change, tp, answer)
                    COUNTS["onward_moved"] += tp in self.onward[change]
                self.graph.expected[tp] = offset

    # -- invariants -------------------------------------------------------------------------------------------
    @invariant()
    def answers_never_change(self):
        if not hasattr(self, "answered"):
            return
        for change, answer in self.answered.items():
            assert self.channel.applied(change) == answer, f"change {change}'s answer changed"
        for change in self.cancelled:
            assert self.channel.applied(change) is None, f"cancelled change {change} was applied"

    def teardown_check(self):
        """Liveness: the driver stays up; every change not cancelled is answered and the stream catches up."""
        for _ in range(200):
            if all(self.graph.stored.get((STREAM, *tp)) == self.log_end[tp] for tp in TPS) and \
                    all(c in self.answered or c in self.cancelled for c in self.requested):
                break
            self.trigger("none")
        else:
            raise AssertionError(f"the stream did not catch up: stored {self.graph.stored}, log {self.log_end}, "
                                 f"open {set(self.requested) - set(self.answered) - self.cancelled}")


class CheckedMachine(MicroBatchMachine):
    def teardown(self):
        try:
            if hasattr(self, "dir"):
                self.teardown_check()
        finally:
            super().teardown()


def test_the_micro_batch_engine_keeps_the_gates_invariants(monkeypatch):
    monkeypatch.setitem(sinks.SCHEMES, "memory", sinks.Scheme(
        parse=lambda parts, query, uri: parts.netloc, open=lambda name, credentials: GraphSink(GRAPHS[name])))
    COUNTS.update(dict.fromkeys(COUNTS, 0))
    run_state_machine_as_test(CheckedMachine, settings=settings(
        max_examples=150, stateful_step_count=30, deadline=None, derandomize=True,
        suppress_health_check=list(HealthCheck)))
    print(f"micro-batch model: {COUNTS}")
    assert COUNTS["examples"] >= 150 and COUNTS["batches"] >= 150 * 5, COUNTS
    assert min(COUNTS[k] for k in ("kills", "replays", "applied", "cancelled", "late_cancels",
                                   "several_per_batch", "stayed", "onward_moved")) >= 10, COUNTS
