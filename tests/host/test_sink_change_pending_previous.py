"""Issue 42's soak (seed 3, exactly-once, 3 minutes): a change pending on a partition when the stream's sink is
changed is applied in the new sink from where the stream stood, which for an exactly-once stream is what its old
sink stores. Through a real host on the embedded cluster with cypherl sinks: the sink stores 20, the group's
commit is 30 (another member of the group committed past the sink, as a file restored behind the group's commit
leaves it too), the stream is stopped; `set_stream_offset(s, 10)` is pending; the sink is altered to a new file
(the partition is not carried over: its pending change applies to the new sink) and the stream started.

The history must record the move that was made, 20 -> 10 (the records 10..19 delivered again, then 20..29): a
previous offset of 30 says the stream stood where it never stood, and a revert of the change would move it to
30, skipping 20..29, which the new sink never got. (Before the fix the history said 30 -> 10: the gate
took the group's commit as where a partition stood whose new sink stores nothing of it.)"""
from __future__ import annotations

import uuid

import httpx
import pytest
from configs import stream_body
from confluent_kafka import Consumer, KafkaException, TopicPartition
from stream_helpers import FAST_REJOIN, delivered_from_file, wait_until

from stream_registry.graph.cypherl_frames import offsets_in_cypherl

pytestmark = pytest.mark.usefixtures("quick_rebalance")


def test_a_change_pending_across_a_sink_change_is_recorded_from_where_the_old_sink_stood(host, kafka, tmp_path):
    topic = kafka.new_topic(partitions=1)
    kafka.produce(topic, 20, partitions=1)
    out, new = tmp_path / "out.cypherl", tmp_path / "new.cypherl"
    name = f"p_{uuid.uuid4().hex[:8]}"
    body = stream_body(kafka, topic, out, name=name, group=f"g_{name}", delivery="exactly_once",
                       transform="stream_helpers.offsets_transform", batch_interval_ms=20, configs=FAST_REJOIN)
    with httpx.Client(base_url=host.url, timeout=90) as api:
        api.post("/streams", json=body).raise_for_status()
        api.put(f"/streams/{name}/start").raise_for_status()
        wait_until(lambda: offsets_in_cypherl(str(out), name) == {(topic, 0): 20}, 60, what="20 stored in the sink")
        api.put(f"/streams/{name}/stop").raise_for_status()
        kafka.produce(topic, 10, partitions=1)
        member = Consumer({"bootstrap.servers": kafka.bootstrap_servers, "group.id": body["consumer_group"],
                           "enable.auto.commit": False, **FAST_REJOIN})
        member.subscribe([topic])

        def commits_past_the_sink() -> bool:
            """Another member of the group, given the partition, commits past what the sink stores."""
            member.poll(0.2)
            if not member.assignment():
                return False
            try:
                member.commit(offsets=[TopicPartition(topic, 0, 30)], asynchronous=False)
            except KafkaException:
                return False
            return True
        try:
            wait_until(commits_past_the_sink, 60, interval=0.1, what="a commit at 30 by another member")
        finally:
            member.close()
        [change] = api.patch(f"/streams/{name}/offsets", json={"offset": 10, "timeout_ms": 10000}).json()
        assert (change["status"], change["previous_offset"]) == ("pending", 20), change
        api.patch(f"/streams/{name}", json={"sink": f"cypherl://{new}"}).raise_for_status()
        api.put(f"/streams/{name}/start").raise_for_status()
        wait_until(lambda: offsets_in_cypherl(str(new), name) == {(topic, 0): 30}, 60, what="the new sink at 30",
                   describe=lambda: (api.get(f"/streams/{name}").json(), delivered_from_file(new)))
        assert [o for _, _, o in delivered_from_file(new)] == list(range(10, 30))
        rows = [r for r in api.get(f"/streams/{name}/history").json() if r["change_id"] == change["change_id"]]
        assert [(r["previous_offset"], r["offset"], r["status"]) for r in rows] == [(20, 10, "applied")], rows
        api.delete(f"/streams/{name}")
