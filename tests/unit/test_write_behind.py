"""Writing behind (stream_registry/registry/stream/write_behind.py) against a model: hypothesis drives a worker's
real parts (consumer_standin.worker_on: BatchWriter, GroupCommits, Assignment, OffsetGate, BatchCollector) over
a consumer stand-in and a sink that prepares its writes apart from sending them, as the Bolt sink does, so each
batch's write runs on a thread of its own while the next batch is delivered. Steps: batches of two partitions,
write failures (transient: retried; of the sink as a whole: the stream fails), work waiting between batches (a
control request), idle turns, a revoke of a partition in the middle of the next batch's collection (with the
write in flight), its assignment back, a stop. After every step:

- at most one write is ever in flight, and the sink gets each partition's records in order, no offset skipped
  (a rewind goes back, never forward past what was written);
- the group's committed offset of a partition never passes what the sink has written of it, and a partition is
  committed only while it is this member's (a revoke waits for the write in flight and commits it first);
- the gate's position of a partition is never past what the sink has written (it learns of a batch once its
  write returned), and no write is in flight once work waited between batches;
- at the stop (or once the stream failed), nothing is in flight, and a stream that did not fail has committed
  every record it was given, written.
"""
from __future__ import annotations

import threading

import pytest
from confluent_kafka import Message, TopicPartition
from consumer_standin import ConsumerStandIn, worker_on
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from stream_registry.errors import SinkError
from stream_registry.graph.sinks.null import NullSink
from stream_registry.model import PartitionKey, StreamStatus
from stream_registry.registry.stream.batch_writer import Outcome
from stream_registry.registry.stream.control_requests import AbandonRequest

P0, P1 = PartitionKey("t", 0), PartitionKey("t", 1)


def at_statements(messages):
    """One statement per record, naming its partition and offset."""
    return [{"query": "MERGE (:R {at: $at})", "parameters": {"at": [m.partition(), m.offset()]}}
            for m in (messages.message_at(i) for i in range(messages.total_messages()))]


class PreparingSink(NullSink):
    """A sink that prepares a write apart from sending it (as BoltSink.prepare / write_prepared); each send may be
    made to fail (`failures`, in order); it keeps what each send carried and how many were in flight at once."""

    def __init__(self):
        super().__init__()
        self.failures: list[BaseException] = []
        self.sends: list[list[tuple[int, int]]] = []   # each successful send's (partition, offset)s, in order
        self.flying = self.most_flying = 0
        self._lock = threading.Lock()

    def prepare(self, statements):
        return [tuple(s.parameters["at"]) for s in statements]

    def write_prepared(self, prepared, *, expect=None):
        with self._lock:
            self.flying += 1
            self.most_flying = max(self.most_flying, self.flying)
            failure = self.failures.pop(0) if self.failures else None
        try:
            if failure is not None:
                raise failure
            with self._lock:
                self.sends.append(list(prepared))
        finally:
            with self._lock:
                self.flying -= 1

    def write(self, statements, *, expect=None):
        self.write_prepared(self.prepare(statements), expect=expect)


class WriteBehindModel(RuleBasedStateMachine):
    def __init__(self):
        super().__init__()
        self.sink = PreparingSink()
        self.consumer = ConsumerStandIn(incremental=True)
        self.worker, self.recorded = worker_on(self.consumer, self.sink, at_statements)
        self.worker.assignment.callbacks()["on_assign"](self.consumer, [TopicPartition("t", 0),
                                                                       TopicPartition("t", 1)])
        self.position = {0: 0, 1: 0}   # the consumer's next record per partition (the model's log reader)
        self.seen_calls = 0
        self.handed = {0: 0, 1: 0}     # the furthest offset (exclusive) ever handed to the stream
        self.written_through = {0: 0, 1: 0}   # every offset below is in the sink (sends are in order)
        self.failed = False
        self.stopped = False

    # -- the model's consumer -------------------------------------------------------------------------------
    def _follow_calls(self) -> None:
        """Seeks and assignments the worker made on the consumer move the model's reader."""
        for call in self.consumer.calls[self.seen_calls:]:
            if call[0] == "seek":
                self.position[call[2]] = call[3]
            elif call[0] == "incremental_assign":
                for _, partition, offset in call[1]:
                    committed = self.consumer.committed_offsets.get(("t", partition), (0, None))[0]
                    self.position[partition] = offset if offset >= 0 else committed
        self.seen_calls = len(self.consumer.calls)

    def _read(self, counts: dict[int, int]) -> list[Message]:
        self._follow_calls()
        batch = []
        for partition, count in counts.items():
            if ("t", partition) not in self.consumer.assigned:
                continue
            for _ in range(count):
                offset = self.position[partition]
                batch.append(Message(topic="t", partition=partition, offset=offset, value=b"x"))
                self.position[partition] = offset + 1
                self.handed[partition] = max(self.handed[partition], offset + 1)
        return batch

    def _deliver(self, batch: list[Message]) -> None:
        if batch:
            self.worker._collector.after_move = False
            if not self.worker._collector.deliver(batch, self.worker.writer):
                self.failed = True
        self._follow_calls()

    @property
    def running(self) -> bool:
        return not self.failed and not self.stopped

    # -- steps --------------------------------------------------------------------------------------------------
    @precondition(lambda self: self.running)
    @rule(n0=st.integers(0, 3), n1=st.integers(0, 3))
    def batch(self, n0, n1):
        self._deliver(self._read({0: n0, 1: n1}))

    @precondition(lambda self: self.running)
    @rule(transient=st.booleans())
    def the_next_write_fails(self, transient):
        self.sink.failures.append(OSError("connection reset") if transient else
                                  SinkError("graph: database is read-only"))

    @precondition(lambda self: self.running)
    @rule()
    def work_waits_between_batches(self):
        """A control request (an abandon of a change nobody asked for: nothing to do), then the poll loop's turn
        between batches, as worker._run makes it."""
        self.worker._control.put(AbandonRequest(999))
        worker = self.worker
        if not worker._written_unless_quiet():
            self.failed = True
            return
        assert not worker.writer.behind, "a write in flight while work waits between batches"
        worker._between_batches()
        self._follow_calls()

    @precondition(lambda self: self.running)
    @rule()
    def idle(self):
        """consume() found nothing: the loop's idle turn."""
        if self.worker.writer.finish() is Outcome.FAILED:
            self.failed = True
            return
        self.worker.commits.flush()
        self.worker.commits.settle()
        self._follow_calls()

    @precondition(lambda self: self.running and ("t", 1) in self.consumer.assigned)
    @rule(n0=st.integers(0, 2), n1=st.integers(0, 2))
    def partition_1_revoked_while_the_next_batch_is_collected(self, n0, n1):
        """The next batch is being collected (the write before in flight) when the group revokes partition 1
        inside consume(); what is left of the batch is delivered after."""
        self.worker.commits.settle()   # the loop calls consume() once no commit is in flight (worker._run)
        collected = self._read({0: n0, 1: n1})
        self.worker._collector._batch = collected
        self.worker.assignment.callbacks()["on_revoke"](self.consumer, [TopicPartition("t", 1)])
        self.worker.commits.settle()
        rest, self.worker._collector._batch = list(collected), []
        self._follow_calls()
        assert all(m.partition() != 1 for m in rest), "a revoked partition's messages left the batch"
        self._deliver(rest)

    @precondition(lambda self: self.running and ("t", 1) not in self.consumer.assigned)
    @rule()
    def partition_1_assigned_again(self):
        self.worker.assignment.callbacks()["on_assign"](self.consumer, [TopicPartition("t", 1)])
        self._follow_calls()

    @precondition(lambda self: self.running)
    @rule()
    def stop(self):
        self.worker.stop()   # the loop is not running: it sets the stop, the close below is the loop's end
        self.worker._close_consumer()
        self.stopped = True
        self._follow_calls()

    @precondition(lambda self: not self.running)
    @rule()
    def nothing_more(self):
        """The stream stopped or failed: nothing more happens to it."""

    def teardown(self):
        if self.running:
            self.stop()
            self.checks()

    # -- what must hold ------------------------------------------------------------------------------------------
    @invariant()
    def checks(self):
        self.one_write_at_a_time_in_order_nothing_skipped()
        self.nothing_committed_or_stood_after_that_was_not_written()
        self.commits_only_of_partitions_owned()
        self.at_the_end_nothing_in_flight_and_all_committed()

    def one_write_at_a_time_in_order_nothing_skipped(self):
        assert self.sink.most_flying <= 1
        through = {0: 0, 1: 0}
        for send in self.sink.sends:
            for partition, offset in send:
                assert offset <= through[partition], f"{partition}@{offset} written past {through[partition]}"
                through[partition] = max(through[partition], offset + 1)
        self.written_through = through

    def commits_only_of_partitions_owned(self):
        owned: set[int] = set()
        for call in list(self.consumer.calls):
            if call[0] == "incremental_assign":
                owned |= {partition for _, partition, _ in call[1]}
            elif call[0] == "incremental_unassign":
                owned -= {partition for _, partition in call[1]}
            elif call[0] == "commit":
                assert {partition for _, partition, _, _ in call[1]} <= owned, f"{call} after the revoke"

    def nothing_committed_or_stood_after_that_was_not_written(self):
        if not self.stopped and not self.failed:
            self.worker.commits.settle()
        for (_, partition), (offset, _) in self.consumer.committed_offsets.items():
            assert offset <= self.written_through[partition], (partition, offset, self.written_through)
        for (_, partition), position in self.worker._gate.positions().items():
            assert position <= self.written_through[partition], (partition, position, self.written_through)

    def at_the_end_nothing_in_flight_and_all_committed(self):
        if self.failed:
            assert not self.worker.writer.behind
            assert self.recorded.statuses[-1][0] is StreamStatus.ERROR
        if self.stopped:
            assert not self.worker.writer.behind
            for partition in (0, 1):
                if ("t", partition) in self.consumer.assigned:
                    committed = self.consumer.committed_offsets.get(("t", partition), (0, None))[0]
                    assert committed == self.position[partition], (partition, committed, self.position)


WriteBehindModel.TestCase.settings = settings(max_examples=150, stateful_step_count=25, deadline=None,
                                              derandomize=True,
                                              suppress_health_check=[HealthCheck.too_slow])
TestWriteBehindModel = WriteBehindModel.TestCase


def test_the_write_of_a_batch_runs_while_the_next_is_prepared_and_is_committed_only_once_it_returned():
    """One batch handed (its write in flight, nothing committed, the gate not told), the next one prepared and
    handed once the first returned; the first committed then, the second at the idle turn."""
    release = threading.Event()
    sink = PreparingSink()
    send = sink.write_prepared

    def held(prepared, **kwargs):
        release.wait(10)
        send(prepared, **kwargs)
    sink.write_prepared = held
    consumer = ConsumerStandIn(incremental=True)
    worker, _ = worker_on(consumer, sink, at_statements)
    worker.assignment.callbacks()["on_assign"](consumer, [TopicPartition("t", 0)])
    first = [Message(topic="t", partition=0, offset=o, value=b"x") for o in (0, 1)]
    assert worker.writer.process(first) is Outcome.WRITTEN
    assert worker.writer.behind and sink.sends == []
    worker.commits.settle()
    assert consumer.committed_offsets == {} and worker._gate.positions().get(P0) is None
    release.set()
    assert worker.writer.process([Message(topic="t", partition=0, offset=2, value=b"x")]) is Outcome.WRITTEN
    worker.commits.settle()
    assert sink.sends[0] == [(0, 0), (0, 1)] and consumer.committed_offsets[("t", 0)][0] == 2
    assert worker.writer.finish() is Outcome.WRITTEN
    worker.commits.flush()
    worker.commits.settle()
    assert sink.sends == [[(0, 0), (0, 1)], [(0, 2)]] and consumer.committed_offsets[("t", 0)][0] == 3


@pytest.mark.parametrize("exactly_once", [False, True])
def test_an_exactly_once_stream_and_a_sink_without_prepare_write_on_the_poll_thread(exactly_once):
    from stream_registry.config import Delivery

    sink = NullSink()
    if exactly_once:   # a sink that could write behind: never asked to
        sink.prepare = sink.write_prepared = lambda *args, **kwargs: pytest.fail("written behind")
    options = {"delivery": Delivery.EXACTLY_ONCE} if exactly_once else {}
    consumer = ConsumerStandIn(incremental=True)
    worker, _ = worker_on(consumer, sink, at_statements, **options)
    worker.assignment.callbacks()["on_assign"](consumer, [TopicPartition("t", 0)])
    assert worker.writer.process([Message(topic="t", partition=0, offset=0, value=b"x")]) is Outcome.WRITTEN
    assert not worker.writer.behind


def test_a_write_that_failed_when_a_revoke_came_is_read_again_and_what_was_collected_after_it_goes():
    """The write in flight fails while the group revokes partition 1 in the middle of the next batch's
    collection: no retry inside the callback; partition 0 is sought back to the failed batch's first offset and
    its messages collected meanwhile (after the failed ones) leave the batch with partition 1's; nothing is
    committed."""
    sink = PreparingSink()
    sink.failures = [OSError("connection reset")]
    consumer = ConsumerStandIn(incremental=True)
    worker, _ = worker_on(consumer, sink, at_statements)
    worker.assignment.callbacks()["on_assign"](consumer, [TopicPartition("t", 0), TopicPartition("t", 1)])
    batch = [Message(topic="t", partition=p, offset=o, value=b"x") for p, o in ((0, 0), (0, 1), (1, 0))]
    assert worker.writer.process(batch) is Outcome.WRITTEN and worker.writer.behind
    collected = [Message(topic="t", partition=p, offset=o, value=b"x") for p, o in ((0, 2), (1, 1))]
    worker._collector._batch = collected
    worker.assignment.callbacks()["on_revoke"](consumer, [TopicPartition("t", 1)])
    worker.commits.settle()
    assert collected == [] and not worker.writer.behind and sink.sends == []
    assert ("seek", "t", 0, 0) in consumer.calls and consumer.committed_offsets == {}
    assert worker._gate.positions().get(P0) == 0
