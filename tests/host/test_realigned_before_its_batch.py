"""Issue 42, the soak's contradictions (seeds 3 and 7, exactly-once): a resume the sink moved back is in the history
even when its process is killed right after its first batch.

Through a real host (`mgstreams serve`, the stream in a process of its own) on the embedded cluster: an
exactly-once cypherl stream caught up at 100 is stopped, its file is cut back to the frame that stores 50, and it
starts again. It resumes at 50, where the file says (the truth), and its process is SIGKILLed as soon as its first
batch after the resume (50..99) is in the file: the worst moment, with the batch's commit held by the coordinator
so nothing else runs in between. The history must say that the partition moved back from the group's 100 to 50
and why. Before the fix the realignment was reported between batches, after that first batch (its assignment and
its records came in one collect), so the kill lost it; the next process found the sink and the group both at 100
and the history never showed the move back (the soak counted that as a contradiction)."""
from __future__ import annotations

import os
import signal
import uuid

import httpx
import pytest
from configs import stream_body
from stream_helpers import FAST_REJOIN, wait_until

from stream_registry.graph.cypherl_frames import offsets_in_cypherl

pytestmark = pytest.mark.usefixtures("quick_rebalance")

COORDINATOR = 1


def test_a_resume_the_sink_moved_back_is_in_the_history_though_a_kill_follows_its_first_batch(
        host, kafka, embedded_kafka, tmp_path):
    name = f"cut_{uuid.uuid4().hex[:8]}"
    group = f"g_{name}"
    embedded_kafka.set_group_coordinator(group, COORDINATOR)
    topic = kafka.new_topic(partitions=1)
    kafka.produce(topic, 50, partitions=1)
    out = tmp_path / "out.cypherl"
    # one batch per 3 s window: the partition's assignment and its first records come in one collect
    body = stream_body(kafka, topic, out, name=name, consumer_group=group, delivery="exactly_once",
                       transform="stream_helpers.offsets_transform", batch_size=100, batch_interval_ms=3000,
                       configs=FAST_REJOIN)
    with httpx.Client(base_url=host.url, timeout=60) as api:
        def info() -> dict:
            return api.get(f"/streams/{name}").json()

        def committed() -> int | None:
            return api.get(f"/streams/{name}/offsets").json()[0]["committed_offset"]

        def realigned() -> list[tuple[int, int]]:
            return [(h["previous_offset"], h["offset"]) for h in api.get(f"/streams/{name}/history").json()
                    if h["status"] == "realigned"]
        api.post("/streams", json=body).raise_for_status()
        api.put(f"/streams/{name}/start").raise_for_status()
        wait_until(lambda: committed() == 50, 60, what="50 committed")
        kafka.produce(topic, 50, partitions=1)   # a second batch: the file has a frame storing 50, then 100
        wait_until(lambda: committed() == 100, 60, what="caught up: 100 committed")
        api.put(f"/streams/{name}/stop").raise_for_status()
        data = out.read_bytes()   # an operator restores a copy: the file ends right after the frame storing 50
        stored_50 = data.index(f" {name}:{topic}:0=50\n".encode())
        out.write_bytes(data[:data.index(b"\n", stored_50) + 1])
        assert offsets_in_cypherl(str(out), name) == {(topic, 0): 50}

        embedded_kafka.delay_responses(COORDINATOR, "OffsetCommit", 20000)   # the first batch's commit is held
        api.put(f"/streams/{name}/start").raise_for_status()
        wait_until(lambda: offsets_in_cypherl(str(out), name) == {(topic, 0): 100}, 60,
                   what="the first batch after the resume (50..99) in the file")
        killed = info()["pid"]
        os.kill(killed, signal.SIGKILL)
        wait_until(lambda: info()["pid"] not in (None, killed) and info()["status"] == "running", 60,
                   what="the stream restarted after the kill")
        wait_until(lambda: committed() == 100, 60, what="the restarted stream caught up: 100 committed")
        assert realigned() == [(100, 50)], api.get(f"/streams/{name}/history").json()
        api.delete(f"/streams/{name}")
