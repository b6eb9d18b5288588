"""The one offset-spec parser and resolver: every form, the dialects, clamping, bad input."""
import pytest

from stream_registry.errors import OffsetSpecError
from stream_registry.offset_spec import (
    Absolute, AtTime, Committed, Earliest, Latest, PartitionSnapshot, Shift, parse_offset_spec, parse_target,
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
    return PartitionSnapshot("t", partition, start, end, committed, position)


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
