"""The chaos soak's checker (bench/soak.py) on hand-made sink histories: it is not vacuous.

Each kind of violation it is meant to catch (a lost offset, a stale record after a move, a move not honoured
exactly, a re-delivery from a point never committed, a position reported past what was written) is counted, and
the legitimate patterns (forward moves, backward moves, re-delivery of uncommitted batches, a pending change never
applied) are not. tests/adversarial/test_soak.py runs the soak itself.
"""
from __future__ import annotations

import pytest

from bench.soak.graph import Kill, graph_records
from bench.soak.oracle import Change, Rec, check_partition, read_sink

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


def test_graph_records_are_each_nodes_deliveries_in_the_clock_order_of_their_batches():
    """The tasks stream's records read from the graph (one node per message, the tags of the batches that
    delivered it in order: soak_transform.GRAPH_QUERY): a delivery sits at its batch's clock plus its rank in
    the batch, so a re-delivery by a later batch comes after; other nodes' shapes and tags are corrupt."""
    rows = [(0, 0, 1000, ["7-1-1000"]), (0, 1, 1001, ["7-1-1000"]), (0, 2, 1002, ["7-1-1000", "8-1-5000"]),
            (1, 0, 1003, ["7-1-1000"]), (0, 3, 1004, ["7-2-2000"]), (0, 4, 1005, ["7-2-2000", "bad"]),
            (0, 9, 1, None)]
    got = graph_records(rows, "soak_e")
    assert [(r.offset, r.batch, r.pos) for r in got.held[("soak_e", 0)]] == \
        [(0, "7-1-1000", 1000), (1, "7-1-1000", 1001), (2, "7-1-1000", 1002), (3, "7-2-2000", 2000),
         (4, "7-2-2000", 2001), (2, "8-1-5000", 5000)]
    assert [(r.offset, r.pos) for r in got.held[("soak_e", 1)]] == [(0, 1000)]
    assert (got.corrupt, got.torn, got.torn_batches) == (2, 0, 0)
    v = check_partition(got.held[("soak_e", 0)], [], 5, {o: 1000 + o for o in range(5)})
    assert (v.duplicates, v.stale) == (0, 1)     # 2 again, not from a commit point (the batch 7-1 ends at 3)


@pytest.mark.parametrize("case", ["torn", "stored", "not_last", "not_killed"])
def test_a_batch_a_kill_cut_short_on_falkordb_is_told_from_a_duplicate_by_what_the_graph_stored(case):
    """FalkorDB has no rollback: a batch whose data statement ran and whose offsets statement did not (its
    process killed between the two) is delivered again from the offsets stored before it: the stated limit,
    counted as `torn`, not as duplicates. Only with the evidence: the process was killed, it is its last batch,
    and the offsets the graph stored right after the kill are not past its first offset. Otherwise the
    re-delivery is a duplicate."""
    rows = [(0, o, o, ["7-1-1000"]) for o in range(3)] + \
        [(0, o, o, ["7-2-2000", "8-1-3000"]) for o in range(3, 5)] + [(0, 5, 5, ["8-1-3000"])]
    if case == "not_last":
        rows.append((1, 0, 0, ["7-3-2500"]))
    stored = {0: 5} if case == "stored" else {0: 3}
    kills = [] if case == "not_killed" else [Kill(7, stored)]
    got = graph_records(rows, "soak_e", kills)
    v = check_partition(got.held[("soak_e", 0)], [], 6, {o: o for o in range(6)})
    if case == "torn":
        assert (got.torn, got.torn_batches, v.duplicates, v.lost) == (2, 1, 0, 0)
        assert [r.offset for r in got.held[("soak_e", 0)]] == [0, 1, 2, 3, 4, 5]
    else:
        assert (got.torn, v.duplicates, v.lost) == (0, 2, 0)


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


def test_a_move_back_from_where_a_foreign_member_committed_starts_its_continuation_at_once():
    """3-minute soak, seed 21, at-least-once: the stream delivers 0..4, a foreign member takes the partition
    over, reads 5..9 and commits 10; a change back to 0 is applied from 10 (the history's previous offset: where
    the group had it). The stream got to 10 without delivering 5..9 itself, so the records at 0 that follow are
    the change's continuation, not the old one's stale records (seen as lost 1772, stale 955 before)."""
    from bench.soak.oracle import Foreign
    f = File().batch(0, 1, 2, 3, 4)
    held = Foreign(f.size, f.size, frozenset(range(5, 10)), frozenset({10}))
    back = Change(0, lo=f.size, previous=10)        # pending when the call returned; the history saw it applied
    f.batch(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11)
    v = check(f, [back], log_end=12, foreign=[held])
    assert figures(v) == {**ZERO, "replayed": 5}, v.problems


def test_an_onward_move_applied_past_its_target_is_judged_where_the_history_says_it_went():
    """3-minute soak, seed 3, at-least-once: `+33` resolved against a stale position (410 -> 443) reaches the
    partition when it already stands at 815; an onward move never takes it back, so it is applied 815 -> 815.
    The history row (same change id) is that call's, and the change goes to 815, not 443."""
    from datetime import UTC, datetime

    from bench.soak.evidence import Call, changes_for
    from bench.soak.plan import StreamPlan
    from stream_registry.model import ChangeStatus, HistoryEntry, OffsetChange

    plan = StreamPlan("s", "t", "range", 10, 10)
    call = Call("s", "+33", 100.0, 500, 101.0, 600,
                rows=[OffsetChange(topic="t", partition=0, previous_offset=410, offset=443, status=ChangeStatus.PENDING,
                                   change_id=28)])
    entry = HistoryEntry(changed_at=datetime.fromtimestamp(102, UTC), topic="t", partition=0, previous_offset=815,
                         offset=815, status=ChangeStatus.APPLIED, change_id=28)
    notes: list[str] = []
    changes = changes_for([call], {"s": [entry]}, {}, plan, 0, notes)
    assert notes == [] and [(c.offset, c.lo, c.previous) for c in changes] == [(815, 500, 815)]


def test_a_foreign_member_that_takes_the_partition_right_after_a_change_leaves_nothing_owed_there():
    """3-minute soak, seed 7, at-least-once: a change to 5 is applied; before the stream writes a record of it,
    a foreign member takes the partition, reads 5..9 and commits 10; the stream resumes at 10. The foreign
    member held the partition while the change's continuation was current (from the call on): 5..9 are its."""
    from bench.soak.oracle import Foreign
    f = File().batch(0, 1, 2, 3, 4, 5, 6, 7)
    move = Change(5, lo=f.size, hi=f.size + 1)
    held = Foreign(f.size, f.size + 1, frozenset(range(5, 10)), frozenset({10}))
    f.size += 50                 # the stream writes nothing for a while
    f.batch(10, 11)
    v = check(f, [move], log_end=12, foreign=[held])
    assert figures(v) == ZERO and v.foreign == 5 and v.problems == [], v.problems


def test_a_cancelled_change_never_starts_a_continuation_where_the_old_one_passes_its_offset():
    """3-minute soak, seed 21, at-least-once: set_offset(41) stays pending and is cancelled; the stream, which
    was reading on from 21, delivers 41 in passing, then a kill makes it re-read from its commit point 0. The
    change never applied: 41 did not start its continuation, and the re-read from 0 is no stale record."""
    from bench.soak.evidence import Call, changes_for
    from bench.soak.plan import StreamPlan
    from stream_registry.model import ChangeStatus, OffsetChange

    plan = StreamPlan("s", "t", "range", 10, 10)
    f = File().batch(*range(0, 21))
    call = Call("s", 41, 100.0, f.size, 101.0, f.size,
                rows=[OffsetChange(topic="t", partition=0, previous_offset=21, offset=41, status=ChangeStatus.PENDING,
                                   change_id=1)])
    f.batch(*range(21, 50)).batch(*range(0, 50))
    changes = changes_for([call], {}, {}, plan, 0, [], cancelled=[("s", 1, "t", 0)])
    v = check(f, changes, log_end=50)
    assert changes == [] and figures(v) == {**ZERO, "duplicates": 50}, v.problems
    v = check(f, changes_for([call], {}, {}, plan, 0, []), log_end=50)
    assert v.stale > 0       # without the cancel's word, 41 is taken for the change's start


def test_a_change_to_where_the_stream_stands_is_a_calls_change_not_a_sink_changes_carry_over():
    """3-minute soak, seed 7, exactly-once (c42): long after a sink change, set_offset(876) is clamped to the log
    end, 860, where the partition stands: its history row is 860 -> 860, like a carry-over's. The stream writes 860
    (during the call), then 861. A later revert moves the partition 1095 -> 860 again. The first row is the call's
    (its change id says so): matched to the revert instead, the clamp got the revert's 1095 as where it stood, 860
    was taken for the old continuation's, and its continuation 'missed' 860 (skipped 1)."""
    from datetime import UTC, datetime

    from bench.soak.evidence import Call, changes_for
    from bench.soak.plan import StreamPlan
    from stream_registry.model import ChangeStatus, HistoryEntry, OffsetChange

    plan = StreamPlan("s", "t", "range", 10, 10)
    f = File().batch(*range(840, 860))
    clamp = Call("s", 876, 100.0, f.size, 101.0, f.size + 2 * LINE,
                 rows=[OffsetChange(topic="t", partition=0, previous_offset=860, offset=860,
                                    status=ChangeStatus.CLAMPED, change_id=35)])
    f.batch(860).batch(*range(861, 1095))
    revert = Call("s", {"revert": 35}, 130.0, f.size, 130.5, f.size + LINE,
                  rows=[OffsetChange(topic="t", partition=0, previous_offset=1095, offset=860,
                                     status=ChangeStatus.APPLIED, change_id=43)])
    f.batch(*range(860, 1100))
    rows = [HistoryEntry(changed_at=datetime.fromtimestamp(at, UTC), topic="t", partition=0, previous_offset=was,
                         offset=to, status=ChangeStatus.APPLIED, change_id=change)
            for at, was, to, change in ((100.5, 860, 860, 35), (130.2, 1095, 860, 43))]
    notes: list[str] = []
    changes = changes_for([clamp, revert], {"s": rows}, {}, plan, 0, notes, sink_changes=[10.0])
    assert notes == [] and [(c.offset, c.previous) for c in changes] == [(860, 860), (860, 1095)]
    v = check(f, [Change(840, 0, 0), *changes], log_end=1100)
    assert figures(v) == {**ZERO, "replayed": 235}, v.problems   # 860..1094 again after the revert


def test_a_second_change_to_the_same_offset_applied_after_the_first_was_read_from_replays_it_again():
    """The 3-minute soak's 57 duplicates (seed 3 on 9713cfc, soak_e): a revert called twice. The first call
    returned pending; its change was applied (697 -> 467) and 467..483 delivered; meanwhile the second call's
    change, to the same 467, was resolved and applied from where the stream then stood (484 -> 467), and
    467..483 delivered again: a rewind asked for twice, replayed. The oracle took the two changes as a chain
    (both to 467, the second's call started before the first record) and put the first reading in the second
    change's continuation, so the second reading counted as duplicates. A change whose history says the stream
    stood elsewhere (484) was not applied before the first one's records: it is no link of that chain."""
    f = File().batch(*range(697))
    first = Change(467, lo=f.size - LINE, previous=697)    # pending when its call returned
    second = Change(467, lo=f.size, hi=f.size + 40 * LINE, previous=484)   # called before the first's records
    f.batch(*range(467, 484))                               # the first change's continuation, to 484
    f.batch(*range(467, 500))                               # the second's, from 467 again
    v = check(f, [first, second], log_end=500)
    assert figures(v) == {**ZERO, "replayed": 17 + 33}, v.problems
    # The first never applied (pending, superseded by the second while it waited): the second's records are its.
    h = File().batch(*range(560))
    superseded = [Change(409, lo=h.size - LINE), Change(409, lo=h.size, hi=h.size + LINE, previous=555)]
    h.batch(*range(409, 560))
    assert figures(check(h, superseded, log_end=560)) == {**ZERO, "replayed": 151}
    # Two changes to one offset applied back to back, nothing read in between, still form a chain.
    g = File().batch(*range(697))
    chained = [Change(467, lo=g.size, previous=697), Change(467, lo=g.size, hi=g.size + LINE, previous=467)]
    g.batch(*range(467, 500))
    assert figures(check(g, chained, log_end=500)) == {**ZERO, "replayed": 33}
