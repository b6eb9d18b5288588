"""The delivery of a batch (stream_registry/registry/stream/batch_writer.py), wired as the worker wires its parts
(consumer_standin.worker_on), with real consumed-message objects and a real null:// sink: the first batch after
an offset change in two writes, a transient failure retried and committed once, a sink that fails as a whole
failing the stream at once (and the consumer sought back), poison messages set aside, an exactly-once batch
that finds other offsets in the sink dropped and realigned there, never written."""
from __future__ import annotations

from confluent_kafka import Message, TopicPartition
from consumer_standin import ConsumerStandIn, worker_on

from stream_registry.config import Delivery, ErrorsTolerance
from stream_registry.errors import SinkError
from stream_registry.graph.offset_store import offset_statements
from stream_registry.graph.sinks.null import NullSink
from stream_registry.model import PartitionKey, StreamStatus
from stream_registry.registry.stream.batch_writer import Outcome

P0, P1 = PartitionKey("t", 0), PartitionKey("t", 1)


def records(*at: tuple[int, int]) -> list[Message]:
    """Consumed records of topic t: (partition, offset) each, the value naming both."""
    return [Message(topic="t", partition=p, offset=o, value=f"{p}@{o}".encode()) for p, o in at]


def per_record(messages):
    """One statement per record, naming it; fails on a value of b'poison'."""
    out = []
    for i in range(messages.total_messages()):
        m = messages.message_at(i)
        if m.payload() == b"poison":
            raise ValueError("poisoned payload")
        out.append({"query": "CREATE (:R {at: $at})", "parameters": {"at": m.payload().decode()}})
    return out


class WritingSink(NullSink):
    """A null:// sink that keeps what each write carried (the records' statements) and can fail writes."""

    def __init__(self):
        super().__init__()
        self.writes: list[list[str]] = []
        self.failures: list[BaseException] = []

    def write(self, statements, *, expect=None):
        if self.failures:
            raise self.failures.pop(0)
        written = super().write(statements, expect=expect)
        self.writes.append([s.parameters["at"] for s in statements if "at" in s.parameters])
        return written


def running(sink: WritingSink, *keys: PartitionKey, **options):
    """A worker's parts over a consumer stand-in the group assigned `keys` to."""
    consumer = ConsumerStandIn(incremental=False)
    worker, recorded = worker_on(consumer, sink, per_record, **options)
    worker.assignment.callbacks()["on_assign"](consumer, [TopicPartition(t, p) for t, p in keys])
    return worker, consumer, recorded


def test_the_first_batch_after_an_offset_change_writes_each_partitions_first_record_first():
    sink = WritingSink()
    worker, consumer, _ = running(sink, P0, P1)
    assert worker.writer.deliver(records((0, 5), (0, 6), (1, 3), (1, 4)), after_move=True)
    assert sink.writes == [["0@5", "1@3"], ["0@6", "1@4"]]
    worker.commits.settle()   # the last batch's commit is answered while the next batch is read (pipelined)
    assert [c for c in consumer.calls if c[0] == "commit"] == [
        ("commit", [("t", 0, 6, None), ("t", 1, 4, None)]), ("commit", [("t", 0, 7, None), ("t", 1, 5, None)])]
    assert worker.writer.deliver(records((0, 7), (0, 8)), after_move=False)
    assert sink.writes[-1] == ["0@7", "0@8"]


def test_a_transient_failure_is_retried_and_the_batch_written_and_committed_once():
    sink = WritingSink()
    sink.failures = [OSError("connection reset")]
    worker, consumer, _ = running(sink, P0)
    assert worker.writer.process(records((0, 5), (0, 6))) is Outcome.WRITTEN
    assert sink.writes == [["0@5", "0@6"]]
    worker.commits.settle()
    assert consumer.committed_offsets == {("t", 0): (7, None)}
    assert worker.writer.stats.batches == 1 and worker.writer.stats.records == 2


def test_a_sink_that_fails_as_a_whole_fails_the_stream_at_once_and_the_consumer_goes_back_to_the_batch():
    sink = WritingSink()
    sink.failures = [SinkError("graph: database is read-only")]
    worker, consumer, recorded = running(sink, P0)
    assert worker.writer.process(records((0, 5), (0, 6))) is Outcome.FAILED
    assert sink.writes == [] and ("t", 0) not in consumer.committed_offsets
    assert ("seek", "t", 0, 5) in consumer.calls
    assert recorded.statuses[-1] == (StreamStatus.ERROR, "batch at t:0@5 failed: graph: database is read-only")


def test_a_batch_that_fails_every_attempt_fails_the_stream_naming_the_attempts():
    worker, consumer, recorded = running(WritingSink(), P0)
    poison = [Message(topic="t", partition=0, offset=5, value=b"poison")]
    assert worker.writer.process(poison) is Outcome.FAILED
    status, error = recorded.statuses[-1]
    assert status is StreamStatus.ERROR and error.startswith("batch at t:0@5 failed 3 time(s): ")


def test_with_errors_tolerance_all_a_poison_message_is_set_aside_and_the_rest_written():
    sink = WritingSink()
    worker, consumer, recorded = running(sink, P0, errors_tolerance=ErrorsTolerance.ALL)
    batch = records((0, 5), (0, 6), (0, 7))
    batch[1] = Message(topic="t", partition=0, offset=6, value=b"poison")
    assert worker.writer.process(batch) is Outcome.WRITTEN
    assert [at for write in sink.writes for at in write] == ["0@5", "0@7"]
    assert [(r.offset, r.dead_lettered) for r in recorded.set_aside] == [(6, False)]
    worker.commits.settle()
    assert consumer.committed_offsets == {("t", 0): (8, None)}


def test_exactly_once_a_batch_finding_other_offsets_in_the_sink_is_dropped_and_the_stream_goes_on_from_them():
    sink = WritingSink()
    sink.write(offset_statements("orders", {P0: 5}))
    worker, consumer, recorded = running(sink, P0, delivery=Delivery.EXACTLY_ONCE)
    assert consumer.assigned == {("t", 0): 5}, "started where the sink stores"
    sink.write(offset_statements("orders", {P0: 9}))   # someone else moved it
    assert worker.writer.process(records((0, 5), (0, 6))) is Outcome.AGAIN
    assert [w for w in sink.writes if w] == [], "nothing of the batch written"
    assert ("seek", "t", 0, 9) in consumer.calls and worker.snapshot().stored == {P0: 9}
    assert ("t", 0) not in consumer.committed_offsets
    assert [(m.previous_offset, m.offset) for m in recorded.realigned] == [(5, 9)], "said, never silent"
    assert worker.writer.process(records((0, 9))) is Outcome.WRITTEN
    assert sink.stored_offsets("orders") == {P0: 10}
