"""A first stream from the shell alone (issue 24): `mgstreams kafka` (embedded), `mgstreams kafka topic create`,
`mgstreams kafka produce` (stdin and --sample), `mgstreams create ... --start`, each an installed `mgstreams`
child process; the stream writes a cypherl file."""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import tempfile
from functools import partial
from pathlib import Path

import cli_helpers
import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient
from stream_helpers import wait_until

from mgstreams.embedded_kafka import EmbeddedKafka
from mgstreams.kafka_tools import create_topic
from stream_registry.errors import ConfigError, StreamError

mgstreams = partial(cli_helpers.mgstreams, script=True)   # the console script


@pytest.fixture
def run_dir():
    """A short runtime directory: a Unix socket's path has at most 107 bytes, and pytest's tmp_path is long."""
    directory = tempfile.mkdtemp(prefix="mgs-", dir="/tmp")
    yield Path(directory)
    shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture
def embedded(run_dir):
    """`mgstreams kafka` in the foreground, its runtime directory (control socket) a temporary one."""
    env = {"XDG_RUNTIME_DIR": str(run_dir)}
    process = subprocess.Popen([cli_helpers.console_script(), "kafka"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               env={**os.environ, **env})
    try:
        bootstrap = process.stdout.readline().strip()
        assert bootstrap, process.stderr.read()
        yield bootstrap, env
        process.send_signal(signal.SIGTERM)
        assert process.wait(15) == 0
        assert not list((run_dir / "mgstreams").iterdir()), "the control socket is removed"
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def watermarks(bootstrap: str, topic: str, partitions: int) -> list[int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "watermarks"})
    try:
        return [consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in range(partitions)]
    finally:
        consumer.close()


def test_topic_create_and_produce_on_the_embedded_cluster(embedded):
    bootstrap, env = embedded
    done = mgstreams("kafka", "topic", "create", "orders", "--partitions", "3", "--bootstrap", bootstrap, env=env)
    assert (done.returncode, done.stdout) == (0, "topic orders created (3 partition(s))\n"), done.stderr
    topics = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10).topics
    assert len(topics["orders"].partitions) == 3

    again = mgstreams("kafka", "topic", "create", "orders", "--bootstrap", bootstrap, env=env)
    assert again.returncode == 1 and "orders" in again.stderr and again.stderr.count("\n") == 1, again.stderr

    lines = "".join(json.dumps({"id": i, "account": f"a{i % 4}"}) + "\n" for i in range(30))
    produced = mgstreams("kafka", "produce", "orders", "--bootstrap", bootstrap, "--key-field", "account",
                         stdin=lines + "\n", env=env)
    assert produced.returncode == 0, produced.stderr
    assert produced.stdout.startswith("produced 30 message(s) to orders (per partition ")
    sampled = mgstreams("kafka", "produce", "orders", "--bootstrap", bootstrap, "--sample", "transfers",
                        "--count", "60", env=env)
    assert sampled.returncode == 0 and sampled.stdout.startswith("produced 60 message(s)"), sampled.stderr
    assert sum(watermarks(bootstrap, "orders", 3)) == 90

    bad = mgstreams("kafka", "produce", "orders", "--bootstrap", bootstrap, stdin='{"ok": 1}\nnot json\n', env=env)
    assert bad.returncode == 1 and bad.stderr.startswith("mgstreams: error: line 2: not JSON"), bad.stderr
    assert mgstreams("kafka", "topic", "create", "bad name", "--bootstrap", bootstrap, env=env).stderr.startswith(
        "mgstreams: error: topic: 'bad name' is not a topic name")


def read_all(bootstrap: str, topic: str, count: int) -> list[tuple[bytes | None, bytes | None]]:
    """(key, value) of the topic's first `count` messages (one partition), in order."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"read_{topic}", "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, 0)])
    out: list[tuple[bytes | None, bytes | None]] = []
    try:
        while len(out) < count:
            msg = consumer.poll(10)
            assert msg is not None, f"only {len(out)} of {count} messages: {out}"
            if msg.error() is None:
                out.append((msg.key(), msg.value()))
    finally:
        consumer.close()
    return out


def test_produce_keys_by_a_field_path_or_a_key_per_line_and_writes_tombstones(embedded):
    """Issue 46: a table's lifecycle as Debezium writes it (create, update, delete, tombstone) with the bundled
    tools: the key from a nested field, or a JSON key of its own on each line; a `null` value is a tombstone."""
    bootstrap, env = embedded
    assert mgstreams("kafka", "topic", "create", "accounts", "--bootstrap", bootstrap, env=env).returncode == 0
    lines = [{"payload": {"op": "c", "after": {"id": 1, "name": "a"}}},
             {"payload": {"op": "u", "after": {"id": 1, "name": "b"}}}]
    by_path = mgstreams("kafka", "produce", "accounts", "--bootstrap", bootstrap, "--key-field", "payload.after.id",
                        stdin="".join(json.dumps(line) + "\n" for line in lines), env=env)
    assert by_path.returncode == 0, by_path.stderr
    per_line = ('{"id": 1}|{"payload": {"op": "d", "before": {"id": 1}, "after": null}}\n'
                '{"id": 1}|null\n'
                '"plain"|{"x": 1}\n')
    keyed = mgstreams("kafka", "produce", "accounts", "--bootstrap", bootstrap, "--key-separator", "|",
                      stdin=per_line, env=env)
    assert keyed.returncode == 0 and keyed.stdout.startswith("produced 3 message(s)"), keyed.stderr
    got = read_all(bootstrap, "accounts", 5)
    assert [k for k, _ in got] == [b"1", b"1", b'{"id":1}', b'{"id":1}', b"plain"], got
    assert json.loads(got[0][1])["payload"]["after"]["name"] == "a" and json.loads(got[2][1])["payload"]["op"] == "d"
    assert got[3][1] is None, "a null value is a tombstone: no value at all"
    missing = mgstreams("kafka", "produce", "accounts", "--bootstrap", bootstrap, "--key-field", "payload.key",
                        stdin=json.dumps(lines[0]) + "\n", env=env)
    assert missing.returncode == 1 and "line 1: --key-field: no field 'payload.key'" in missing.stderr, missing.stderr
    unsplit = mgstreams("kafka", "produce", "accounts", "--bootstrap", bootstrap, "--key-separator", "|",
                        stdin='{"id": 1}\n', env=env)
    assert unsplit.returncode == 1 and "line 1: --key-separator: no '|'" in unsplit.stderr, unsplit.stderr


def test_create_start_and_write_a_cypherl_file(embedded, host, tmp_path):
    bootstrap, env = embedded
    env = {**env, "MGSTREAMS_URL": host.url}
    assert mgstreams("kafka", "topic", "create", "transfers", "--partitions", "2", "--bootstrap", bootstrap,
                     env=env).returncode == 0
    assert mgstreams("kafka", "produce", "transfers", "--bootstrap", bootstrap, "--sample", "transfers",
                     "--count", "40", env=env).returncode == 0
    out = tmp_path / "transfers.cypherl"
    created = mgstreams("create", "payments", "--topic", "transfers", "--bootstrap", bootstrap,
                        "--sink", f"cypherl://{out}", "--config", "errors.tolerance=all",
                        "--config", "fetch.min.bytes=1", "--batch-interval-ms", "50", "--start", "--json", env=env)
    assert created.returncode == 0, created.stderr
    assert json.loads(created.stdout)["status"] in ("starting", "running")
    [listed] = json.loads(mgstreams("list", "--json", env=env).stdout)
    assert (listed["topics"], listed["bootstrap_servers"], listed["consumer_group"], listed["configs"],
            listed["errors_tolerance"]) == (["transfers"], bootstrap, "mgstreams_payments",
                                            {"fetch.min.bytes": "1"}, "all")
    wait_until(lambda: out.exists() and len(out.read_text().splitlines()) >= 40, 60, 0.2, "40 statements")

    twice = mgstreams("create", "payments", "--topic", "transfers", "--bootstrap", bootstrap, env=env)
    assert twice.returncode == 1 and "already exists" in twice.stderr
    usage = mgstreams("create", "p2", "--topic", "transfers", "--bootstrap", bootstrap, "--config", "nope", env=env)
    assert usage.returncode == 2 and "expected KEY=VALUE" in usage.stderr
    secret = mgstreams("create", "p2", "--topic", "transfers", "--bootstrap", bootstrap,
                       "--config", "sasl.password=hunter2-on-argv", env=env)
    assert secret.returncode == 2 and "'sasl.password' is a secret" in secret.stderr, secret.stderr
    assert "hunter2-on-argv" not in secret.stderr + secret.stdout


def test_topic_create_without_a_control_socket_says_why(tmp_path, monkeypatch):
    """A mock cluster in another process (no control socket) cannot create topics: the error says so."""
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    with EmbeddedKafka(brokers=1) as cluster:
        with pytest.raises(StreamError, match="no controller answered CreateTopics"):
            create_topic(cluster.bootstrap_servers, "orders", 2, timeout=2)
    with pytest.raises(ConfigError, match="^partitions: "):
        create_topic("127.0.0.1:1", "orders", 0)
