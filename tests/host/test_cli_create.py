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
