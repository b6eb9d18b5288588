"""The backfill's terminal (issue 24): progress in offsets with records/s and the time left, and no log4j WARN
lines from Spark. `mgstreams backfill` runs as a child process with its stderr on a pseudo-terminal (the
progress bar is drawn on terminals only)."""
from __future__ import annotations

import os
import pty
import re
import select
import subprocess
import sys

import pytest
from configs import MERGE
from paths import ROOT

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def backfill_on_terminal(args: list[str], timeout: float = 180) -> tuple[int, str]:
    main, child = pty.openpty()
    process = subprocess.Popen([sys.executable, "-m", "mgstreams", "backfill", *args], stdout=subprocess.DEVNULL,
                               stderr=child, stdin=subprocess.DEVNULL, cwd=ROOT,
                               env={**os.environ, "COLUMNS": "160", "TERM": "xterm"})
    os.close(child)
    chunks = []
    try:
        while True:
            ready, _, _ = select.select([main], [], [], timeout)
            if not ready:
                break
            try:
                data = os.read(main, 65536)
            except OSError:
                break
            if not data:
                break
            chunks.append(data)
        code = process.wait(30)
    finally:
        os.close(main)
        if process.poll() is None:
            process.kill()
    return code, ANSI.sub("", b"".join(chunks).decode(errors="replace"))


# The Spark case starts a JVM (a child process's local[1]): marked spark, it runs on the worker that holds the
# run's Spark (tests/conftest.py xdist_group), not beside it on the other one.
@pytest.mark.parametrize("engine", ["local", pytest.param("spark", marks=pytest.mark.spark)])
def test_progress_shows_offsets_records_per_second_and_time_left(kafka, tmp_path, engine):
    topic = kafka.new_topic(2)
    kafka.produce(topic, 4000, partitions=2, payload=lambda i: b'{"i": %d, "pad": "%s"}' % (i, b"x" * 200))
    extra = ["--master", "local[1]"] if engine == "spark" else []
    code, err = backfill_on_terminal(["--topics", topic, "--bootstrap-servers", kafka.bootstrap_servers,
                                      "--from", "earliest", "--transform", MERGE, "--engine", engine, *extra,
                                      "--sink", f"cypherl://{tmp_path / 'out'}"])
    assert code == 0, err
    assert re.search(r"[\d,]+/4,000 offsets, \d+/\d+ ranges", err), err
    assert "records/s" in err and "left" in err, err
    if engine == "spark":
        assert not re.search(r"^\S+ \S+ WARN ", err, re.M), [l for l in err.splitlines() if " WARN " in l]
