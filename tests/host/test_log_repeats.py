"""librdkafka's repeated lines collapse to one per kind and interval, with a count; `serve --log-level` (issue 24:
one refused create against 127.0.0.1:1 wrote 194 identical "Connection refused" lines)."""
from __future__ import annotations

import logging
import re
import time

import httpx
import pytest
from host_helpers import HostProcess
from stream_helpers import FAST_REJOIN, wait_until

from mgstreams.embedded_kafka import EmbeddedKafka
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


def test_a_broker_failure_is_logged_once_per_stream_task_not_twice(tmp_path):
    """Issue 46: each refused connection was logged twice by a stream's process, by librdkafka's logger
    (`ERROR mgstreams.librdkafka [stream s, pid N]: FAIL ... Connect to ... failed`) and by the stream's error
    callback (`WARNING mgstreams.worker ...: stream s: kafka: ... Connect to ... failed`): now once, by the stream
    (which names it), in each of its tasks' processes."""
    host = HostProcess(tmp_path / "state")
    try:
        with EmbeddedKafka(brokers=1, initial_rebalance_delay_ms=100) as cluster:
            cluster.create_topic("orders", 2)
            host.start()
            with httpx.Client(base_url=host.url, timeout=60) as api:
                created = api.post("/streams", json={
                    "name": "once", "topics": ["orders"], "bootstrap_servers": cluster.bootstrap_servers,
                    "sink": "null://", "tasks": 2, "configs": FAST_REJOIN})
                assert created.status_code == 201, created.text
                assert api.put("/streams/once/start").status_code == 200
                pids = wait_until(lambda: (s := api.get("/streams/once").json())["status"] == "running"
                                  and len(s["pids"]) == 2 and s["pids"], what="two tasks running")

        def refused_in_each_task() -> bool:   # the cluster is gone: every task's consumer is refused
            log = host.log()
            return all(re.search(rf"mgstreams\.worker \[stream once[^\]]*pid {pid}\]: stream once: kafka: "
                                 rf".*Connect to", log) for pid in pids)
        wait_until(refused_in_each_task, timeout=60, what="each task's refused connection in the log")
    finally:
        host.stop()
    twice = [line for line in host.log().splitlines()
             if "mgstreams.librdkafka [stream once" in line and "Connect to" in line]
    assert not twice, "\n".join(twice[:10])
