"""Exactly-once at the sink: a batch checks the offsets it continues from in its own transaction.

Issue 21, reproduction 1 (lost acknowledgement): a driver whose commit() makes
the batch durable and then loses the connection made the Bolt sink apply the
batch again. Here through a real stream (the registry's worker, the embedded
cluster) and at the sink; the compare-and-set (`expect=`) the worker calls is
checked on every sink, and against a model with hypothesis.
"""
from __future__ import annotations

import time
from collections import Counter

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule
from mgclient_standin.mgclient import Server
from stream_helpers import bolt_exactly_once_stream, wait_until

from stream_registry import StreamStatus
from stream_registry.errors import SinkError, StoredOffsetsConflict
from stream_registry.graph.offset_store import READ_QUERY, offset_statements
from stream_registry.graph.sinks import BoltSink, CypherlSink, NullSink, Written, read_stored_offsets_within
from stream_registry.graph.transform import Statement

pytestmark = pytest.mark.usefixtures("quick_rebalance")   # see conftest

CREATE = "CREATE (:Msg {topic: $topic, partition: $partition, offset: $offset})"


def batch(stream: str, topic: str, partition: int, first: int, count: int) -> list[Statement]:
    """`count` CREATEs for offsets first.., then the offsets the batch stores, as the worker builds it."""
    return [*(Statement(CREATE, {"topic": topic, "partition": partition, "offset": o})
              for o in range(first, first + count)),
            *offset_statements(stream, {(topic, partition): first + count})]


def test_a_lost_ack_through_a_running_stream_applies_each_create_once(kafka, tmp_path, monkeypatch):
    """A stand-in: a commit applied whose answer never comes is what no real server can be made to do."""
    memgraph = Server(rtt_ms=0)
    expects = []   # what each of the worker's batch writes said it continues from
    write = BoltSink.write

    def recorded(sink, statements, *, expect=None):
        expects.append(expect)
        return write(sink, statements, expect=expect)

    monkeypatch.setattr(BoltSink, "write", recorded)
    with bolt_exactly_once_stream(kafka, tmp_path, monkeypatch, memgraph, batch_size=10, attempts=3) as (registry,
                                                                                                         topic):
        memgraph.drop_after_commit = 3          # the next three commits are made, then the connection drops
        kafka.produce(topic, 30, partitions=1)  # offsets 10..39
        wait_until(lambda: memgraph.offsets.get(("orders", topic, 0)) == 40, 30, what="every batch stored")
        wait_until(lambda: registry.describe("orders")[0].committed_offset == 40, 30, what="committed")
        assert memgraph.drop_after_commit == 0, "the faults happened"
        continued = [e[(topic, 0)] for e in expects if e is not None]
        assert None not in expects and continued[0] is None and continued[1] == 10, expects
        assert continued[1:] == sorted(continued[1:]) and continued[-1] < 40, "each from the stored offset before it"
        created = memgraph.created()
        assert sorted(created) == [(topic, 0, o) for o in range(40)]
        assert [key for key, n in created.items() if n != 1] == [], "each CREATE applied once"
        assert registry.get("orders").status == StreamStatus.RUNNING


def test_a_stream_whose_stored_offsets_someone_else_moved_goes_on_from_them_and_writes_nothing_twice(
        kafka, tmp_path, monkeypatch):
    """A restored snapshot, a second writer: the sink stores 25 while the worker knows 10. Its next batch is
    refused by the compare-and-set (nothing written), and the stream goes on from 25, still running."""
    memgraph = Server(rtt_ms=0)
    with bolt_exactly_once_stream(kafka, tmp_path, monkeypatch, memgraph, batch_size=10, attempts=3) as (registry,
                                                                                                         topic):
        with memgraph.lock:
            memgraph.offsets[("orders", topic, 0)] = 25
        kafka.produce(topic, 30, partitions=1)  # offsets 10..39
        wait_until(lambda: memgraph.offsets.get(("orders", topic, 0)) == 40, 30, what="every batch stored")
        wait_until(lambda: registry.describe("orders")[0].committed_offset == 40, 30, what="committed")
        created = memgraph.created()
        assert sorted(created) == [(topic, 0, o) for o in [*range(10), *range(25, 40)]], \
            "10..24 lie before what the sink stores: never written"
        assert set(created.values()) == {1}, "each CREATE applied once"
        info = registry.get("orders")
        assert info.status == StreamStatus.RUNNING and info.error is None
        assert registry.describe("orders")[0].stored_offset == 40


def test_offset_nodes_a_user_edits_or_deletes_are_a_conflict_a_realignment_and_a_history_row(
        kafka, tmp_path, monkeypatch):
    """Issue 34: the graph's MgstreamsOffset nodes edited, then deleted, by a user while the stream runs. Each is a
    conflict at the next batch's compare-and-set: the stream goes on from what the graph holds (none: the log
    start), and the history says from where to where and why (status realigned), never silently."""
    memgraph = Server(rtt_ms=0)
    with bolt_exactly_once_stream(kafka, tmp_path, monkeypatch, memgraph, batch_size=10, attempts=3) as (registry,
                                                                                                         topic):
        with memgraph.lock:
            memgraph.offsets[("orders", topic, 0)] = 5                  # edited back: 5..9 are read again
        kafka.produce(topic, 10, partitions=1)                          # offsets 10..19
        wait_until(lambda: memgraph.offsets.get(("orders", topic, 0)) == 20, 30, what="stored 20")
        realigned = [h for h in registry.history("orders") if h.status == "realigned"]
        assert [(h.previous_offset, h.offset) for h in realigned] == [(10, 5)]
        assert "changed under the running stream" in realigned[0].message and realigned[0].change_id
        with memgraph.lock:
            del memgraph.offsets[("orders", topic, 0)]                   # deleted: the graph holds none
        kafka.produce(topic, 5, partitions=1)                           # offsets 20..24
        wait_until(lambda: memgraph.offsets.get(("orders", topic, 0)) == 25, 30, what="stored 25")
        realigned = [h for h in registry.history("orders") if h.status == "realigned"]
        assert [(h.previous_offset, h.offset) for h in realigned] == [(20, 0), (10, 5)]
        created = memgraph.created()
        assert created == Counter({**{(topic, 0, o): 2 for o in range(20)},
                                   **{(topic, 0, o): 3 for o in range(5, 10)},
                                   **{(topic, 0, o): 1 for o in range(20, 25)}}), \
            "exactly what the graph's offsets said to read again, each time"
        assert registry.get("orders").status == StreamStatus.RUNNING


def test_a_sink_outage_at_assignment_is_shown_in_error_and_clears_when_the_sink_answers(
        kafka, tmp_path, monkeypatch):
    """Issue 21, reproduction 3 (Bolt): the stored offsets are read when partitions are assigned; a sink that
    does not answer then used to put the stream in `error` for good. Now the partitions wait, the outage shows
    in `error`, and the stream starts them where the sink says once it answers."""
    memgraph = Server(rtt_ms=0)
    with bolt_exactly_once_stream(kafka, tmp_path, monkeypatch, memgraph, batch_size=10, attempts=3) as (registry,
                                                                                                         topic):
        registry.stop("orders")
        memgraph.down = True
        registry.start("orders")
        kafka.produce(topic, 10, partitions=1)  # offsets 10..19
        shown = wait_until(lambda: (registry.get("orders").error or "").find("reading the offsets stored") >= 0,
                           30, what="the outage shown")
        assert shown
        assert registry.get("orders").status == StreamStatus.RUNNING
        time.sleep(1.0)   # retried between batches, still not answering: still waiting, nothing written
        assert registry.get("orders").status == StreamStatus.RUNNING
        assert memgraph.offsets[("orders", topic, 0)] == 10
        memgraph.down = False
        wait_until(lambda: memgraph.offsets.get(("orders", topic, 0)) == 20, 30, what="the rest stored")
        wait_until(lambda: registry.get("orders").error is None, 10, what="the error cleared")
        assert registry.get("orders").status == StreamStatus.RUNNING
        created = memgraph.created()
        assert sorted(created) == [(topic, 0, o) for o in range(20)] and set(created.values()) == {1}


def test_a_sink_that_refuses_the_read_at_assignment_fails_the_stream(kafka, tmp_path, monkeypatch):
    """Not an outage: Memgraph refuses the read of the stored offsets (not transient). The stream goes to `error`
    at once, naming it, rather than waiting for an answer that will not come."""
    memgraph = Server(rtt_ms=0)
    with bolt_exactly_once_stream(kafka, tmp_path, monkeypatch, memgraph, batch_size=10, attempts=3) as (registry,
                                                                                                         topic):
        registry.stop("orders")
        memgraph.fail_when = lambda query, parameters: query == READ_QUERY
        registry.start("orders")
        wait_until(lambda: registry.get("orders").status == StreamStatus.ERROR, 30, what="the stream failed")
        assert "reading the offsets stored in the sink" in registry.get("orders").error


def test_a_lost_ack_at_the_bolt_sink_is_resolved_by_reading_the_stored_offsets():
    memgraph = Server(rtt_ms=0)
    sink = BoltSink("memgraph", connect=memgraph.connect, sleep=lambda s: None)
    assert sink.write(batch("s", "t", 0, 0, 5), expect={("t", 0): None}) is Written.APPLIED
    memgraph.drop_after_commit = 1
    assert sink.write(batch("s", "t", 0, 5, 5), expect={("t", 0): 5}) is Written.ALREADY_APPLIED
    assert sink.unknown_commits == 1
    memgraph.drop_before_commit = 1           # lost before the server saw the commit: written on the retry
    assert sink.write(batch("s", "t", 0, 10, 5), expect={("t", 0): 10}) is Written.APPLIED
    assert memgraph.offsets == {("s", "t", 0): 15}
    assert set(memgraph.created().values()) == {1} and len(memgraph.created()) == 15


def test_an_unknown_outcome_the_sink_cannot_resolve_yet_is_said_so_and_resolved_by_the_next_write():
    memgraph = Server(rtt_ms=0)
    sink = BoltSink("memgraph", connect=memgraph.connect, retries=2, sleep=lambda s: setattr(memgraph, "down", True))
    memgraph.drop_after_commit = 1            # committed, the connection lost, and the server gone
    with pytest.raises(SinkError, match="may have been applied") as failed:
        sink.write(batch("s", "t", 0, 0, 3), expect={("t", 0): None})
    assert failed.value.transient
    memgraph.down = False                     # the worker's retry, later
    assert sink.write(batch("s", "t", 0, 0, 3), expect={("t", 0): None}) is Written.ALREADY_APPLIED
    assert set(memgraph.created().values()) == {1} and len(memgraph.created()) == 3


@pytest.fixture(params=["bolt", "cypherl", "null"])
def any_sink(request, tmp_path):
    if request.param == "bolt":
        sink = BoltSink("memgraph", connect=Server(rtt_ms=0).connect, sleep=lambda s: None)
    elif request.param == "cypherl":
        sink = CypherlSink(str(tmp_path / "out.cypherl"))
    else:
        sink = NullSink()
    yield sink
    sink.close()


def test_the_compare_and_set_writes_nothing_unless_the_batch_continues_from_the_stored_offsets(any_sink):
    sink = any_sink
    assert sink.write(batch("s", "t", 0, 0, 3), expect={("t", 0): None}) is Written.APPLIED
    assert sink.stored_offsets("s") == {("t", 0): 3}
    # the same batch again (a retry, a duplicate): nothing written
    assert sink.write(batch("s", "t", 0, 0, 3), expect={("t", 0): None}) is Written.ALREADY_APPLIED
    # a batch from a stale view (a zombie after a rebalance, the worker out of step): refused with the truth
    with pytest.raises(StoredOffsetsConflict) as conflict:
        sink.write(batch("s", "t", 0, 1, 5), expect={("t", 0): 1})
    assert conflict.value.stored == {("t", 0): 3} and not conflict.value.transient
    assert "t:0 stored 3, expected 1" in str(conflict.value)
    with pytest.raises(StoredOffsetsConflict) as none_stored:
        sink.write(batch("s", "u", 0, 0, 1), expect={("u", 0): 7})
    assert none_stored.value.stored == {}
    assert sink.stored_offsets("s") == {("t", 0): 3}
    # gaps (a transaction marker at 3): the batch continues from the stored offset, not its first message's
    assert sink.write(batch("s", "t", 0, 4, 2), expect={("t", 0): 3}) is Written.APPLIED
    # set_offset's rewind: the offsets alone, no expectation, move the stored offset; the replay continues there
    assert sink.write(offset_statements("s", {("t", 0): 2})) is Written.APPLIED
    assert sink.stored_offsets("s") == {("t", 0): 2}
    assert sink.write(batch("s", "t", 0, 2, 4), expect={("t", 0): 2}) is Written.APPLIED
    assert sink.stored_offsets("s", [("t", 0)]) == {("t", 0): 6}


def test_stored_offsets_are_retried_within_a_bound_then_a_transient_error_says_how_long():
    memgraph = Server(rtt_ms=0)
    sink = BoltSink("memgraph", connect=memgraph.connect, sleep=lambda s: None)
    sink.write(batch("s", "t", 0, 0, 2))
    memgraph.down = True
    naps = []

    def nap(seconds):
        naps.append(seconds)
        if len(naps) == 3:
            memgraph.down = False   # the sink answers again

    assert read_stored_offsets_within(sink, "s", deadline_s=30, sleep=nap) == {("t", 0): 2}
    assert len(naps) == 3
    memgraph.down = True
    with pytest.raises(SinkError, match=r"could not be read within 0\.3 s") as failed:
        read_stored_offsets_within(sink, "s", deadline_s=0.3, retry_s=0.01)
    assert failed.value.transient
    with pytest.raises(SinkError, match="not trusted"):   # not transient: at once
        read_stored_offsets_within(_Untrusted(), "s", deadline_s=30, sleep=lambda s: pytest.fail("retried"))


class _Untrusted:
    def stored_offsets(self, stream, partitions=None):
        raise SinkError("sink bolt+s://h: the server's certificate is not trusted")


# -- against a model ------------------------------------------------------------------------------------------
class BoltExactlyOnce(RuleBasedStateMachine):
    """A writer that keeps `expect` as the worker will, over lost acks, lost commits, outages and rewinds: every
    CREATE of a written batch is applied exactly as often as the model says (once, plus once per rewind over it).
    A user edits or deletes the MgstreamsOffset node behind the writer's back (issue 34): its next batch is a
    conflict saying what the graph holds, nothing written, and the writer goes on from there."""

    def __init__(self):
        super().__init__()
        self.memgraph = Server(rtt_ms=0)
        self.sink = BoltSink("memgraph", connect=self.memgraph.connect, retries=3, sleep=lambda s: None)
        self.stored: int | None = None        # the writer's view of the stored offset
        self.graph: int | None = None         # what the graph stores
        self.expected = Counter()             # how often each offset should have been applied

    @rule(count=st.integers(1, 4), faults=st.sampled_from(["none", "after", "before", "after-twice", "down"]))
    def write_batch(self, count, faults):
        first = self.stored or 0
        if self.graph != self.stored and self.graph == first + count:   # edited to this very batch's end
            assert self.sink.write(batch("s", "t", 0, first, count),
                                   expect={("t", 0): self.stored}) is Written.ALREADY_APPLIED
            self.stored = self.graph
            return
        if self.graph != self.stored:         # a user edited or deleted the offsets: refused, go on from the graph's
            with pytest.raises(StoredOffsetsConflict) as conflict:
                self.sink.write(batch("s", "t", 0, first, count), expect={("t", 0): self.stored})
            assert conflict.value.stored == ({} if self.graph is None else {("t", 0): self.graph})
            self.stored = self.graph
            return
        if faults == "after":
            self.memgraph.drop_after_commit = 1
        elif faults == "before":
            self.memgraph.drop_before_commit = 1
        elif faults == "after-twice":
            self.memgraph.drop_after_commit = 2
        elif faults == "down":
            self.memgraph.down = True
        try:
            self.sink.write(batch("s", "t", 0, first, count), expect={("t", 0): self.stored})
        except SinkError as exc:
            assert exc.transient and faults == "down"
            self.memgraph.down = False
            return                              # the worker retries later: the next rule does
        finally:
            self.memgraph.drop_after_commit = self.memgraph.drop_before_commit = 0
        self.expected.update(("t", 0, o) for o in range(first, first + count))
        self.stored = self.graph = first + count

    @precondition(lambda self: self.stored)
    @rule(data=st.data())
    def rewind(self, data):
        to = data.draw(st.integers(0, self.stored))
        self.sink.write(offset_statements("s", {("t", 0): to}))
        self.stored = self.graph = to

    @precondition(lambda self: self.graph is not None)
    @rule(data=st.data(), delete=st.booleans())
    def user_edits_the_offsets(self, data, delete):
        """Someone edits the MgstreamsOffset node (to any offset but the batch end the writer will store next), or
        deletes it."""
        with self.memgraph.lock:
            if delete:
                del self.memgraph.offsets[("s", "t", 0)]
                self.graph = None
            else:
                self.graph = self.memgraph.offsets[("s", "t", 0)] = data.draw(st.integers(0, self.graph + 3))

    @precondition(lambda self: self.stored and self.graph == self.stored)
    @rule()
    def stale_writer(self):
        """A writer a step behind (a zombie after a rebalance): its duplicate of the last message is already
        applied; a batch overlapping what is stored is refused."""
        assert self.sink.write(batch("s", "t", 0, self.stored - 1, 1),
                               expect={("t", 0): self.stored - 1}) is Written.ALREADY_APPLIED
        with pytest.raises(StoredOffsetsConflict):
            self.sink.write(batch("s", "t", 0, self.stored - 1, 2), expect={("t", 0): self.stored - 1})

    @invariant()
    def applied_as_the_model_says(self):
        assert self.memgraph.created() == self.expected
        assert self.memgraph.offsets.get(("s", "t", 0)) == self.graph


TestBoltExactlyOnce = BoltExactlyOnce.TestCase
TestBoltExactlyOnce.settings = settings(max_examples=60, stateful_step_count=20, deadline=None)


def test_a_torn_batch_cut_on_open_is_logged_with_its_size(kafka, tmp_path, caplog):
    """A kill left half a batch at the end of the file: the sink cuts it on open, and the stream says how much."""
    import logging
    import uuid

    from stream_registry import StreamConfig, StreamRegistry

    out = tmp_path / "state" / "output" / "orders.cypherl"
    out.parent.mkdir(parents=True)
    with CypherlSink(str(out)) as sink:
        sink.write(batch("orders", "t", 0, 0, 2))
    torn = b'CREATE (:Msg {topic: "t", partition: 0, offset: 2});\nCREATE (:Msg {top'
    with out.open("ab") as handle:
        handle.write(torn)
    topic = kafka.new_topic(partitions=1)
    registry = StreamRegistry(tmp_path / "state")
    try:
        with caplog.at_level(logging.WARNING, logger="mgstreams.worker"):
            registry.create(StreamConfig("orders", [topic], kafka.bootstrap_servers, "stream_helpers.offsets_transform",
                                         f"cypherl://{out}", consumer_group=f"eos_{uuid.uuid4().hex[:8]}",
                                         delivery="exactly_once"))
            registry.start("orders")
            wait_until(lambda: "cut on open" in caplog.text, 10, what="the cut logged")
        assert f"{len(torn)} byte(s) cut on open" in caplog.text
    finally:
        registry.close()
