"""Issue 30, "several members, one truth": the offset gate when the stream's consumer group has another member,
when the host dies between a persist and its record, and when a cancel times out. Through real stream hosts
(`mgstreams serve`) and stream processes; a second member of the stream's group is a plain confluent-kafka
Consumer with the stream's group id (range assignment), as an operator's console consumer started by mistake is.

1. an onward move (latest, +N) applied when the stream takes a partition over starts where the group committed
   it, not at the stale target planned while the other member read on; the history says where it stood;
2. a revert supersedes the pending rows of the change it reverts (shown superseded in the history);
3. a change persisted just before the host died is recorded as applied by the next host, never applied again;
4. a cancel is durable from its first answer, even when the stream process is inside a long batch;
5. no raw librdkafka constant (-2) ever shows as an offset.

The scenario documented in docs/how-to/move-a-stream-several-members.md: that page's commands are checked here.
"""
from __future__ import annotations

import sqlite3
import time
import uuid

import psutil
import pytest
from broker_support import tansu_limitation
from confluent_kafka import TopicPartition
from group_members import RANGE, assigned, caught_up_stream, committed
from group_members import new_stream as _stream
from group_members import offsets_of as _offsets
from group_members import produce_to as _produce_to
from group_members import second_member as _second_member
from host_helpers import HostProcess
from stream_helpers import delivered_from_file, wait_until

from stream_registry import ChangeStatus, StreamConfig, StreamRegistry
from stream_registry.model import RetryPolicy
from stream_registry.registry.runners.runner import Isolation
from stream_registry.registry.state.state_store import STATE_FILE

pytestmark = pytest.mark.usefixtures("quick_rebalance")
# Committed with metadata 'mgstreams:{"change":12}' at offset 3, Tansu (v0.6.0) answers OffsetFetch with offset 3
# and no metadata (confluent-kafka's committed() gives metadata None); Kafka returns the string it was given.
NO_COMMIT_METADATA = tansu_limitation("OffsetFetch answers no committed metadata (a commit's metadata string is "
                                      "dropped), so a commit cannot say which change it came from")


@pytest.fixture(scope="module")
def shared_host(kafka, tmp_path_factory):
    """One host for the reproductions that do not kill it (each on streams of its own)."""
    host = HostProcess(tmp_path_factory.mktemp("members") / "state").start()
    yield host
    host.stop()


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


# -- 1 ---------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("spec", ["latest", "+20"])
def test_an_onward_move_applied_at_takeover_starts_where_the_group_committed(kafka, shared_host, tmp_path, spec):
    """The second member holds P (committed 100, log end 150); `latest` (or `+20`) is applied on the stream's
    partition and pending on P, planned as 150 (or 120). The member reads on, commits 250 and leaves; the stream
    takes P over at 250 (not back at the planned target: 100 or 130 records again) and the history says P
    moved from 250, where it stood."""
    out = tmp_path / "out.cypherl"
    with shared_host.client() as client:
        topic, name = caught_up_stream(client, kafka, out)
        group = client.get(name).consumer_group
        member, theirs = _second_member(kafka, group, topic, lambda: assigned(client, name))
        try:
            _produce_to(kafka, topic, theirs, 50)   # the member has not read them yet: committed 100, end 150
            changes = {c.partition: c for c in client.set_offset(name, spec, timeout=2)}
            planned = changes[theirs]
            assert (planned.status, planned.offset) == (ChangeStatus.PENDING, 150 if spec == "latest" else 120)
            _produce_to(kafka, topic, theirs, 100)
            member.commit(offsets=[TopicPartition(topic, theirs, 250)], asynchronous=False)   # it read on
        finally:
            member.close()
        wait_until(lambda: [h for h in client.history(name) if h.partition == theirs], timeout=30,
                   what="the change applied on the partition taken over")
        _produce_to(kafka, topic, theirs, 5)
        wait_until(lambda: len(_offsets(out, theirs)) >= 105, what="the 5 new records")
        time.sleep(0.5)   # a move back would deliver 100..249 now
        assert _offsets(out, theirs) == list(range(100)) + list(range(250, 255)), "moved back at takeover"
        [row] = [h for h in client.history(name) if h.partition == theirs]
        assert (row.previous_offset, row.offset) == (250, 250), row
        assert "250" in row.message, row.message


# -- 2 ---------------------------------------------------------------------------------------------------
def test_a_revert_supersedes_the_pending_half_of_the_change_it_reverts(kafka, shared_host, tmp_path):
    """set_offset(10) is applied on the stream's partition and pending on the member's P. `revert` moves the
    applied half back and supersedes the pending half (a `superseded` history row of the change); when the
    member leaves, P stays at 100 (before: moved to 10 after the revert, 90 records again)."""
    out = tmp_path / "out.cypherl"
    with shared_host.client() as client:
        topic, name = caught_up_stream(client, kafka, out)
        member, theirs = _second_member(kafka, client.get(name).consumer_group, topic, lambda: assigned(client, name))
        mine = 1 - theirs
        try:
            changes = {c.partition: c for c in client.set_offset(name, 10, timeout=2)}
            assert (changes[mine].status, changes[theirs].status) == (ChangeStatus.APPLIED, ChangeStatus.PENDING)
            change_id = changes[mine].change_id
            wait_until(lambda: len(_offsets(out, mine)) == 190, what="10..99 again")
            reverted = client.revert(name, change_id, timeout=5)
            assert [(c.partition, c.offset, c.status) for c in reverted] == [(mine, 100, ChangeStatus.APPLIED)]
            assert client.pending(name) == []
            [superseded] = [h for h in client.history(name) if h.status == ChangeStatus.SUPERSEDED]
            assert (superseded.change_id, superseded.partition, superseded.offset) == (change_id, theirs, 10)
            assert f"superseded by change {reverted[0].change_id}" in superseded.message
        finally:
            member.close()
        wait_until(lambda: assigned(client, name) == {0, 1}, timeout=30, what="the stream to take the partition over")
        _produce_to(kafka, topic, theirs, 5)
        wait_until(lambda: len(_offsets(out, theirs)) >= 105, what="the 5 new records")
        time.sleep(0.5)
        assert _offsets(out, theirs) == list(range(105)), "the reverted change was applied after its revert"
        assert [(h.change_id, h.partition, h.status) for h in client.history(name) if h.change_id == change_id] \
            == [(change_id, theirs, ChangeStatus.SUPERSEDED), (change_id, mine, ChangeStatus.APPLIED)]


# -- 3 ---------------------------------------------------------------------------------------------------
@NO_COMMIT_METADATA
@pytest.mark.parametrize("delivery", ["at_least_once", "exactly_once"])
def test_a_change_persisted_before_the_host_died_is_not_applied_again(kafka, tmp_path, delivery):
    """set_offset(10) waits for P, which the second member holds. A write transaction held on the host's state
    store keeps the host from recording what the stream persists; the member leaves, the stream applies the
    change on P (commits 10, with the change's mark, then reads on and commits 100), the host is killed before
    it records it. The next host on the same state directory records the change as applied (10, from 100) and
    does not move P back to 10: 10..99 come twice, not three times."""
    out = tmp_path / "out.cypherl"
    state = tmp_path / "state"
    host = HostProcess(state).start()
    lock = None
    try:
        with host.client() as client:
            topic, name = caught_up_stream(client, kafka, out, name="orders", delivery=delivery)
            group = client.get(name).consumer_group
            member, theirs = _second_member(kafka, group, topic, lambda: assigned(client, name))
            try:
                changes = {c.partition: c for c in client.set_offset(name, 10, timeout=2)}
                assert changes[theirs].status == ChangeStatus.PENDING
                change_id = changes[theirs].change_id
                wait_until(lambda: _offsets(out, 1 - theirs)[-1:] == [99] and len(_offsets(out, 1 - theirs)) == 190,
                           what="the stream's own partition moved and caught up")
                lock = sqlite3.connect(state / STATE_FILE, isolation_level=None, timeout=30)
                lock.execute("BEGIN IMMEDIATE")   # the host cannot record anything now
            finally:
                member.close()
            wait_until(lambda: len(_offsets(out, theirs)) == 190, timeout=30, what="P moved to 10 and caught up")
            wait_until(lambda: committed(kafka, group, topic, theirs)[0] == 100, what="P committed at 100")
            pid = client.get(name).pid
        host.kill()
        wait_until(lambda: _gone(pid), timeout=30, what="the stream process to stop (its host is gone)")
        rows = lock.execute("SELECT change_id, partition, offset FROM pending_changes").fetchall()
        assert rows == [(change_id, theirs, 10)], "the host recorded the change before it died: no window"
        lock.execute("ROLLBACK")
        lock.close()
        lock = None
        host = HostProcess(state).start()   # restarts the stream: it was running
        with host.client() as client:
            wait_until(lambda: [h for h in client.history(name) if h.partition == theirs], timeout=30,
                       what="the change recorded by the new host")
            [row] = [h for h in client.history(name) if h.partition == theirs]
            assert (row.change_id, row.offset, row.status) == (change_id, 10, ChangeStatus.APPLIED), row
            assert client.pending(name) == []
            _produce_to(kafka, topic, theirs, 5)
            wait_until(lambda: len(_offsets(out, theirs)) >= 195, timeout=30, what="the 5 new records")
            time.sleep(0.5)
            assert _offsets(out, theirs) == list(range(100)) + list(range(10, 105)), "applied a second time"
    finally:
        if lock is not None:
            lock.close()
        host.stop()


# -- 4 ---------------------------------------------------------------------------------------------------
def test_a_cancel_that_times_out_is_durable_from_its_first_answer(kafka, tmp_path):
    """A change waits for P (the second member's); the stream process is inside a 6 s batch; cancel (1 s
    timeout, 3 s with the pipe's grace) answers with what it cancelled (before: 409 "nothing was cancelled yet", the row stayed,
    and after a stop and start the change was applied, 10 -> 3). Nothing is pending any more, and when the
    member leaves, P stays where it was."""
    topic = kafka.new_topic(partitions=2)
    kafka.produce(topic, 20, partitions=2)
    out = tmp_path / "out.cypherl"
    registry = StreamRegistry(tmp_path / "state", isolation=Isolation.PROCESS,
                              retry=RetryPolicy(attempts=2, first_backoff_s=0.05))
    member = None
    try:
        registry.create(StreamConfig(name="orders", topics=[topic], bootstrap_servers=kafka.bootstrap_servers,
                                     transform="stream_helpers.crashing_transform", sink=f"cypherl://{out}",
                                     consumer_group=f"g_{uuid.uuid4().hex[:10]}", batch_interval_ms=20,
                                     configs=RANGE))
        registry.start("orders")
        wait_until(lambda: [r.committed_offset for r in registry.describe("orders")] == [10, 10], what="caught up")
        member, theirs = _second_member(kafka, registry.get("orders").consumer_group, topic,
                                        lambda: {r.partition for r in registry.describe("orders") if r.assigned})
        mine = 1 - theirs
        [pending] = [c for c in registry.set_offset("orders", 3, timeout=1) if c.partition == theirs]
        assert pending.status == ChangeStatus.PENDING
        wait_until(lambda: len(_offsets(out, mine)) == 17, what="3..9 again on the stream's partition")
        _produce_to(kafka, topic, mine, 1, payload=b"sleep:6")
        time.sleep(1.0)   # the stream process is inside the batch now
        started = time.monotonic()
        cancelled = registry.cancel_pending("orders", timeout=1)
        assert time.monotonic() - started < 4.5, "the cancel waited for the batch"
        assert [(c.change_id, c.partition, c.offset) for c in cancelled] == [(pending.change_id, theirs, 3)]
        assert registry.pending("orders") == []
        registry.stop("orders")   # after the batch
        registry.start("orders")
        member.close()
        member = None
        wait_until(lambda: {r.partition for r in registry.describe("orders") if r.assigned} == {0, 1}, timeout=30,
                   what="the stream to take the partition over")
        _produce_to(kafka, topic, theirs, 2)
        wait_until(lambda: len(_offsets(out, theirs)) >= 12, what="the 2 new records")
        time.sleep(0.5)
        assert _offsets(out, theirs) == list(range(12)), "the cancelled change was applied"
        assert [h for h in registry.history("orders") if h.partition == theirs] == []
        assert registry.pending("orders") == []
    finally:
        if member is not None:
            member.close()
        registry.close()


# -- 5 ---------------------------------------------------------------------------------------------------
def test_no_raw_librdkafka_constant_shows_as_an_offset(kafka, shared_host, tmp_path):
    """An exactly-once stream on an empty partition its sink stores nothing of: describe, set_stream_offset and
    the history show a concrete offset or null, never librdkafka's OFFSET_BEGINNING (-2, "the end" in our own
    Memgraph dialect)."""
    topic = kafka.new_topic(partitions=1)
    out = tmp_path / "out.cypherl"
    with shared_host.client() as client:
        name = _stream(client, kafka, topic, out, delivery="exactly_once")
        client.start(name)
        wait_until(lambda: client.describe(name)[0].assigned, timeout=30, what="the assignment")
        [row] = client.describe(name)
        assert row.position is None or row.position >= 0, row
        [change] = client.set_offset(name, "latest", timeout=5)
        assert change.status in (ChangeStatus.APPLIED, ChangeStatus.CLAMPED), change
        assert change.previous_offset is None or change.previous_offset >= 0, change
        for entry in client.history(name):
            assert entry.previous_offset is None or entry.previous_offset >= 0, entry
        assert all(v is None or v >= 0 for r in client.describe(name)
                   for v in (r.position, r.committed_offset, r.stored_offset, r.resume_offset)), client.describe(name)
        assert not delivered_from_file(out)
