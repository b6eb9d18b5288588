"""The operator's second day (issue 35): each friction a new user met off the getting-started script, through the
interface they used (the `mgstreams` CLI, the HTTP API, a browser), against real `mgstreams serve` processes.

The error messages' options and variables (friction 2) are checked in tests/unit/test_error_message_names.py.
"""
from __future__ import annotations

import json
import uuid

import httpx
import pytest
from cli_helpers import invoke
from host_helpers import HostProcess

POISON = "stream_helpers.poison_transform"   # raises on a payload starting with `poison`
PARTITIONS = 3
PER_PARTITION = 6


@pytest.fixture(scope="module")
def day2(kafka, tmp_path_factory):
    """One host (no token) for the module, a 3-partition topic of 6 records a partition; offset 1 of partition 0
    holds a poison payload."""
    host = HostProcess(tmp_path_factory.mktemp("day2") / "state").start()
    topic = kafka.new_topic(partitions=PARTITIONS)
    kafka.produce(topic, PER_PARTITION * PARTITIONS, partitions=PARTITIONS,
                  payload=lambda i: b"poison!" if i == PARTITIONS else f'{{"i": {i}}}'.encode())
    host.topic = topic
    host.kafka = kafka
    yield host
    host.stop()


def create(host, transform: str = POISON, **fields) -> str:
    name = f"s_{uuid.uuid4().hex[:8]}"
    with host.client() as client:
        client.create(name=name, topics=[host.topic], bootstrap_servers=host.kafka.bootstrap_servers,
                      transform=transform, sink="null://", consumer_group=f"day2_{name}", **fields)
    return name


def cli(host, *args):
    return invoke(*args, host=host)


# -- 1: a bare -1 / -2 at a shell prompt ----------------------------------------------------------------
@pytest.mark.parametrize("spec, reading, word", [("-1", "beginning", "earliest"), ("-2", "end", "latest")])
def test_a_bare_minus_one_or_two_is_refused_at_the_shell_naming_both_readings_and_nothing_moves(day2, spec, reading,
                                                                                                word):
    name = create(day2)
    result = cli(day2, "set-offset", name, spec)
    assert result.exit_code == 1 and result.stdout == "", result.stdout
    error = result.stderr
    assert error.startswith(f"mgstreams: error: SPEC: {spec} is ambiguous"), error
    assert reading in error and word in error and f"'\"{spec}\"'" in error and "back" in error, error
    assert cli(day2, "check", name, spec).exit_code == 1          # every command taking a SPEC reads it the same
    pending = json.loads(cli(day2, "pending", name, "--json").stdout)
    assert pending == [] and json.loads(cli(day2, "history", name, "--json").stdout) == []   # nothing moved
    # Cypher and the API keep Memgraph's dialect: -1 is the beginning, -2 the end
    with httpx.Client(base_url=day2.url, headers={"Content-Type": "application/json"}, timeout=30) as api:
        planned = api.patch(f"/streams/{name}/offsets", json={"offset": int(spec), "dry_run": True}).json()
    assert {r["offset"] for r in planned} == {0 if spec == "-1" else PER_PARTITION}, planned
    # the words it names work
    moved = cli(day2, "set-offset", name, word, "--dry-run", "--json")
    assert moved.exit_code == 0 and {r["offset"] for r in json.loads(moved.stdout)} == \
        {0 if word == "earliest" else PER_PARTITION}


# -- 5: check on a stream that has committed nothing yet ----------------------------------------------------
def test_check_on_a_stream_with_nothing_committed_previews_from_where_it_resumes(day2):
    name = create(day2, transform="stream_helpers.offsets_transform")
    first = cli(day2, "check", name, "--limit", "2", "--json")
    assert first.exit_code == 0, first.stderr
    assert sorted((r["partition"], r["offset"]) for r in json.loads(first.stdout)) == \
        [(p, o) for p in range(PARTITIONS) for o in (0, 1)]     # auto.offset.reset: the beginning
    assert cli(day2, "set-offset", name, "4").exit_code == 0     # stopped: pending, where it resumes now
    after = cli(day2, "check", name, "--limit", "1", "--json")
    assert after.exit_code == 0, after.stderr
    assert sorted((r["partition"], r["offset"]) for r in json.loads(after.stdout)) == [(p, 4) for p in range(PARTITIONS)]


# -- 7: check over a record the transformation fails on -------------------------------------------------------
def test_check_shows_the_good_statements_and_a_row_with_the_error_for_the_bad_record(day2):
    name = create(day2)
    result = cli(day2, "check", name, json.dumps({f"{day2.topic}:0": 0}), "--limit", "3", "--json")
    assert result.exit_code == 0, result.stderr
    rows = json.loads(result.stdout)
    assert [(r["offset"], bool(r["query"]), r["error"] is None) for r in rows] == \
        [(0, True, True), (1, False, False), (2, True, True)], rows
    assert "ValueError: cannot read b'poison!'" in rows[1]["error"], rows[1]
    table = cli(day2, "check", name, json.dumps({f"{day2.topic}:0": 1}), "--limit", "1")
    assert table.exit_code == 0 and table.stdout.splitlines()[0].split()[-1] == "ERROR", table.stdout
    assert "ValueError" in table.stdout


# -- 3: alter takes every stream option create takes, or says plainly which it cannot change -----------------
def test_alter_changes_the_stream_options_create_takes_and_names_what_it_cannot(day2):
    name = create(day2)
    result = cli(day2, "alter", name, "--config", "errors.tolerance=all",
                 "--config", "errors.deadletterqueue.topic.name=day2_dlq", "--config", "restart=never")
    assert (result.exit_code, result.stdout.strip()) == (0, f"{name} altered (created)"), result.stderr
    [listed] = [s for s in json.loads(cli(day2, "list", "--json").stdout) if s["name"] == name]
    assert (listed["errors_tolerance"], listed["dead_letter_topic"], listed["restart"], listed["configs"]) == \
        ("all", "day2_dlq", "never", {}), listed
    back = cli(day2, "alter", name, "--config", "errors.tolerance=none")   # the dead-letter topic stays
    assert back.exit_code == 1 and "needs errors.tolerance 'all'" in back.stderr, back.stderr   # checked as create
    refused = cli(day2, "alter", name, "--config", "delivery=exactly_once")
    assert refused.exit_code == 1 and refused.stderr.startswith(
        "mgstreams: error: delivery: cannot be altered (an exactly-once stream resumes from the offsets its sink "
        "stores"), refused.stderr
    assert "drop the stream and create it again" in refused.stderr
    # the API takes Kafka Connect's names in PATCH too, as in POST
    with httpx.Client(base_url=day2.url, headers={"Content-Type": "application/json"}, timeout=30) as api:
        patched = api.patch(f"/streams/{name}", json={"errors.tolerance": "none", "errors.deadletterqueue.topic.name":
                                                      None, "restart": "on-failure"})
        assert patched.status_code == 200, patched.text
        assert (patched.json()["errors_tolerance"], patched.json()["dead_letter_topic"]) == ("none", None)


# -- 6: errors that name the value ------------------------------------------------------------------------------
def test_errors_name_the_servers_the_value_and_the_partitions_there_are(day2):
    from ports import free_port

    closed = f"127.0.0.1:{free_port()}"
    unreachable = cli(day2, "create", "nowhere", "--topic", day2.topic, "--bootstrap", closed,
                      "--no-check-sink")   # the default Bolt sink: no Memgraph here (its own check: issue 32)
    assert unreachable.exit_code == 1 and f"'{closed}'" in unreachable.stderr, unreachable.stderr
    assert unreachable.stderr.startswith("mgstreams: error: bootstrap_servers: metadata for topic"), unreachable.stderr

    bad = cli(day2, "create", "badvalue", "--topic", day2.topic, "--bootstrap", day2.kafka.bootstrap_servers,
              "--config", "session.timeout.ms=abc", "--no-check-sink")
    assert bad.exit_code == 1 and bad.stderr.startswith(
        "mgstreams: error: configs['session.timeout.ms']: 'abc' rejected by the Kafka client: Invalid value"), \
        bad.stderr
    assert "KafkaError{" not in bad.stderr

    name = create(day2)
    unknown = cli(day2, "set-offset", name, json.dumps({f"{day2.topic}:9": 1}))
    assert unknown.exit_code == 1 and unknown.stderr.rstrip().endswith(
        f"offset: unknown partition {day2.topic}:9 (topic '{day2.topic}' has {PARTITIONS} partitions: 0-2)"), \
        unknown.stderr
    listed = {s["name"] for s in json.loads(cli(day2, "list", "--json").stdout)}
    assert not {"nowhere", "badvalue"} & listed     # refused creates store nothing


# -- 4: the token outside the first shell, and the browser ---------------------------------------------------
def test_a_second_shell_and_a_browser_are_told_how_to_get_in(tmp_path):
    import os
    import subprocess
    import sys

    from paths import ROOT, SUPPORT
    from ports import free_port

    state = tmp_path / "mgstreams-state"
    env = {k: v for k, v in os.environ.items() if not k.startswith("MGSTREAMS_")}
    env.update(XDG_STATE_HOME=str(tmp_path / "xdg"), PYTHONPATH=f"{SUPPORT}{os.pathsep}{ROOT}")
    port = free_port()
    host = subprocess.Popen([sys.executable, "-m", "mgstreams", "serve", "--listen", f"127.0.0.1:{port}"],
                            env={**env, "MGSTREAMS_STATE_DIR": str(state)}, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True, cwd=tmp_path)
    try:
        ready = host.stdout.readline()
        url = f"http://127.0.0.1:{port}"
        assert ready.rstrip().endswith(f"; its page: {url}/ui"), ready     # the ready line names the page
        token = (state / "api-token").read_text().strip()

        # a second shell: no token, no state directory; the hint names MGSTREAMS_STATE_DIR, which then works
        def second_shell(**extra):
            return subprocess.run([sys.executable, "-m", "mgstreams", "list"], env={**env, "MGSTREAMS_URL": url,
                                  **extra}, capture_output=True, text=True, timeout=60, cwd=ROOT)
        refused = second_shell()
        assert refused.returncode == 1 and "(no token was sent)" in refused.stderr, refused.stderr
        assert "MGSTREAMS_STATE_DIR" in refused.stderr, refused.stderr
        assert second_shell(MGSTREAMS_STATE_DIR=str(state)).returncode == 0

        # a browser without the token: an HTML page saying how to get in (not the API's JSON), at / too
        with httpx.Client(base_url=url, timeout=30, headers={"Accept": "text/html"}) as browser:
            for path in ("/ui", "/", "/ui?token=wrong"):
                page = browser.get(path)
                assert page.status_code == 401 and page.headers["content-type"].startswith("text/html"), path
                assert "api-token" in page.text and 'name="token"' in page.text and token not in page.text, path
            assert "not the token of this host" in browser.get("/ui?token=wrong").text
            assert browser.get("/streams").headers["content-type"] == "application/json"   # the API stays JSON
            home = browser.get("/", params={"token": token})       # `/` leads to the page, the token kept
            assert home.status_code == 303 and home.headers["location"] == f"/ui?token={token}", home.headers
            shown = browser.get("/", params={"token": token}, follow_redirects=True)
            assert shown.status_code == 200 and "<h1>mgstreams</h1>" in shown.text
    finally:
        host.terminate()
        assert host.wait(60) == 0
        host.stdout.close()


# -- 8: backfill finds the transformations the host finds; each hint names its own command ----------------------
def test_backfill_finds_the_hosts_transformations_and_hints_name_the_right_command(kafka, tmp_path):
    import os
    import subprocess
    import sys

    from paths import ROOT

    modules = tmp_path / "modules"
    modules.mkdir()
    (modules / "day2_moves.py").write_text(
        "def moved(messages):\n"
        "    return [{'query': 'MERGE (:Moved {offset: $o})', 'parameters': {'o': messages.message_at(i).offset()}}\n"
        "            for i in range(messages.total_messages())]\n")
    topic = kafka.new_topic(partitions=1)
    kafka.produce(topic, 5, partitions=1)
    host = HostProcess(tmp_path / "state", env={"MGSTREAMS_QUERY_MODULES_DIR": str(modules)}).start()
    try:
        with host.client() as client:
            client.create(name="moves", topics=[topic], bootstrap_servers=kafka.bootstrap_servers,
                          transform="day2_moves.moved", sink="null://")
        unknown = invoke("create", "nowhere", "--topic", topic, "--bootstrap", kafka.bootstrap_servers,
                         "--transform", "no_such_day2_module.fn", host=host)
        assert unknown.exit_code == 1 and "MGSTREAMS_QUERY_MODULES_DIR" in unknown.stderr, unknown.stderr
        assert "mgstreams backfill" not in unknown.stderr and "--modules-dir" not in unknown.stderr, unknown.stderr

        # another shell, without the host's environment: the stream's transformation is found all the same
        env = {k: v for k, v in os.environ.items() if k != "MGSTREAMS_QUERY_MODULES_DIR"}
        out = tmp_path / "backfill"
        done = subprocess.run([sys.executable, "-m", "mgstreams", "backfill", "--stream", "moves", "--state-dir",
                               str(host.state_dir), "--from", "earliest", "--until", "latest", "--engine", "local",
                               "--sink", f"cypherl://{out}"], env=env, cwd=ROOT, capture_output=True, text=True,
                              timeout=180)
        assert done.returncode == 0, done.stderr[-2000:]
        assert "".join(f.read_text() for f in out.glob("*.cypherl")).count("Moved") >= 5
        hinted = subprocess.run([sys.executable, "-m", "mgstreams", "backfill", "--topics", topic,
                                 "--bootstrap-servers", kafka.bootstrap_servers, "--from", "earliest",
                                 "--transform", "no_such_day2_module.fn", "--sink", "null://", "--dry-run"],
                                env=env, cwd=ROOT, capture_output=True, text=True, timeout=180)
        assert hinted.returncode == 1 and hinted.stderr.rstrip().endswith("; here: --modules-dir DIR"), hinted.stderr
    finally:
        host.stop()


# -- 9: a restart on defaults delivers again within 10 s on the embedded cluster ------------------------------------
RESTART_BUDGET_S = 10.0


def test_a_stream_restarted_on_defaults_delivers_again_within_10_s(day2, embedded_kafka, tmp_path):
    """The embedded cluster ignores LeaveGroup: a restarted stream waited for its last run's session, 45 s on
    librdkafka's defaults. The stream sets no group timing here (no session.timeout.ms, no heartbeat)."""
    import time

    from stream_helpers import delivered_from_file, wait_until

    kafka = day2.kafka
    topic = kafka.new_topic(partitions=2)
    kafka.produce(topic, 4, partitions=2)
    out = tmp_path / "restart.cypherl"
    with day2.client() as client:
        client.create(name="restarts", topics=[topic], bootstrap_servers=kafka.bootstrap_servers,
                      transform="stream_helpers.offsets_transform", sink=f"cypherl://{out}",
                      consumer_group=f"day2_restart_{uuid.uuid4().hex[:8]}", batch_interval_ms=20)
        assert "session.timeout.ms" not in client.get("restarts").configs
        client.start("restarts")
        wait_until(lambda: out.exists() and len(delivered_from_file(out)) == 4, 60, 0.1, "the first run's messages")
        took = {}
        for how in ("stop and start", "alter", "stop and start again"):
            seen = len(delivered_from_file(out))
            began = time.monotonic()
            if how == "alter":
                client.alter("restarts", batch_size=500)   # a running stream restarts to apply it
            else:
                client.stop("restarts")
                began = time.monotonic()
                client.start("restarts")
            kafka.produce(topic, 2, partitions=2)
            wait_until(lambda n=seen + 2: len(delivered_from_file(out)) >= n, 60, 0.1, f"delivery after {how}")
            took[how] = time.monotonic() - began
        client.stop("restarts")
    assert max(took.values()) < RESTART_BUDGET_S, took
