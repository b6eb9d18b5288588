"""The CLI's tables keep their key columns at any terminal width, and print whole values when piped (issue 24).

Each command runs as `python -m mgstreams` in a child process against a real host: on a pseudo-terminal
with COLUMNS set to 60, 80, 120 and 250 (what a terminal of that width tells rich), and piped.
"""
from __future__ import annotations

import json
import os
import pty
import re
import select
import subprocess
import sys
import uuid

import pytest
from cli_helpers import mgstreams
from configs import MERGE
from paths import ROOT
from stream_helpers import SETTLED_MS, wait_until

WIDTHS = (60, 80, 120, 250)
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
POISON = "stream_helpers.poison_transform"


def on_terminal(url: str, width: int, *args: str) -> str:
    """`mgstreams ARGS` with a pseudo-terminal COLUMNS wide as stdout; its output, colours removed."""
    main, child = pty.openpty()
    env = {**os.environ, "MGSTREAMS_URL": url, "COLUMNS": str(width), "LINES": "50", "TERM": "xterm"}
    process = subprocess.Popen([sys.executable, "-m", "mgstreams", *args], stdout=child, stderr=subprocess.PIPE,
                               stdin=subprocess.DEVNULL, env=env, cwd=ROOT)
    os.close(child)
    chunks = []
    try:
        while True:
            ready, _, _ = select.select([main], [], [], 30)
            if not ready:
                break
            try:
                data = os.read(main, 65536)
            except OSError:   # the child closed the terminal
                break
            if not data:
                break
            chunks.append(data)
        assert process.wait(30) == 0, process.stderr.read()
    finally:
        os.close(main)
        process.stderr.close()
    return ANSI.sub("", b"".join(chunks).decode().replace("\r\n", "\n"))


def piped(url: str, *args: str) -> str:
    done = mgstreams(*args, env={"MGSTREAMS_URL": url, "COLUMNS": "60"})
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.fixture
def failed(kafka, host, tmp_path):
    """A stream in `error` (its transformation refuses a message) with long servers, sink and error, and a
    running one beside it."""
    topic = kafka.new_topic(partitions=2)
    kafka.produce(topic, 6, partitions=2, payload=lambda i: b"poison-" + str(i).encode())
    sink_dir = tmp_path / ("a-rather-long-directory-name-for-the-sink-" * 2)
    sink_dir.mkdir()
    with host.client() as client:
        for name, transform in (("orders_with_a_long_name", POISON), ("other", MERGE)):
            client.create(name=name, topics=[topic], bootstrap_servers=kafka.bootstrap_servers, transform=transform,
                          sink=f"cypherl://{sink_dir / (name + '.cypherl')}", batch_interval_ms=20,
                          consumer_group=f"tables_{uuid.uuid4().hex[:8]}")
        client.start("orders_with_a_long_name")
        wait_until(lambda: client.get("orders_with_a_long_name").status.value == "error", 90, 0.2,
                   "the stream to fail")
        error = client.get("orders_with_a_long_name").error
        # top reads the lag rounds (every few seconds): wait for the round that saw the failure
        wait_until(lambda: client.lag("orders_with_a_long_name").stream_status.value == "error", 90, 0.2,
                   "a lag round to see the stream failed")
    assert error and len(error) > 60, error
    return {"topic": topic, "error": error, "sink_dir": str(sink_dir)}


def rows_of(output: str, header: str) -> list[str]:
    lines = output.splitlines()
    at = next(i for i, line in enumerate(lines) if header in line.split())
    return lines[at:]


def test_list_keeps_name_status_and_topics_at_every_width_and_pipes_whole_values(failed, host, kafka):
    for width in WIDTHS:
        out = on_terminal(host.url, width, "list")
        lines = rows_of(out, "NAME")
        assert lines[0].split()[:3] == ["NAME", "STATUS", "TOPICS"], (width, out)
        assert "ERROR" in lines[0], (width, out)
        rows = [line.split() for line in lines[1:] if line.strip() and not line.startswith(" ")]
        assert [r[:3] for r in rows if r[0] in ("orders_with_a_long_name", "other")] == \
            [["orders_with_a_long_name", "error", failed["topic"]], ["other", "created", failed["topic"]]], \
            (width, out)
        assert max(len(line.rstrip()) for line in lines) <= width, (width, out)
        # the error is folded, not cut: every word of it is in the table
        assert " ".join(out.split()).count(failed["error"].split()[0]) >= 1
        if width < 250:
            assert failed["sink_dir"] not in out, "a long sink gives way"
            assert "…" in out or "not shown" in out, (width, out)
    whole = piped(host.url, "list")
    header, *rows = whole.splitlines()
    assert header.split() == ["NAME", "STATUS", "TOPICS", "GROUP", "BOOTSTRAP-SERVERS", "TRANSFORM", "SINK", "ERROR"]
    assert [r.split()[:3] for r in rows] == [["orders_with_a_long_name", "error", failed["topic"]],
                                             ["other", "created", failed["topic"]]]
    assert failed["error"] in rows[0] and failed["sink_dir"] in rows[0] and kafka.bootstrap_servers in rows[0]
    assert "…" not in whole


def test_describe_check_history_and_lag_keep_topic_partition_offset_and_lag(failed, host):
    name = "other"
    topic = failed["topic"]

    def caught_up() -> bool:
        return [r["committed_offset"] for r in json.loads(piped(host.url, "describe", name, "--json"))] == [3, 3]
    piped(host.url, "start", name)
    wait_until(caught_up, 60, 0.2, "the stream to catch up")
    changes = json.loads(piped(host.url, "set-offset", name, "1", "--json", "--timeout", str(SETTLED_MS / 1000)))   # one history row per partition
    assert {c["status"] for c in changes} == {"applied"}, changes
    wait_until(caught_up, 60, 0.2, "the stream to catch up again")
    for width in WIDTHS:
        described = rows_of(on_terminal(host.url, width, "describe", name), "TOPIC")
        header = described[0].split()
        for column in ("TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG"):
            assert column in header, (width, described)
        got = [dict(zip(header, line.split(), strict=False)) for line in described[1:3]]
        assert [(r["TOPIC"], r["PARTITION"], r["CURRENT-OFFSET"], r["LOG-END-OFFSET"], r["LAG"]) for r in got] == \
            [(topic, str(p), "3", "3", "0") for p in range(2)], (width, described)

        checked = on_terminal(host.url, width, "check", name, "earliest", "--limit", "1")
        lines = rows_of(checked, "TOPIC")
        assert lines[0].split()[:3] == ["TOPIC", "PARTITION", "OFFSET"], (width, checked)
        starts = [line.split()[:3] for line in lines[1:] if line.startswith(topic)]
        assert starts == [[topic, "0", "0"], [topic, "1", "0"]], (width, checked)

        history = rows_of(on_terminal(host.url, width, "history", name), "CHANGE-ID")
        header = history[0].split()
        assert header[:4] == ["CHANGE-ID", "CHANGED-AT", "TOPIC", "PARTITION"] and "OFFSET" in header \
            and "STATUS" in header, (width, history)
        rows = [dict(zip(header, line.split(), strict=False)) for line in history[1:] if line.startswith(tuple("0123456789"))]
        assert sorted((r["TOPIC"], r["PARTITION"], r["OFFSET"], r["STATUS"]) for r in rows) == \
            [(topic, "0", "1", "applied"), (topic, "1", "1", "applied")], (width, history)

        lag = rows_of(on_terminal(host.url, width, "lag", name), "TOPIC")
        header = lag[0].split()
        for column in ("TOPIC", "PARTITION", "CURRENT-OFFSET", "LAG", "STATUS"):
            assert column in header, (width, lag)


def test_pending_json_writes_times_as_the_table_does(failed, host):
    name = "other"
    assert json.loads(piped(host.url, "set-offset", name, json.dumps({f"{failed['topic']}:0": 2}), "--json"))
    rows = json.loads(piped(host.url, "pending", name, "--json"))
    assert [(r["topic"], r["partition"], r["offset"]) for r in rows] == [(failed["topic"], 0, 2)], rows
    table = piped(host.url, "pending", name).splitlines()
    requested = table[1].split()[table[0].split().index("REQUESTED-AT")]
    assert rows[0]["requested_at"].endswith("Z") and requested.endswith("Z"), (rows, table)
    assert rows[0]["requested_at"].startswith(requested[:-1]), (rows, table)


def on_terminal_pressing(url: str, width: int, keys: list[tuple[str, bytes]], *args: str) -> bytes:
    """`mgstreams ARGS` on a pseudo-terminal (stdin too, so it reads keys): each (text, key) sends `key` once
    `text` has appeared in the output; the raw output, colours kept."""
    main, child = pty.openpty()
    env = {**os.environ, "MGSTREAMS_URL": url, "COLUMNS": str(width), "LINES": "60", "TERM": "xterm"}
    process = subprocess.Popen([sys.executable, "-m", "mgstreams", *args], stdout=child, stdin=child,
                               stderr=subprocess.PIPE, env=env, cwd=ROOT)
    os.close(child)
    out, waiting = b"", list(keys)
    try:
        while process.poll() is None or select.select([main], [], [], 0)[0]:
            ready, _, _ = select.select([main], [], [], 30)
            if not ready:
                break
            try:
                data = os.read(main, 65536)
            except OSError:
                break
            if not data:
                break
            out += data
            if waiting and waiting[0][0].encode() in ANSI.sub("", out.decode(errors="ignore")).encode():
                os.write(main, waiting.pop(0)[1])
        assert process.wait(30) == 0, process.stderr.read()
    finally:
        os.close(main)
        process.stderr.close()
    return out


def test_top_fits_the_terminal_colours_verdicts_and_opens_a_streams_partitions(failed, host):
    """Issue 46: top's rows went past the terminal (eleven key columns and a message cut short), its verdicts were
    plain text, and a stream's partitions were a separate command away."""
    words = "".join(failed["error"].split()[:8])
    for width in (100, 120, 250):
        # the message, the last column, is folded onto more lines (not cut): read back without the whitespace;
        # top shows the lag rounds, so the round that saw the failure is waited for, then the table is checked
        shown: list[str] = []

        def folded_error_shown(width=width, shown=shown) -> bool:
            shown[:] = [on_terminal(host.url, width, "top", "--once")]
            return words in "".join(shown[0].split())
        wait_until(folded_error_shown, 60, 0.5, f"top at {width} columns to show the failed stream's error",
                   describe=lambda shown=shown: shown[0] if shown else "nothing")
        out = shown[0]
        lines = rows_of(out, "NAME")
        assert lines[0].split()[:4] == ["#", "NAME", "STATE", "STATUS"] and "MESSAGE" in lines[0], (width, out)
        assert max(len(line.rstrip()) for line in lines) <= width, (width, out)
    raw = on_terminal_pressing(host.url, 120, [("MESSAGE", b"1"), ("orders_with_a_long_name: partitions", b"q")],
                               "top", "--interval", "60")   # a key opens at once, not at the next refresh
    text = ANSI.sub("", raw.decode(errors="replace"))
    assert "orders_with_a_long_name: partitions" in text and "PARTITION" in text, text[-3000:]
    coloured = re.findall(r"\x1b\[([0-9;]*)m(STOP|OK|ERR|STARTING|WARN|STALL|REWIND)\b", raw.decode(errors="replace"))
    assert coloured and all(code for code, _ in coloured), raw[-2000:]


def test_describe_has_a_task_column(failed, host):
    out = rows_of(piped(host.url, "describe", "other"), "TOPIC")
    header = out[0].split()
    assert "TASK" in header, out
    assert {dict(zip(header, line.split(), strict=False))["TASK"] for line in out[1:3]} == {"-"}, out   # not running
