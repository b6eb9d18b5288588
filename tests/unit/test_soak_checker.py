"""The chaos soak's checker (bench/soak.py) on hand-made sink histories: it is not vacuous.

Each kind of violation it is meant to catch (a lost offset, a stale record after a move, a move not honoured
exactly, a re-delivery from a point never committed, a position reported past what was written) is counted, and
the legitimate patterns (forward moves, backward moves, re-delivery of uncommitted batches, a pending change never
applied) are not. tests/adversarial/test_soak.py runs the soak itself.
"""
from __future__ import annotations

import pytest
from mgclient_standin.mgclient import Server, TransientError

from bench.soak.oracle import Change, Rec, check_partition, read_journal, read_sink
from bench.soak_transform import QUERY
from stream_registry.errors import StoredOffsetsConflict
from stream_registry.graph.offset_store import offset_statements
from stream_registry.graph.sinks.bolt import BoltSink
from stream_registry.graph.statement import Statement
from stream_registry.model import PartitionKey

LINE = 100   # bytes per statement in these hand-made files


class File:
    """A sink file being written: batches of offsets, one partition; `size` is where the next line starts."""

    def __init__(self):
        self.records: list[Rec] = []
        self.size = 0
        self.batches = 0

    def batch(self, *offsets: int) -> File:
        self.batches += 1
        for o in offsets:
            self.records.append(Rec(o, o, f"1-{self.batches}", self.size))
            self.size += LINE
        return self


def check(file: File, changes=(), log_end: int | None = None, foreign=()):
    end = log_end if log_end is not None else max((r.offset for r in file.records), default=-1) + 1
    return check_partition(file.records, list(changes), end, {o: o for o in range(end)}, foreign=foreign)


def figures(v) -> dict:
    return {k: getattr(v, k) for k in ("lost", "skipped", "stale", "duplicates", "replayed", "mismatched")}


ZERO = dict(lost=0, skipped=0, stale=0, duplicates=0, replayed=0, mismatched=0)


def test_a_clean_partition_has_nothing_to_report():
    v = check(File().batch(0, 1, 2, 3, 4).batch(5, 6, 7, 8, 9))
    assert figures(v) == ZERO and v.records == 10


def test_a_hole_and_an_unread_tail_are_lost():
    v = check(File().batch(0, 1, 2).batch(4, 5), log_end=8)
    assert figures(v) == {**ZERO, "lost": 3}, v.problems    # 3, 6, 7


def test_a_forward_move_skips_on_purpose_and_a_backward_move_replays():
    f = File().batch(0, 1, 2, 3, 4)
    forward = Change(20, lo=f.size, hi=f.size)               # applied before the call returned
    f.batch(20, 21, 22)
    backward = Change(1, lo=f.size, hi=f.size)
    f.batch(1, 2, 3)
    v = check(f, [forward, backward], log_end=4)
    assert figures(v) == {**ZERO, "replayed": 3}, v.problems


def test_the_continuation_must_reach_the_log_end():
    f = File().batch(0, 1, 2)
    move = Change(1, lo=f.size, hi=f.size)
    f.batch(1, 2)
    v = check(f, [move], log_end=5)
    assert figures(v) == {**ZERO, "lost": 2, "replayed": 2}, v.problems   # 3 and 4 never came


def test_a_record_from_the_old_position_after_the_call_returned_is_stale():
    f = File().batch(0, 1, 2, 3, 4)
    move = Change(50, lo=f.size, hi=f.size)
    f.batch(5, 6)                                            # the old position, after `applied`
    f.batch(50, 51)
    v = check(f, [move], log_end=52)
    assert v.stale == 2 and v.lost == 0, v.problems


def test_a_move_that_does_not_start_exactly_at_its_offset_is_counted():
    f = File().batch(0, 1, 2, 3, 4)
    move = Change(2, lo=f.size, hi=f.size)
    f.batch(3, 4)                                            # 2 was skipped after the move
    v = check(f, [move], log_end=5)
    assert v.skipped == 1 and v.stale == 0, v.problems


def test_a_backward_move_from_past_its_offset_replays_what_the_batch_in_flight_wrote():
    """The soak's seed 11: set_offset(303) is resolved while the stream stands at 301; the batch in flight
    writes 301..303 after the call started, and the gate applies the move from 304 (the answer and the history
    say previous 304): 303 again is a replay of an explicit backward move, not a duplicate. Without the
    previous offset the first 303 is taken as the move's first record and the second as a duplicate."""
    f = File().batch(*range(301))
    lo = f.size
    f.batch(301, 302, 303)                                   # in flight while the call was resolved
    move = Change(303, lo=lo, hi=f.size + LINE, previous=304)
    f.batch(303, 304, 305)
    v = check(f, [move], log_end=306)
    assert figures(v) == {**ZERO, "replayed": 1}, v.problems
    assert figures(check(f, [Change(303, lo=lo, hi=f.size + LINE)], log_end=306))["duplicates"] == 1


def test_redelivery_of_uncommitted_batches_is_duplicates_only_from_a_batch_end():
    f = File().batch(0, 1, 2).batch(3, 4, 5).batch(6, 7)
    f.batch(3, 4, 5, 6, 7)                                   # restart from the committed end of batch 1
    v = check(f)
    assert figures(v) == {**ZERO, "duplicates": 5}, v.problems
    g = File().batch(0, 1, 2).batch(3, 4, 5).batch(4, 5)     # from 4: nobody committed 4
    v = check(g)
    assert v.stale == 2 and v.duplicates == 0, v.problems


def test_a_reported_position_past_what_was_written_is_lost():
    f = File().batch(0, 1, 2, 3)
    move = Change(30, lo=f.size, hi=f.size, claim=7)         # the stream said it was at 7: 4, 5, 6 vanished
    f.batch(30, 31)
    v = check(f, [move], log_end=32)
    assert v.lost == 3, v.problems


def test_a_pending_change_is_placed_by_its_first_record_or_ignored_if_never_applied():
    f = File().batch(0, 1, 2)
    never = Change(100, lo=f.size)                           # pending, superseded: never applied
    later = Change(10, lo=f.size)                            # pending, applied at the next assignment
    f.batch(3, 4)
    f.batch(10, 11)
    v = check(f, [never, later], log_end=12)
    assert figures(v) == ZERO, v.problems


def test_a_change_to_something_that_is_no_offset_is_noted_not_miscounted():
    """A change the host applied with offset -1001 (librdkafka's OFFSET_INVALID): the soak fails the run on the
    row itself; the checker notes it and follows the stream from wherever it went, without phantom losses."""
    f = File().batch(0, 1, 2, 3)
    invalid = Change(-1001, lo=f.size, hi=f.size)
    f.batch(0, 1, 2, 3, 4)
    v = check(f, [invalid], log_end=5)
    assert (v.lost, v.skipped, v.stale) == (0, 0, 0)
    assert any("-1001" in p for p in v.problems), v.problems


def test_the_payload_must_be_what_the_producer_wrote_at_that_offset():
    f = File().batch(0, 1, 2)
    v = check_partition(f.records, [], 3, {0: 0, 1: 7, 2: 2})
    assert v.mismatched == 1


def test_read_sink_keeps_file_order_and_counts_torn_lines(tmp_path):
    path = tmp_path / "s.cypherl"
    line = 'CREATE (:SoakMsg {topic: "t", partition: %d, offset: %d, seq: %d, batch: "9-1"});\n'
    path.write_text(line % (0, 5, 1) + line % (1, 0, 2) + 'CREATE (:SoakMsg {topic: "t", parti\n' + line % (0, 6, 3))
    records, corrupt = read_sink(path)
    assert [r.offset for r in records[("t", 0)]] == [5, 6] and [r.offset for r in records[("t", 1)]] == [0]
    assert corrupt == 1
    assert records[("t", 0)][1].pos == path.read_bytes().rindex(b"CREATE")


def test_what_a_foreign_member_consumed_and_committed_past_is_not_lost_while_it_held_the_partition():
    """Issue 30: a plain consumer of the group holds the partition, reads 5..9 and commits 10; the stream
    takes it over from 10. Those offsets are the foreign member's, not lost; a foreign member that read them
    but never committed past them (or a stream that resumed past its commit) leaves them lost."""
    from bench.soak.oracle import Foreign
    f = File().batch(0, 1, 2, 3, 4)
    lo = f.size
    f.batch(10, 11, 12)
    held = Foreign(lo, lo, frozenset(range(5, 10)), frozenset({10}))
    v = check(f, [], log_end=13, foreign=[held])
    assert figures(v) == ZERO and v.foreign == 5, v.problems
    read_only = Foreign(lo, lo, frozenset(range(5, 8)), frozenset({8}))     # committed 8, the stream took 10
    v = check(f, [], log_end=13, foreign=[read_only])
    assert v.lost == 2 and v.foreign == 3, v.problems
    assert check(f, [], log_end=13).lost == 5


def test_a_position_a_foreign_member_committed_is_a_claim_it_explains():
    """The stream delivers 0..4 and loses the partition to a foreign member, which reads 5..9, commits 10 and
    leaves; a change then reports the partition at 10 (where the group committed it) and moves it on to 15. The
    claim 10 is past what the stream wrote, but the offsets between are the foreign member's, not lost (seen in a
    2-minute soak, seed 714772, before the checker knew it: lost 147)."""
    from bench.soak.oracle import Foreign
    f = File().batch(0, 1, 2, 3, 4)
    held = Foreign(0, f.size, frozenset(range(5, 10)), frozenset({10}))   # in the group while 0..4 were written
    onward = Change(15, lo=f.size, hi=f.size, claim=10)
    v = check(f.batch(15, 16), [onward], log_end=17, foreign=[held])
    assert figures(v) == ZERO and v.foreign == 5, v.problems
    unexplained = Foreign(0, f.size, frozenset(range(5, 8)), frozenset({8}))   # it took 5..7 only
    v = check(f, [onward], log_end=17, foreign=[unexplained])
    assert v.lost == 2 and v.foreign == 3, v.problems     # 8 and 9: claimed, neither written nor taken


def test_a_foreign_members_offsets_are_owed_again_after_a_move_back_that_came_after_it_left():
    from bench.soak.oracle import Foreign
    f = File().batch(0, 1, 2, 3, 4)
    held = Foreign(f.size, f.size, frozenset(range(5, 10)), frozenset({10}))
    f.batch(10, 11)
    back = Change(3, lo=f.size, hi=f.size)
    f.batch(3, 4, 5, 11)                  # the move back must deliver 5..10 again: 6..10 missing
    v = check(f, [back], log_end=12, foreign=[held])
    assert v.foreign == 5 and v.lost + v.skipped == 5, v.problems


def test_a_file_cut_and_the_stream_realigning_to_it_is_neither_lost_nor_duplicated():
    """Issue 34: the exactly-once file is cut back to the frame after offset 5 (records 5..9 removed); the
    stream realigns there and delivers 5..9 again. The file as it is at the end holds each once; a stream that
    went on from its remembered position (10) leaves 5..9 lost."""
    from bench.soak.evidence import logical_positions, with_cuts
    from bench.soak.members import CutMove
    f = File().batch(0, 1, 2, 3, 4)
    to = f.size
    f.batch(5, 6, 7, 8, 9)
    removed = f.size - to
    cut = CutMove("s", 0.0, f.size, {("t", 0): (10, 5)})
    kept = f.records[:5]
    for ok, offsets in ((True, range(5, 13)), (False, range(10, 13))):
        g = File()
        g.records, g.size, g.batches = list(kept), to, 1
        g.batch(*offsets)
        records = logical_positions(g.records, [(to, removed)])
        assert all(r.pos >= f.size for r in records[5:])
        changes = with_cuts([], [cut], ("t", 0))
        v = check_partition(records, changes, 13, {o: o for o in range(13)})
        assert figures(v) == (ZERO if ok else {**ZERO, "lost": 5}), (ok, v.problems)


def soak_batch(topic: str, partition: int, offsets, batch: str) -> list[Statement]:
    return [Statement(QUERY, {"topic": topic, "partition": partition, "offset": o, "seq": o + 1000, "batch": batch})
            for o in offsets]


def journal_sink(journal, **kwargs) -> BoltSink:
    """A Bolt sink on a stand-in journaling as the soak's host processes do (each BoltSink: one process)."""
    server = Server(0, str(journal), True, **kwargs)
    return BoltSink("memgraph.standin", connect=server.connect, sleep=lambda s: None)


def test_read_journal_reads_the_stand_ins_transactions_in_commit_order(tmp_path):
    """The journal as the stand-in writes it, through the Bolt sink (UNWIND folded, unrolled by the server):
    the topic's records per partition in commit order, positions growing with the file, other topics and the
    offset statements left out."""
    journal = tmp_path / "bolt.jsonl"
    task0, task1 = journal_sink(journal, shared=True), journal_sink(journal, shared=True)
    task0.write(soak_batch("soak_e", 0, range(0, 3), "7-1") + soak_batch("other", 0, [9], "7-1"))
    task1.write(soak_batch("soak_e", 1, range(0, 2), "8-1"))
    task0.write(soak_batch("soak_e", 0, range(3, 5), "7-2") + soak_batch("soak_e", 1, [2], "7-2")
                + offset_statements("soak_e", {PartitionKey("soak_e", 1): 3}))
    records, corrupt = read_journal(journal, "soak_e")
    assert corrupt == 0 and set(records) == {("soak_e", 0), ("soak_e", 1)}
    assert [(r.offset, r.seq, r.batch) for r in records[("soak_e", 0)]] == \
        [(0, 1000, "7-1"), (1, 1001, "7-1"), (2, 1002, "7-1"), (3, 1003, "7-2"), (4, 1004, "7-2")]
    assert [(r.offset, r.batch) for r in records[("soak_e", 1)]] == [(0, "8-1"), (1, "8-1"), (2, "7-2")]
    lines = journal.read_bytes().split(b"\n")
    starts = [sum(len(line) + 1 for line in lines[:i]) for i in range(3)]
    assert [r.pos for r in records[("soak_e", 0)]] == [starts[0], starts[0] + 1, starts[0] + 2, starts[2],
                                                         starts[2] + 1]
    assert [r.pos for r in records[("soak_e", 1)]] == [starts[1], starts[1] + 1, starts[2] + 2]
    assert all(r.pos < starts[2] + len(lines[2]) for r in records[("soak_e", 1)])
    assert read_journal(tmp_path / "none.jsonl", "soak_e") == ({}, 0)


def test_read_journal_skips_a_torn_last_line_and_counts_a_garbled_one(tmp_path):
    """A process killed in the middle of its append leaves a last line without its newline: that transaction
    did not commit (the stand-in's next commit cuts it off), so it is neither read nor counted. A line that is
    not a transaction anywhere else is corrupt."""
    journal = tmp_path / "bolt.jsonl"
    sink = journal_sink(journal, shared=True)
    sink.write(soak_batch("soak_e", 0, [0, 1], "7-1"))
    whole = journal.read_bytes()
    torn = whole[:len(whole) // 2]
    with journal.open("ab") as handle:
        handle.write(torn)
    records, corrupt = read_journal(journal, "soak_e")
    assert [r.offset for r in records[("soak_e", 0)]] == [0, 1] and corrupt == 0
    sink.write(soak_batch("soak_e", 0, [2], "7-2"))   # the next commit cuts the torn line off
    assert journal.read_bytes().count(b"\n") == 2 and torn not in journal.read_bytes()[len(whole):]
    last = journal.read_bytes().split(b"\n")[1]
    with journal.open("ab") as handle:      # a line that is no transaction, then a whole one again
        handle.write(b'{"pid": 1, "statements": [["CREATE (:SoakMsg\n' + last + b"\n")
    records, corrupt = read_journal(journal, "soak_e")
    assert [r.offset for r in records[("soak_e", 0)]] == [0, 1, 2, 2] and corrupt == 1


def test_the_shared_stand_in_is_one_database_for_every_process_with_memgraphs_write_conflicts(tmp_path):
    """MGCLIENT_STANDIN_SHARED: the exactly-once offsets one task (process) commits are what another reads (a
    task taking a partition over continues from them), a batch that does not continue from them is refused by
    the sink's compare-and-set, and two transactions writing one partition's offset conflict as in Memgraph."""
    journal = tmp_path / "bolt.jsonl"
    task0, task1 = journal_sink(journal, shared=True), journal_sink(journal, shared=True)
    tp = PartitionKey("soak_e", 0)
    task0.write(soak_batch("soak_e", 0, [0, 1], "7-1") + offset_statements("s", {tp: 2}), expect={tp: None})
    assert task1.stored_offsets("s") == {tp: 2}
    with pytest.raises(StoredOffsetsConflict):        # task 1 still believes nothing is stored: a zombie batch
        task1.write(soak_batch("soak_e", 0, [0], "8-1") + offset_statements("s", {tp: 1}), expect={tp: None})
    task1.write(soak_batch("soak_e", 0, [2], "8-2") + offset_statements("s", {tp: 3}), expect={tp: 2})
    assert [r.offset for r in read_journal(journal, "soak_e")[0][("soak_e", 0)]] == [0, 1, 2]
    # a write-write conflict: both began before either committed
    a, b = Server(0, str(journal), shared=True).connect(), Server(0, str(journal), shared=True).connect()
    write = offset_statements("s", {tp: 9})[0]
    a.cursor().execute(write.query, dict(write.parameters))
    b.cursor().execute("MATCH (n) RETURN n", {})
    a.commit()
    with pytest.raises(TransientError, match="conflicting transactions"):
        b.cursor().execute(write.query, dict(write.parameters))
    # without SHARED each process keeps its own offsets (what the stand-in did before, for in-process tests)
    alone = journal_sink(tmp_path / "alone.jsonl")
    assert alone.stored_offsets("s") == {}


def test_a_file_cut_owes_a_realigned_row_unless_it_took_the_file_back_to_its_groups_commit():
    """The cut's partition must get a realigned history row; none is owed where the group's commit read right
    after the cut already was what the file then stored (the cut removed a batch its killed process never
    committed to Kafka: the restarted stream resumes at the commit, the sink's offset). A realigned row to
    another offset is a contradiction either way."""
    from datetime import UTC, datetime

    from bench.soak.evidence import unexplained_cuts
    from bench.soak.members import CutMove
    from stream_registry.model import ChangeStatus, HistoryEntry

    def row(offset: int) -> HistoryEntry:
        return HistoryEntry(changed_at=datetime.fromtimestamp(101, UTC), topic="t", partition=0, previous_offset=10,
                            offset=offset, status=ChangeStatus.REALIGNED, change_id=1)

    at_commit = CutMove("s", 100.0, 0, {("t", 0): (10, 5)}, {("t", 0): 5})
    past_commit = CutMove("s", 100.0, 0, {("t", 0): (10, 5)}, {("t", 0): 10})
    unread = CutMove("s", 100.0, 0, {("t", 0): (10, 5)})
    assert unexplained_cuts([at_commit], {}) == []
    assert len(unexplained_cuts([past_commit], {})) == 1 and len(unexplained_cuts([unread], {})) == 1
    assert unexplained_cuts([past_commit], {"s": [row(5)]}) == []
    assert len(unexplained_cuts([at_commit], {"s": [row(7)]})) == 1


def test_two_cuts_before_the_stream_noticed_are_judged_by_the_last():
    """Issue 42's soak (seed 3): a partition cut twice while its stream rebalanced realigns once, to where the
    second cut left the file; the first cut is not a contradiction, the second is judged."""
    from datetime import UTC, datetime

    from bench.soak.evidence import unexplained_cuts
    from bench.soak.members import CutMove
    from stream_registry.model import ChangeStatus, HistoryEntry

    realigned = HistoryEntry(changed_at=datetime.fromtimestamp(105, UTC), topic="t", partition=0, previous_offset=10,
                             offset=3, status=ChangeStatus.REALIGNED, change_id=1)
    first = CutMove("s", 100.0, 0, {("t", 0): (10, 5)}, {("t", 0): 10})
    second = CutMove("s", 102.0, 0, {("t", 0): (5, 3)}, {("t", 0): 10})
    assert unexplained_cuts([first, second], {"s": [realigned]}) == []
    wrong = CutMove("s", 102.0, 0, {("t", 0): (5, 4)}, {("t", 0): 10})
    assert len(unexplained_cuts([first, wrong], {"s": [realigned]})) == 1
