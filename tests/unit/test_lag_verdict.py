"""Lag verdicts and lag seconds as tables of samples: every rule of Burrow's, the false alarms it raises that
mgstreams must not, and kafka-lag-exporter's extrapolation. Pure functions: no Kafka, no clock."""
from __future__ import annotations

import pytest

from stream_registry.errors import ConfigError
from stream_registry.lag import LagSample, OffsetChangeMark, PartitionVerdict, Verdict, evaluate, worst
from stream_registry.lag.seconds import extrapolated, from_timestamp

T0 = 1_700_000_000.0
STEP = 5.0


def series(committed, log_end, polling=True, nothing_to_read=False, log_start=0, start=T0, step=STEP):
    """Samples every `step` s; a scalar is the same in every sample (ten of them when all are)."""
    n = max([len(v) for v in (committed, log_end) if isinstance(v, list)] or [10])
    pick = lambda v, i: v[i] if isinstance(v, list) else v   # noqa: E731
    return [LagSample(pick(committed, i), pick(log_end, i), start + i * step, polling=pick(polling, i),
                      log_start=log_start, nothing_to_read=pick(nothing_to_read, i)) for i in range(n)]


def grow(first, by, n=10):
    return [first + by * i for i in range(n)]


# -- the rules ----------------------------------------------------------------------------------
RULES = [
    # (case, samples, verdict, words in the message)
    ("caught up, committing as data comes",
     series(grow(100, 10), grow(100, 10)), Verdict.OK, "caught up"),
    ("lag 0 once in the window, lagging now",
     series([100] * 5 + grow(105, 1, 5), [100] * 5 + grow(120, 5, 5)), Verdict.OK, "0 within the window"),
    ("falling lag", series(grow(0, 20), grow(150, 5)), Verdict.OK, "falling"),
    ("steady lag, offsets moving", series(grow(0, 10), grow(50, 10)), Verdict.OK, "steady"),
    ("lag rising though not in every sample (Burrow: OK, a missed alarm)",
     series(grow(0, 10), [50, 61, 72, 83, 94, 104, 115, 126, 137, 148]), Verdict.WARN, "lag rising +0.2/s: 50 to 58"),
    ("flat lag with batch noise", series(grow(0, 10), [x + 50 + i * 10 for i, x in
                                                       enumerate([0, 9, -4, 6, -8, 3, -2, 7, -6, 1])]),
     Verdict.OK, "consuming: lag 51"),
    ("a burst caught up within the window", series([0, 0, 0, 30, 60, 100, 100, 100, 130, 160],
                                                   [0, 100, 100, 100, 100, 100, 200, 200, 200, 200]),
     Verdict.OK, "0 within the window"),
    ("STOP: no commit over the window, lag, nobody polls",
     series(40, grow(60, 3), polling=False), Verdict.STOP, "no commit for 45.0 s with lag 47"),
    ("STOP: a stream never started, data waiting",
     series(None, 30, polling=False, log_start=10), Verdict.STOP, "nothing committed yet"),
    ("STALL: offsets not moving while the consumer polls",
     series(40, 60), Verdict.STALL, "committed offset 40 not moving for 45.0 s with lag 20 while the consumer polls"),
    ("STALL with growing lag: not moving beats growing",
     series(40, grow(60, 3)), Verdict.STALL, "not moving"),
    ("WARN: lag grew in every sample", series(grow(0, 10), grow(20, 15)), Verdict.WARN, "lag rising +1.0/s: 20 to 65"),
    ("WARN from a stopped consumer would be STOP", series(0, grow(20, 15), polling=False), Verdict.STOP, "no commit"),
]


@pytest.mark.parametrize("case, samples, verdict, words", RULES, ids=[r[0] for r in RULES])
def test_rules(case, samples, verdict, words):
    got = evaluate(samples)
    assert got.verdict == verdict, got
    assert words in got.message, got.message
    assert got.alarm == (verdict not in (Verdict.OK, Verdict.STARTING))


# -- Burrow's false alarms, which these rules must not raise -----------------------------------------------
FALSE_ALARMS = [
    ("quiet partition, no new data, no commits, consumer polling (Burrow: STOP)",
     series(500, 500), "caught up"),
    ("quiet partition of a stopped stream (Burrow: STOP)", series(500, 500, polling=False), "caught up"),
    ("transaction marker after the last record: lag 1 forever, nothing to read (Burrow: STALL)",
     series(500, 501, nothing_to_read=True), "not records"),
    ("aborted transaction: lag 40, nothing to read (Burrow: STALL)",
     series(500, 540, nothing_to_read=True, polling=False), "transaction markers or aborted records"),
]


@pytest.mark.parametrize("case, samples, words", FALSE_ALARMS, ids=[r[0] for r in FALSE_ALARMS])
def test_false_alarms_are_ok(case, samples, words):
    got = evaluate(samples)
    assert (got.verdict, got.alarm) == (Verdict.OK, False), got
    assert words in got.message


def test_lag_is_taken_at_sample_time_not_at_commit_time():
    """Burrow stores lag with each commit: a consumer that committed at lag 0 and then stopped looks fine to
    it forever. Here the log end is read at every sample: once the lag-0 sample has left the window, STOP."""
    samples = series(100, [100, 100] + grow(110, 5), polling=False)   # 12 samples
    assert len(samples) == 12
    assert evaluate(samples[:10]).verdict == Verdict.OK                    # lag 0 still in the window
    got = evaluate(samples)
    assert got.verdict == Verdict.STOP and "lag 55" in got.message


def test_nothing_to_read_only_where_it_was_seen():
    """A marker-only tail in an earlier sample does not excuse records that came after it."""
    samples = series(500, grow(501, 7), nothing_to_read=[True] + [False] * 9)
    assert evaluate(samples).verdict == Verdict.OK                        # within the window
    assert evaluate(series(500, grow(501, 7), nothing_to_read=False)).verdict == Verdict.STALL


# -- REWIND ------------------------------------------------------------------------------------------
BACKWARDS = series([300, 300, 300, 300, 0, 40, 80, 120, 160, 200], grow(300, 1))   # moved back at sample 4


def test_operator_rewind_is_rewind_with_the_change_id_and_no_alarm():
    change = OffsetChangeMark(17, T0 + 3 * STEP + 2.0, "orders", 0, 300, 0)
    got = evaluate(BACKWARDS, [change])
    assert got == PartitionVerdict(Verdict.REWIND, got.message, alarm=False, change_id=17)
    assert "change 17" in got.message and "from 300 to 0" in got.message and "set_stream_offset" in got.message


def test_operator_rewind_shows_until_a_later_sample_finds_the_partition_caught_up_again():
    """Issue 46: a set-offset on a stream at lag 0 said REWIND for the whole window (a minute or two) after the
    stream had read the records again and caught up."""
    change = OffsetChangeMark(3, T0 + 3 * STEP + 1.0, "orders", 0, 300, 0)
    samples = series([300] * 4 + [0, 200, 306, 307, 308, 309], grow(300, 1))   # caught up two samples after
    assert evaluate(samples[:5], [change]).verdict == Verdict.REWIND    # the move
    assert evaluate(samples[:6], [change]).verdict == Verdict.REWIND    # reading again
    got = evaluate(samples[:7], [change])                                # caught up again: OK at once
    assert (got.verdict, got.alarm, got.change_id) == (Verdict.OK, False, 3), got
    assert got.message.startswith("caught up again after: set_stream_offset moved it back from 300 to 0 (change 3")
    assert evaluate(samples, [change]).verdict == Verdict.OK
    nobody = evaluate(samples, [])     # a rewind nobody made through mgstreams stays an alarm for the window
    assert (nobody.verdict, nobody.alarm) == (Verdict.REWIND, True)


def test_the_newest_explaining_change_is_named():
    changes = [OffsetChangeMark(8, T0 + 3 * STEP + 1.0, "orders", 0, 300, 10),
               OffsetChangeMark(9, T0 + 3 * STEP + 3.0, "orders", 0, 10, 0),
               OffsetChangeMark(5, T0 - 100.0, "orders", 0, 500, 0)]   # long before: not this move
    assert evaluate(BACKWARDS, changes).change_id == 9


@pytest.mark.parametrize("change", [None,
                                    OffsetChangeMark(4, T0 - 60.0, "orders", 0, 300, 0),        # too early
                                    OffsetChangeMark(4, T0 + 3 * STEP + 2.0, "orders", 0, 300, 50)])  # not there
def test_a_rewind_nobody_made_through_mgstreams_is_an_alarm(change):
    got = evaluate(BACKWARDS, [change] if change else [])
    assert (got.verdict, got.alarm, got.change_id) == (Verdict.REWIND, True, None)
    assert "went back from 300 to 0" in got.message and "no offset change made through mgstreams" in got.message


def test_a_rewind_read_again_between_two_samples_is_known_from_the_history():
    """The consumer re-read 300 offsets within one interval: no sample shows a lower committed offset."""
    samples = series(grow(300, 0, 5) + grow(300, 1, 5), grow(300, 0, 5) + grow(300, 1, 5))
    change = OffsetChangeMark(21, T0 + 4 * STEP + 1.0, "orders", 0, 300, 0)
    got = evaluate(samples[:6], [change])                  # the first sample after the change
    assert (got.verdict, got.alarm, got.change_id) == (Verdict.REWIND, False, 21)
    assert "from 300 to 0" in got.message and "change 21" in got.message
    assert evaluate(samples, [change]).verdict == Verdict.OK   # caught up in the samples after it
    forward = OffsetChangeMark(22, T0 + 4 * STEP + 1.0, "orders", 0, 300, 310)
    assert evaluate(samples, [forward]).verdict == Verdict.OK                # skipping ahead is no rewind
    old = OffsetChangeMark(20, T0 - 1.0, "orders", 0, 300, 0)
    assert evaluate(samples, [old]).verdict == Verdict.OK                    # before the window


def test_after_a_rewind_a_falling_behind_consumer_is_warn():
    change = OffsetChangeMark(2, T0 + 3 * STEP + 1.0, "orders", 0, 300, 0)
    samples = series([300] * 4 + [0, 1, 2, 3, 4, 5], [300] * 4 + grow(400, 50, 6))
    assert evaluate(samples, [change]).verdict == Verdict.WARN


# -- window and edges --------------------------------------------------------------------------------
def test_only_the_last_ten_samples_count():
    samples = series([0] + [10] * 11, [0] + [30] * 11)     # lag 0 in the first of 12 samples
    assert evaluate(samples).verdict == Verdict.STALL
    assert evaluate(samples, window=12).verdict == Verdict.OK


@pytest.mark.parametrize("n, verdict", [(0, Verdict.STARTING), (1, Verdict.STARTING), (2, Verdict.STARTING),
                                        (3, Verdict.STALL)])
def test_too_few_samples_say_nothing_about_a_trend(n, verdict):
    got = evaluate(series(40, 60)[:n])
    assert got.verdict == verdict
    if n < 3:
        assert got.message in ("no samples yet", f"lag 20; {n} of 3 samples needed for a trend")


@pytest.mark.parametrize("call, field", [
    (lambda: evaluate([], window=1), "window"),
    (lambda: evaluate([], window=10, min_samples=11), "min_samples"),
    (lambda: evaluate(list(reversed(series(grow(0, 1), grow(0, 1))))), "samples"),
    (lambda: LagSample(-1, 10, T0), "committed"),
    (lambda: LagSample(1, True, T0), "log_end"),
])
def test_bad_input_names_the_field(call, field):
    with pytest.raises(ConfigError, match=f"^{field}: "):
        call()


def test_stream_verdict_is_the_worst_partition():
    ok, warn = PartitionVerdict(Verdict.OK, "caught up"), PartitionVerdict(Verdict.WARN, "lag grew", alarm=True)
    stop = PartitionVerdict(Verdict.STOP, "no commit", alarm=True)
    rewind = PartitionVerdict(Verdict.REWIND, "set_stream_offset moved it back", change_id=4)
    assert worst({}) == (Verdict.OK, "no partitions sampled yet")
    assert worst({("a", 0): ok, ("a", 1): ok}) == (Verdict.OK, "every partition OK")
    assert worst({("a", 0): ok, ("a", 1): rewind}) == (Verdict.REWIND, "a:1: set_stream_offset moved it back")
    assert worst({("a", 2): warn, ("a", 0): stop, ("b", 0): rewind}) == (Verdict.STOP, "a:0: no commit")
    assert worst({("a", 2): stop, ("a", 1): stop, ("b", 0): ok}) == \
        (Verdict.STOP, "a:1 (and 1 more partition(s)): no commit")
    assert [v.severity for v in (Verdict.OK, Verdict.STARTING, Verdict.REWIND, Verdict.WARN, Verdict.STALL,
                                 Verdict.STOP)] == [0, 1, 2, 3, 4, 5]


# -- lag seconds ---------------------------------------------------------------------------------------
def at(log_ends, committed, step=10.0):
    return series(committed, log_ends, step=step)


@pytest.mark.parametrize("case, samples, now, seconds", [
    ("no samples", [], T0, None),
    ("caught up", at([100, 100], 100), T0 + 100, 0.0),
    ("nothing to read", series(100, 101, nothing_to_read=True), T0 + 100, 0.0),
    ("between two samples: interpolated", at([0, 100], 50), T0 + 10, 5.0),
    ("a quiet run: from the last sample that saw the old log end",
     at([0, 0, 0, 0, 100], 50), T0 + 40, 5.0),
    ("older than the table: along its average rate", at([100, 200], 50), T0 + 10, 15.0),
    ("log end never moved: at least as old as the first sample", at([100, 100, 100], 50), T0 + 20, 20.0),
    ("the same, later: it keeps growing", at([100, 100, 100], 50), T0 + 80, 80.0),
    ("nothing committed: from the log start", series(None, [0, 100], log_start=0, step=10.0), T0 + 10, 10.0),
])
def test_extrapolated_lag_seconds(case, samples, now, seconds):
    got = extrapolated(samples, now)
    assert got == (None if seconds is None else pytest.approx(seconds)), case


def test_lag_seconds_from_a_record_timestamp():
    assert from_timestamp(int((T0 - 12.5) * 1000), T0) == pytest.approx(12.5)
    assert from_timestamp(int((T0 + 3) * 1000), T0) == 0.0    # a producer clock ahead of ours
