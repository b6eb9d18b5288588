"""The chaos soak (issue 10): short runs end to end (`python -m bench.soak` in its own process), with its figures read
from the last line; tests/unit/test_soak_checker.py checks its checker on hand-made sink histories."""
from __future__ import annotations

import re
import subprocess
import sys

import pytest
from paths import ROOT

LAST = re.compile(r"^soak: (\d+) records, (\d+) faults \((.*)\), lost (\d+), stale (\d+), contradictions (\d+), "
                  r"duplicates (\d+), secrets in logs (\d+)$")

FOREIGN = re.compile(r"foreign members: \d+, consumed (?P<consumed>\d+), committed (?P<commits>\d+) times")
TASKS = re.compile(r"^  soak_e: (?P<lines>\d+) lines;", re.M)
CUTS = re.compile(r"file cuts: \d+, partitions whose stored offset they took back (?P<moved>\d+)")


def short_soak(*extra: str, timeout: float) -> tuple:
    """Run a 10 s soak (it still goes through every fault kind once, about 12 steps of ~1 s, before it stops):
    the process, its last line's figures and the faults by kind."""
    done = subprocess.run([sys.executable, "-m", "bench.soak", "--seconds", "10", "--interval", "0.8",
                           "--seed", "3", *extra], cwd=ROOT, capture_output=True, text=True, timeout=timeout)
    lines = done.stdout.strip().splitlines()
    assert lines, done.stderr[-3000:]
    match = LAST.match(lines[-1])
    assert match, done.stdout[-3000:] + done.stderr[-3000:]
    records, faults, by_kind, lost, stale, contradictions, duplicates, leaked = match.groups()
    kinds = dict((k, int(n)) for k, n in (part.rsplit(" ", 1) for part in by_kind.split(", ")))
    return done, (records, faults, lost, stale, contradictions, duplicates, leaked), kinds


@pytest.mark.slow
def test_a_short_soak_loses_nothing_and_leaks_no_secret():
    done, (records, faults, lost, stale, contradictions, duplicates, leaked), kinds = short_soak(timeout=180)
    assert (int(lost), int(stale), int(contradictions), int(leaked)) == (0, 0, 0, 0), done.stdout[-4000:]
    assert done.returncode == 0, done.stdout[-4000:]
    assert int(records) > 1000 and int(faults) == sum(kinds.values())
    assert {"host_kill", "member_join", "set_offset", "broker_down", "errors:OffsetCommit", "errors:Heartbeat",
            "errors:JoinGroup", "errors:Fetch", "leader_move", "coordinator_move"} <= set(kinds), kinds
    assert {"sink_failure", "transform_failure"} & set(kinds), kinds    # counted when a batch hit them
    # Issue 30: a foreign member that read and committed (the stream takes over where it committed; what it
    # consumed and committed past is not lost), and revert, cancel and alter calls through the host's API.
    assert {"foreign_member", "revert", "cancel", "alter"} <= set(kinds), kinds
    # ... and a `tasks: 2` stream (on a real FalkorDB server over Bolt, judged from the graph) with one of its
    # tasks killed
    assert "task_kill" in kinds and int(TASKS.search(done.stdout)["lines"]) > 0, done.stdout[-4000:]
    foreign = FOREIGN.search(done.stdout)
    assert foreign and int(foreign["consumed"]) > 0 and int(foreign["commits"]) > 0, done.stdout[-4000:]


@pytest.mark.slow
def test_a_short_exactly_once_soak_writes_each_offset_once_through_kills_and_ambiguous_commits():
    """Issue 21: the same faults plus SIGKILLs of stream processes (often mid-append) and kills right after an
    append, before its Kafka commit; every offset is in the sink file once per continuation."""
    done, (records, faults, lost, stale, contradictions, duplicates, leaked), kinds = \
        short_soak("--delivery", "exactly_once", timeout=240)
    assert (int(lost), int(stale), int(contradictions), int(duplicates), int(leaked)) == (0, 0, 0, 0, 0), \
        done.stdout[-4000:]
    assert done.returncode == 0, done.stdout[-4000:]
    assert int(records) > 1000
    assert {"stream_kill", "ambiguous_commit", "host_kill", "set_offset", "member_join", "task_kill"} <= set(kinds), \
        kinds
    assert int(TASKS.search(done.stdout)["lines"]) > 0, done.stdout[-4000:]
    # Issue 34: the file cut back while the stream runs (it realigns, with a history row per partition taken
    # back: a contradiction otherwise) and the sink changed to a new file (it continues where the stream stood:
    # a replay would be duplicates, a jump lost records), and issue 30's revert, cancel and alter.
    assert {"file_cut", "sink_change", "revert", "cancel", "alter"} <= set(kinds), kinds
    # Issue 42: a cancel right after a sink change (refused while its carry-over is pending), also of the tasks
    # stream, moved between two FalkorDB servers (issue 41: the graph is real)
    assert {"sink_change_cancel", "graph_sink_change"} <= set(kinds), kinds
    cuts = CUTS.search(done.stdout)
    assert cuts and int(cuts["moved"]) > 0, done.stdout[-4000:]
    assert "killed by signal 9" in done.stdout, "a stream process was killed and restarted"
