"""Issue 42: an exactly-once sink stores the change mark beside its offsets. Through a real host on the embedded
cluster: `set_stream_offset` stored in the cypherl sink, the stream process SIGKILLed while the Kafka commit of
the change is still being retried (OffsetCommit answers COORDINATOR_LOAD_IN_PROGRESS), so the group holds no mark
and the host has not recorded the change. The restarted stream reads the sink's mark: the change is recorded once,
as the move it was (20 -> 10), not moved again, and the sink holds 10..19 a second time only once.

Before the sink kept marks, the restart applied the change a second time (history: 10 -> 10, the move it made
lost)."""
from __future__ import annotations

import os
import signal
import uuid
from collections import Counter

import httpx
import pytest
from configs import stream_body
from confluent_kafka import KafkaError
from stream_helpers import FAST_REJOIN, delivered_from_file, wait_until

from stream_registry.graph.cypherl_frames import offsets_in_cypherl

pytestmark = pytest.mark.usefixtures("quick_rebalance")


def test_a_change_stored_in_the_sink_before_a_kill_is_recorded_once_from_the_sinks_mark(
        host, kafka, embedded_kafka, tmp_path):
    topic = kafka.new_topic(partitions=1)
    kafka.produce(topic, 20, partitions=1)
    out = tmp_path / "out.cypherl"
    name = f"m_{uuid.uuid4().hex[:8]}"
    with httpx.Client(base_url=host.url, timeout=90) as api:
        body = stream_body(kafka, topic, out, name=name, group=f"g_{name}", delivery="exactly_once",
                           transform="stream_helpers.offsets_transform", batch_interval_ms=20, configs=FAST_REJOIN)
        api.post("/streams", json=body).raise_for_status()
        api.put(f"/streams/{name}/start").raise_for_status()

        def state() -> dict:
            return api.get(f"/streams/{name}").json()

        def committed() -> int | None:
            return api.get(f"/streams/{name}/offsets").json()[0]["committed_offset"]
        wait_until(lambda: committed() == 20, 60, what="caught up")
        pid = state()["pid"]
        embedded_kafka.push_request_errors("OffsetCommit", *[KafkaError.COORDINATOR_LOAD_IN_PROGRESS] * 60)
        [change] = api.patch(f"/streams/{name}/offsets", json={"offset": 10, "timeout_ms": 100}).json()
        assert change["status"] == "pending", change
        wait_until(lambda: offsets_in_cypherl(str(out), name) == {(topic, 0): 10}, 30,
                   what="the change stored in the sink")
        os.kill(pid, signal.SIGKILL)   # its commit still retried: no mark in the group, nothing recorded
        wait_until(lambda: state()["status"] == "error", 10, interval=0.02, what="the kill seen")
        assert api.get(f"/streams/{name}/history").json() == [], "not recorded before the kill"
        api.put(f"/streams/{name}/start").raise_for_status()

        wait_until(lambda: Counter(o for _, _, o in delivered_from_file(out)) ==
                   Counter([*range(20), *range(10, 20)]), 60, what="10..19 delivered again, once",
                   describe=lambda: (Counter(o for _, _, o in delivered_from_file(out)), state()))
        rows = wait_until(lambda: [r for r in api.get(f"/streams/{name}/history").json()
                                   if r["change_id"] == change["change_id"]], 30, what="the change recorded")
        assert [(r["previous_offset"], r["offset"], r["status"]) for r in rows] == [(20, 10, "applied")], rows
        assert api.get(f"/streams/{name}/pending").json() == [], "nothing left to apply"
        kafka.produce(topic, 5, partitions=1)
        wait_until(lambda: offsets_in_cypherl(str(out), name) == {(topic, 0): 25}, 60, what="20..24 delivered")
        assert Counter(o for _, _, o in delivered_from_file(out)) == Counter([*range(25), *range(10, 20)]), \
            "not moved back again: no duplicates"
        api.delete(f"/streams/{name}")
