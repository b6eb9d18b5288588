"""Issue: the offset gate. The seven reproductions of the issue, each through the registry (the host's
core) on the embedded cluster; the ones about processes and locks through stream processes and a real host.

1. a failed commit does not drag the stream back later;
2. a cancel cancels;
3. a stream process that dies after it applied a change: the call says applied;
4. KIP-848: a change made just after the first assignment is where delivery starts;
5. relative moves and previous offsets of an exactly-once stream count from what its sink stores;
6. nothing waits under the stream's lock, and a call's deadline counts from its arrival;
7. one call is one change: one change id, reverted whole; the same message in the call and the history.
"""
from __future__ import annotations

import threading
import time
import uuid

import httpx
import pytest
from broker_support import NO_KIP848
from configs import stream_config
from confluent_kafka import Consumer, KafkaError
from kafka_records import commit_as
from stream_helpers import FAST_REJOIN, RecordingSink, by_partition, delivered_from_file, offsets_transform, wait_until

from stream_registry import ChangeStatus, StreamConfig, StreamRegistry, StreamStatus
from stream_registry.model import MoveState, RetryPolicy
from stream_registry.registry.runners.runner import Isolation
from stream_registry.registry.stream.stream_events import StreamEvents
from stream_registry.registry.stream.worker import StreamWorker

pytestmark = pytest.mark.usefixtures("quick_rebalance")
COMMIT_FAILS = KafkaError.OFFSET_METADATA_TOO_LARGE   # not retriable, no rejoin: the commit just fails


def _create(kafka, registry, topic, name="orders", sink=None, **kwargs):
    registry.create(stream_config(kafka, topic, sink, name=name,
                                  transform=kwargs.pop("transform", "stream_helpers.offsets_transform"),
                                  consumer_group=f"g_{uuid.uuid4().hex[:10]}", batch_size=kwargs.pop("batch_size", 100),
                                  batch_interval_ms=20, **kwargs))


def _caught_up(kafka, registry, memory_sinks, messages=20):
    topic = kafka.new_topic(partitions=1)
    kafka.produce(topic, messages, partitions=1)
    _create(kafka, registry, topic)
    registry.start("orders")
    wait_until(lambda: len(memory_sinks["orders"].delivered()) >= messages, what="the first delivery")
    wait_until(lambda: registry.describe("orders")[0].committed_offset == messages, what="the first commit")
    return topic


# -- 1 ---------------------------------------------------------------------------------------------------
def test_a_failed_commit_never_drags_the_stream_back_later(own_kafka, registry, memory_sinks):
    """Every OffsetCommit fails; set_offset(5) at 20 stays pending, saying why, and nothing is redelivered.
    Once commits succeed it is applied once: 5..19 come again exactly once, the committed offset ends at 20
    with no lag, and a restart writes nothing more."""
    kafka, embedded_kafka = own_kafka, own_kafka.embedded   # every OffsetCommit of its cluster is this test's
    topic = _caught_up(kafka, registry, memory_sinks)
    sink = memory_sinks["orders"]
    embedded_kafka.push_request_errors("OffsetCommit", *[COMMIT_FAILS] * 500)
    try:
        [change] = registry.set_offset("orders", 5, timeout=2)
        assert change.status == ChangeStatus.PENDING and "failed" in change.message, change
        time.sleep(1.0)
        assert len(sink.delivered()) == 20, "nothing is delivered from a change that is not applied"
        assert registry.history("orders") == []
    finally:
        embedded_kafka.clear_request_errors("OffsetCommit")
    wait_until(lambda: [h.offset for h in registry.history("orders")] == [5], what="the change applied")
    wait_until(lambda: len(sink.delivered()) == 35, what="5..19 again")
    wait_until(lambda: (registry.describe("orders")[0].committed_offset, registry.describe("orders")[0].lag)
               == (20, 0), what="committed 20, no lag")
    time.sleep(1.5)
    assert registry.describe("orders")[0].committed_offset == 20
    registry.stop("orders")
    registry.start("orders")
    time.sleep(4.0)   # the group's rejoin (a 3 s session)
    assert by_partition(sink.delivered()) == {(topic, 0): list(range(20)) + list(range(5, 20))}


# -- 2 ---------------------------------------------------------------------------------------------------
def test_a_cancelled_change_is_never_applied(own_kafka, registry, memory_sinks):
    kafka, embedded_kafka = own_kafka, own_kafka.embedded   # every OffsetCommit of its cluster is this test's
    _caught_up(kafka, registry, memory_sinks)
    embedded_kafka.push_request_errors("OffsetCommit", *[COMMIT_FAILS] * 500)
    try:
        [change] = registry.set_offset("orders", 5, timeout=1)
        assert change.status == ChangeStatus.PENDING
        [cancelled] = registry.cancel_pending("orders")
        assert (cancelled.partition, cancelled.offset) == (0, 5)
    finally:
        embedded_kafka.clear_request_errors("OffsetCommit")
    time.sleep(3.0)   # several of the gate's retries would have passed
    assert registry.history("orders") == [] and registry.pending("orders") == []
    assert len(memory_sinks["orders"].delivered()) == 20
    assert registry.describe("orders")[0].committed_offset == 20


# -- 3 ---------------------------------------------------------------------------------------------------
def test_a_process_that_dies_after_applying_reports_applied(kafka, tmp_path):
    """Partition 0 is the stream's, partition 1 another member's; set_offset moves partition 0 onto a message
    that kills the stream process at once, while the call still waits for partition 1. The call says
    applied for partition 0 (the history does too) and pending for partition 1."""
    topic = kafka.new_topic(partitions=2)
    marker = tmp_path / "aborted"
    payloads = {4: f"abort:{marker}".encode()}
    kafka.produce(topic, 20, partitions=2, payload=lambda i: payloads.get(i // 2, b"x"))   # offset 4 of both
    registry = StreamRegistry(tmp_path / "state", isolation=Isolation.PROCESS,
                              retry=RetryPolicy(attempts=2, first_backoff_s=0.05))
    intruder = None
    try:
        _create(kafka, registry, topic, sink=f"cypherl://{tmp_path / 'out.cypherl'}",
                transform="stream_helpers.crashing_transform", restart="never",
                configs={"partition.assignment.strategy": "range"})
        commit_as(kafka, registry.get("orders").consumer_group, {(topic, 0): 10, (topic, 1): 10})
        registry.start("orders")
        wait_until(lambda: {r.partition for r in registry.describe("orders") if r.assigned} == {0, 1},
                   what="the stream's assignment")
        intruder = Consumer({"bootstrap.servers": kafka.bootstrap_servers, "group.id": registry.get("orders").consumer_group,
                             "partition.assignment.strategy": "range", "enable.auto.commit": False, **FAST_REJOIN})
        held = []
        intruder.subscribe([topic], on_assign=lambda c, parts: held.extend(p.partition for p in parts))
        wait_until(lambda: intruder.poll(0.1) is None and held, timeout=30, what="the intruder's assignment")
        [mine] = {0, 1} - set(held)
        wait_until(lambda: {r.partition for r in registry.describe("orders") if r.assigned} == {mine},
                   timeout=30, what="the stream to hold the other partition")
        changes = {c.partition: c for c in registry.set_offset("orders", 4, timeout=8)}
        assert marker.exists(), "the stream process aborted on the message at 4"
        assert (changes[mine].status, changes[1 - mine].status) == (ChangeStatus.APPLIED, ChangeStatus.PENDING), \
            changes
        assert [(h.partition, h.offset, h.status) for h in registry.history("orders")] == \
            [(mine, 4, ChangeStatus.APPLIED)]
        # the host learns of the exit from the process's pipe, on a thread of its own: after the call's answer
        wait_until(lambda: registry.get("orders").status == StreamStatus.ERROR, what="the process's death seen")
    finally:
        if intruder is not None:
            intruder.close()
        registry.close()


# -- 4 ---------------------------------------------------------------------------------------------------
def test_kip848_a_change_right_after_the_first_assignment_is_where_delivery_starts(kafka, embedded_kafka):
    """Under group.protocol=consumer the change reaches the poll thread at the first assignment (asked from the
    status callback, so it lands in the window), while librdkafka still looks the partition's committed offset
    (2) up, its OffsetFetch answered late: the change is applied, and delivery starts at its 15.

    On a loaded machine the lookup can end, and records from 2 arrive, in the consume() that ran the assignment,
    before the change is applied: then what was delivered before it stays, and delivery goes on from 15. Every
    attempt must say that; at least one of up to six must land in the window (nothing delivered before 15)."""
    for attempt in range(6):
        topic = kafka.new_topic(partitions=1)
        kafka.produce(topic, 30, partitions=1)
        config = StreamConfig(name="orders", topics=[topic], bootstrap_servers=kafka.bootstrap_servers,
                              transform="stream_helpers.offsets_transform", sink="memory://x",
                              consumer_group=f"g_{uuid.uuid4().hex[:10]}", batch_size=100, batch_interval_ms=20,
                              configs={"group.protocol": "consumer"}).with_group()
        commit_as(kafka, config.group_id, {(topic, 0): 2})
        sink, applied, asked, workers, before = RecordingSink(), [], [], [], []

        def on_status(status, error, topic=topic, asked=asked, workers=workers):
            if status == StreamStatus.RUNNING and not asked:
                asked.append(True)
                workers[0].request_offsets(1, {(topic, 0): 15})

        def on_change(event, applied=applied, before=before, sink=sink):
            applied.append((event.state, event.offset))
            before.append(len(sink.delivered()))   # the poll thread applies it: no batch is being written

        worker = StreamWorker(config, offsets_transform, sink, events=StreamEvents(on_status=on_status,
                                                                                    on_change=on_change))
        workers.append(worker)
        embedded_kafka.push_request_errors("OffsetFetch", *[KafkaError.COORDINATOR_LOAD_IN_PROGRESS] * 4)
        try:
            worker.start()
            wait_until(lambda applied=applied: applied, what="the change applied")
            assert applied == [(MoveState.PERSISTED, 15)]
            wait_until(lambda sink=sink, before=before: len(sink.delivered()) >= before[0] + 15, what="the delivery")
            time.sleep(0.3)
            delivered = by_partition(sink.delivered())[(topic, 0)]
            assert delivered == list(range(2, 2 + before[0])) + list(range(15, 30)), f"attempt {attempt}"
        finally:
            embedded_kafka.clear_request_errors("OffsetFetch")
            worker.stop()
        if before[0] == 0:
            break
    else:
        pytest.fail("no attempt applied the change before the first delivery")


# -- 5 ---------------------------------------------------------------------------------------------------
def test_relative_moves_of_an_exactly_once_stream_count_from_what_its_sink_stores(own_kafka, registry, tmp_path):
    """Kafka's commits fail while the graph takes batches: the sink stores 20, the group holds 10. "-5" then
    plans 20 → 15, and revert goes back to 20."""
    kafka, embedded_kafka = own_kafka, own_kafka.embedded   # every OffsetCommit of its cluster is this test's
    topic = kafka.new_topic(partitions=1)
    kafka.produce(topic, 10, partitions=1)
    out = tmp_path / "out.cypherl"
    _create(kafka, registry, topic, sink=f"cypherl://{out}", delivery="exactly_once", batch_size=5)
    registry.start("orders")
    wait_until(lambda: registry.describe("orders")[0].committed_offset == 10, what="10 committed")
    embedded_kafka.push_request_errors("OffsetCommit", *[COMMIT_FAILS] * 500)
    try:
        kafka.produce(topic, 10, partitions=1)
        wait_until(lambda: registry.describe("orders")[0].stored_offset == 20, what="20 stored in the sink")
        registry.stop("orders")
    finally:
        embedded_kafka.clear_request_errors("OffsetCommit")
    row = registry.describe("orders")[0]
    assert (row.committed_offset, row.stored_offset, row.resume_offset) == (10, 20, 20)
    [planned] = registry.set_offset("orders", "-5", dry_run=True)
    assert (planned.previous_offset, planned.offset) == (20, 15), planned
    [change] = registry.set_offset("orders", "-5")
    assert (change.previous_offset, change.offset, change.status) == (20, 15, ChangeStatus.PENDING)
    registry.start("orders")
    wait_until(lambda: registry.history("orders"), what="the change applied")
    wait_until(lambda: len(delivered_from_file(out)) == 25, what="15..19 again")
    # the file holds the batch before the stream's position moves past it: the revert is planned from where it stands
    wait_until(lambda: registry.describe("orders")[0].position == 20, what="the stream standing at 20")
    [back] = registry.revert("orders", registry.history("orders")[0].change_id, dry_run=True)
    assert (back.previous_offset, back.offset) == (20, 20)


# -- 6 ---------------------------------------------------------------------------------------------------
def test_nothing_waits_under_the_streams_lock_and_deadlines_count_from_arrival(kafka, registry, memory_sinks):
    """Another member holds partition 1: set_offset waits for it (20 s). Meanwhile describe answers at once,
    a second call with a 2 s timeout ends within its 2 s, and stop returns at once; the waiting call then
    answers at once too."""
    topic = kafka.new_topic(partitions=2)
    kafka.produce(topic, 20, partitions=2)
    _create(kafka, registry, topic, configs={"partition.assignment.strategy": "range"})
    registry.start("orders")
    wait_until(lambda: len(memory_sinks["orders"].delivered()) >= 20)
    intruder = Consumer({"bootstrap.servers": kafka.bootstrap_servers, "group.id": registry.get("orders").consumer_group,
                         "partition.assignment.strategy": "range", "enable.auto.commit": False, **FAST_REJOIN})
    held = []
    intruder.subscribe([topic], on_assign=lambda c, parts: held.extend(p.partition for p in parts))
    try:
        wait_until(lambda: intruder.poll(0.1) is None and held, timeout=30, what="the intruder's assignment")
        [mine] = {0, 1} - set(held)
        wait_until(lambda: {r.partition for r in registry.describe("orders") if r.assigned} == {mine}, timeout=30,
                   what="the stream to hold the other partition")
        results = {}
        waiting = threading.Thread(target=lambda: results.update(first=registry.set_offset("orders", 3, timeout=20)))
        started = time.monotonic()
        waiting.start()
        time.sleep(1.0)
        t0 = time.monotonic()
        registry.describe("orders")
        assert time.monotonic() - t0 < 2.0, "describe waited for the change"
        t0 = time.monotonic()
        second = registry.set_offset("orders", 4, timeout=2)
        assert time.monotonic() - t0 < 2.0 + 1.0, "the second call outlived its own timeout"
        assert {c.partition: c.status for c in second} == {mine: ChangeStatus.APPLIED, 1 - mine: ChangeStatus.PENDING}
        t0 = time.monotonic()
        registry.stop("orders")
        assert time.monotonic() - t0 < 3.0, "stop waited for the change"
        waiting.join(5)
        assert not waiting.is_alive() and time.monotonic() - started < 10
        first = {c.partition: c.status for c in results["first"]}
        assert first == {mine: ChangeStatus.APPLIED, 1 - mine: ChangeStatus.SUPERSEDED}, results["first"]
    finally:
        intruder.close()


# -- 7 ---------------------------------------------------------------------------------------------------
def test_one_call_is_one_change_reverted_whole_through_the_host(host, kafka):
    topic = kafka.new_topic(partitions=3)
    kafka.produce(topic, 60, partitions=3)
    api = httpx.Client(base_url=host.url, timeout=30)
    with host.client() as client:
        client.create(name="orders", topics=[topic], bootstrap_servers=kafka.bootstrap_servers,
                      transform="stream_helpers.offsets_transform", sink="null://",
                      consumer_group=f"g_{uuid.uuid4().hex[:10]}", configs=FAST_REJOIN)
        client.start("orders")
        wait_until(lambda: all(r.committed_offset == 20 for r in client.describe("orders")), what="caught up")
        changes = client.set_offset("orders", 10, timeout=10)
        assert {(c.offset, c.status) for c in changes} == {(10, ChangeStatus.APPLIED)}
        history = client.history("orders")
        assert len({h.change_id for h in history}) == 1 and len(history) == 3
        assert [c.message for c in changes] == [h.message for h in sorted(history, key=lambda h: h.partition)]
        assert all(h.changed_at.utcoffset() is not None and h.changed_at.utcoffset().total_seconds() == 0
                   for h in history)
        raw = api.get("/streams/orders/history").json()
        assert all(r["changed_at"].endswith("+00:00") for r in raw), raw
        wait_until(lambda: all(r.committed_offset == 20 for r in client.describe("orders")), what="10..19 again")
        reverted = client.revert("orders", history[0].change_id, timeout=10)   # back to 20, where it stood
        assert sorted((c.partition, c.previous_offset, c.offset, c.status) for c in reverted) == \
            [(p, 20, 20, ChangeStatus.APPLIED) for p in range(3)]
        newest = client.history("orders")[:3]
        assert len({h.change_id for h in newest}) == 1 and newest[0].change_id != history[0].change_id
        assert {h.message for h in newest} == {f"revert of change {history[0].change_id}"} == \
            {c.message for c in reverted}
        [one] = client.revert("orders", history[0].change_id, timeout=10, partitions=[f"{topic}:1"], dry_run=True)
        assert (one.partition, one.offset, one.status) == (1, 20, ChangeStatus.PLANNED)


# -- issue 21: time lookups hold no lock and keep the caller's deadline ---------------------------------
def test_a_slow_time_lookup_holds_no_lock_and_gets_the_callers_deadline(kafka, registry, memory_sinks, monkeypatch):
    """A datetime spec is resolved by a time lookup against the cluster (a binary search over record timestamps
    where the broker has no time index). While one is slow, stop and describe answer at once, and the lookup
    is handed the deadline of the call that asked for it (its timeout counted from its arrival)."""
    from stream_registry.kafka.queries import PartitionQuery

    topic = kafka.new_topic(partitions=1)
    kafka.produce(topic, 10, partitions=1)
    _create(kafka, registry, topic)
    looking, deadlines = threading.Event(), []
    real = PartitionQuery.offsets_for_times

    def slow(self, queries, deadline=None):
        deadlines.append(deadline)
        looking.set()
        time.sleep(3.0)
        return real(self, queries, deadline)

    monkeypatch.setattr(PartitionQuery, "offsets_for_times", slow)
    results = {}
    arrived = time.monotonic()
    caller = threading.Thread(target=lambda: results.update(
        changes=registry.set_offset("orders", "2020-01-01T00:00:00Z", timeout=5)))
    caller.start()
    assert looking.wait(10), "the spec was not looked up by time"
    t0 = time.monotonic()
    registry.describe("orders")
    registry.stop("orders")
    assert time.monotonic() - t0 < 1.5, "describe and stop waited for the time lookup"
    caller.join(15)
    assert not caller.is_alive()
    [deadline] = deadlines
    assert deadline is not None and arrived < deadline <= arrived + 5.0 + 0.1, "not the caller's deadline"
    assert [c.offset for c in results["changes"]] == [0]   # a time before every record: the log start


# -- a move to the end never goes back (the soak's duplicate: clamped 276 -> 277 applied at 278) -----------
def _move_while_the_stream_moves_on(kafka, tmp_path, monkeypatch, spec, produced, protocol):
    """An exactly-once stream in a stream process at 20; set_offset(spec) is resolved (its position read as
    20), 5 more records arrive (before or after the log end is read: 25 or 20) and the stream writes them
    before its gate applies the change; then 5 more. The call's answer, the history row and the offsets
    written, in order."""
    from stream_registry.kafka.queries import PartitionQuery

    topic = kafka.new_topic(partitions=1)
    kafka.produce(topic, 20, partitions=1)
    out = tmp_path / "out.cypherl"
    registry = StreamRegistry(tmp_path / "state", isolation=Isolation.PROCESS,
                              retry=RetryPolicy(attempts=2, first_backoff_s=0.05))
    try:
        if protocol == "classic":
            _create(kafka, registry, topic, sink=f"cypherl://{out}", delivery="exactly_once", batch_size=5)
        else:   # KIP-848 (the soak's soak_d): the session is the broker's, not the client's
            registry.create(StreamConfig(name="orders", topics=[topic], bootstrap_servers=kafka.bootstrap_servers,
                                         transform="stream_helpers.offsets_transform", sink=f"cypherl://{out}",
                                         consumer_group=f"g_{uuid.uuid4().hex[:10]}", batch_size=5,
                                         batch_interval_ms=20, delivery="exactly_once",
                                         configs={"group.protocol": "consumer"}))
        registry.start("orders")
        wait_until(lambda: registry.describe("orders")[0].stored_offset == 20, what="20 stored in the sink")
        real = PartitionQuery.snapshots

        def read_then_move_on(self, tps, positions=None, deadline=None):   # the stream moves on after the read
            if produced == "before":
                kafka.produce(topic, 5, partitions=1)
            snapshots = real(self, tps, positions, deadline)
            if produced == "after":
                kafka.produce(topic, 5, partitions=1)
            wait_until(lambda: len(delivered_from_file(out)) >= 25, what="25 written after the log end was read")
            return snapshots

        monkeypatch.setattr(PartitionQuery, "snapshots", read_then_move_on)
        [change] = registry.set_offset("orders", spec, timeout=10)
        monkeypatch.undo()
        written = 25 + 25 - change.offset
        kafka.produce(topic, 5, partitions=1)
        wait_until(lambda: len(delivered_from_file(out)) >= written + 5, what="the last 5 written")
        time.sleep(0.5)   # a rewind's re-delivery would come now
        wait_until(lambda: registry.describe("orders")[0].stored_offset == 30, what="30 stored in the sink")
        [row] = registry.history("orders")
        return change, row, [o for _, _, o in delivered_from_file(out)]
    finally:
        registry.close()


@pytest.mark.parametrize("spec, produced", [(1000, "after"), ("latest", "after"), ("+2", "before")],
                         ids=["clamped_to_the_log_end", "latest", "shift_onward"])
@pytest.mark.parametrize("protocol", ["classic", pytest.param("consumer", marks=NO_KIP848)])
def test_a_move_to_the_end_never_takes_a_partition_back_from_where_it_got(kafka, tmp_path, monkeypatch, spec,
                                                                          produced, protocol):
    """A spec beyond the log end or "latest" means "the end", "+2" means on from where it stands: the
    partition must not be moved back to 20 or 22 from 25 (that would write 20..24 or 22..24 twice). The call
    and the history say where it really stands: 25, from 25."""
    change, row, offsets = _move_while_the_stream_moves_on(kafka, tmp_path, monkeypatch, spec, produced, protocol)
    assert sorted(offsets) == list(range(30)), f"written twice: {sorted(o for o in set(offsets) if offsets.count(o) > 1)}"
    assert (change.previous_offset, change.offset) == (25, 25), change
    assert change.status in (ChangeStatus.CLAMPED, ChangeStatus.APPLIED), change
    assert "25" in change.message, change.message
    assert (row.previous_offset, row.offset, row.status, row.message) == \
        (change.previous_offset, change.offset, change.status, change.message)


@pytest.mark.parametrize("protocol", ["classic", pytest.param("consumer", marks=NO_KIP848)])
def test_an_explicit_offset_is_kept_exact_and_reported_from_where_the_stream_stood(kafka, tmp_path, monkeypatch,
                                                                                   protocol):
    """The soak's 303 asked at 301 and applied at 304: an explicit in-range offset is where the partition goes,
    rewind or not (22..24 come again, as asked), and the call and the history say it moved from 25, where the
    stream really stood, not from the 20 read when the call was resolved (a revert goes back to 25)."""
    change, row, offsets = _move_while_the_stream_moves_on(kafka, tmp_path, monkeypatch, 22, "before", protocol)
    assert offsets == list(range(25)) + list(range(22, 30)), offsets
    assert (change.previous_offset, change.offset, change.status) == (25, 22, ChangeStatus.APPLIED), change
    assert (row.previous_offset, row.offset, row.status) == (25, 22, ChangeStatus.APPLIED), row
