"""What an operator reads about a host's streams (issue 24), through a real host:

- its log: one line per lifecycle event (create, start, running, stop, alter, error, restart, drop) and per
  offset change (requested, applied, cancelled; revert naming the change it reverts), each with the stream's
  name and the change id, read from the host's own stderr;
- a `starting` stream says what it waits for (`detail`: GET, `mgstreams list`, `describe`'s caption), with the
  session timeout of its own config, and says nothing once running.
"""
from __future__ import annotations

import os
import re
import signal
import time
import uuid

import httpx
from cli_helpers import mgstreams
from stream_helpers import FAST_REJOIN, delivered_from_file, wait_until

SESSION = {"session.timeout.ms": 12_000}
REBALANCE_IN_PROGRESS = 27   # Kafka's error code: the client joins again   # longer than the rebalance delay below: a member kept waiting stays


def stream_lines(log: str, name: str) -> list[tuple[str, str]]:
    """(level, message) of the host's log lines about stream `name`, in order."""
    found = re.findall(rf"^\S+ \S+ (INFO|WARNING|ERROR) mgstreams\.registry: stream {name}: (.*)$", log, re.M)
    return [(level, message) for level, message in found]


def test_a_starting_stream_says_what_it_waits_for(host, kafka, embedded_kafka, tmp_path):
    """The group is held, not timed: the embedded coordinator refuses every JoinGroup (REBALANCE_IN_PROGRESS, which
    the client retries) until the test has read the detail through GET, `list` and `describe`, then lets it join
    (a 5 s rebalance delay raced the reads on a loaded machine)."""
    topic = kafka.new_topic(partitions=1)
    api = httpx.Client(base_url=host.wait_ready(), timeout=60)
    created = api.post("/streams", json={
        "name": "waiting", "topics": [topic], "bootstrap_servers": kafka.bootstrap_servers, "sink": "null://",
        "consumer_group": f"detail_{uuid.uuid4().hex[:8]}", "configs": SESSION})
    assert created.status_code == 201 and created.json()["detail"] is None, created.text
    embedded_kafka.push_request_errors("JoinGroup", *[REBALANCE_IN_PROGRESS] * 100_000)
    try:
        started = api.put("/streams/waiting/start").json()
        assert started["status"] == "starting", started
        wait_until(lambda: api.get("/streams/waiting").json()["detail"], what="a detail")
        info = api.get("/streams/waiting").json()
        assert info["status"] == "starting" and info["error"] is None
        assert info["detail"].startswith("waiting for the group to assign partitions ("), info
        assert "session.timeout.ms (12 s)" in info["detail"], info
        assert len(info["detail"]) <= 110, info["detail"]      # a column of `mgstreams list` (issue 35)
        listed = mgstreams("--url", host.url, "list", script=True)   # piped: whole values
        assert listed.returncode == 0 and "DETAIL" in listed.stdout.splitlines()[0]
        assert "waiting for the group to assign partitions" in listed.stdout, listed.stdout
        described = mgstreams("--url", host.url, "describe", "waiting", script=True)
        assert "waiting for the group to assign partitions" in " ".join(described.stdout.split()), described.stdout
    finally:
        embedded_kafka.clear_request_errors("JoinGroup")
    with kafka.quick_rebalance():
        wait_until(lambda: api.get("/streams/waiting").json()["status"] == "running", timeout=60, what="running")
    assert api.get("/streams/waiting").json()["detail"] is None, "cleared once running"
    assert all(s["detail"] is None for s in api.get("/streams").json())


def test_the_host_log_has_a_line_per_lifecycle_event_and_offset_change(host, kafka, tmp_path):
    topic = kafka.new_topic(partitions=2)
    kafka.produce(topic, 4, partitions=2)
    out = tmp_path / "out.cypherl"
    group = f"log_{uuid.uuid4().hex[:8]}"
    api = httpx.Client(base_url=host.wait_ready(), timeout=60)
    with kafka.quick_rebalance():
        assert api.post("/streams", json={
            "name": "logged", "topics": [topic], "bootstrap_servers": kafka.bootstrap_servers,
            "transform": "stream_helpers.offsets_transform", "sink": f"cypherl://{out}", "consumer_group": group,
            "batch_interval_ms": 20, "configs": FAST_REJOIN}).status_code == 201
        assert api.put("/streams/logged/start").status_code == 200
        wait_until(lambda: api.get("/streams/logged").json()["status"] == "running", what="running")
        wait_until(lambda: len(delivered_from_file(out)) == 4, what="the first messages")
        [moved] = api.patch("/streams/logged/offsets", json={"offset": {f"{topic}:0": 1}, "timeout_ms": 30_000}).json()
        assert moved["status"] == "applied", moved
        reverted = api.post(f"/streams/logged/history/{moved['change_id']}/revert", json={"timeout_ms": 30_000}).json()
        assert [c["status"] for c in reverted] == ["applied"], reverted
        assert api.put("/streams/logged/stop").status_code == 200
        pending = api.patch("/streams/logged/offsets", json={"offset": "earliest"}).json()
        assert {c["status"] for c in pending} == {"pending"}, pending
        assert len(api.delete("/streams/logged/pending").json()) == 2
        assert api.patch("/streams/logged", json={"batch_size": 5}).status_code == 200
        assert api.put("/streams/logged/start").status_code == 200
        wait_until(lambda: api.get("/streams/logged").json()["status"] == "running", what="running again")
        pid = api.get("/streams/logged").json()["pid"]
        os.kill(pid, signal.SIGKILL)
        wait_until(lambda: api.get("/streams/logged").json()["restarts"] == 1, what="restarted")
        wait_until(lambda: api.get("/streams/logged").json()["status"] == "running", what="running after restart")
        assert api.delete("/streams/logged").status_code == 200
    assert host.stop() == 0

    lines = stream_lines(host.log(), "logged")
    messages = [m for _, m in lines]
    m1, m2, m3 = moved["change_id"], reverted[0]["change_id"], pending[0]["change_id"]
    expected = [
        ("INFO", rf"created \(topics {topic}, group {group}, bootstrap {re.escape(kafka.bootstrap_servers)}, "
                 rf"transform stream_helpers\.offsets_transform, sink cypherl://{re.escape(str(out))}\)"),
        ("INFO", r"start: starting \(pid \d+\)"),
        ("INFO", r"running \(the group assigned its partitions after \d+\.\d s\)"),
        ("INFO", rf"change {m1} requested: {topic}:0 2 -> 1"),
        ("INFO", rf"change {m1} applied: {topic}:0 2 -> 1"),
        ("INFO", rf"change {m2} requested \(revert of change {m1}\): {topic}:0 \d -> 2"),
        ("INFO", rf"change {m2} applied: {topic}:0 \d -> 2"),
        ("INFO", r"stopped \(was running\)"),
        ("INFO", rf"change {m3} requested: {topic}:0 2 -> 0, {topic}:1 2 -> 0 "
                 rf"\(stream not running: pending until it starts\)"),
        ("INFO", rf"change {m3} cancelled: {topic}:0 2 -> 0, {topic}:1 2 -> 0"),
        ("INFO", r"altered \(batch_size 1000 -> 5\)"),
        ("INFO", r"start: starting \(pid \d+\)"),
        ("INFO", r"running \(the group assigned"),
        ("WARNING", rf"error: stream process \(pid {pid}\) killed by signal 9 \(SIGKILL\); restarting in 1 s "
                    rf"\(restart 1\)"),
        ("INFO", r"restart 1 \(restart: on-failure\): starting \(pid \d+\)"),
        ("INFO", r"running \(the group assigned"),
        ("INFO", r"dropped \(was running\)"),
    ]
    assert len(lines) == len(expected), "\n".join(messages)
    for (level, message), (want_level, pattern) in zip(lines, expected, strict=False):
        assert level == want_level and re.match(pattern, message), (level, message, pattern, messages)


def test_a_refused_start_and_a_failed_restart_are_logged(host, kafka):
    """An error a caller does not see (a restart after a crash fails) reaches the operator through the log."""
    api = httpx.Client(base_url=host.wait_ready(), timeout=60)
    topic = kafka.new_topic(partitions=1)
    assert api.post("/streams", json={"name": "short", "topics": [topic], "bootstrap_servers": kafka.bootstrap_servers,
                                      "sink": "null://", "restart": "never"}).status_code == 201
    with kafka.quick_rebalance():
        assert api.put("/streams/short/start").status_code == 200
        wait_until(lambda: api.get("/streams/short").json()["pid"], what="a process")
        pid = api.get("/streams/short").json()["pid"]
        os.kill(pid, signal.SIGKILL)
        wait_until(lambda: api.get("/streams/short").json()["status"] == "error", what="error")
    time.sleep(0.2)
    lines = stream_lines(host.log(), "short")
    assert ("WARNING", f"error: stream process (pid {pid}) killed by signal 9 (SIGKILL); not restarted "
                       f"(restart: never)") in lines, lines
