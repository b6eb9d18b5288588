"""The host stays responsive (issue 33), through a real `mgstreams serve`:

- calls waiting for an offset change hold no thread: with 40 of them waiting, describe, stop and a short
  set_offset answer at once, and every deadline counts from the request's arrival;
- an alter does not hold its stream across the stop and start of its restart;
- a stopping host restarts nothing and is down within its stop timeout;
- the dashboards answer from the lag sampler's last round, saying how old it is, whatever Kafka does;
- repeated log lines of any logger collapse, in the host and in its stream processes.
"""
from __future__ import annotations

import time
import uuid
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from host_helpers import HostProcess
from stream_helpers import FAST_REJOIN, wait_until

WAITERS = 40          # the count: anyio's worker threads, all of them
HELD_S = 60_000       # the group's first assignment comes after this: the stream waits in `starting`


def create_stream(api: httpx.Client, kafka, name: str, topic: str, **fields) -> None:
    created = api.post("/streams", json={
        "name": name, "topics": [topic], "bootstrap_servers": kafka.bootstrap_servers, "sink": "null://",
        "consumer_group": f"resp_{uuid.uuid4().hex[:8]}", "configs": FAST_REJOIN, **fields})
    assert created.status_code == 201, created.text


def timed(call):
    began = time.monotonic()
    answer = call()
    return answer, time.monotonic() - began


def test_waiting_offset_calls_hold_no_thread(kafka, tmp_path):
    """40 set_offset calls wait (each its own partition, 20 s) on a stream in `starting`: describe, a 1 s
    set_offset and stop still answer at once, the 1 s call within its second and naming its pending change,
    through the API and the Python client alike."""
    topic = kafka.new_topic(partitions=WAITERS + 2)
    with HostProcess(tmp_path / "state") as host, httpx.Client(base_url=host.url, timeout=60) as api, \
            kafka.quick_rebalance(delay_ms=HELD_S), ThreadPoolExecutor(WAITERS) as pool:
        create_stream(api, kafka, "held", topic)
        assert api.put("/streams/held/start").json()["status"] == "starting"

        def wait_one(partition: int) -> float:
            with httpx.Client(base_url=host.url, timeout=60) as own:
                answer, took = timed(lambda: own.patch("/streams/held/offsets", json={
                    "offset": {f"{topic}:{partition}": 0}, "timeout_ms": 20_000}))
            assert answer.status_code == 200 and answer.json()[0]["status"] == "pending", answer.text
            return took
        waiting = [pool.submit(wait_one, p) for p in range(WAITERS)]
        wait_until(lambda: host.log().count("stream held: change ") >= WAITERS, timeout=30,
                   what="every waiting call's change requested (the host's log)")
        time.sleep(0.5)
        assert not any(w.done() for w in waiting), "the calls wait for their changes"

        described, took = timed(lambda: api.get("/streams/held/offsets"))
        assert described.status_code == 200 and took < 3, f"describe answered after {took:.1f} s"

        short, took = timed(lambda: api.patch("/streams/held/offsets", json={
            "offset": {f"{topic}:{WAITERS}": 0}, "timeout_ms": 1000}))
        assert short.status_code == 200 and took < 3, f"a 1 s set_offset answered after {took:.1f} s"
        [change] = short.json()
        assert change["status"] == "pending" and change["change_id"], change

        with host.client() as client:   # the CLI's client: a 1 s call answers, naming its pending change
            [moved], took = timed(lambda: client.set_offset("held", {f"{topic}:{WAITERS + 1}": 0}, timeout=1))
        assert took < 3 and moved.status.value == "pending" and moved.change_id, (took, moved)
        pending = {p["change_id"] for p in api.get("/streams/held/pending").json()}
        assert {change["change_id"], moved.change_id} <= pending   # the caller can cancel what it was told

        stopped, took = timed(lambda: api.put("/streams/held/stop"))
        assert stopped.status_code == 200 and took < 5, f"stop answered after {took:.1f} s"
        took_waiting = [w.result(timeout=30) for w in waiting]
        assert max(took_waiting) < 15, "the stop answered the waiting calls"
