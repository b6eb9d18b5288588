"""Issue 42, "truth belongs to the stream that wrote it": a change mark in the group's commit metadata is believed
only when it is provably this stream's, about this change; a sink change's carry-over is part of its alter.
Through real stream hosts (`mgstreams serve`) and stream processes:

1. a change one task applied is not applied again by the task that takes its partition over, when the call
   reached that task after the first had persisted it (the forget relay found nothing to forget then);
2. another host's stream on the same consumer group (its own state directory) writes marks of its own, with
   colliding change ids: they are foreign, and this host's pending change is applied where the group committed;
3. a plain member of the group committing `mgstreams:` metadata by hand writes nothing the gate believes;
4. a cancel while a sink change's carry-over is pending refuses (409) and changes nothing: the new sink
   continues where the old one stood, never from the log start.

Each of these failed on the code before issue 42 (the mark was a change id and a wall-clock time, believed when
the id was great enough and the time late enough; a cancel ended the carry-over with the other changes).
"""
from __future__ import annotations

import json
import os
import signal
import sqlite3
import time
import uuid

import httpx
import pytest
from broker_support import tansu_limitation
from confluent_kafka import TopicPartition
from group_members import (
    RANGE,
    assigned,
    caught_up,
    caught_up_stream,
    committed,
    new_stream,
    offsets_of,
    polling_member,
    produce_to,
    second_member,
)
from host_helpers import HostProcess
from standin_journal import SINK, journaling_host, written
from stream_helpers import wait_until

from stream_registry import ChangeStatus
from stream_registry.registry.state.state_store import STATE_FILE

pytestmark = pytest.mark.usefixtures("quick_rebalance")
NO_COMMIT_METADATA = tansu_limitation("OffsetFetch answers no committed metadata (a commit's metadata string is "
                                      "dropped), so no mark, ours or forged, reaches the stream")


@pytest.fixture(scope="module")
def host(kafka, tmp_path_factory):
    """One host for the reproductions on one state directory (each on streams of its own); its stream processes
    import the pymgclient stand-in, which journals every committed Bolt transaction with the writer's pid."""
    process = journaling_host(tmp_path_factory.mktemp("marks"))
    yield process
    process.stop()


def _written(journal, topic) -> list[tuple[int, int]]:
    """(partition, offset) of every record of `topic` the Bolt sink committed, in commit order."""
    return [(partition, offset) for _, partition, offset in written(journal, topic)]


# -- 1 ---------------------------------------------------------------------------------------------------
@NO_COMMIT_METADATA
def test_a_change_one_task_applied_is_not_applied_again_by_the_task_that_reads_it_late(kafka, host):
    """`tasks: 2`; task 1 is inside a 6 s batch when set_offset(10) arrives. Task 0 applies it on its partition
    P at once (10..19 again) and the host's "forget" finds nothing in task 1, which has not read the call. Task 0
    is killed (restart: never, so task 1 takes P over); task 1 reads the call after its batch, then gets P: the
    mark on P's commit is task 0's, for this very change, so P resumes where it was committed (20). Before:
    task 1 stamped the call with its own (later) time, the older mark was "not about this change", and P moved
    back to 10 again: 10..19 a third time."""
    topic = kafka.new_topic(partitions=2)
    kafka.produce(topic, 40, partitions=2)
    name = f"tasks_{uuid.uuid4().hex[:8]}"
    with httpx.Client(base_url=host.url, timeout=60) as api, host.client() as client:
        api.post("/streams", json={
            "name": name, "topics": [topic], "bootstrap_servers": kafka.bootstrap_servers,
            "transform": "stream_helpers.crashing_transform", "sink": SINK,
            "consumer_group": f"g_{uuid.uuid4().hex[:10]}", "batch_interval_ms": 20, "configs": RANGE, "tasks": 2,
            "restart": "never"}).raise_for_status()
        api.put(f"/streams/{name}/start").raise_for_status()
        wait_until(lambda: {r["task"] for r in api.get(f"/streams/{name}/offsets").json()} == {0, 1}, 60,
                   what="each task holding a partition")
        caught_up(client, name, [20, 20])
        holders = {r["partition"]: r["task"] for r in api.get(f"/streams/{name}/offsets").json()}
        before = len(_written(host.journal, topic))   # (a partition may have been written twice as the tasks joined)
        pids = api.get(f"/streams/{name}").json()["pids"]
        mine = next(p for p, task in holders.items() if task == 0)   # P: task 0's
        slow = 1 - mine
        produce_to(kafka, topic, slow, 1, payload=b"sleep:6")   # task 1's next batch takes 6 s
        time.sleep(1.0)   # task 1 is inside the batch now (nothing outside shows it: its transformation sleeps)
        changes = {c.partition: c for c in client.set_offset(name, 10, timeout=3)}
        assert changes[mine].status == ChangeStatus.APPLIED, changes
        assert changes[slow].status == ChangeStatus.PENDING, changes   # task 1 is inside its batch
        wait_until(lambda: _written(host.journal, topic)[before:].count((mine, 19)) == 1, 30, what="P: 10..19 again",
                   describe=lambda: (_written(host.journal, topic)[before:], client.describe(name)))
        wait_until(lambda: committed(kafka, client.get(name).consumer_group, topic, mine)[0] == 20, 30,
                   what="P committed at 20 (carrying the change's mark)")
        os.kill(pids[0], signal.SIGKILL)
        wait_until(lambda: {r["task"] for r in api.get(f"/streams/{name}/offsets").json()} == {1}, 90,
                   what="task 1 holding both partitions")
        produce_to(kafka, topic, mine, 5)
        wait_until(lambda: (mine, 24) in _written(host.journal, topic), 60, what="P's 5 new records")
        again = [o for p, o in _written(host.journal, topic)[before:] if p == mine]
        assert again == list(range(10, 25)), f"P moved back to 10 again: {again}"
        assert sorted(h.partition for h in client.history(name) if h.change_id == changes[mine].change_id) \
            == [0, 1], client.history(name)   # one row per partition: applied once each
        assert client.pending(name) == []
        api.delete(f"/streams/{name}").raise_for_status()


# -- 2 ---------------------------------------------------------------------------------------------------
@NO_COMMIT_METADATA
def test_another_hosts_mark_on_the_same_group_is_foreign(kafka, tmp_path):
    """Hosts A and B (separate state directories) run a stream "orders" on one consumer group, each holding one
    partition. A's set_offset(10) waits for P, B's; B applies its own change 1 there (50) and stops; A takes P
    over: B's mark (change 1, as A's is) is not A's stream's, so A applies its change from where the group
    committed (100) to 10. Before: A recorded its change as "persisted before its record was written" at 50 and
    never moved P to 10."""
    topic = kafka.new_topic(partitions=2)
    kafka.produce(topic, 200, partitions=2)
    group = f"g_{uuid.uuid4().hex[:10]}"
    out_a, out_b = tmp_path / "a.cypherl", tmp_path / "b.cypherl"
    host_a, host_b = HostProcess(tmp_path / "a").start(), HostProcess(tmp_path / "b").start()
    try:
        with host_a.client() as a, host_b.client() as b:
            new_stream(a, kafka, topic, out_a, name="orders", consumer_group=group)
            new_stream(b, kafka, topic, out_b, name="orders", consumer_group=group)
            a.start("orders")
            caught_up(a, "orders", [100, 100])
            b.start("orders")
            wait_until(lambda: len(assigned(a, "orders")) == 1 and len(assigned(b, "orders")) == 1, 60,
                       what="each host holding one partition")
            [theirs] = assigned(b, "orders")
            mine = 1 - theirs
            ours = {c.partition: c for c in a.set_offset("orders", 10, timeout=2)}
            assert ours[theirs].status == ChangeStatus.PENDING, ours
            wait_until(lambda: len(offsets_of(out_a, mine)) == 190, what="A's own partition moved and caught up")
            [theirs_change] = [c for c in b.set_offset("orders", 50, timeout=2) if c.partition == theirs]
            assert (theirs_change.status, theirs_change.change_id) == (ChangeStatus.APPLIED, ours[theirs].change_id)
            wait_until(lambda: offsets_of(out_b, theirs)[-1:] == [99], what="B read 50..99 again")
            b.stop("orders")
            wait_until(lambda: [h for h in a.history("orders") if h.partition == theirs], 60,
                       what="A's change applied on the partition taken over")
            [row] = [h for h in a.history("orders") if h.partition == theirs]
            assert (row.change_id, row.offset, row.previous_offset, row.status) == \
                (ours[theirs].change_id, 10, 100, ChangeStatus.APPLIED), row
            wait_until(lambda: offsets_of(out_a, theirs)[-1:] == [99] and len(offsets_of(out_a, theirs)) == 190,
                       what="A delivered P from 10")
            assert offsets_of(out_a, theirs) == list(range(100)) + list(range(10, 100))
            # the key that signs the marks is in the state directory only: not in the API, the log, the metadata
            db = sqlite3.connect(tmp_path / "a" / STATE_FILE)
            [(key,)] = db.execute("SELECT mark_key FROM streams WHERE name = 'orders'").fetchall()
            db.close()
            _, metadata = committed(kafka, group, topic, mine)
            assert metadata.startswith("mgstreams:{") and len(key) == 64, metadata
            with httpx.Client(base_url=host_a.url, timeout=30) as api:
                shown = "".join(api.get(path).text for path in ("/streams", "/streams/orders", "/streams/orders/offsets",
                                                                 "/streams/orders/history", "/metrics"))
            assert key not in shown and key not in metadata and key not in host_a.log()
    finally:
        host_b.stop()
        host_a.stop()


# -- 3 ---------------------------------------------------------------------------------------------------
@NO_COMMIT_METADATA
def test_a_mark_a_plain_member_commits_is_not_believed(kafka, host, tmp_path):
    """A plain confluent-kafka member of the group holds P while set_offset(10) waits for it; it commits
    `mgstreams:{"change":<that change>,"offset":77,"previous":0,"at":9999999999}` at 77 and leaves. The stream
    takes P over at 77 and applies the change: 77 -> 10. Before: the host recorded a move 0 -> 77 that never
    happened, and the change to 10 was never applied."""
    out = tmp_path / "out.cypherl"
    with host.client() as client:
        topic, name = caught_up_stream(client, kafka, out)
        member, theirs = second_member(kafka, client.get(name).consumer_group, topic, lambda: assigned(client, name))
        try:
            [pending] = [c for c in client.set_offset(name, 10, timeout=2) if c.partition == theirs]
            assert pending.status == ChangeStatus.PENDING
            forged = "mgstreams:" + json.dumps({"change": pending.change_id, "offset": 77, "previous": 0,
                                                "at": 9999999999}, separators=(",", ":"))
            member.commit(offsets=[TopicPartition(topic, theirs, 77, metadata=forged)], asynchronous=False)
        finally:
            member.close()
        wait_until(lambda: [h for h in client.history(name) if h.partition == theirs], 60,
                   what="the change applied on the partition taken over")
        [row] = [h for h in client.history(name) if h.partition == theirs]
        assert (row.change_id, row.offset, row.previous_offset, row.status) == \
            (pending.change_id, 10, 77, ChangeStatus.APPLIED), row
        wait_until(lambda: len(offsets_of(out, theirs)) == 190, what="P delivered from 10")
        assert offsets_of(out, theirs) == list(range(100)) + list(range(10, 100))


# -- 4 ---------------------------------------------------------------------------------------------------
def test_a_cancel_while_a_sink_change_is_in_flight_refuses_and_the_new_sink_continues(kafka, host, tmp_path):
    """An exactly-once stream; a second member (polling, so it stays through the alter's rebalance) holds P.
    PATCH the sink to a new cypherl file: the carry-over of P (where the old sink stored it, 100) waits for P.
    `DELETE /streams/s/pending` answers 409 naming the sink change and cancels nothing; when the member leaves,
    the new sink continues P from 100: the 5 records produced then, nothing of 0..99. Before: the cancel ended
    the carry-over, and the new sink, storing no offsets for P, was filled again from offset 0."""
    old, new = tmp_path / "old.cypherl", tmp_path / "new.cypherl"
    with host.client() as client, httpx.Client(base_url=host.url, timeout=60) as api:
        topic, name = caught_up_stream(client, kafka, old, delivery="exactly_once")
        with polling_member(kafka, client.get(name).consumer_group, topic) as held:
            wait_until(lambda: len(held) == 1 and assigned(client, name) == {1 - next(iter(held))}, 60,
                       what="the member and the stream holding one partition each")
            client.alter(name, sink=f"cypherl://{new}")
            [carry] = wait_until(lambda: len(held) == 1 and [p for p in client.pending(name)
                                                            if p.partition in held], 60,
                                 what="the carry-over of the member's partition pending",
                                 describe=lambda: (held, client.pending(name), client.history(name)))
            theirs = carry.partition
            assert carry.offset == 100, carry
            refused = api.delete(f"/streams/{name}/pending")
            assert refused.status_code == 409, refused.text
            assert "sink change in flight" in refused.text and f"{topic}:{theirs}" in refused.text, refused.text
            assert (theirs, 100) in [(p.partition, p.offset) for p in client.pending(name)]   # nothing cancelled
        wait_until(lambda: not client.pending(name), 60, what="the carry-over applied when the stream took P")
        produce_to(kafka, topic, theirs, 5)
        wait_until(lambda: offsets_of(new, theirs)[-1:] == [104], 60, what="the 5 new records in the new sink")
        assert offsets_of(new, theirs) == list(range(100, 105)), "the new sink was filled again from 0"
        [row] = [h for h in client.history(name) if h.partition == theirs and "sink change" in (h.message or "")]
        assert (row.offset, row.status) == (100, ChangeStatus.APPLIED), row
