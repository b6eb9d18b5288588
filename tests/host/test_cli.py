"""The operator CLI, a client of the stream host: the same streams, tables and exit codes for scripts.

Commands run in-process through click's runner (MGSTREAMS_URL in the
environment) or as `python -m mgstreams` child processes, always against a real
host in another process.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import types
import uuid

import psutil
import pytest
from cli_helpers import console_script, invoke, mgstreams
from click.testing import CliRunner
from configs import MERGE
from confluent_kafka.admin import AdminClient
from host_helpers import HostProcess
from paths import ROOT
from ports import free_port
from stream_helpers import SETTLED_MS, delivered_from_file, wait_until

from mgstreams.cli import cli
from mgstreams.cli.spec_argument import parse_spec_argument
from stream_registry.errors import ConfigError

NO_STREAM = "mgstreams: error: name: no stream named 'nope'\n"


@pytest.fixture
def stream(kafka, host, tmp_path):
    """A 3-partition topic with 30 messages and a stream `orders` on it, created on the host through its API."""
    topic = kafka.new_topic(partitions=3)
    kafka.produce(topic, 30, partitions=3)
    out = tmp_path / "out.cypherl"
    with host.client() as client:
        client.create(name="orders", topics=[topic], bootstrap_servers=kafka.bootstrap_servers, transform=MERGE,
                      sink=f"cypherl://{out}", consumer_group=f"cli_{uuid.uuid4().hex[:8]}", batch_interval_ms=20,
                      configs={"sasl.password": "hunter2"}, credentials={"sasl.username": "ops"})
    return types.SimpleNamespace(topic=topic, out=out)


def test_help_lists_the_commands():
    result = CliRunner().invoke(cli, ["--help"])
    assert result.exit_code == 0
    for command in ("serve", "list", "describe", "set-offset", "history", "start", "stop", "drop", "kafka",
                    "revert", "pending", "offsets", "check", "--url", "MGSTREAMS_URL"):
        assert command in result.output


def test_serve_help_documents_its_options():
    result = CliRunner().invoke(cli, ["serve", "--help"])
    assert result.exit_code == 0
    for option in ("--state-dir", "--listen", "--token-file", "MGSTREAMS_TOKEN", "MGSTREAMS_STATE_DIR",
                   "127.0.0.1:8765"):
        assert option in result.output


@pytest.mark.parametrize("text, expected", [
    ("10", 10), ("-3", "-3"), ("earliest", "earliest"), ("+5", "+5"), ('"-5"', "-5"),
    ("2024-05-01T12:00:00Z", "2024-05-01T12:00:00Z"), ('{"t:0": 5, "u": "latest"}', {"t:0": 5, "u": "latest"}),
])
def test_spec_argument_forms(text, expected):
    assert parse_spec_argument(text) == expected


def test_bad_json_spec_is_a_config_error():
    with pytest.raises(ConfigError, match="SPEC: '{bad' is not valid JSON"):
        parse_spec_argument("{bad")


def test_failures_exit_1_with_one_line_and_usage_errors_exit_2(host):
    for args in [("describe", "nope"), ("describe", "nope", "--json"), ("history", "nope"),
                 ("set-offset", "nope", "earliest"), ("start", "nope"), ("stop", "nope"), ("drop", "nope"),
                 ("revert", "nope", "1"), ("pending", "nope"), ("pending", "nope", "--cancel"),
                 ("offsets", "export", "nope"), ("check", "nope"), ("check", "nope", "-PT15M", "--limit", "3")]:
        result = invoke(*args, host=host)
        assert (result.exit_code, result.stdout, result.stderr) == (1, "", NO_STREAM), args
    assert invoke("describe", host=host).exit_code == 2
    assert invoke("set-offset", "orders", host=host).exit_code == 2                  # neither SPEC nor --from-file
    assert invoke("revert", "orders", host=host).exit_code == 2
    assert invoke("revert", "orders", "0", host=host).exit_code == 2
    assert invoke("revert", "orders", "x", host=host).exit_code == 2
    assert invoke("check", "orders", "--limit", "1001", host=host).exit_code == 2
    assert invoke("offsets", "export", "orders", "--source", "lag", host=host).exit_code == 2
    assert invoke("set-offset", "orders", "0", "--timeout", "0", host=host).exit_code == 2
    assert invoke("set-offset", "orders", "0", "--timeout", "86400", host=host).exit_code == 2
    assert invoke("history", "orders", "--limit", "0", host=host).exit_code == 2
    assert invoke("no-such-command", host=host).exit_code == 2
    assert invoke("kafka", "--partitions-topic", "orders", host=host).exit_code == 2

    # the same across a process boundary, with --url instead of the environment
    result = mgstreams("--url", host.url, "start", "nope")
    assert (result.returncode, result.stdout, result.stderr) == (1, "", NO_STREAM)
    assert mgstreams("--url", host.url, "start").returncode == 2


def test_no_host_is_one_line_naming_the_url(tmp_path):
    url = f"http://127.0.0.1:{free_port()}"
    result = mgstreams("list", env={"MGSTREAMS_URL": url})
    assert result.returncode == 1 and result.stdout == ""
    assert result.stderr == f"mgstreams: error: no mgstreams host at {url}: start one with `mgstreams serve`\n"
    result = CliRunner().invoke(cli, ["--url", url, "describe", "orders"])
    assert result.exit_code == 1
    assert result.stderr == f"mgstreams: error: no mgstreams host at {url}: start one with `mgstreams serve`\n"
    for bad in ("localhost:8765", "ftp://127.0.0.1:8765", "http://[::1"):
        result = CliRunner().invoke(cli, ["--url", bad, "list"])
        assert result.exit_code == 1 and result.stderr.startswith("mgstreams: error: url: "), result.stderr
        assert repr(bad) in result.stderr and result.stderr.count("\n") == 1


def test_the_token_comes_from_mgstreams_token(tmp_path):
    host = HostProcess(tmp_path / "state", token=f"tok-{uuid.uuid4().hex}").start()
    try:
        denied = mgstreams("--url", host.url, "list", env={"MGSTREAMS_TOKEN": ""})
        assert denied.returncode == 1
        assert denied.stderr.startswith("mgstreams: error: authorization: a valid bearer token is required "
                                        "(Authorization: Bearer ...) (no token was sent): ")
        # it says where a token comes from
        for way in ("$MGSTREAMS_TOKEN", "--token", "$MGSTREAMS_TOKEN_FILE", "api-token"):
            assert way in denied.stderr, (way, denied.stderr)
        assert denied.stderr.count("\n") == 1
        wrong = mgstreams("--url", host.url, "list", env={"MGSTREAMS_TOKEN": "wrong"})
        assert wrong.returncode == 1 and "the token sent was refused" in wrong.stderr
        # --token, before or after the subcommand, wins over the environment
        for args in (("--token", host.token, "list", "--json"), ("list", "--json", "--token", host.token)):
            given = mgstreams("--url", host.url, *args, env={"MGSTREAMS_TOKEN": "wrong"})
            assert (given.returncode, json.loads(given.stdout or "null")) == (0, []), given.stderr
        refused = mgstreams("--url", host.url, "--token", "wrong", "list", env={"MGSTREAMS_TOKEN": host.token})
        assert refused.returncode == 1 and "the token sent was refused" in refused.stderr
        allowed = mgstreams("--url", host.url, "list", "--json", env={"MGSTREAMS_TOKEN": host.token})
        assert (allowed.returncode, json.loads(allowed.stdout)) == (0, [])
        assert host.token not in denied.stderr + wrong.stderr + allowed.stdout + allowed.stderr
    finally:
        host.stop()


def test_list_masks_secrets(stream, host):
    result = invoke("list", host=host)
    assert result.exit_code == 0
    header, row = result.stdout.splitlines()
    assert header.split() == ["NAME", "STATUS", "TOPICS", "GROUP", "BOOTSTRAP-SERVERS", "TRANSFORM", "SINK",
                              "ERROR"]   # DETAIL only while a stream has one
    assert row.split()[:3] == ["orders", "created", stream.topic]
    listed_json = invoke("list", "--json", host=host).stdout
    [listed] = json.loads(listed_json)
    assert listed["name"] == "orders" and listed["topics"] == [stream.topic] and listed["status"] == "created"
    assert listed["configs"] == {"sasl.password": "****"} and listed["credentials"] == {"sasl.username": "****"}
    assert "hunter2" not in result.stdout + listed_json and "ops" not in json.dumps(listed["credentials"])


def test_describe_table_json_and_watch(stream, host):
    result = invoke("describe", "orders", host=host)
    assert result.exit_code == 0
    lines = result.stdout.splitlines()
    assert lines[0].split() == ["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "POSITION", "LOG-START-OFFSET",
                                "LOG-END-OFFSET", "LAG", "ASSIGNED", "TASK", "STORED-OFFSET", "RESUME-OFFSET"]
    assert [line.split()[1:] for line in lines[1:4]] == [[stream.topic, str(p), "-", "-", "0", "10", "-", "no", "-",
                                                          "-", "0"] for p in range(3)]   # resumes from the beginning
    assert {line.split()[0] for line in lines[1:4]} == {json.loads(invoke("list", "--json", host=host).stdout)[0]
                                                        ["consumer_group"]}
    assert [line.strip() for line in lines[4:]] == ["stream orders created, no process, restarts 0"], "the caption"
    rows = json.loads(invoke("describe", "orders", "--json", host=host).stdout)
    assert [(r["partition"], r["log_end_offset"], r["committed_offset"]) for r in rows] == \
        [(p, 10, None) for p in range(3)]
    watched = invoke("describe", "orders", "--watch", "--interval", "0.1", "--count", "2", "--json", host=host)
    assert watched.exit_code == 0
    assert [len(json.loads(line)) for line in watched.stdout.splitlines()] == [3, 3]
    table = invoke("describe", "orders", "--watch", "--interval", "0.1", "--count", "1", host=host)
    assert table.exit_code == 0 and "LOG-END-OFFSET" in table.stdout and "orders at " in table.stdout


def test_set_offset_table_json_dry_run_and_bad_specs(stream, host):
    dry = invoke("set-offset", "orders", "5", "--dry-run", "--json", host=host)
    assert dry.exit_code == 0
    assert {(c["offset"], c["status"]) for c in json.loads(dry.stdout)} == {(5, "planned")}
    bad = invoke("set-offset", "orders", '"-1"', host=host)       # a shift: nothing committed, nothing pending yet
    assert bad.exit_code == 1 and bad.stdout == "" and bad.stderr.startswith("mgstreams: error: offset '-1': ")
    result = invoke("set-offset", "orders", json.dumps({f"{stream.topic}:0": 7}), "--timeout", "5", host=host)
    assert result.exit_code == 0
    assert result.stdout.splitlines()[0].split() == ["TOPIC", "PARTITION", "PREVIOUS-OFFSET", "NEW-OFFSET",
                                                     "STATUS", "MESSAGE"]
    assert result.stdout.splitlines()[1].split()[:5] == [stream.topic, "0", "-", "7", "pending"]
    assert len(result.stdout.splitlines()) == 2                               # only the partition named
    assert invoke("set-offset", "orders", "earliest", host=host).exit_code == 0      # -1 in Cypher, refused here

    for spec, message in [("sometime", "mgstreams: error: offset: cannot parse 'sometime'"),
                          ("{bad", "mgstreams: error: SPEC: '{bad' is not valid JSON"),
                          ('{"other_topic": 0}', "mgstreams: error: offset: unknown topic 'other_topic'")]:
        bad = invoke("set-offset", "orders", spec, host=host)
        assert bad.exit_code == 1 and bad.stdout == "", spec
        assert bad.stderr.startswith(message) and bad.stderr.count("\n") == 1, bad.stderr
    assert json.loads(invoke("history", "orders", "--json", host=host).stdout) == []   # nothing applied yet


def test_start_history_stop_and_drop(stream, host):
    assert invoke("set-offset", "orders", "2", host=host).exit_code == 0
    started = invoke("start", "orders", host=host)
    assert started.exit_code == 0, started.stderr
    assert started.stdout in ("orders starting\n", "orders running\n")
    again = invoke("start", "orders", host=host)   # idempotent, as stop is: exit 0, and it says so
    assert again.exit_code == 0 and again.stdout in ("orders already starting\n", "orders already running\n"), \
        (again.stdout, again.stderr)
    wait_until(lambda: len(delivered_from_file(stream.out)) >= 24, timeout=60, what="24 messages in the sink")
    assert sorted(o for _, _, o in delivered_from_file(stream.out)) == sorted(list(range(2, 10)) * 3)

    history = json.loads(invoke("history", "orders", "--json", host=host).stdout)
    assert sorted((h["partition"], h["offset"], h["status"]) for h in history) == [(p, 2, "applied")
                                                                                  for p in range(3)]
    table = invoke("history", "orders", "--limit", "1", host=host).stdout.splitlines()
    assert table[0].split() == ["CHANGE-ID", "CHANGED-AT", "TOPIC", "PARTITION", "PREVIOUS-OFFSET", "OFFSET",
                                "STATUS", "MESSAGE"]
    assert len(table) == 2 and table[1].split()[1].endswith("Z")
    assert table[1].split()[0] == str(max(h["change_id"] for h in history)) and table[1].split()[-1] == "-"
    wait_until(lambda: [r["committed_offset"]
                        for r in json.loads(invoke("describe", "orders", "--json", host=host).stdout)]
               == [10, 10, 10], what="offsets committed")
    assert json.loads(invoke("list", "--json", host=host).stdout)[0]["status"] == "running"

    assert invoke("stop", "orders", host=host).stdout == "orders stopped\n"
    assert json.loads(invoke("stop", "orders", "--json", host=host).stdout) == \
        {"name": "orders", "status": "stopped", "error": None}                # idempotent
    assert invoke("start", "orders", host=host).exit_code == 0
    dropped = mgstreams("--url", host.url, "drop", "orders")   # a running stream: stopped and forgotten
    assert (dropped.returncode, dropped.stdout) == (0, "orders dropped\n"), dropped.stderr
    assert json.loads(invoke("list", "--json", host=host).stdout) == []
    assert invoke("describe", "orders", host=host).stderr == "mgstreams: error: name: no stream named 'orders'\n"


def test_serve_takes_its_state_dir_from_the_environment(tmp_path):
    state = tmp_path / "from-env"
    process = subprocess.Popen([sys.executable, "-m", "mgstreams", "serve", "--listen", "127.0.0.1:0"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
                               env={**os.environ, "MGSTREAMS_STATE_DIR": str(state), "MGSTREAMS_TOKEN": ""})
    try:
        line = process.stdout.readline()
        assert line.startswith("mgstreams host serving at http://127.0.0.1:") and f"state: {state}" in line
        assert (state / "host.lock").is_file()
        url = line.split()[4]
        assert f"token in {state / 'api-token'}" in line         # no token given: the host made one
        # the CLI finds the token the host generated through the same $MGSTREAMS_STATE_DIR
        listed = mgstreams("--url", url, "list", "--json", env={"MGSTREAMS_STATE_DIR": str(state),
                                                                   "MGSTREAMS_TOKEN": ""})
        assert (listed.returncode, json.loads(listed.stdout)) == (0, []), listed.stderr
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=30) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def test_backfill_is_a_subcommand_of_the_cli_without_main():
    """`mgstreams backfill` is part of the command tree itself, not attached by `main()` through a lazy import
    (which made an import circle with the backfill module)."""
    result = CliRunner().invoke(cli, ["backfill", "--help"])
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("Usage: cli backfill [OPTIONS]") and "--from SPEC" in result.stdout


def test_installed_entry_point_runs_an_embedded_cluster(tmp_path):
    """`mgstreams kafka`: bootstrap servers on stdout's first line, topics created, clean exit on SIGTERM."""
    executable = console_script()
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


def test_installed_entry_point_runs_a_tansu_broker_process_and_stops_it():
    """`mgstreams kafka --engine tansu`: a Tansu process of its own answers on the printed address, has the
    topic, and is gone after SIGTERM to the command; Tansu is one broker, so --brokers 2 is a usage error."""
    executable = console_script()
    process = subprocess.Popen([executable, "kafka", "--engine", "tansu", "--partitions-topic", "demo:3"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        bootstrap = process.stdout.readline().strip()
        metadata = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10)
        assert len(metadata.topics["demo"].partitions) == 3 and len(metadata.brokers) == 1
        [broker] = [p for p in psutil.Process(process.pid).children(recursive=True) if p.name().startswith("tansu")]
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=15) == 0
        assert "Tansu stopped" in process.stderr.read()
        broker.wait(5)
        assert not broker.is_running()
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    result = CliRunner().invoke(cli, ["kafka", "--engine", "tansu", "--brokers", "2"])
    assert result.exit_code == 2 and "'--brokers': Tansu runs one broker here, got 2" in result.stderr, result.output


@pytest.mark.parametrize("argv", [["describe", "--count"], ["--url"], ["backfill", "--from"],
                                  ["history", "orders", "--limit"]])
def test_an_option_missing_its_value_is_a_usage_error_with_the_usage(argv):
    """Click raises "requires an argument" without its context and printed the error alone (found by test_fuzz)."""
    from mgstreams.cli.backfill import backfill

    command, args = (backfill, argv[1:]) if argv[0] == "backfill" else (cli, argv)   # attached by main()
    result = CliRunner().invoke(command, args)
    assert result.exit_code == 2, result.output
    lines = result.stderr.splitlines()
    assert lines[0].startswith("Usage: ") and lines[-1].startswith("Error: Option '") \
        and lines[-1].endswith("requires an argument."), result.stderr


def test_drop_says_dropped_for_a_created_stream(stream, host):
    """`mgstreams drop tmp1` printed `tmp1 created` (the stream as it was before the drop)."""
    dropped = invoke("drop", "orders", host=host)
    assert (dropped.exit_code, dropped.stdout) == (0, "orders dropped\n")
    assert json.loads(invoke("list", "--json", host=host).stdout) == []


def test_describe_watch_piped_prints_every_frame(stream, host):
    """`describe --watch | cat` printed only the last frame (a live display's redraws)."""
    result = mgstreams("--url", host.url, "describe", "orders", "--watch", "--interval", "0.1", "--count", "3")
    assert result.returncode == 0, result.stderr
    assert result.stdout.count("orders at ") == 3 and result.stdout.count("LOG-END-OFFSET") == 3, result.stdout


def test_unquoted_minus_n_moves_back_where_it_cannot_mean_beginning_or_end(stream, host):
    """`mgstreams set-offset orders -50` failed with `use >= 0, -1 (beginning) or -2 (end)` while `+10` worked."""
    assert parse_spec_argument("-4") == "-4"

    def committed():
        return [r["committed_offset"] for r in json.loads(invoke("describe", "orders", "--json", host=host).stdout)]
    assert invoke("start", "orders", host=host).exit_code == 0
    wait_until(lambda: committed() == [10, 10, 10], timeout=60, what="caught up")
    moved = invoke("set-offset", "orders", "-4", "--json", "--timeout", str(SETTLED_MS / 1000), host=host)
    assert moved.exit_code == 0, moved.stderr
    assert {(c["previous_offset"], c["offset"], c["status"]) for c in json.loads(moved.stdout)} == {(10, 6, "applied")}
    wait_until(lambda: committed() == [10, 10, 10], timeout=60, what="caught up again")
    checked = invoke("check", "orders", "-3", "--limit", "1", "--json", host=host)
    assert checked.exit_code == 0, checked.stderr
    assert sorted((r["partition"], r["offset"]) for r in json.loads(checked.stdout)) == [(p, 7) for p in range(3)]
    help_text = invoke("set-offset", "--help", host=host).stdout
    assert "-N (N >= 3" in help_text and "'\"-1\"'" in help_text


def test_global_options_after_the_subcommand_and_version(stream, host):
    """`--url` worked only before the subcommand; there was no --version."""
    after = mgstreams("list", "--json", "--url", host.url, env={"MGSTREAMS_URL": f"http://127.0.0.1:{free_port()}"})
    assert after.returncode == 0 and [s["name"] for s in json.loads(after.stdout)] == ["orders"], after.stderr
    equals = mgstreams("describe", "orders", f"--url={host.url}", "--json")
    assert equals.returncode == 0 and len(json.loads(equals.stdout)) == 3, equals.stderr
    version = mgstreams("--version")
    assert version.returncode == 0 and version.stdout.startswith("mgstreams ") and version.stdout.split()[1][0].isdigit()


def test_offsets_export_of_positions_on_a_stopped_stream_says_why(stream, host):
    """`offsets export --source position` on a stopped stream printed nothing and exited 0."""
    result = invoke("offsets", "export", "orders", "--source", "position", host=host)
    assert result.exit_code == 1 and result.stdout == ""
    assert result.stderr.splitlines()[-1] == ("mgstreams: error: source: stream 'orders' is created: positions exist "
                                              "only while it runs; use --source committed (the group's committed "
                                              "offsets)"), result.stderr


def test_a_negative_offset_in_a_map_says_how_to_move_back(stream, host):
    result = invoke("set-offset", "orders", json.dumps({f"{stream.topic}:0": -50}), host=host)
    assert result.exit_code == 1 and result.stderr.rstrip().endswith('to move back 50, give the string "-50"'), \
        result.stderr
