"""Stop, close and the state store under failure (issue 10, defects 4, 5 and 7).

Each test names the defect it pins; each fails on the code before its fix.
"""
from __future__ import annotations

import sqlite3
import time
from functools import partial

import pytest
from broker_support import SASL_HANDSHAKE, skip_rest_on_tansu
from configs import stream_config
from stream_helpers import SLOW_S, wait_until

from stream_registry import StreamConfig, StreamError, StreamRegistry, StreamStatus
from stream_registry.errors import StreamStateError
from stream_registry.registry.state.state_store import STATE_FILE, PlannedRow, StateStore

FAST_GROUP = {"session.timeout.ms": 6000, "heartbeat.interval.ms": 200}


_config = partial(stream_config, sink="memory://out", batch_interval_ms=20, configs=FAST_GROUP)


@pytest.fixture
def slow_transformation():
    yield SLOW_S
    SLOW_S["per_batch"] = 0.0


def test_a_stop_that_times_out_keeps_the_sink_and_refuses_a_second_consumer(kafka, tmp_path, memory_sinks,
                                                                            slow_transformation):
    """Defect 4: the sink is not closed under a thread still writing, and no second consumer starts."""
    topic = kafka.new_topic(partitions=1)
    registry = StreamRegistry(tmp_path / "state", stop_timeout=0.5)
    try:
        registry.create(_config(kafka, topic))
        registry.start("orders")
        wait_until(lambda: registry.get("orders").status == StreamStatus.RUNNING, 30, what="running")
        slow_transformation["per_batch"] = 3.0
        kafka.produce(topic, 5, partitions=1)
        time.sleep(0.5)  # the batch is in the (slow) transformation now
        with pytest.raises(StreamStateError, match="did not stop within 0.5 s; it is still finishing its batch"):
            registry.stop("orders")
        with pytest.raises(StreamStateError, match="still stopping"):
            registry.start("orders")
        slow_transformation["per_batch"] = 0.0
        wait_until(lambda: len(memory_sinks["out"].delivered()) == 5, 10, what="the batch written to the open sink")
        assert registry.stop("orders").status == StreamStatus.STOPPED
    finally:
        registry.close()


def test_close_stops_every_stream_even_when_one_does_not_stop_in_time(kafka, tmp_path, memory_sinks,
                                                                      slow_transformation):
    """Defect 4: close() does not give up at the first failing stream."""
    topic = kafka.new_topic(partitions=1)
    other = kafka.new_topic(partitions=1)
    registry = StreamRegistry(tmp_path / "state", stop_timeout=0.5)
    registry.create(_config(kafka, topic, name="slow", sink="memory://slow"))
    registry.create(_config(kafka, other, name="fine", sink="memory://fine"))
    registry.start("slow")
    registry.start("fine")
    wait_until(lambda: {s.status for s in registry.list()} == {StreamStatus.RUNNING}, 30, what="both running")
    workers = {name: registry._streams[name].runner for name in ("slow", "fine")}
    slow_transformation["per_batch"] = 2.0
    kafka.produce(topic, 3, partitions=1)
    time.sleep(0.5)
    registry.close()
    assert not workers["fine"].alive, "the stream after the one that failed to stop was stopped too"
    slow_transformation["per_batch"] = 0.0
    wait_until(lambda: not workers["slow"].alive, 10, what="the slow stream to finish")


def test_a_busy_state_store_raises_a_stream_error_not_sqlite(tmp_path):
    """Defect 5: a BEGIN that times out leaves no transaction; ROLLBACK must not raise OperationalError."""
    store = StateStore(tmp_path)
    store._db.execute("PRAGMA busy_timeout = 100")
    blocker = sqlite3.connect(tmp_path / STATE_FILE, isolation_level=None)
    blocker.execute("BEGIN EXCLUSIVE")
    try:
        with pytest.raises(StreamError, match="state: cannot write .*database is locked"):
            store.add_change("orders", [PlannedRow("t", 0, 5, None, False, "")], supersede=True)
    finally:
        blocker.execute("ROLLBACK")
        blocker.close()
    store.add_change("orders", [PlannedRow("t", 0, 5, None, False, "")], supersede=True)
    assert store.pending("orders") == {("t", 0): 5}
    store.close()


def test_a_failing_state_store_never_stops_a_stream(kafka, tmp_path, memory_sinks, monkeypatch):
    """Defect 5: an audit write failing inside the assign callback is reported and retried, not fatal."""
    topic = kafka.new_topic(partitions=2)
    kafka.produce(topic, 10, partitions=2)
    registry = StreamRegistry(tmp_path / "state")
    try:
        registry.create(_config(kafka, topic))
        registry.set_offset("orders", 3)  # pending: applied (and recorded) in the assign callback
        store = registry._store
        real = store.record_applied
        failures = {"left": 3}

        def flaky(*args, **kwargs):
            if failures["left"]:
                failures["left"] -= 1
                raise StreamError(f"state: cannot write {store.path}: database is locked")
            return real(*args, **kwargs)
        monkeypatch.setattr(store, "record_applied", flaky)
        registry.start("orders")
        wait_until(lambda: len(memory_sinks["out"].delivered()) == 4, 30, what="delivery from offset 3")
        assert sorted((p, o) for _, p, o in memory_sinks["out"].delivered()) == [(0, 3), (0, 4), (1, 3), (1, 4)]
        info = registry.get("orders")
        assert info.status == StreamStatus.RUNNING
        assert "offset history kept in memory" in (info.error or ""), info.error
        history = wait_until(lambda: registry.history("orders"), 10, what="the retried history write")
        assert sorted((h.partition, h.offset) for h in history) == [(0, 3), (1, 3)]
        assert registry.get("orders").error is None
    finally:
        registry.close()


def test_an_outage_shows_in_the_status_within_seconds_and_clears_by_itself(kafka, embedded_kafka, tmp_path,
                                                                          memory_sinks):
    """Defect 3: all brokers unreachable is visible (with since when), and clears when they are back."""
    topic = kafka.new_topic(partitions=1)
    registry = StreamRegistry(tmp_path / "state")
    brokers = (1, 2, 3)
    try:
        registry.create(_config(kafka, topic))
        registry.start("orders")
        wait_until(lambda: registry.get("orders").status == StreamStatus.RUNNING, 30, what="running")
        assert registry.get("orders").error is None
        for broker in brokers:
            embedded_kafka.broker_down(broker)
        try:
            error = wait_until(lambda: registry.get("orders").error, 15, what="the outage in the status")
            assert error.startswith("all brokers down since 20"), error
        finally:
            for broker in brokers:
                embedded_kafka.broker_up(broker)
        wait_until(lambda: registry.get("orders").error is None, 20, what="the outage to clear")
        kafka.produce(topic, 3, partitions=1)
        wait_until(lambda: len(memory_sinks["out"].delivered()) == 3, 30, what="delivery after the outage")
    finally:
        registry.close()


def test_a_failing_sasl_login_shows_in_the_status(kafka, tmp_path, memory_sinks):
    """Defect 3: an authentication failure is named in the status (the embedded brokers speak no SASL:
    librdkafka reports _AUTHENTICATION, as with a real cluster and a wrong mechanism or password)."""
    topic = kafka.new_topic(partitions=1)
    if kafka.embedded is None:
        skip_rest_on_tansu(SASL_HANDSHAKE)
        pytest.skip("a real cluster may accept SASL_PLAINTEXT")
    registry = StreamRegistry(tmp_path / "state", query_timeout=2)
    try:
        registry.create(_config(kafka, topic))
        stream = registry._streams["orders"]
        stream.config = StreamConfig(**{**stream.config.__dict__, "configs": {
            **FAST_GROUP, "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN"},
            "credentials": {"sasl.username": "u", "sasl.password": "hunter2"}})
        registry.start("orders")
        error = wait_until(lambda: registry.get("orders").error, 15, what="the login failure in the status")
        assert error.startswith("SASL authentication failed: "), error
        assert "hunter2" not in error
    finally:
        registry.close()


def test_offsets_of_many_partitions_are_asked_in_batches(kafka, tmp_path, monkeypatch, memory_sinks):
    """Defect 8: watermarks come from two batched ListOffsets (earliest, latest), not one request per
    partition, so describe and set_offset cost the same for 200 partitions as for 2."""
    from confluent_kafka.admin import AdminClient

    topic = kafka.new_topic(partitions=200)
    kafka.produce(topic, 400, partitions=200)
    calls = []
    real = AdminClient.list_offsets

    def counting(self, requests, **kwargs):
        calls.append(len(requests))
        return real(self, requests, **kwargs)
    monkeypatch.setattr(AdminClient, "list_offsets", counting)
    registry = StreamRegistry(tmp_path / "state")
    try:
        registry.create(_config(kafka, topic))
        rows = registry.describe("orders")
        assert [(r.log_start_offset, r.log_end_offset) for r in rows] == [(0, 2)] * 200
        assert calls == [200, 200], "one request per offset kind, for all partitions at once"
        changes = registry.set_offset("orders", -1, dry_run=True)
        assert len(changes) == 200 and calls[2:] == [200, 200]
        with pytest.raises(StreamError) as refused:
            registry.set_offset("orders", "-1")
        assert str(refused.value).count("cannot shift by -1") == 1, "one reason, once, for 200 partitions"
        assert f"{topic}:0..199 (200 partitions)" in str(refused.value)
    finally:
        registry.close()


def test_set_offset_ends_within_its_own_timeout_when_brokers_are_down(kafka, embedded_kafka, tmp_path,
                                                                      memory_sinks):
    """Defect 8: the cluster queries of set_offset are bounded by the caller's timeout, not 10 s each."""
    topic = kafka.new_topic(partitions=2)
    registry = StreamRegistry(tmp_path / "state")
    try:
        registry.create(_config(kafka, topic))
        registry.describe("orders")  # metadata cached; the query client is connected
        for broker in (1, 2, 3):
            embedded_kafka.broker_down(broker)
        try:
            started = time.monotonic()
            with pytest.raises(StreamError):
                registry.set_offset("orders", 1, timeout=1.5)
            assert time.monotonic() - started < 4, "bounded by the caller's timeout"
            assert registry.history("orders") == []
        finally:
            for broker in (1, 2, 3):
                embedded_kafka.broker_up(broker)
    finally:
        registry.close()


def test_a_clamped_pending_change_stays_clamped_when_applied_after_a_restart(kafka, tmp_path, memory_sinks):
    """Defect 7: the `clamped` of a pending change is stored with it, not kept in memory only."""
    topic = kafka.new_topic(partitions=2)
    kafka.produce(topic, 10, partitions=2)
    registry = StreamRegistry(tmp_path / "state")
    registry.create(_config(kafka, topic))
    changes = registry.set_offset("orders", {f"{topic}:0": 1_000_000, f"{topic}:1": 2})
    assert sorted((c.partition, c.offset, c.status.value) for c in changes) == [(0, 5, "pending"), (1, 2, "pending")]
    registry.close()
    registry = StreamRegistry(tmp_path / "state")
    try:
        registry.start("orders")
        history = wait_until(lambda: len(registry.history("orders")) == 2 and registry.history("orders"), 30,
                             what="both pending changes applied")
        assert sorted((h.partition, h.offset, h.status.value) for h in history) == \
            [(0, 5, "clamped"), (1, 2, "applied")]
    finally:
        registry.close()


def _leader(kafka, topic, partition):
    from confluent_kafka.admin import AdminClient
    metadata = AdminClient({"bootstrap.servers": kafka.bootstrap_servers}).list_topics(topic, timeout=10)
    return metadata.topics[topic].partitions[partition].leader


def test_a_partition_without_a_leader_refuses_the_change_instead_of_using_offset_minus_1001(
        kafka, embedded_kafka, tmp_path, memory_sinks):
    """Found by the soak: with a partition's leader down, ListOffsets answered OFFSET_INVALID (-1001) and
    set_offset applied it. Now the call is refused (naming the partition), within its timeout."""
    topic = kafka.new_topic(partitions=2)
    kafka.produce(topic, 20, partitions=2)
    registry = StreamRegistry(tmp_path / "state")
    try:
        registry.create(_config(kafka, topic))
        registry.describe("orders")
        leader = _leader(kafka, topic, 1)
        embedded_kafka.broker_down(leader)
        try:
            started = time.monotonic()
            # ListOffsets either answers OFFSET_INVALID for the leaderless partition or, on a loaded machine, does not
            # answer within the 2 s: both refuse, naming the partition (:1, or :0 led by the same broker)
            with pytest.raises(StreamError, match=f"(no leader answered|no answer) for {topic}:[01]\\b"):
                registry.set_offset("orders", "earliest", timeout=2)
            assert time.monotonic() - started < 4
        finally:
            embedded_kafka.broker_up(leader)
        assert registry.history("orders") == []
        def accepted() -> bool:   # refused (naming the partition) until the clients see the leader again
            try:
                return {c.status.value for c in registry.set_offset("orders", 3)} == {"pending"}
            except StreamError:
                return False
        wait_until(accepted, 30, what="the change once the leader is back")
    finally:
        registry.close()


def test_offsets_are_read_again_after_the_leader_is_re_elected(kafka, embedded_kafka, tmp_path, memory_sinks):
    """Found by the soak: after the same leader was re-elected (a new leader epoch) the cached admin client
    kept failing with FENCED_LEADER_EPOCH; it is replaced on that error."""
    topic = kafka.new_topic(partitions=2)
    kafka.produce(topic, 10, partitions=2)
    registry = StreamRegistry(tmp_path / "state")
    try:
        registry.create(_config(kafka, topic))
        assert [r.log_end_offset for r in registry.describe("orders")] == [5, 5]
        embedded_kafka.set_partition_leader(topic, 1, _leader(kafka, topic, 1))
        assert [r.log_end_offset for r in registry.describe("orders")] == [5, 5]
        kafka.produce(topic, 2, partitions=2)
        assert [r.log_end_offset for r in registry.describe("orders")] == [6, 6]
    finally:
        registry.close()
