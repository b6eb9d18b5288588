"""Issue: set_stream_offset — rebalance-gated offset control on every partition, describe and lag.

The race tests keep the cluster's initial rebalance delay at its default (3 s on
the embedded cluster, as on brokers): `assignment()` is empty for that long
after subscribe, and an offset set in that window must still be where every
partition starts.
"""
from __future__ import annotations

import threading
import time

import pytest
from broker_support import LIST_OFFSETS_BY_TIME, NO_KIP848
from confluent_kafka import KafkaError
from stream_helpers import FAST_REJOIN, SLOW_S, by_partition, wait_until

from stream_registry import ChangeStatus, StreamConfig, StreamError, StreamStatus

PROTOCOLS = [
    pytest.param({"partition.assignment.strategy": "range"}, id="eager-range"),
    pytest.param({"partition.assignment.strategy": "cooperative-sticky"}, id="cooperative-sticky"),
    pytest.param({"group.protocol": "consumer"}, id="kip848-consumer", marks=NO_KIP848),
]


def _stream(kafka, registry, partitions=3, messages=300, name="orders", configs=None, batch_size=100):
    topic = kafka.new_topic(partitions=partitions)
    if messages:
        kafka.produce(topic, messages, partitions=partitions)
    registry.create(StreamConfig(name=name, topics=[topic], bootstrap_servers=kafka.bootstrap_servers,
                                 transform="stream_helpers.offsets_transform", sink=f"memory://{name}",
                                 consumer_group=f"g_{topic}", batch_size=batch_size, configs=_with_fast_rejoin(configs or {})))
    return topic


def _with_fast_rejoin(configs):
    """The classic protocol takes a session timeout from the client; KIP-848 takes it from the broker."""
    return configs if configs.get("group.protocol") == "consumer" else {**FAST_REJOIN, **configs}


def _first_offsets(delivered):
    return {tp: offsets[0] for tp, offsets in by_partition(delivered).items()}


def _stream_the_group_committed_at_50(kafka, registry, configs=None) -> str:
    """_stream's 300 records on 3 partitions, its group's offsets committed at 50 (by a member that left)."""
    from confluent_kafka import Consumer, TopicPartition

    topic = _stream(kafka, registry, configs=configs)
    member = Consumer({"bootstrap.servers": kafka.bootstrap_servers, "group.id": registry.get("orders").consumer_group})
    member.commit(offsets=[TopicPartition(topic, p, 50) for p in range(3)], asynchronous=False)
    member.close()
    return topic


def _every_partition_starts_at_10(changes, sink, topic: str, end: int) -> None:
    """The call applied 10 on every partition, and each delivered 10..end-1 from there, nothing from the group's 50."""
    assert {c.status for c in changes} == {ChangeStatus.APPLIED}, changes
    assert sorted((c.topic, c.partition, c.offset) for c in changes) == [(topic, p, 10) for p in range(3)]
    wait_until(lambda: len(sink.delivered()) >= 3 * (end - 10))
    assert _first_offsets(sink.delivered()) == {(topic, p): 10 for p in range(3)}
    assert all(offsets == list(range(10, end)) for offsets in by_partition(sink.delivered()).values())


@pytest.mark.parametrize("configs", PROTOCOLS)
def test_set_before_first_assignment_is_where_every_partition_starts(kafka, registry, memory_sinks, configs,
                                                                      monkeypatch):
    """The call is in the poll thread's queue when the group's first assignment arrives inside consume() (the
    assign callback is held until the call ended in the host: its request is queued; a call still resolving is
    order C, the next test), and the group has committed offsets, so librdkafka fetches at once: the
    first fetch of every partition lands before the assign callback returns (as a slow callback let it under
    load) and the same consume() returns those records. Every partition still starts at the call's offset:
    nothing from the group's offset is delivered. Before the fix (the queue drained only between batches) the
    records from the group's offset went first (KIP-848, 1 run in 10 under load)."""
    from confluent_kafka import TopicPartition

    from stream_registry.registry.stream.assignment import Assignment
    from stream_registry.registry.stream.calls_coming import CallsComing

    topic = _stream_the_group_committed_at_50(kafka, registry, configs)
    queued = threading.Event()
    ended, on_assign = CallsComing.ended, Assignment._on_assign

    def queue_request(calls, token):   # the call ended: its request is queued
        ended(calls, token)
        queued.set()

    def assign_once_queued(assignment, consumer, partitions):
        assert queued.wait(30), "the call never reached the stream"
        on_assign(assignment, consumer, partitions)
        started = [TopicPartition(tp.topic, tp.partition) for tp in partitions]
        wait_until(lambda: all(consumer.get_watermark_offsets(tp, cached=True)[1] >= 0 for tp in started), 30,
                   what="the first fetch of every partition")
        kafka.produce(topic, 3, partitions=3)   # the next fetch answers only once the first one's records are queued
        wait_until(lambda: all(consumer.get_watermark_offsets(tp, cached=True)[1] == 101 for tp in started), 30,
                   what="the first fetch's records queued")
    monkeypatch.setattr(CallsComing, "ended", queue_request)
    monkeypatch.setattr(Assignment, "_on_assign", assign_once_queued)
    registry.start("orders")
    assert registry.get("orders").status == StreamStatus.STARTING   # the group has not assigned anything yet
    _every_partition_starts_at_10(registry.set_offset("orders", 10, timeout=15), memory_sinks["orders"], topic, 101)


@pytest.mark.parametrize("configs", PROTOCOLS)
def test_a_call_still_resolving_at_the_first_assignment_is_where_every_partition_starts(kafka, registry,
                                                                                       memory_sinks, configs,
                                                                                       monkeypatch):
    """Order C of the first-assignment race: the call arrives while the stream starts, and the group's first
    assignment comes while the host is still resolving the call's offsets (held here until the assignment has
    run and the stream either delivered from the group's 50 or holds the partitions). The call was accepted
    before any record was delivered, so every partition still starts at the call's offset. Before the fix the
    records from the group's 50 went first (all protocols: the request reached the stream only after them)."""

    from stream_registry.registry.host.positions import StreamPositions
    from stream_registry.registry.stream.assignment import Assignment

    topic = _stream_the_group_committed_at_50(kafka, registry, configs)
    assigned: list[Assignment] = []
    resolving = threading.Event()
    resolve, on_assign = StreamPositions.resolve, Assignment._on_assign

    def assign_and_say(assignment, consumer, partitions):
        # KIP-848 assigns at once: the first assignment waits here until the call is accepted and resolving
        assert resolving.wait(30), "the call reached the host's resolve"
        on_assign(assignment, consumer, partitions)
        assigned.append(assignment)

    def resolve_after_the_assignment(positions, *args, **kwargs):
        resolving.set()
        wait_until(lambda: assigned, 30, what="the group's first assignment")
        wait_until(lambda: memory_sinks["orders"].delivered() or assigned[0].held, 30,
                   what="records delivered from the group's offset, or the partitions held for the call")
        return resolve(positions, *args, **kwargs)
    monkeypatch.setattr(Assignment, "_on_assign", assign_and_say)
    monkeypatch.setattr(StreamPositions, "resolve", resolve_after_the_assignment)
    registry.start("orders")
    _every_partition_starts_at_10(registry.set_offset("orders", 10, timeout=30), memory_sinks["orders"], topic, 100)


def test_partitions_held_for_a_call_that_fails_start_where_the_group_resumes(kafka, registry, memory_sinks,
                                                                            monkeypatch):
    """The partitions a starting stream holds for a call still resolving (order C) start once the call failed:
    where the group resumes them, nothing lost, nothing held for ever."""

    from stream_registry.errors import ConfigError
    from stream_registry.registry.host.positions import StreamPositions
    from stream_registry.registry.stream.assignment import Assignment

    topic = _stream_the_group_committed_at_50(kafka, registry)
    assigned: list[Assignment] = []
    on_assign = Assignment._on_assign

    def assign_and_say(assignment, consumer, partitions):
        on_assign(assignment, consumer, partitions)
        assigned.append(assignment)

    def resolve_fails_once_held(*args, **kwargs):
        wait_until(lambda: assigned and assigned[0].held, 30, what="the partitions held for the call")
        raise ConfigError("offset: refused (the test's resolve)")
    monkeypatch.setattr(Assignment, "_on_assign", assign_and_say)
    monkeypatch.setattr(StreamPositions, "resolve", resolve_fails_once_held)
    registry.start("orders")
    with pytest.raises(ConfigError):
        registry.set_offset("orders", 10, timeout=30)
    sink = memory_sinks["orders"]
    wait_until(lambda: len(sink.delivered()) >= 3 * 50)
    assert by_partition(sink.delivered()) == {(topic, p): list(range(50, 100)) for p in range(3)}
    assert registry.get("orders").status == StreamStatus.RUNNING and registry.history("orders") == []


@pytest.mark.parametrize("configs", PROTOCOLS)
def test_rewind_while_running_redelivers_from_exactly_there(kafka, registry, memory_sinks, configs):
    topic = _stream(kafka, registry, configs=configs)
    registry.start("orders")
    sink = memory_sinks["orders"]
    wait_until(lambda: len(sink.delivered()) >= 300)
    seen = len(sink.delivered())
    changes = registry.set_offset("orders", {f"{topic}:0": 5, f"{topic}:1": "earliest"}, timeout=10)
    assert {(c.partition, c.offset, c.status) for c in changes} == {(0, 5, ChangeStatus.APPLIED),
                                                                   (1, 0, ChangeStatus.APPLIED)}
    assert {c.previous_offset for c in changes} == {100}
    wait_until(lambda: len(sink.delivered()) >= seen + 95 + 100)
    after = by_partition(sink.delivered()[seen:])
    assert after[(topic, 0)] == list(range(5, 100))
    assert after[(topic, 1)] == list(range(0, 100))
    assert (topic, 2) not in after                      # partitions not named keep their offset
    # the last batch's commit follows its write (pipelined: answered while the next batch is read): wait for it
    wait_until(lambda: {row.partition: row.committed_offset for row in registry.describe("orders")} ==
               {0: 100, 1: 100, 2: 100}, 30, what="every partition committed at its end")
    history = registry.history("orders")
    assert {(h.partition, h.offset) for h in history} == {(0, 5), (1, 0)}


def test_jump_to_end_delivers_nothing_old_after_the_call(kafka, registry, memory_sinks):
    topic = _stream(kafka, registry, messages=6000, batch_size=50)
    SLOW_S["per_batch"] = 0.05   # a lagging stream
    try:
        registry.start("orders")
        sink = memory_sinks["orders"]
        wait_until(lambda: len(sink.delivered()) >= 100)
        changes = registry.set_offset("orders", -2, timeout=10)   # Memgraph dialect: -2 = end
        assert {c.offset for c in changes} == {2000} and {c.status for c in changes} == {ChangeStatus.APPLIED}
        seen = len(sink.delivered())
        kafka.produce(topic, 30, partitions=3)
        wait_until(lambda: len(sink.delivered()) >= seen + 30)
        after = by_partition(sink.delivered()[seen:])
        assert after == {(topic, p): list(range(2000, 2010)) for p in range(3)}
    finally:
        SLOW_S["per_batch"] = 0.0


def test_stopped_stream_records_pending_and_start_begins_there(kafka, registry, memory_sinks):
    topic = _stream(kafka, registry)
    changes = registry.set_offset("orders", {topic: 40, f"{topic}:2": -1})
    assert {c.status for c in changes} == {ChangeStatus.PENDING}
    assert sorted((c.partition, c.offset) for c in changes) == [(0, 40), (1, 40), (2, 0)]
    assert registry.history("orders") == []
    registry.start("orders")
    sink = memory_sinks["orders"]
    wait_until(lambda: len(sink.delivered()) >= 60 + 60 + 100)
    assert _first_offsets(sink.delivered()) == {(topic, 0): 40, (topic, 1): 40, (topic, 2): 0}
    assert sorted((h.partition, h.offset) for h in registry.history("orders")) == [(0, 40), (1, 40), (2, 0)]


@LIST_OFFSETS_BY_TIME
def test_every_spec_form_and_clamping(kafka, registry, memory_sinks):
    base = 1_790_000_000_000
    topic = kafka.new_topic(partitions=2)
    kafka.produce(topic, 100, partitions=2, timestamp_ms=lambda i: base + i * 1000)
    registry.create(StreamConfig(name="orders", topics=[topic], bootstrap_servers=kafka.bootstrap_servers,
                                 transform="stream_helpers.offsets_transform", sink="memory://orders"))

    def plan(spec):
        return {c.partition: (c.offset, c.status) for c in registry.set_offset("orders", spec, dry_run=True)}

    assert plan(7) == {0: (7, ChangeStatus.PLANNED), 1: (7, ChangeStatus.PLANNED)}
    assert plan(-1) == plan("earliest") == {0: (0, ChangeStatus.PLANNED), 1: (0, ChangeStatus.PLANNED)}
    assert plan(-2) == plan("latest") == {0: (50, ChangeStatus.PLANNED), 1: (50, ChangeStatus.PLANNED)}
    assert plan(999) == {0: (50, ChangeStatus.CLAMPED), 1: (50, ChangeStatus.CLAMPED)}
    # message i has timestamp base + i s and goes to partition i % 2: 20 s in is i=20 -> p0@10, p1@10 (i=21)
    assert plan("2026-09-21T14:13:40+00:00") == {0: (10, ChangeStatus.PLANNED), 1: (10, ChangeStatus.PLANNED)}
    after_all = registry.set_offset("orders", "2030-01-01T00:00:00Z", dry_run=True)
    assert {c.offset for c in after_all} == {50} and all("end" in c.message for c in after_all)
    with pytest.raises(StreamError, match=f"{topic}:0"):
        registry.set_offset("orders", "+5")          # no committed offset to shift from
    registry.set_offset("orders", 20)                 # stopped: pending, applied at next start
    with pytest.raises(StreamError, match="committed"):
        registry.set_offset("orders", "committed", dry_run=True)
    assert registry.history("orders") == []


def test_shift_and_committed_after_consumption(kafka, registry, memory_sinks):
    _stream(kafka, registry, partitions=2, messages=100)
    registry.start("orders")
    wait_until(lambda: len(memory_sinks["orders"].delivered()) >= 100)
    registry.stop("orders")
    assert {c.offset for c in registry.set_offset("orders", "-10", dry_run=True)} == {40}
    assert {c.offset for c in registry.set_offset("orders", "+10", dry_run=True)} == {50}
    assert {c.offset for c in registry.set_offset("orders", "committed", dry_run=True)} == {50}


def test_bad_specs_raise_naming_the_value_and_change_nothing(kafka, registry, memory_sinks):
    topic = _stream(kafka, registry, partitions=2, messages=20)
    registry.start("orders")
    wait_until(lambda: len(memory_sinks["orders"].delivered()) >= 20)
    # the batch written is also committed and its positions known: what "nothing changed" is compared with
    wait_until(lambda: all(p.committed_offset == 10 and p.position == 10 for p in registry.describe("orders")))
    before = registry.describe("orders")
    for bad, shown in [(1.5, "1.5"), (-3, "-3"), ("garbage", "garbage"), ({"nope:0": 1}, "nope"),
                       ({f"{topic}:7": 1}, f"{topic}:7"), (None, "None")]:
        with pytest.raises(StreamError) as info:
            registry.set_offset("orders", bad)
        assert shown in str(info.value)
    with pytest.raises(StreamError, match="'ghost'"):
        registry.set_offset("ghost", 1)
    with pytest.raises(StreamError, match="timeout"):
        registry.set_offset("orders", 1, timeout=0)
    assert registry.describe("orders") == before
    assert registry.history("orders") == []


def test_concurrent_calls_last_wins_and_none_is_half_applied(kafka, registry, memory_sinks):
    _stream(kafka, registry, partitions=3, messages=300)
    registry.start("orders")
    wait_until(lambda: len(memory_sinks["orders"].delivered()) >= 300)
    results, errors = {}, []

    def call(value):
        try:
            results[value] = registry.set_offset("orders", value, timeout=10)
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=call, args=(v,)) for v in (10, 20, 30, 40, 50)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    for value, changes in results.items():
        assert {(c.offset, c.status) for c in changes} == {(value, ChangeStatus.APPLIED)}
    history = registry.history("orders")              # newest first: the last applied call
    last = history[0].offset
    assert {h.offset for h in history[:3]} == {last}
    wait_until(lambda: {r.committed_offset for r in registry.describe("orders")} == {100})
    committed_marks = [h.offset for h in history]
    assert len(committed_marks) == 15


def test_commit_errors_and_a_broker_down_during_the_call(kafka, embedded_kafka, registry, memory_sinks):
    _stream(kafka, registry, partitions=3, messages=300)
    registry.start("orders")
    wait_until(lambda: len(memory_sinks["orders"].delivered()) >= 300)
    embedded_kafka.push_request_errors("OffsetCommit", KafkaError.REBALANCE_IN_PROGRESS,
                                       KafkaError.NOT_COORDINATOR, KafkaError.COORDINATOR_LOAD_IN_PROGRESS)
    changes = registry.set_offset("orders", 50, timeout=10)
    assert {(c.offset, c.status) for c in changes} == {(50, ChangeStatus.APPLIED)}
    wait_until(lambda: {r.committed_offset for r in registry.describe("orders")} == {100}, timeout=20)

    def outage():
        embedded_kafka.broker_down(2)
        time.sleep(1.5)
        embedded_kafka.broker_up(2)

    broker = threading.Thread(target=outage)
    broker.start()
    try:
        changes = registry.set_offset("orders", 90, timeout=20)
    finally:
        broker.join()
    assert {(c.offset, c.status) for c in changes} == {(90, ChangeStatus.APPLIED)}
    wait_until(lambda: len(memory_sinks["orders"].delivered()) >= 300 + 150 + 30, timeout=30)


def test_a_failed_batch_commit_is_retried_when_nothing_more_comes(own_kafka, registry, memory_sinks):
    """The last batch's commit fails (a non-retriable OffsetCommit error, as a rebalance or an outage can leave
    it) and nothing more arrives to carry it: the stream commits it again between batches, so the group's offset
    does not stay behind what the stream wrote (its lag 0, a restart resuming after it)."""
    kafka, embedded_kafka = own_kafka, own_kafka.embedded   # every OffsetCommit of its cluster is this test's
    topic = _stream(kafka, registry, partitions=1, messages=10)
    registry.start("orders")
    wait_until(lambda: {r.committed_offset for r in registry.describe("orders")} == {10}, timeout=30)
    embedded_kafka.push_request_errors("OffsetCommit", *[KafkaError.OFFSET_METADATA_TOO_LARGE] * 2)
    kafka.produce(topic, 5, partitions=1)
    wait_until(lambda: len(memory_sinks["orders"].delivered()) >= 15, timeout=30)
    wait_until(lambda: {r.committed_offset for r in registry.describe("orders")} == {15}, timeout=15,
               what="the failed commit retried with nothing more to read")


def test_describe_running_and_stopped(kafka, registry, memory_sinks):
    topic = _stream(kafka, registry, partitions=3, messages=30)
    rows = registry.describe("orders")
    assert [(r.partition, r.committed_offset, r.log_end_offset, r.lag, r.assigned) for r in rows] == \
        [(p, None, 10, None, False) for p in range(3)]
    registry.start("orders")
    wait_until(lambda: len(memory_sinks["orders"].delivered()) >= 30)
    wait_until(lambda: all(r.committed_offset == 10 for r in registry.describe("orders")))
    rows = registry.describe("orders")
    assert all(r.assigned and r.lag == 0 and r.position == 10 and r.log_start_offset == 0 for r in rows)
    registry.stop("orders")
    kafka.produce(topic, 3, partitions=3)
    assert [(r.lag, r.assigned) for r in registry.describe("orders")] == [(1, False)] * 3


def test_partitions_another_member_holds_get_the_offset_when_reassigned(kafka, registry, memory_sinks):
    """A second member joins the stream's group and takes partitions (eager rebalance: the stream's are
    revoked and reassigned); set_offset then applies to the stream's partitions at once and keeps the
    others pending; when the intruder's session ends they are assigned to the stream and start there."""
    from confluent_kafka import Consumer

    topic = _stream(kafka, registry, partitions=4, messages=400, configs={"partition.assignment.strategy": "range"})
    group = registry.get("orders").consumer_group
    registry.start("orders")
    sink = memory_sinks["orders"]
    wait_until(lambda: len(sink.delivered()) >= 400)
    intruder = Consumer({"bootstrap.servers": kafka.bootstrap_servers, "group.id": group,
                         "partition.assignment.strategy": "range", "enable.auto.commit": False,
                         **FAST_REJOIN})
    held = []
    intruder.subscribe([topic], on_assign=lambda c, parts: held.extend(p.partition for p in parts))
    wait_until(lambda: intruder.poll(0.1) is None and held, timeout=30, what="the intruder's assignment")
    wait_until(lambda: {r.partition for r in registry.describe("orders") if r.assigned}
               == set(range(4)) - set(held), timeout=30, what="the stream to hold the rest")
    seen = len(sink.delivered())
    changes = registry.set_offset("orders", 10, timeout=1)
    status = {c.partition: c.status for c in changes}
    assert {p for p, s in status.items() if s == ChangeStatus.PENDING} == set(held), changes
    assert {p for p, s in status.items() if s == ChangeStatus.APPLIED} == set(range(4)) - set(held)
    intruder.close()   # the embedded cluster expires its session (6 s) instead of acting on LeaveGroup
    wait_until(lambda: set(by_partition(sink.delivered()[seen:])) == {(topic, p) for p in range(4)} and
               all(len(o) >= 90 for o in by_partition(sink.delivered()[seen:]).values()), timeout=40,
               what="every partition redelivered from 10")
    assert _first_offsets(sink.delivered()[seen:]) == {(topic, p): 10 for p in range(4)}
    assert sorted((h.partition, h.offset) for h in registry.history("orders")) == [(p, 10) for p in range(4)]



@pytest.mark.parametrize("api", ["ListOffsets", "OffsetFetch"])
def test_a_request_a_broker_never_answers_is_asked_again_within_the_call(api, own_kafka, registry, memory_sinks):
    """A broker that swallows one request (CI: a broker went down while the host's log-end question was in flight,
    and no answer came for the whole 20 s call): the call asks again, and is applied in its time. ListOffsets goes
    to the partitions' leader; OffsetFetch to the group's coordinator, which, asked again on the same connection,
    answers behind the swallowed request, so the host asks with a new client."""
    kafka, embedded_kafka = own_kafka, own_kafka.embedded
    topic = _stream(kafka, registry, partitions=3, messages=30)
    for partition in range(3):
        embedded_kafka.set_partition_leader(topic, partition, 1)
    embedded_kafka.set_group_coordinator(registry.get("orders").consumer_group, 1)
    registry.start("orders")
    wait_until(lambda: len(memory_sinks["orders"].delivered()) >= 30)
    embedded_kafka.delay_responses(1, api, 120_000)   # broker 1's next answer to `api`: never in time
    changes = registry.set_offset("orders", 5, timeout=20)
    assert {(c.offset, c.status) for c in changes} == {(5, ChangeStatus.APPLIED)}
