"""The operator CLI: same registry, parser and reports as the query module; exit codes for scripts."""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import types
import uuid

import click
import pytest
from click.testing import CliRunner
from confluent_kafka.admin import AdminClient

from stream_helpers import delivered_from_file
from stream_registry import StreamConfig, StreamRegistry
from mgstreams.cli import cli, main, parse_spec_argument
from stream_registry.errors import ConfigError

TRANSFORM = "stream_registry.builtin_transformations.merge_messages"


@pytest.fixture
def state_dir(tmp_path):
    return tmp_path / "state"


def run(state_dir, *args):
    return CliRunner().invoke(cli, ["--state-dir", str(state_dir), *map(str, args)], catch_exceptions=False)


@pytest.fixture
def stream(kafka, state_dir, tmp_path):
    """A 3-partition topic with 30 messages and a stream `orders` on it, created by another registry."""
    topic = kafka.new_topic(partitions=3)
    kafka.produce(topic, 30, partitions=3)
    out = tmp_path / "out.cypherl"
    registry = StreamRegistry(state_dir, autostart=False)
    registry.create(StreamConfig("orders", [topic], kafka.bootstrap_servers, TRANSFORM, f"cypherl://{out}",
                                 consumer_group=f"cli_{uuid.uuid4().hex[:8]}", batch_interval_ms=20,
                                 configs={"sasl.password": "hunter2"}, credentials={"sasl.username": "ops"}))
    registry.close()
    return types.SimpleNamespace(topic=topic, out=out)


def test_help_lists_the_commands():
    result = CliRunner().invoke(cli, ["--help"])
    assert result.exit_code == 0
    for command in ("list", "describe", "set-offset", "history", "start", "stop", "drop", "kafka", "--state-dir"):
        assert command in result.output


def test_state_dir_comes_from_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("MGSTREAMS_STATE_DIR", str(tmp_path / "from-env"))
    result = CliRunner().invoke(cli, ["list", "--json"])
    assert result.exit_code == 0 and json.loads(result.stdout) == []
    assert (tmp_path / "from-env").is_dir()


@pytest.mark.parametrize("text, expected", [
    ("10", 10), ("-1", -1), ("-2", -2), ("earliest", "earliest"), ("+5", "+5"), ('"-5"', "-5"),
    ("2024-05-01T12:00:00Z", "2024-05-01T12:00:00Z"), ('{"t:0": 5, "u": "latest"}', {"t:0": 5, "u": "latest"}),
])
def test_spec_argument_forms(text, expected):
    assert parse_spec_argument(text) == expected


def test_bad_json_spec_is_a_config_error():
    with pytest.raises(ConfigError, match="SPEC: '{bad' is not valid JSON"):
        parse_spec_argument("{bad")


@pytest.mark.parametrize("args", [("describe", "nope"), ("history", "nope"), ("set-offset", "nope", "-1"),
                                  ("start", "nope"), ("stop", "nope"), ("drop", "nope")])
def test_failures_exit_1_with_one_line(state_dir, args):
    result = run(state_dir, *args)
    assert result.exit_code == 1
    assert result.stdout == ""
    assert result.stderr == "mgstreams: error: name: no stream named 'nope'\n"


def test_usage_errors_exit_2(state_dir):
    assert run(state_dir, "describe").exit_code == 2
    assert run(state_dir, "kafka", "--partitions-topic", "orders").exit_code == 2


def test_list_masks_secrets(stream, state_dir):
    result = run(state_dir, "list")
    assert result.exit_code == 0
    header, row = result.stdout.splitlines()
    assert header.split() == ["NAME", "STATUS", "TOPICS", "GROUP", "BOOTSTRAP-SERVERS", "TRANSFORM", "SINK",
                              "ERROR"]
    assert row.split()[:3] == ["orders", "created", stream.topic]
    [listed] = json.loads(run(state_dir, "list", "--json").stdout)
    assert listed["name"] == "orders" and listed["topics"] == [stream.topic] and listed["status"] == "created"
    output = result.stdout + json.dumps(listed)
    assert "hunter2" not in output and "ops" not in json.dumps(listed["credentials"])


def test_describe_table_json_and_watch(stream, state_dir):
    result = run(state_dir, "describe", "orders")
    assert result.exit_code == 0
    lines = result.stdout.splitlines()
    assert lines[0].split() == ["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "POSITION", "LOG-START-OFFSET",
                                "LOG-END-OFFSET", "LAG", "ASSIGNED"]
    assert [line.split()[1:] for line in lines[1:]] == [[stream.topic, str(p), "-", "-", "0", "10", "-", "no"]
                                                        for p in range(3)]
    rows = json.loads(run(state_dir, "describe", "orders", "--json").stdout)
    assert [(r["partition"], r["log_end_offset"], r["committed_offset"]) for r in rows] == \
        [(p, 10, None) for p in range(3)]
    watched = run(state_dir, "describe", "orders", "--watch", "--interval", "0.1", "--count", "2", "--json")
    assert watched.exit_code == 0
    assert [len(json.loads(line)) for line in watched.stdout.splitlines()] == [3, 3]
    table = run(state_dir, "describe", "orders", "--watch", "--interval", "0.1", "--count", "1")
    assert table.exit_code == 0 and "LOG-END-OFFSET" in table.stdout


def test_set_offset_history_drop(stream, state_dir):
    dry = run(state_dir, "set-offset", "orders", "5", "--dry-run", "--json")
    assert dry.exit_code == 0
    assert {(c["offset"], c["status"]) for c in json.loads(dry.stdout)} == {(5, "planned")}
    result = run(state_dir, "set-offset", "orders", json.dumps({f"{stream.topic}:0": 7}), "--timeout", "5")
    assert result.exit_code == 0
    assert result.stdout.splitlines()[0].split() == ["TOPIC", "PARTITION", "PREVIOUS-OFFSET", "NEW-OFFSET",
                                                     "STATUS", "MESSAGE"]
    assert result.stdout.splitlines()[1].split()[:5] == [stream.topic, "0", "-", "7", "pending"]
    assert run(state_dir, "set-offset", "orders", "-1").exit_code == 0       # -1: Memgraph's beginning
    assert run(state_dir, "set-offset", "orders", '"-1"').exit_code == 1    # a shift: nothing committed yet
    bad = run(state_dir, "set-offset", "orders", "sometime")
    assert bad.exit_code == 1 and bad.stderr.startswith("mgstreams: error: offset: cannot parse 'sometime'")

    assert json.loads(run(state_dir, "history", "orders", "--json").stdout) == []   # nothing applied yet
    assert run(state_dir, "drop", "orders", "--json").stdout.strip() == \
        json.dumps({"name": "orders", "status": "created", "error": None})
    assert json.loads(run(state_dir, "list", "--json").stdout) == []


def test_start_runs_in_the_foreground_then_stops(stream, state_dir):
    assert run(state_dir, "set-offset", "orders", "-1").exit_code == 0       # -1: Memgraph's beginning
    started = run(state_dir, "start", "orders", "--duration", "7")  # the group assigns after ~3 s
    assert started.exit_code == 0, started.stderr
    assert started.stdout.splitlines()[0] in ("orders starting", "orders running")
    assert started.stdout.splitlines()[-1] == "orders stopped"
    assert len(delivered_from_file(stream.out)) == 30

    history = json.loads(run(state_dir, "history", "orders", "--json").stdout)
    assert sorted((h["partition"], h["offset"], h["status"]) for h in history) == [(p, 0, "applied")
                                                                                  for p in range(3)]
    table = run(state_dir, "history", "orders", "--limit", "1").stdout.splitlines()
    assert table[0].split() == ["CHANGED-AT", "TOPIC", "PARTITION", "PREVIOUS-OFFSET", "OFFSET", "STATUS"]
    assert len(table) == 2 and table[1].split()[0].endswith("Z")
    committed = json.loads(run(state_dir, "describe", "orders", "--json").stdout)
    assert [r["committed_offset"] for r in committed] == [10, 10, 10]
    assert json.loads(run(state_dir, "drop", "orders", "--json").stdout)["status"] == "stopped"


def test_optional_backfill_command_attaches(monkeypatch):
    @click.command()
    def backfill():
        """Replay offset ranges (stand-in)."""

    monkeypatch.setitem(sys.modules, "mgstreams.backfill_cli", types.SimpleNamespace(backfill=backfill))
    # a command attached by an earlier main() in this process must not hide the stand-in
    monkeypatch.setattr(cli, "commands", {k: v for k, v in cli.commands.items() if k != "backfill"})
    with pytest.raises(SystemExit) as exited:
        main(["--help"])
    assert exited.value.code == 0
    assert cli.commands["backfill"] is backfill


def test_installed_entry_point_runs_an_embedded_cluster(tmp_path):
    """`mgstreams kafka`: bootstrap servers on stdout's first line, topics created, clean exit on SIGTERM."""
    executable = shutil.which("mgstreams", path=os.path.dirname(sys.executable)) or shutil.which("mgstreams")
    assert executable, "the console script `mgstreams` is installed with the package"
    process = subprocess.Popen([executable, "kafka", "--brokers", "2", "--partitions-topic", "demo:3"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        bootstrap = process.stdout.readline().strip()
        assert bootstrap.count(":") == 2, bootstrap                         # two brokers: host:port,host:port
        metadata = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10)
        assert len(metadata.topics["demo"].partitions) == 3
        assert len(metadata.brokers) == 2
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=15) == 0
        assert "embedded Kafka stopped" in process.stderr.read()
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
