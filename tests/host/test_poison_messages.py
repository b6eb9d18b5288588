"""Poison messages with errors.tolerance 'all': found by bisection, dead-lettered or skipped; the stream runs on.

The bisection is checked as plain Python (every good message once, in order,
exactly the bad ones set aside, O(log n) re-runs, transient errors resumed
without rewriting); the rest on the embedded cluster, and through a real host
where the stream runs in its own process.
"""
from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time
import uuid
from contextlib import contextmanager
from functools import partial

import httpx
import pytest
from broker_support import QUICK_FIRST_JOIN
from configs import stream_config
from confluent_kafka import Consumer, Producer
from host_helpers import HostProcess
from hypothesis import given, settings
from hypothesis import strategies as st
from mgclient_standin.mgclient import Server
from stream_helpers import FAST_REJOIN, RecordingSink, RejectingSink, by_partition, delivered_from_file, wait_until

from stream_registry import StreamConfig, StreamRegistry, StreamStatus
from stream_registry.errors import SinkError, StoredOffsetsConflict, TransformError
from stream_registry.graph.sinks import BoltSink
from stream_registry.graph.transform import Statement
from stream_registry.model import ChangeStatus, RetryPolicy
from stream_registry.registry.stream.poison import BatchDelivery, may_be_poison

CONNECT_HEADERS = ("__connect.errors.topic", "__connect.errors.partition", "__connect.errors.offset",
                   "__connect.errors.exception.class.name", "__connect.errors.exception.message",
                   "__connect.errors.exception.stacktrace", "mgstreams.stream")
TOPIC_AUTHORIZATION_FAILED = 29


pytestmark = pytest.mark.usefixtures("quick_rebalance")   # see conftest


# -- the bisection, as plain Python -----------------------------------------------------------
def _deliver(n: int, poison: set[int], transient_calls: set[int] = frozenset()):
    written, aside, calls = [], [], [0]

    def write(chunk):
        calls[0] += 1
        if calls[0] in transient_calls:
            raise ConnectionError("connection lost")   # never a message's fault
        if poison.intersection(chunk):
            raise ValueError("bad message")
        written.extend(chunk)

    delivery = BatchDelivery(list(range(n)), write, lambda item, error: aside.append(item), tolerate=True)
    while True:
        try:
            delivery.run()
            return written, aside, delivery
        except ConnectionError:
            continue   # the batch's retry: continues where it stopped


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_bisection_writes_every_good_message_once_in_order_and_sets_aside_exactly_the_bad_ones(data):
    n = data.draw(st.integers(1, 200), label="n")
    poison = data.draw(st.sets(st.integers(0, n - 1), max_size=8), label="poison")
    transient = data.draw(st.sets(st.integers(1, 40), max_size=5), label="transient write calls")
    written, aside, _ = _deliver(n, poison, transient)
    assert written == [i for i in range(n) if i not in poison]
    assert aside == sorted(poison)


def test_one_poison_message_in_ten_thousand_costs_a_logarithmic_number_of_re_runs():
    for position in (0, 4_321, 9_999):
        written, aside, delivery = _deliver(10_000, {position})
        assert aside == [position] and len(written) == 9_999
        assert delivery.writes <= 2 * math.ceil(math.log2(10_000)) + 1, delivery.writes


def test_without_tolerance_the_first_failure_is_raised_and_nothing_is_set_aside():
    aside = []
    delivery = BatchDelivery([1, 2, 3], lambda chunk: (_ for _ in ()).throw(ValueError("bad")),
                             lambda item, error: aside.append(item), tolerate=False)
    with pytest.raises(ValueError):
        delivery.run()
    assert aside == [] and delivery.done == 0


def _bolt_failure(raised: Exception) -> SinkError:
    """What the Bolt sink raises when its connection raises `raised` on every attempt."""
    server = Server(rtt_ms=0)
    server.failures = [raised] * 3      # every attempt (the sink tries twice)
    sink = BoltSink("memgraph", connect=server.connect, retries=2, sleep=lambda s: None)
    with pytest.raises(SinkError) as failed:
        sink.write([Statement("CREATE (:X)")])
    return failed.value


def test_only_errors_the_messages_may_have_caused_start_a_bisection():
    """By the error's type, never its text: the neo4j driver raises a server error (Neo4jError) for a query the
    server refuses, TransientError for a conflict, ServiceUnavailable when it cannot connect or the connection is
    lost, SessionExpired on a lost session (the stand-in's DB-API names are those classes)."""
    from mgclient_standin import mgclient

    assert may_be_poison(_bolt_failure(mgclient.DatabaseError(
        "Unable to commit due to unique constraint violation on :Msg(offset)")))
    assert may_be_poison(_bolt_failure(mgclient.DatabaseError("Invalid types: string and int for '+'.")))
    assert may_be_poison(_bolt_failure(mgclient.DatabaseError("socket_id: connection timed out, retry")))
    assert not may_be_poison(_bolt_failure(mgclient.TransientError("Cannot resolve conflicting transactions")))
    assert not may_be_poison(_bolt_failure(mgclient.OperationalError("couldn't connect to host")))
    assert not may_be_poison(_bolt_failure(mgclient.InterfaceError("bad session")))
    assert not may_be_poison(SinkError("sink cypherl:///x: writing a batch of 3 statements failed: "
                                       "[Errno 28] No space left on device", transient=True))   # the disk
    assert not may_be_poison(SinkError("sink bolt+s://h: the server's certificate is not trusted"))
    assert not may_be_poison(StoredOffsetsConflict("stored offsets differ", stored={("t", 0): 5}))
    assert may_be_poison(TransformError("transform 'm.f' failed on the batch starting at t:0 offset 5: "
                                        "ValueError: not JSON"))
    assert not may_be_poison(ConnectionResetError("connection reset by peer"))
    assert not may_be_poison(TimeoutError("timed out"))


def test_the_words_in_an_error_decide_nothing():
    """Issue 21: on a topic named websocket_events_*, or with a payload key 'socket_id', the old text match
    ("socket", "serializ", "timed out") made every failure transient: retried, never set aside."""
    from confluent_kafka.serialization import SerializationError

    words = "websocket_events_1 socket serialization timed out connection reset broken pipe retry this transaction"
    for cause in (SerializationError(f"Unknown magic byte ({words})"), KeyError("socket_id"), ValueError(words)):
        wrapped = TransformError(f"transform 'm.f' failed on the batch starting at websocket_events_1:0 offset 3: "
                                 f"{type(cause).__name__}: {cause}")
        wrapped.__cause__ = cause
        assert may_be_poison(wrapped), cause
    assert not may_be_poison(SinkError(f"sink: {words}", transient=True))
    assert not may_be_poison(SinkError(f"sink: {words}"))          # neither transient nor refused: the sink's
    assert may_be_poison(SinkError(f"sink: {words}", rejected=True))


# -- on the embedded cluster ----------------------------------------------------------------------
def _produce(kafka, topic: str, count: int, partitions: int, poison: set[int]) -> None:
    """Message i goes to partition i % partitions (offset i // partitions), with a key and a header."""
    producer = Producer({"bootstrap.servers": kafka.bootstrap_servers})
    for i in range(count):
        value = f"poison-{i}" if i in poison else f'{{"i": {i}}}'
        producer.produce(topic, value=value.encode(), key=f"k-{i}".encode(), partition=i % partitions,
                         headers=[("trace", f"t-{i}".encode())], timestamp=1_700_000_000_000 + i)
    assert producer.flush(30) == 0


def _read_topic(kafka, topic: str, count: int, timeout: float = 30) -> list:
    consumer = Consumer({"bootstrap.servers": kafka.bootstrap_servers, "group.id": f"read_{uuid.uuid4().hex}",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False, **QUICK_FIRST_JOIN})
    consumer.subscribe([topic])
    out, deadline = [], time.monotonic() + timeout
    try:
        while len(out) < count and time.monotonic() < deadline:
            out += [m for m in consumer.consume(count, 0.5) if m.error() is None]
        time.sleep(0.3)   # and nothing more arrives
        out += [m for m in consumer.consume(10, 0.3) if m.error() is None]
    finally:
        consumer.close()
    return out


_config = partial(stream_config, transform="stream_helpers.poison_transform", batch_size=50, batch_interval_ms=20)


@contextmanager
def _committed_through(kafka, tmp_path, config: StreamConfig, offset: int, attempts: int = 2):
    """A registry running `config` (its batches retried `attempts` times), once every partition committed `offset`."""
    registry = StreamRegistry(tmp_path / "state", retry=RetryPolicy(attempts=attempts, first_backoff_s=0.05))
    try:
        registry.create(config)
        registry.start(config.name)
        wait_until(lambda: {r.committed_offset for r in registry.describe(config.name)} == {offset}, 60,
                   what="the whole topic committed")
        yield registry
    finally:
        registry.close()


def _expected(topic: str, count: int, partitions: int, skip: set[int]) -> dict:
    return by_partition((topic, i % partitions, i // partitions) for i in range(count) if i not in skip)


def test_messages_the_transformation_rejects_go_to_the_dead_letter_topic_with_connect_headers(
        kafka, tmp_path, memory_sinks):
    topic, dlq = kafka.new_topic(partitions=3), f"dlq_{uuid.uuid4().hex[:10]}"
    poison = {7, 40, 41, 88}
    _produce(kafka, topic, 90, 3, poison)
    registry = StreamRegistry(tmp_path / "state")
    try:
        registry.create(_config(kafka, topic, "memory://p", errors_tolerance="all", dead_letter_topic=dlq))
        registry.start("orders")
        sink = memory_sinks["p"]
        wait_until(lambda: len(sink.delivered()) >= 86, 60, what="every good message")
        wait_until(lambda: {r.committed_offset for r in registry.describe("orders")} == {30}, 30,
                   what="the whole topic committed")
        assert by_partition(sink.delivered()) == _expected(topic, 90, 3, poison)   # once each, in order
        info = registry.get("orders")
        assert info.status == StreamStatus.RUNNING and info.dead_lettered == 4 and info.skipped == 0
        rows = [h for h in registry.history("orders") if h.status == ChangeStatus.DEAD_LETTERED]
        assert sorted((h.partition, h.offset) for h in rows) == sorted((i % 3, i // 3) for i in poison)
        assert all("ValueError" in h.message and "cannot read" in h.message for h in rows)
    finally:
        registry.close()

    dead = _read_topic(kafka, dlq, 4)
    assert sorted(m.value() for m in dead) == sorted(f"poison-{i}".encode() for i in poison)
    for m in dead:
        i = int(m.value().decode().split("-")[1])
        headers = dict(m.headers())
        assert m.key() == f"k-{i}".encode() and m.timestamp()[1] == 1_700_000_000_000 + i
        assert headers["trace"] == f"t-{i}".encode()   # the original headers are kept
        assert set(CONNECT_HEADERS) <= set(headers)
        assert headers["__connect.errors.topic"] == topic.encode()
        assert (headers["__connect.errors.partition"], headers["__connect.errors.offset"]) == \
            (str(i % 3).encode(), str(i // 3).encode())
        assert headers["__connect.errors.exception.class.name"] == b"ValueError"
        assert b"cannot read" in headers["__connect.errors.exception.message"]
        assert b"poison_transform" in headers["__connect.errors.exception.stacktrace"]
        assert headers["mgstreams.stream"] == b"orders"


def test_typed_poison_on_a_websocket_topic_is_dead_lettered_and_the_stream_runs_on(kafka, tmp_path, memory_sinks):
    """Issue 21, reproduction 4: the topic's name holds "socket", the errors hold "magic byte" and 'socket_id'.
    Classified by type, the SerializationError and the KeyError are the messages' fault: dead-lettered with
    Connect's headers, every other message written once, the stream running."""
    topic, dlq = kafka.new_topic(partitions=2, prefix="websocket_events"), f"dlq_{uuid.uuid4().hex[:10]}"
    producer = Producer({"bootstrap.servers": kafka.bootstrap_servers})
    bad = {5: b"\x00\x00\x00\x00\x07avro-bytes", 12: b'{"user": "no socket here"}'}
    for i in range(30):
        producer.produce(topic, value=bad.get(i, json.dumps({"socket_id": f"s-{i}"}).encode()),
                         key=f"k-{i}".encode(), partition=i % 2)
    assert producer.flush(30) == 0
    memory_sinks["w"] = sink = RecordingSink()
    with _committed_through(kafka, tmp_path, _config(kafka, topic, "memory://w", errors_tolerance="all",
                                                     dead_letter_topic=dlq,
                                                     transform="stream_helpers.websocket_transform"), 15) as registry:
        assert by_partition(sink.delivered()) == _expected(topic, 30, 2, set(bad))
        info = registry.get("orders")
        assert info.status == StreamStatus.RUNNING and info.dead_lettered == 2, (info.status, info.error)
    dead = {m.value(): dict(m.headers()) for m in _read_topic(kafka, dlq, 2)}
    assert set(dead) == set(bad.values())
    for i, value in bad.items():
        headers = dead[value]
        assert set(CONNECT_HEADERS) <= set(headers)
        assert (headers["__connect.errors.topic"], headers["__connect.errors.partition"],
                headers["__connect.errors.offset"]) == (topic.encode(), str(i % 2).encode(), str(i // 2).encode())
    assert dead[bad[5]]["__connect.errors.exception.class.name"] == \
        b"confluent_kafka.serialization.SerializationError"
    assert b"Unknown magic byte" in dead[bad[5]]["__connect.errors.exception.message"]
    assert dead[bad[12]]["__connect.errors.exception.class.name"] == b"KeyError"
    assert b"socket_id" in dead[bad[12]]["__connect.errors.exception.message"]


def test_a_statement_the_sink_rejects_skips_its_message_and_records_it_in_the_history(
        kafka, tmp_path, memory_sinks):
    topic = kafka.new_topic(partitions=2)
    kafka.produce(topic, 60, partitions=2)
    memory_sinks["r"] = sink = RejectingSink({(topic, 1, 5)})
    registry = StreamRegistry(tmp_path / "state")
    try:
        registry.create(_config(kafka, topic, "memory://r", errors_tolerance="all",
                                transform="stream_helpers.offsets_transform"))
        registry.start("orders")
        wait_until(lambda: {r.committed_offset for r in registry.describe("orders")} == {30}, 60,
                   what="the whole topic committed")
        assert by_partition(sink.delivered()) == _expected(topic, 60, 2, {11})   # partition 1, offset 5
        info = registry.get("orders")
        assert info.status == StreamStatus.RUNNING and (info.skipped, info.dead_lettered) == (1, 0)
        [row] = [h for h in registry.history("orders") if h.status == ChangeStatus.SKIPPED]
        assert (row.topic, row.partition, row.offset) == (topic, 1, 5)
        assert "unique constraint violation" in row.message and row.change_id is not None
        assert sink.rejected <= 2 * math.ceil(math.log2(50)) + 1
    finally:
        registry.close()


class LosingConnectionSink(RecordingSink):
    """Loses its connection on the first writes, as a Memgraph restarting does: transient, never poison."""

    def __init__(self, failures: int):
        super().__init__()
        self.failures = failures

    def write(self, statements):
        if self.failures:
            self.failures -= 1
            raise ConnectionResetError("connection reset by peer")
        super().write(statements)


def test_transient_sink_errors_are_retried_and_never_dead_lettered(kafka, tmp_path, memory_sinks):
    topic, dlq = kafka.new_topic(partitions=2), f"dlq_{uuid.uuid4().hex[:10]}"
    kafka.produce(topic, 40, partitions=2)
    memory_sinks["l"] = sink = LosingConnectionSink(failures=2)
    with _committed_through(kafka, tmp_path, _config(kafka, topic, "memory://l", errors_tolerance="all",
                                                     dead_letter_topic=dlq, transform="stream_helpers.offsets_transform"),
                            20, attempts=4) as registry:
        assert by_partition(sink.delivered()) == _expected(topic, 40, 2, set())
        assert registry.get("orders").dead_lettered == 0 and registry.history("orders") == []


def test_without_tolerance_a_rejected_batch_stops_the_stream_as_before(kafka, tmp_path, memory_sinks):
    topic = kafka.new_topic(partitions=1)
    kafka.produce(topic, 20)
    memory_sinks["r"] = RejectingSink({(topic, 0, 3)})
    registry = StreamRegistry(tmp_path / "state", retry=RetryPolicy(attempts=2, first_backoff_s=0.05))
    try:
        registry.create(_config(kafka, topic, "memory://r", transform="stream_helpers.offsets_transform"))
        registry.start("orders")
        wait_until(lambda: registry.get("orders").status == StreamStatus.ERROR, 30, what="error")
        assert "unique constraint violation" in registry.get("orders").error
        assert [r.committed_offset for r in registry.describe("orders")] == [None]
        assert registry.history("orders") == []
    finally:
        registry.close()


def test_a_dead_letter_topic_that_refuses_the_message_leaves_the_batch_uncommitted(
        kafka, embedded_kafka, tmp_path, memory_sinks):
    topic, dlq = kafka.new_topic(partitions=1), f"dlq_{uuid.uuid4().hex[:10]}"
    _produce(kafka, topic, 30, 1, {10})
    # Every produce is refused as a cluster without a WRITE ACL on the topic refuses it (a permanent error).
    embedded_kafka.push_request_errors("Produce", *[TOPIC_AUTHORIZATION_FAILED] * 50)
    registry = StreamRegistry(tmp_path / "state", retry=RetryPolicy(attempts=3, first_backoff_s=0.05))
    try:
        try:
            registry.create(_config(kafka, topic, "memory://d", errors_tolerance="all", dead_letter_topic=dlq))
            registry.start("orders")
            wait_until(lambda: registry.get("orders").status == StreamStatus.ERROR, 60, what="error")
        finally:
            embedded_kafka.clear_request_errors("Produce")
        error = registry.get("orders").error
        assert "dead_letter_topic" in error and dlq in error and f"{topic}:0@10" in error
        assert [r.committed_offset for r in registry.describe("orders")] == [None]   # nothing committed
        assert 10 not in [o for _, _, o in memory_sinks["d"].delivered()]
        registry.start("orders")   # the topic accepts again: nothing was lost
        wait_until(lambda: [r.committed_offset for r in registry.describe("orders")] == [30], 60,
                   what="the batch committed")
        assert set(o for _, _, o in memory_sinks["d"].delivered()) == set(range(30)) - {10}
        assert registry.get("orders").dead_lettered == 1
    finally:
        registry.close()
    assert [m.value() for m in _read_topic(kafka, dlq, 1)] == [b"poison-10"]


def test_through_the_host_the_counts_reach_the_api_and_the_file_holds_every_other_offset(kafka, tmp_path):
    """The stream runs in its own process: what it sets aside crosses the pipe to the host's history."""
    topic, dlq = kafka.new_topic(partitions=2), f"dlq_{uuid.uuid4().hex[:10]}"
    poison = {3, 50}
    _produce(kafka, topic, 80, 2, poison)
    out = tmp_path / "out.cypherl"
    host = HostProcess(tmp_path / "state").start()
    try:
        with httpx.Client(base_url=host.url, timeout=30) as api:
            api.post("/streams", json={
                "name": "orders", "topics": [topic], "bootstrap_servers": kafka.bootstrap_servers,
                "sink": f"cypherl://{out}", "transform": "stream_helpers.poison_transform",
                "consumer_group": f"g_{uuid.uuid4().hex[:10]}", "batch_size": 30, "configs": FAST_REJOIN,
                "delivery": "exactly_once", "errors.tolerance": "all",
                "errors.deadletterqueue.topic.name": dlq}).raise_for_status()
            api.put("/streams/orders/start").raise_for_status()
            wait_until(lambda: api.get("/streams/orders").json()["dead_lettered"] == 2, 60,
                       what="two messages dead-lettered")
            wait_until(lambda: len(delivered_from_file(out)) == 78, 30, what="every other message")
            stream = api.get("/streams/orders").json()
            assert stream["status"] == "running" and stream["skipped"] == 0
            history = api.get("/streams/orders/history").json()
            assert sorted((h["partition"], h["offset"]) for h in history if h["status"] == "dead_lettered") == \
                [(0, 25), (1, 1)]
            rows = {(r["partition"], r["stored_offset"]) for r in api.get("/streams/orders/offsets").json()}
            assert rows == {(0, 40), (1, 40)}   # exactly-once: the stored offsets pass the messages set aside
            metrics = api.get("/metrics").text
            assert 'mgstreams_dead_letter_records_total{stream="orders"} 2.0' in metrics
            assert 'mgstreams_skipped_records_total{stream="orders"} 0.0' in metrics
        # the operator's view: describe's caption counts them, history names each with its error
        env = {**os.environ, "MGSTREAMS_URL": host.url}
        described = subprocess.run([sys.executable, "-m", "mgstreams", "describe", "orders"], env=env,
                                   capture_output=True, text=True, timeout=60)
        assert described.returncode == 0 and "dead-lettered 2, skipped 0" in described.stdout, described
        history = subprocess.run([sys.executable, "-m", "mgstreams", "history", "orders", "--json"], env=env,
                                 capture_output=True, text=True, timeout=60)
        rows = json.loads(history.stdout)
        assert sorted(r["offset"] for r in rows if r["status"] == "dead_lettered") == [1, 25]
        assert all("cannot read" in r["message"] for r in rows if r["status"] == "dead_lettered")
    finally:
        host.stop()
    assert by_partition(delivered_from_file(out)) == _expected(topic, 80, 2, poison)
