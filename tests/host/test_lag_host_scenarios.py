"""Steady scenarios through a real host (`--lag-sample-interval 0.2`): each holds its verdict for the whole run
(issue 24: a stream falling behind read OK, OK, WARN x11, OK x7; a stopped one read OK at 10 records/s).

The host's answers are read every half interval for several seconds (tens of windows); once the stream has left
STARTING, every answer must be the scenario's verdict.
"""
from __future__ import annotations

import threading
import time

import pytest
from confluent_kafka import Producer
from lag_host import INTERVAL, create, lag_of, wait_lag

RUN_S = 8.0


def observe(api, name: str, seconds: float = RUN_S) -> list[dict]:
    answers = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        answers.append(lag_of(api, name))
        time.sleep(INTERVAL / 2)
    return answers


def settled(answers: list[dict]) -> list[tuple[str, float, int]]:
    """(verdict, records/s, total lag) from the first answer of the running stream past STARTING on."""
    got = [(a["status"], a["records_per_second"], a["total_lag"]) for a in answers]
    first = next(i for i, a in enumerate(answers) if a["stream_status"] == "running" and a["status"] != "STARTING")
    return got[first:]


class Producing:
    """A producer thread: `rate` messages/s of `payload` to partition 0 while the context is open."""

    def __init__(self, kafka, topic: str, rate: float, payload: bytes):
        self.kafka, self.topic, self.rate, self.payload = kafka, topic, rate, payload
        self.stop = threading.Event()

    def __enter__(self):
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()
        return self

    def _run(self):
        producer = Producer({"bootstrap.servers": self.kafka.bootstrap_servers, "linger.ms": 5})
        began, sent = time.monotonic(), 0
        while not self.stop.is_set():
            due = int((time.monotonic() - began) * self.rate)
            for _ in range(due - sent):
                producer.produce(self.topic, value=self.payload, partition=0)
            sent = max(sent, due)
            producer.poll(0)
            time.sleep(0.01)
        producer.flush(10)

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join(15)


def test_under_provisioned_is_warn_for_the_whole_run(lag_host, api, kafka):
    """~150/s produced, at most ~40/s taken (25 ms a message), 300 behind from the start: WARN, never OK."""
    topic = kafka.new_topic(partitions=1)
    kafka.produce(topic, 300, partitions=1, payload=lambda i: b"sleep:0.025")
    with Producing(kafka, topic, 150, b"sleep:0.025"):
        create(api, kafka, "behind", topic, transform="stream_helpers.crashing_transform", batch_size=4)
        try:
            got = settled(observe(api, "behind"))
        finally:
            api.delete("/streams/behind")
    assert {verdict for verdict, _, _ in got} == {"WARN"}, got
    assert got[-1][2] > got[0][2] and all(rate > 0 for _, rate, _ in got[len(got) // 2:]), got


def test_caught_up_is_ok_for_the_whole_run(lag_host, api, kafka):
    topic = kafka.new_topic(partitions=1)
    with Producing(kafka, topic, 40, b'{"i": 1}'):
        create(api, kafka, "keeping", topic)
        try:
            wait_lag(api, "keeping", lambda lag: lag["stream_status"] == "running", "keeping running")
            got = settled(observe(api, "keeping"))
        finally:
            api.delete("/streams/keeping")
    assert {verdict for verdict, _, _ in got} == {"OK"}, got


def test_idle_is_ok_for_the_whole_run(lag_host, api, kafka):
    topic = kafka.new_topic(partitions=2)
    kafka.produce(topic, 20, partitions=2)
    create(api, kafka, "idle", topic)
    try:
        wait_lag(api, "idle", lambda lag: lag["stream_status"] == "running" and lag["total_lag"] == 0, "idle caught up")
        got = settled(observe(api, "idle", 4.0))
    finally:
        api.delete("/streams/idle")
    assert {verdict for verdict, _, _ in got} == {"OK"}, got


def test_stopped_is_stop_at_once_with_no_records_per_second(lag_host, api, kafka):
    topic = kafka.new_topic(partitions=1)
    with Producing(kafka, topic, 40, b'{"i": 1}'):
        create(api, kafka, "parked", topic)
        try:
            wait_lag(api, "parked", lambda lag: lag["stream_status"] == "running" and lag["records_per_second"] > 0,
                     "parked consuming")
            assert api.put("/streams/parked/stop").json()["status"] == "stopped"
            stopped_at = time.monotonic()
            first = wait_lag(api, "parked", lambda lag: lag["stream_status"] == "stopped", "a round after the stop",
                             timeout=5)
            assert time.monotonic() - stopped_at < 10 * INTERVAL, "at once, not after a window"
            got = [first] + observe(api, "parked", 4.0)
        finally:
            api.delete("/streams/parked")
    assert {(a["status"], a["records_per_second"]) for a in got} == {("STOP", 0.0)}, got
    assert got[-1]["total_lag"] > got[0]["total_lag"] and not got[-1]["partitions"][0]["alarm"]


@pytest.mark.parametrize("partitions", [2])
def test_a_young_stream_is_never_stall(lag_host, api, kafka, partitions):
    """A stream whose second partition waits behind a slow first one: STARTING or OK, never STALL, while young."""
    topic = kafka.new_topic(partitions=partitions)
    kafka.produce(topic, 40, partitions=partitions, payload=lambda i: b"sleep:0.02")
    create(api, kafka, "young", topic, transform="stream_helpers.crashing_transform", batch_size=40)
    try:
        answers = observe(api, "young", 1.5)
    finally:
        api.delete("/streams/young")
    assert all(p["status"] != "STALL" for a in answers for p in a["partitions"]), answers
