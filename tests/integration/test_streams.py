"""Issue: registry, consumer lifecycle and live ingestion on the embedded 3-broker cluster."""
from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import textwrap

import pytest
from configs import FAST_RETRY, stream_config
from paths import ROOT, SUPPORT
from stream_helpers import FAIL_PAYLOADS, FAILING, by_partition, delivered_from_file, wait_until

from stream_registry import StreamConfig, StreamError, StreamRegistry, StreamStatus
from stream_registry.errors import StreamStateError

TRANSFORM = "stream_helpers.offsets_transform"


pytestmark = pytest.mark.usefixtures("quick_rebalance")   # see conftest


_config = stream_config


def _assert_exactly_once(delivered, topic, expected_per_partition):
    parts = by_partition(delivered)
    for partition, count in expected_per_partition.items():
        offsets = parts.get((topic, partition), [])
        assert offsets == list(range(count)), f"{topic}:{partition} got {offsets[:10]}... ({len(offsets)})"


def test_clean_run_delivers_every_offset_once_in_partition_order(kafka, registry, memory_sinks):
    topic = kafka.new_topic(partitions=3)
    kafka.produce(topic, 300, partitions=3)
    registry.create(_config(kafka, topic, batch_size=50, configs={"partition.assignment.strategy": "roundrobin"}))
    assert registry.get("orders").status == StreamStatus.CREATED
    registry.start("orders")
    sink = memory_sinks["orders"]
    wait_until(lambda: len(sink.delivered()) >= 300, what="300 messages")
    assert registry.get("orders").status == StreamStatus.RUNNING
    _assert_exactly_once(sink.delivered(), topic, {0: 100, 1: 100, 2: 100})
    registry.stop("orders")
    assert registry.get("orders").status == StreamStatus.STOPPED
    assert all(row.committed_offset == 100 and row.lag == 0 for row in registry.describe("orders"))


def test_stop_start_and_a_new_registry_resume_without_loss_or_duplicates(kafka, tmp_path, memory_sinks):
    topic = kafka.new_topic(partitions=3)
    kafka.produce(topic, 90, partitions=3)
    state = tmp_path / "state"
    reg = StreamRegistry(state, retry=FAST_RETRY)
    reg.create(_config(kafka, topic, batch_size=20))
    reg.start("orders")

    wait_until(lambda: len(memory_sinks["orders"].delivered()) >= 90)
    reg.stop("orders")
    kafka.produce(topic, 90, partitions=3)
    reg.start("orders")
    wait_until(lambda: len(memory_sinks["orders"].delivered()) >= 180)
    reg.close()  # the stream was running: a new registry restarts it
    kafka.produce(topic, 90, partitions=3)
    reg2 = StreamRegistry(state, retry=FAST_RETRY)
    try:
        assert reg2.get("orders").status in (StreamStatus.STARTING, StreamStatus.RUNNING)
        wait_until(lambda: len(memory_sinks["orders"].delivered()) >= 270)
        reg2.stop("orders")
        _assert_exactly_once(memory_sinks["orders"].delivered(), topic, {0: 90, 1: 90, 2: 90})
    finally:
        reg2.close()


def test_sink_failures_are_retried_then_error_then_resume_loses_nothing(kafka, registry, memory_sinks):
    topic = kafka.new_topic(partitions=3)
    other_topic = kafka.new_topic(partitions=1)
    kafka.produce(topic, 60, partitions=3)
    kafka.produce(other_topic, 10)
    registry.create(_config(kafka, topic, batch_size=10))
    registry.create(_config(kafka, other_topic, name="other"))
    registry.start("other")
    memory_sinks["orders"].fail_next = 2           # transient: retried, nothing lost
    registry.start("orders")
    wait_until(lambda: len(memory_sinks["orders"].delivered()) >= 60)
    _assert_exactly_once(memory_sinks["orders"].delivered(), topic, {0: 20, 1: 20, 2: 20})

    memory_sinks["orders"].fail_next = 100         # persistent: the stream goes to ERROR
    kafka.produce(topic, 30, partitions=3)
    wait_until(lambda: registry.get("orders").status == StreamStatus.ERROR, what="ERROR")
    info = {s.name: s for s in registry.list()}
    assert "injected sink failure" in info["orders"].error
    kafka.produce(other_topic, 10)                 # other streams go on
    wait_until(lambda: len(memory_sinks["other"].delivered()) >= 20)
    assert info["other"].status == StreamStatus.RUNNING

    memory_sinks["orders"].fail_next = 0
    registry.start("orders")                       # the failed batch is not skipped

    wait_until(lambda: len(memory_sinks["orders"].delivered()) >= 90)
    _assert_exactly_once(memory_sinks["orders"].delivered(), topic, {0: 30, 1: 30, 2: 30})


def _stream_in_error_on_a_poisoned_message(kafka, registry, partitions: int, count: int, poisoned: int) -> str:
    """Stream 'orders' over a new topic whose message `poisoned` the transformation rejects: started, in ERROR."""
    topic = kafka.new_topic(partitions=partitions)
    kafka.produce(topic, count, partitions=partitions, payload=lambda i: b"poison" if i == poisoned else b"ok-%d" % i)
    FAIL_PAYLOADS.add(b"poison")
    FAILING.set()
    try:
        registry.create(_config(kafka, topic, batch_size=5))
        registry.start("orders")
        wait_until(lambda: registry.get("orders").status == StreamStatus.ERROR, what="ERROR")
        assert "poisoned payload" in registry.get("orders").error
    finally:
        FAILING.clear()
    return topic


def test_transformation_failure_on_one_message_loses_nothing(kafka, registry, memory_sinks):
    topic = _stream_in_error_on_a_poisoned_message(kafka, registry, 2, 40, poisoned=17)
    assert len(memory_sinks["orders"].delivered()) < 40
    registry.start("orders")
    wait_until(lambda: len(memory_sinks["orders"].delivered()) >= 40)
    _assert_exactly_once(memory_sinks["orders"].delivered(), topic, {0: 20, 1: 20})


def test_start_right_after_error_restarts_while_the_failed_thread_is_still_ending(kafka, registry, memory_sinks,
                                                                                 monkeypatch):
    """Found on Tansu: the poll thread reports ERROR and then ends; a start() in between (a user who saw ERROR)
    was refused with "stream 'orders' is already error". Here the thread lingers 1 s after reporting ERROR."""
    import time

    from stream_registry.registry.stream.worker import StreamWorker

    fail = StreamWorker._fail
    monkeypatch.setattr(StreamWorker, "_fail", lambda self, reason: (fail(self, reason), time.sleep(1.0)))
    topic = _stream_in_error_on_a_poisoned_message(kafka, registry, 1, 10, poisoned=3)
    assert registry.start("orders").status in (StreamStatus.STARTING, StreamStatus.RUNNING)
    wait_until(lambda: len(memory_sinks["orders"].delivered()) >= 10)
    _assert_exactly_once(memory_sinks["orders"].delivered(), topic, {0: 10})


@pytest.mark.parametrize("commit_interval_ms", [0, 60_000])
def test_sigkill_mid_run_loses_nothing(kafka, tmp_path, commit_interval_ms):
    """At least once: a SIGKILL loses nothing. With each batch committed (commit.interval.ms 0) it re-delivers at
    most the one batch whose commit had not been made; with commit.interval.ms N (500 by default) the batches of up
    to N ms (exactly-once-delivery.md)."""
    topic = kafka.new_topic(partitions=3)
    kafka.produce(topic, 3000, partitions=3)
    out = tmp_path / "out.cypherl"
    state = tmp_path / "state"
    reg = StreamRegistry(state)
    reg.create(_config(kafka, topic, sink=f"cypherl://{out}", batch_size=50, commit_interval_ms=commit_interval_ms))
    reg.close()
    script = textwrap.dedent(f"""
        import time, stream_helpers
        from stream_registry import StreamRegistry
        stream_helpers.SLOW_S["per_batch"] = 0.02
        reg = StreamRegistry({str(state)!r})
        reg.start("orders")
        time.sleep(600)
    """)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SUPPORT), os.getcwd()])}
    child = subprocess.Popen([sys.executable, "-c", script], env=env)
    try:
        wait_until(lambda: len(delivered_from_file(out)) >= 600, timeout=60, what="child progress")
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(10)
    before = len(delivered_from_file(out))
    assert before < 3000
    reg = StreamRegistry(state)  # the stream was running: restored and restarted here
    try:
        wait_until(lambda: set(delivered_from_file(out)) >= {(topic, p, o) for p in range(3) for o in range(1000)},
                   timeout=60, what="all offsets")
        delivered = delivered_from_file(out)
        dupes = len(delivered) - len(set(delivered))
        if commit_interval_ms == 0:
            assert dupes <= 50, f"{dupes} duplicates: more than the one uncommitted batch"
        else:   # a backlog read in well under a minute: nothing was committed before the kill, all of it again
            assert 50 < dupes <= before, f"{dupes} duplicates of {before} delivered before the kill"
    finally:
        reg.close()


def test_bad_input_gives_named_errors_and_changes_nothing(kafka, registry, memory_sinks):
    topic = kafka.new_topic(partitions=1)
    good = _config(kafka, topic)
    cases = [
        (dict(transform="no_such_module.fn"), "transform"),
        (dict(transform="stream_helpers.no_such_fn"), "transform"),
        (dict(sink="ftp://x"), "sink"),
        (dict(sink="cypherl://relative/path"), "sink"),
        (dict(bootstrap_servers="127.0.0.1:1"), "bootstrap_servers"),
        (dict(topics=["does_not_exist_" + topic]), "topics"),
        (dict(configs={"enable.auto.commit": "true"}), "configs"),
        (dict(batch_size=0), "batch_size"),
    ]
    for overrides, field in cases:
        with pytest.raises(StreamError) as info:   # an owned librdkafka key is refused as the config is made
            registry.create(StreamConfig(**{**good.__dict__, **overrides}))
        assert field in str(info.value), (field, str(info.value))
        assert registry.list() == []
    registry.create(good)
    with pytest.raises(StreamError, match="already exists"):
        registry.create(good)
    with pytest.raises(StreamError, match="'missing'"):
        registry.start("missing")
    assert [s.name for s in registry.list()] == ["orders"]


def test_credentials_never_appear_in_list_reprs_logs_or_errors(kafka, registry, caplog, memory_sinks):
    caplog.set_level(logging.DEBUG)
    topic = kafka.new_topic(partitions=1)
    secret = "s3cr3t-Pa55word"
    config = _config(kafka, topic, credentials={"sasl.username": "bob", "sasl.password": secret},
                     configs={"security.protocol": "plaintext", "ssl.key.password": secret})
    assert secret not in repr(config)
    info = registry.create(config)
    assert secret not in repr(info) and secret not in repr(registry.list())
    assert info.credentials == {"sasl.username": "****", "sasl.password": "****"}
    bad = _config(kafka, topic, name="bad", credentials={"sasl.password": secret},
                  configs={"security.protocol": "sasl_plaintext", "sasl.mechanism": "NOPE"})
    with pytest.raises(StreamError) as err:
        registry.create(bad)
    assert secret not in str(err.value)
    registry.start("orders")
    registry.stop("orders")
    assert secret not in caplog.text
    db = (registry.state_dir / "mgstreams.sqlite3")
    assert oct(db.stat().st_mode & 0o777) == "0o600"


def test_a_stream_that_fails_to_restore_goes_to_error_and_the_others_run(kafka, tmp_path, memory_sinks,
                                                                         monkeypatch):
    topic = kafka.new_topic(partitions=2)
    kafka.produce(topic, 20, partitions=2)
    state = tmp_path / "state"
    reg = StreamRegistry(state, retry=FAST_RETRY)
    reg.create(_config(kafka, topic, name="good"))
    reg.create(StreamConfig(**{**_config(kafka, topic, name="broken").__dict__,
                               "transform": "stream_registry.builtin_transformations.merge_messages"}))
    reg.start("good")
    reg.start("broken")
    wait_until(lambda: len(memory_sinks["good"].delivered()) >= 20)
    reg.close()

    from stream_registry.errors import TransformError
    from stream_registry.registry.runners import runner as runner_module
    real_loader = runner_module.load_transformation

    def loader(path, search_dirs=(), **kwargs):
        if path.endswith("merge_messages"):
            raise TransformError(f"transform {path!r}: module vanished after an upgrade")
        return real_loader(path, search_dirs, **kwargs)

    monkeypatch.setattr(runner_module, "load_transformation", loader)
    restored = StreamRegistry(state, retry=FAST_RETRY)
    try:
        info = {s.name: s for s in restored.list()}
        assert info["broken"].status == StreamStatus.ERROR and "vanished" in info["broken"].error
        assert info["good"].status in (StreamStatus.STARTING, StreamStatus.RUNNING)
        kafka.produce(topic, 20, partitions=2)
        wait_until(lambda: len(memory_sinks["good"].delivered()) >= 40)   # 20 before the restart, 20 after
        _assert_exactly_once(memory_sinks["good"].delivered(), topic, {0: 20, 1: 20})
    finally:
        restored.close()


def test_one_registry_per_state_dir_and_a_killed_holder_does_not_block(kafka, tmp_path, memory_sinks):
    """Two registries on one state dir would be two consumers of each group: the second is refused,
    naming the holder; a holder killed with SIGKILL leaves nothing behind (the kernel drops the flock)."""
    topic = kafka.new_topic(partitions=2)
    state = tmp_path / "state"
    first = StreamRegistry(state)
    first.create(_config(kafka, topic))
    with pytest.raises(StreamStateError, match=f"already hosted by pid {os.getpid()} "):
        StreamRegistry(state)
    first.close()
    holder = subprocess.Popen([sys.executable, "-c", (
        "import sys, time; from stream_registry import StreamRegistry; "
        f"StreamRegistry({str(state)!r}); print('held', flush=True); time.sleep(60)")],
        stdout=subprocess.PIPE, cwd=ROOT)
    try:
        assert holder.stdout.readline().strip() == b"held"
        with pytest.raises(StreamStateError, match=f"pid {holder.pid} "):
            StreamRegistry(state)
    finally:
        holder.kill()
        holder.wait()
    again = StreamRegistry(state)
    try:
        assert [s.name for s in again.list()] == ["orders"]
    finally:
        again.close()
