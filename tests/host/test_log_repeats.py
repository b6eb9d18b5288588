"""librdkafka's repeated lines collapse to one per kind and interval, with a count; `serve --log-level` (issue 24:
one refused create against 127.0.0.1:1 wrote 194 identical "Connection refused" lines)."""
from __future__ import annotations

import logging
import time

import pytest
from host_helpers import HostProcess

from stream_registry.errors import StreamError
from stream_registry.log_repeats import RepeatCollapser, collapse_repeats, shape

FAIL = ("FAIL [rdkafka#consumer-{n}] [thrd:{thread}]: 127.0.0.1:1/bootstrap: Connect to ipv4#127.0.0.1:1 failed: "
        "Connection refused (after {ms}ms in state CONNECT)")


class Clock:
    now = 0.0

    def __call__(self) -> float:
        return self.now


def record(message: str, level: int = logging.ERROR) -> logging.LogRecord:
    return logging.LogRecord("mgstreams.librdkafka", level, __file__, 1, message, (), None)


def test_the_first_of_a_kind_passes_then_a_count_per_interval():
    clock = Clock()
    collapser = RepeatCollapser(10.0, clock)
    passed = []
    for i in range(200):   # 20 lines a second for 10 s
        clock.now = i * 0.05
        r = record(FAIL.format(n=3, thread="127.0.0.1:1/bootstrap", ms=i % 7))
        if collapser.filter(r):
            passed.append(r.getMessage())
    clock.now = 10.5
    last = record(FAIL.format(n=3, thread="main", ms=0))
    assert collapser.filter(last)
    assert len(passed) == 1 and passed[0].startswith("FAIL")
    assert last.getMessage().endswith("(and 199 more like it in the last 10 s)"), last.getMessage()
    other = record("FAIL [rdkafka#consumer-3] [thrd:main]: other broker: Connect failed: Connection refused")
    assert collapser.filter(other), "another kind of line passes at once"
    assert collapser.filter(record(FAIL.format(n=3, thread="x", ms=1), logging.WARNING)), "another level too"
    assert shape("a [thrd:GroupCoordinator]: after 12ms") == "a: after Nms"


def test_installed_once():
    logger = logging.getLogger("mgstreams.test_repeats")
    collapse_repeats("mgstreams.test_repeats")
    collapse_repeats("mgstreams.test_repeats")
    assert sum(isinstance(f, RepeatCollapser) for f in logger.filters) == 1


def test_a_refused_cluster_fills_no_log_and_log_level_applies(tmp_path):
    """A create against 127.0.0.1:1 (nothing listens) retries for seconds: the log holds a few lines per kind."""
    host = HostProcess(tmp_path / "state", extra_args=("--log-level", "info")).start()
    try:
        with host.client() as client:
            with pytest.raises(StreamError, match="^bootstrap_servers: "):   # refused: nothing listens there
                client.create(name="nowhere", topics=["orders"], bootstrap_servers="127.0.0.1:1", sink="null://")
            time.sleep(1)
    finally:
        host.stop()
    lines = [line for line in host.log_path.read_text().splitlines() if "Connection refused" in line]
    assert lines, "librdkafka's failures still reach the log"
    assert len(lines) <= 12, "\n".join(lines[:40])
    quiet = HostProcess(tmp_path / "quiet", extra_args=("--log-level", "warning")).start()
    quiet.stop()
    assert " INFO " not in quiet.log_path.read_text()
