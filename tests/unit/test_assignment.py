"""The partitions a stream process holds (stream_registry/registry/stream/assignment.py), wired as the worker wires its
parts (consumer_standin.worker_on), over a consumer stand-in (tests/support/consumer_standin.py) and a real null:// sink: the group's protocol
learned from a refusal, exactly-once start points from the sink (and the realignment said when the group committed
elsewhere), partitions held back while the sink does not answer, what a revoke forgets, records that left the log."""
from __future__ import annotations

import pytest
from confluent_kafka import OFFSET_INVALID, KafkaError, KafkaException, TopicPartition
from consumer_standin import ConsumerStandIn, worker_on

from stream_registry.config import DataLossPolicy, Delivery
from stream_registry.errors import SinkError
from stream_registry.graph.offset_store import offset_statements
from stream_registry.graph.sinks.null import NullSink
from stream_registry.model import PartitionKey, StreamStatus
from stream_registry.registry.stream import assignment as assignment_module
from stream_registry.registry.stream.assignment import OFFSET_BEGINNING
from stream_registry.registry.stream.data_loss import OFFSET_END
from stream_registry.registry.stream.worker import StreamWorker

P0, P1 = PartitionKey("t", 0), PartitionKey("t", 1)


def assign(worker: StreamWorker, consumer: ConsumerStandIn, *keys: PartitionKey) -> None:
    worker.assignment.callbacks()["on_assign"](consumer, [TopicPartition(t, p) for t, p in keys])


def revoke(worker: StreamWorker, consumer: ConsumerStandIn, *keys: PartitionKey) -> None:
    worker.assignment.callbacks()["on_revoke"](consumer, [TopicPartition(t, p) for t, p in keys])


def test_the_groups_protocol_is_learned_from_librdkafkas_refusal():
    consumer = ConsumerStandIn(incremental=True)
    worker, recorded = worker_on(consumer)   # no cooperative strategy in the config: eager is the first guess
    assert worker.assignment.incremental is False
    assign(worker, consumer, P0)
    assert worker.assignment.incremental is True
    assert consumer.calls[0][0] == "incremental_assign" and ("t", 0) in consumer.assigned
    assert recorded.statuses[-1] == (StreamStatus.RUNNING, None)
    revoke(worker, consumer, P0)
    assert consumer.calls[-1] == ("incremental_unassign", [("t", 0)])


def test_exactly_once_partitions_start_where_the_sink_stores_and_a_different_group_commit_is_a_realignment():
    sink = NullSink()
    sink.write(offset_statements("orders", {P0: 12}))
    consumer = ConsumerStandIn(committed={("t", 0): (5, None)}, watermarks={("t", 1): (0, 0)})
    worker, recorded = worker_on(consumer, sink, delivery=Delivery.EXACTLY_ONCE,
                                 configs={"partition.assignment.strategy": "cooperative-sticky"})
    assign(worker, consumer, P0, P1)
    assert consumer.calls[0] == ("incremental_assign", [("t", 0, 12), ("t", 1, OFFSET_BEGINNING)])
    assert worker.snapshot().stored == {P0: 12}
    assert recorded.realigned == [], "said between batches, not inside the rebalance callback"
    worker.assignment.follow_sink()
    assert [(m.topic, m.partition, m.previous_offset, m.offset) for m in recorded.realigned] == [("t", 0, 5, 12)]
    assert consumer.committed_offsets[("t", 0)][0] == 12, "the group's offset follows the sink's"


class FlakySink(NullSink):
    def __init__(self):
        super().__init__()
        self.down: BaseException | None = SinkError("graph: connection refused", transient=True)

    def stored_offsets(self, stream, partitions=None):
        if self.down is not None:
            raise self.down
        return super().stored_offsets(stream, partitions)


def test_partitions_wait_while_the_sink_does_not_answer_and_start_where_it_stores_once_it_does(monkeypatch):
    monkeypatch.setattr(assignment_module, "ASSIGN_STORED_DEADLINE_S", 0.0)
    monkeypatch.setattr(assignment_module, "HELD_RETRY_S", 0.0)
    sink = FlakySink()
    consumer = ConsumerStandIn()
    worker, recorded = worker_on(consumer, sink, delivery=Delivery.EXACTLY_ONCE,
                                 configs={"partition.assignment.strategy": "cooperative-sticky"})
    assign(worker, consumer, P0)
    assert consumer.calls == [("incremental_assign", [])] and worker.assignment.held == {P0}
    status, error = recorded.statuses[-1]
    assert status is StreamStatus.RUNNING and "connection refused" in error and "wait for the sink" in error
    worker.assignment.start_held()
    assert worker.assignment.held == {P0}, "still down: still held"
    sink.down = None
    sink.write(offset_statements("orders", {P0: 40}))
    worker.assignment.start_held()
    assert worker.assignment.held == set() and consumer.calls[-1] == ("incremental_assign", [("t", 0, 40)])
    assert recorded.statuses[-1] == (StreamStatus.RUNNING, None)


def test_a_sink_that_cannot_say_what_it_stores_fails_the_stream_from_the_loop(monkeypatch):
    sink = FlakySink()
    sink.down = SinkError("graph: unauthorized")   # not transient: waiting helps not
    consumer = ConsumerStandIn(incremental=False)
    worker, _ = worker_on(consumer, sink, delivery=Delivery.EXACTLY_ONCE)
    assign(worker, consumer, P0)
    assert "unauthorized" in worker.health.fatal and worker.assignment.held == set()


def test_a_revoke_forgets_what_this_process_knew_of_the_partition():
    sink = NullSink()
    sink.write(offset_statements("orders", {P0: 3, P1: 8}))
    consumer = ConsumerStandIn(incremental=False)
    worker, _ = worker_on(consumer, sink, delivery=Delivery.EXACTLY_ONCE)
    assign(worker, consumer, P0, P1)
    worker.commits.owed = {P0: 4, P1: 9}
    revoke(worker, consumer, P0)
    assert worker.snapshot().stored == {P1: 8} and worker.commits.owed == {P1: 9}
    assert worker.snapshot().assigned == frozenset({P1})


@pytest.mark.parametrize("policy, start", [("earliest", OFFSET_BEGINNING), ("latest", OFFSET_END),
                                           ("error", OFFSET_INVALID)])
def test_partitions_the_group_committed_nothing_for_are_assigned_where_auto_offset_reset_says(policy, start):
    """In the one assign (tests/integration/test_new_group_start.py: no reset rounds); a committed partition is the
    group's, and with `error` nothing is guessed (the stream then fails naming the partition: data_loss.decide)."""
    consumer = ConsumerStandIn(incremental=False, committed={("t", 1): (7, None)})
    worker, _ = worker_on(consumer, configs={"auto.offset.reset": policy})
    assign(worker, consumer, P0, P1)
    assert consumer.calls == [("assign", [("t", 0, start), ("t", 1, OFFSET_INVALID)])]   # INVALID: the group's


@pytest.mark.parametrize("policy", [DataLossPolicy.CONTINUE, DataLossPolicy.STOP])
def test_records_that_left_the_log_are_counted_and_the_stream_goes_on_or_stops_as_its_policy_says(policy):
    consumer = ConsumerStandIn(incremental=False, watermarks={("t", 0): (10, 20)})
    worker, recorded = worker_on(consumer, on_data_loss=policy, configs={"auto.offset.reset": "earliest"})
    assign(worker, consumer, P0)
    worker.assignment.resets[P0] = 5   # librdkafka could not fetch from 5: the log starts at 10 now
    worker.assignment.decide_resets()
    if policy is DataLossPolicy.STOP:
        assert "on_data_loss is stop" in worker.health.fatal and recorded.lost == []
        assert ("t", 0) not in consumer.committed_offsets, "the committed offset stays where it was"
        return
    assert [(lost.from_offset, lost.to_offset) for lost in recorded.lost] == [(5, 10)]
    assert ("seek", "t", 0, 10) in consumer.calls
    assert consumer.committed_offsets[("t", 0)][0] == 10 and worker.assignment.resets == {}


def test_a_partition_an_offset_change_waits_for_is_held_while_its_commit_cannot_be_read():
    """Issue 42: whether an earlier run of the stream applied a waiting offset change is known only from the
    partition's commit (its mark). While the batched committed() read at assignment fails, that partition is held
    back, the error saying why, and the others start; once the read answers it starts, and the mark decides: here
    the commit carries the change, so it is recorded as applied before, not applied (and delivered) again. Before,
    the partition started at once and the change was applied a second time."""
    from stream_registry.registry.stream.change_marks import ChangeMark

    class UnreadFirst(ConsumerStandIn):
        fails = 1

        def committed(self, partitions, timeout=None):
            if self.fails:
                self.fails -= 1
                raise KafkaException(KafkaError(KafkaError._TIMED_OUT, "no answer"))
            return super().committed(partitions, timeout)

    consumer = UnreadFirst(incremental=True)
    worker, _ = worker_on(consumer, configs={"partition.assignment.strategy": "cooperative-sticky"})
    applied_before = worker.commits._mark_key.encode(P0, ChangeMark(1, 3, 10))
    consumer.committed_offsets[("t", 0)] = (3, applied_before)   # an earlier run moved P0 10 -> 3, then died
    worker._gate.request(1, {P0: 3})
    assign(worker, consumer, P0, P1)
    assert ("t", 0) not in consumer.assigned and ("t", 1) in consumer.assigned, "P0 held, P1 started"
    assert "reading the committed offsets of t:0 failed" in worker.error
    worker.assignment._next_held_try = 0.0   # the retry due
    worker.assignment.start_held()
    assert ("t", 0) in consumer.assigned and worker.error is None
    assert not [c for c in consumer.calls if c[0] == "commit"], "not applied again: nothing committed"
    assert worker._gate.waiting() == {}, "recorded from the mark"
