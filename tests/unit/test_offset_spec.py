"""The one offset-spec parser and resolver: every form, the dialects, clamping, bad input."""
import pytest

from stream_registry.errors import OffsetSpecError
from stream_registry.model import ChangeStatus, PartitionSnapshot
from stream_registry.offset_spec import (
    Absolute,
    AtTime,
    Committed,
    Earliest,
    Latest,
    Shift,
    parse_offset_spec,
    parse_target,
    resolve,
)


@pytest.mark.parametrize("value, target", [
    (0, Absolute(0)), (42, Absolute(42)), ("42", Absolute(42)),
    (-1, Earliest()), (-2, Latest()),            # Memgraph's dialect: -1 beginning, -2 end
    ("-1", Shift(-1)), ("+5", Shift(5)), ("-10", Shift(-10)),   # strings with a sign are shifts
    ("earliest", Earliest()), ("LATEST", Latest()), ("committed", Committed()),
    ("2026-11-22T10:00:00Z", AtTime(1795341600000, "2026-11-22T10:00:00Z")),
    ("2026-11-22T11:00:00+01:00", AtTime(1795341600000, "2026-11-22T11:00:00+01:00")),
])
def test_every_single_form(value, target):
    assert parse_target(value) == target


@pytest.mark.parametrize("bad", [1.5, -3, "-3x", "garbage", "", None, True, [1], "2026-13-45T00:00:00"])
def test_bad_specs_name_the_value(bad):
    with pytest.raises(OffsetSpecError) as info:
        parse_offset_spec(bad)
    assert repr(bad) in str(info.value) or str(bad) in str(info.value)


def test_map_targets_partitions_topics_and_leaves_the_rest():
    spec = parse_offset_spec({"orders:0": 42, "orders:1": "earliest", "payments": -1})
    assert spec.target_for("orders", 0) == Absolute(42)
    assert spec.target_for("orders", 1) == Earliest()
    assert spec.target_for("orders", 2) is None
    assert spec.target_for("payments", 7) == Earliest()
    spec.check_against({"orders": [0, 1, 2], "payments": [0]})
    with pytest.raises(OffsetSpecError, match="'nope'"):
        parse_offset_spec({"nope": 1}).check_against({"orders": [0]})
    with pytest.raises(OffsetSpecError, match="orders:9"):
        parse_offset_spec({"orders:9": 1}).check_against({"orders": [0]})
    with pytest.raises(OffsetSpecError, match="orders:0"):
        parse_offset_spec({"orders:0": 2.5})
    with pytest.raises(OffsetSpecError, match="empty"):
        parse_offset_spec({})


def _snap(partition=0, start=10, end=100, committed=None, position=None):
    return PartitionSnapshot(topic="t", partition=partition, log_start=start, log_end=end, committed=committed,
                             position=position)


def _one(spec, snap, running=False, times=None):
    [result] = resolve(parse_offset_spec(spec), [snap], lambda q: times or {}, running=running)
    return result


def test_resolve_clamps_like_the_reset_tool():
    low = _one(3, _snap())
    assert (low.offset, low.clamped) == (10, True) and "3" in low.message and "10" in low.message
    high = _one(500, _snap())
    assert (high.offset, high.clamped) == (100, True) and "500" in high.message
    inside = _one(50, _snap())
    assert (inside.offset, inside.clamped) == (50, False)
    assert _one("earliest", _snap()).offset == 10 and _one(-2, _snap()).offset == 100


def test_shift_uses_position_when_running_and_committed_when_not():
    assert _one("+5", _snap(committed=40, position=60), running=True).offset == 65
    assert _one("-5", _snap(committed=40, position=60), running=False).offset == 35
    failed = _one("+5", _snap(committed=None))
    assert failed.failed and "t:0" in failed.message


def test_committed_and_time_targets():
    assert _one("committed", _snap(committed=33)).offset == 33
    assert _one("committed", _snap()).failed
    found = _one("2026-01-01T00:00:00Z", _snap(), times={("t", 0): 77})
    assert found.offset == 77
    none = _one("2026-01-01T00:00:00Z", _snap(), times={("t", 0): None})
    assert none.offset == 100 and "end" in none.message


@pytest.mark.parametrize("spec, times, onward", [
    ("latest", None, True), (-2, None, True), (500, None, True),            # the end, as read now
    ("+5", None, True), ("+0", None, True), ("+500", None, True),          # on from where it stands
    ("2026-01-01T00:00:00Z", {("t", 0): None}, True),                       # no record after: the end
    (50, None, False), (100, None, False), (3, None, False), ("earliest", None, False),   # explicit targets
    ("-5", None, False), ("-500", None, False), ("committed", None, False),
    ("2026-01-01T00:00:00Z", {("t", 0): 77}, False),
])
def test_targets_meaning_the_end_or_onward_are_marked_so_the_gate_never_moves_them_back(spec, times, onward):
    """The soak's duplicate: a stream consumes on between the call's resolving and the gate's applying; a
    target that stood for "the end" or "+N" must not take it back (see offset_gate). Explicit ones stay exact."""
    assert _one(spec, _snap(committed=40, position=60), running=True, times=times).onward is onward


# -- a duration back from now (issue 13) -------------------------------------------------------------------
import datetime as dt  # noqa: E402

from hypothesis import given  # noqa: E402
from hypothesis import strategies as st

from stream_registry.offset_spec import BackFromNow, GroupOffsets

SECOND_NS = 1_000_000_000


@pytest.mark.parametrize("text, seconds", [
    ("-PT15M", 900), ("-P1D", 86_400), ("-P1DT2H", 93_600), ("-PT1H30M", 5_400), ("-PT0.5S", 0.5),
    ("-pt10s", 10), ("-PT1,25S", 1.25), ("-P0D", 0), ("-PT1.S", 1), ("-P2DT3H4M5.000000006S", 183_845.000000006),
])
def test_durations_back_from_now(text, seconds):
    target = parse_target(text)
    assert target == BackFromNow(round(seconds * SECOND_NS), text)
    assert parse_target(target.describe()) == target


@pytest.mark.parametrize("bad, hint", [
    ("PT15M", "must start with '-'"), ("+P1D", "must start with '-'"), ("-P", "as a duration"),
    ("-PT", "as a duration"), ("-P1W", "as a duration"), ("-P1Y", "as a duration"), ("-PT15X", "as a duration"),
    ("-P1DT", "as a duration"), ("-PT1.0000000001S", "as a duration"), ("-P-1D", "as a duration"),
    ("-PT" + "9" * 19 + "S", "as a duration"), ("-P1D2H", "as a duration"),
])
def test_bad_durations_are_refused_naming_the_value(bad, hint):
    with pytest.raises(OffsetSpecError) as info:
        parse_offset_spec(bad)
    assert repr(bad) in str(info.value) and hint in str(info.value) and str(info.value).startswith("offset: ")


def test_a_duration_resolves_through_the_time_index_from_now():
    now_ns = 1_795_341_600_000 * 1_000_000 + 250_000   # 0.25 ms past a whole millisecond
    asked = []

    def times(queries):
        asked.extend(queries)
        return {("t", 0): 42}

    [found] = resolve(parse_offset_spec("-PT15M"), [_snap()], times, running=False, now_ns=now_ns)
    assert asked == [("t", 0, 1_795_341_600_000 - 900_000 + 1)]   # the first whole ms at or after now - 15 min
    assert (found.offset, found.clamped) == (42, False)
    [none] = resolve(parse_offset_spec("-PT15M"), [_snap()], lambda q: {("t", 0): None}, running=False,
                     now_ns=now_ns)
    assert none.offset == 100 and "-PT15M (2026-11-22T09:45:00.001Z)" in none.message and "end" in none.message
    [zero] = resolve(parse_offset_spec("-P100000D"), [_snap()], lambda q: asked.append(q) or {}, running=False,
                     now_ns=now_ns)
    assert asked[-1] == [("t", 0, 0)], "never before the epoch: -1/-2 mean latest/earliest to the broker"


@given(days=st.integers(0, 30), hours=st.integers(0, 48), minutes=st.integers(0, 600),
       micros=st.integers(0, 10 ** 8), now_us=st.integers(10 ** 15, 2 * 10 ** 15))
def test_duration_arithmetic_matches_timedelta(days, hours, minutes, micros, now_us):
    text = f"-P{days}DT{hours}H{minutes}M{micros // 10 ** 6}.{micros % 10 ** 6:06d}S"
    target = parse_target(text)
    back = dt.timedelta(days=days, hours=hours, minutes=minutes, microseconds=micros)
    moment = dt.datetime(1970, 1, 1, tzinfo=dt.UTC) + dt.timedelta(microseconds=now_us) - back
    expected = -(-((moment - dt.datetime(1970, 1, 1, tzinfo=dt.UTC)) // dt.timedelta(microseconds=1)) // 1000)
    assert target.timestamp_ms(now_us * 1000) == max(0, expected)


# -- another group's committed offsets (issue 13) -----------------------------------------------------------
def test_group_forms_parse_alone_and_inside_maps():
    assert parse_offset_spec({"group": "backup"}).default == GroupOffsets("backup")
    spec = parse_offset_spec({"t:0": {"group": "a"}, "u": {"group": "b"}, "t:1": "-PT1M"})
    assert spec.target_for("t", 0) == GroupOffsets("a") and spec.target_for("u", 3) == GroupOffsets("b")
    assert spec.target_for("t", 1) == BackFromNow(60 * SECOND_NS, "-PT1M")
    assert parse_target(GroupOffsets("a b:c").describe()) == GroupOffsets("a b:c")


@pytest.mark.parametrize("bad, shown", [
    ({"group": ""}, "''"), ({"group": "  "}, "'  '"), ({"group": 5}, "5"), ({"group": None}, "None"),
    ({"group": "a\nb"}, "'a\\nb'"), ({"group": "g", "t:0": 1}, "'t:0'"), ({"t:0": {"groups": "g"}}, "'groups'"),
    ({"t": {"group": "g", "x": 1}}, "'x'"),
])
def test_bad_group_forms_are_refused_naming_the_value(bad, shown):
    with pytest.raises(OffsetSpecError) as info:
        parse_offset_spec(bad)
    assert shown in str(info.value) and str(info.value).startswith("offset")


def test_group_resolution_copies_commits_and_keeps_the_rest():
    snaps = [_snap(0, committed=20), _snap(1, committed=30), _snap(2, committed=None), _snap(3, committed=50)]
    calls = []

    def groups(group, tps):
        calls.append((group, tps))
        return {("t", 0): 5, ("t", 1): 500, ("t", 2): None, ("t", 3): None}

    results = {r.partition: r for r in resolve(parse_offset_spec({"group": "other"}), snaps, lambda q: {},
                                               running=False, lookup_group=groups)}
    assert calls == [("other", [("t", 0), ("t", 1), ("t", 2), ("t", 3)])], "one batched lookup per group"
    assert (results[0].offset, results[0].clamped, results[0].unchanged) == (10, True, False)   # below log start
    assert (results[1].offset, results[1].clamped) == (100, True)
    assert (results[2].offset, results[2].unchanged, results[2].failed) == (None, True, False)
    assert (results[3].offset, results[3].previous_offset, results[3].unchanged) == (50, 50, True)
    assert "'other'" in results[3].message and "t:3" in results[3].message and "keeps its offset" in results[3].message
    assert ChangeStatus("unchanged") == ChangeStatus.UNCHANGED


def test_unknown_group_is_refused_naming_it():
    with pytest.raises(OffsetSpecError, match="unknown consumer group 'ghost'.*t"):
        resolve(parse_offset_spec({"t:0": {"group": "ghost"}}), [_snap(0), _snap(1)], lambda q: {}, running=False,
                lookup_group=lambda group, tps: {tp: None for tp in tps})
    # a group with a commit on another of the stream's partitions is known: the targeted one keeps its offset
    [kept] = resolve(parse_offset_spec({"t:0": {"group": "g"}}), [_snap(0, committed=7), _snap(1)], lambda q: {},
                     running=False, lookup_group=lambda group, tps: {("t", 1): 3})
    assert kept.unchanged and kept.offset == 7
    with pytest.raises(OffsetSpecError, match="'g'"):
        resolve(parse_offset_spec({"group": "g"}), [_snap()], lambda q: {}, running=False)


def test_a_partition_with_nothing_to_resolve_from_is_refused_before_any_lookup():
    """Issue 46, item 12: a spec whose other partition fails as the snapshots stand (no committed offset, nothing
    to shift from) was refused only after its lookups by time and group, which a slow cluster turned into a 503
    past the caller's deadline. Now no lookup is made: only the failed partitions come back."""
    from stream_registry.offset_spec import parse_offset_spec

    def never(*_):
        raise AssertionError("a lookup was made for a spec refused as it stands")
    snaps = [PartitionSnapshot(topic="t", partition=p, log_start=0, log_end=10) for p in (0, 1, 2)]
    spec = parse_offset_spec({"t:0": "2020-01-01T00:00:00Z", "t:1": "committed", "t:2": {"group": "other"}})
    resolved = resolve(spec, snaps, never, running=True, lookup_group=never)
    assert [(r.partition, r.failed, r.message) for r in resolved] == \
        [(1, True, "t:1: no committed offset for this partition")]
    shifted = resolve(parse_offset_spec({"t:0": "-PT1H", "t:1": "+5"}), snaps, never, running=False)
    assert [(r.partition, r.failed) for r in shifted] == [(1, True)]
