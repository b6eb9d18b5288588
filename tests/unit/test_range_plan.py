"""Range planning without Spark or a cluster: a fake PartitionQuery answers the planner."""
from __future__ import annotations

import pytest

from spark_bridge.range_plan import (
    DataLossError,
    OffsetRange,
    plan,
    plan_ranges,
    ranges_from_json,
    ranges_to_json,
    resolve_bounds,
    split_ranges,
)
from stream_registry.errors import ConfigError, OffsetSpecError
from stream_registry.model import PartitionSnapshot
from stream_registry.offset_spec import parse_offset_spec

T0 = 1_700_000_000_000  # ms


class FakeQuery:
    """Partitions, watermarks, committed offsets and one record per offset at T0 + offset seconds."""

    def __init__(self, logs: dict[tuple[str, int], tuple[int, int]], committed=None, groups=None):
        self.logs = logs
        self.committed_offsets = committed or {}
        self.groups = groups or {}   # other consumer groups' committed offsets

    def group_committed(self, group, tps):
        return {tp: self.groups.get(group, {}).get(tp) for tp in tps}

    def partitions(self, topics):
        out = {}
        for topic in topics:
            found = sorted(p for t, p in self.logs if t == topic)
            if not found:
                raise ConfigError(f"topics: topic {topic!r} does not exist")
            out[topic] = found
        return out

    def snapshots(self, tps):
        return [PartitionSnapshot(topic=t, partition=p, log_start=self.logs[(t, p)][0], log_end=self.logs[(t, p)][1],
                                  committed=self.committed_offsets.get((t, p))) for t, p in tps]

    def offsets_for_times(self, queries):
        out = {}
        for topic, partition, ts in queries:
            low, high = self.logs[(topic, partition)]
            offset = max(low, -(-(ts - T0) // 1000))
            out[(topic, partition)] = offset if offset < high else None
        return out


def spec(value):
    return parse_offset_spec(value)


@pytest.fixture
def query():
    return FakeQuery({("a", 0): (0, 100), ("a", 1): (10, 50), ("b", 0): (0, 0)},
                     committed={("a", 0): 60, ("a", 1): 20})


# -- OffsetRange -----------------------------------------------------------------
def test_offset_range_value():
    r = OffsetRange("orders", 3, 100, 250)
    assert (r.size, r.name, str(r)) == (150, "orders-3-100-250", "orders:3 [100, 250)")
    assert OffsetRange("t", 0, 5, 5).size == 0
    assert ranges_from_json(ranges_to_json([r, OffsetRange("x", 0, 0, 1)])) == [r, OffsetRange("x", 0, 0, 1)]
    with pytest.raises(OffsetSpecError, match="from <= until"):
        OffsetRange.from_dict({"topic": "t", "partition": 0, "from_offset": 9, "until_offset": 3})
    with pytest.raises(OffsetSpecError, match="not JSON"):
        ranges_from_json("[{")


# -- resolving every spec form -----------------------------------------------------
def test_earliest_to_latest_drops_empty_partitions(query):
    assert plan_ranges(query, ["a", "b"], spec("earliest"), spec("latest")) == [
        OffsetRange("a", 0, 0, 100), OffsetRange("a", 1, 10, 50)]


def test_absolute_start_and_explicit_end_map(query):
    ranges = plan_ranges(query, ["a"], spec(30), spec({"a:0": 70, "a:1": "40"}))
    assert ranges == [OffsetRange("a", 0, 30, 70), OffsetRange("a", 1, 30, 40)]


def test_per_partition_start_map_defaults_others_to_earliest(query):
    ranges = plan_ranges(query, ["a"], spec({"a:1": 45}), spec("latest"))
    assert ranges == [OffsetRange("a", 0, 0, 100), OffsetRange("a", 1, 45, 50)]


def test_datetime_start_and_end(query):
    start, end = "2023-11-14T22:13:40Z", "2023-11-14T22:14:20Z"  # T0 + 20 s, T0 + 60 s
    assert plan_ranges(query, ["a"], spec(start), spec(end)) == [
        OffsetRange("a", 0, 20, 60), OffsetRange("a", 1, 20, 50)]


def test_shift_start_is_relative_to_committed(query):
    assert plan_ranges(query, ["a"], spec("-15"), spec("latest")) == [
        OffsetRange("a", 0, 45, 100), OffsetRange("a", 1, 10, 50)]  # 20 - 15 clamped to log start 10


def test_until_committed_is_the_hand_off_point(query):
    bounds = resolve_bounds(query, ["a"], spec("earliest"), spec("committed"))
    assert [b.range for b in bounds] == [OffsetRange("a", 0, 0, 60), OffsetRange("a", 1, 10, 20)]
    # the live stream resumes at the committed offsets: together they cover [log start, log end) once
    for b in bounds:
        assert b.until_offset == query.committed_offsets[(b.topic, b.partition)]


def test_until_committed_without_a_commit_names_the_partition():
    q = FakeQuery({("a", 0): (0, 10), ("a", 1): (0, 10)}, committed={("a", 0): 5})
    with pytest.raises(OffsetSpecError, match=r"until: a:1: no committed offset"):
        plan_ranges(q, ["a"], spec("earliest"), spec("committed"))


def test_start_after_end_is_dropped_with_a_note(query):
    result = plan(query, ["a"], spec(80), spec("committed"))
    assert list(result.ranges) == []
    assert any("after the end" in note for note in result.notes)
    assert "0 range(s)" in str(result)


def test_out_of_range_end_is_clamped_with_a_note(query):
    result = plan(query, ["a"], spec("earliest"), spec(500))
    assert list(result.ranges) == [OffsetRange("a", 0, 0, 100), OffsetRange("a", 1, 10, 50)]
    assert any("clamped to log end 100" in note for note in result.notes)


def test_deleted_start_is_data_loss_unless_allowed(query):
    with pytest.raises(DataLossError, match=r"offsets \[5, 10\) of a:1 were deleted") as caught:
        plan_ranges(query, ["a"], spec(5), spec("latest"))
    assert (caught.value.topic, caught.value.partition, caught.value.code) == ("a", 1, "OFFSET_OUT_OF_RANGE")
    ranges = plan_ranges(query, ["a"], spec(5), spec("latest"), fail_on_data_loss=False)
    assert ranges == [OffsetRange("a", 0, 5, 100), OffsetRange("a", 1, 10, 50)]


def test_assign_restricts_partitions_and_checks_them(query):
    assert plan_ranges(query, {"a": [1]}, spec("earliest"), spec("latest")) == [OffsetRange("a", 1, 10, 50)]
    with pytest.raises(OffsetSpecError, match=r"assign: topic 'a' has no partition\(s\) \[7\]"):
        plan_ranges(query, {"a": [1, 7]}, spec("earliest"), spec("latest"))


def test_spec_naming_unknown_topic_or_partition_is_rejected(query):
    with pytest.raises(OffsetSpecError, match="unknown topic 'zzz'"):
        plan_ranges(query, ["a"], spec({"zzz": 1}), spec("latest"))
    with pytest.raises(OffsetSpecError, match="unknown partition a:9"):
        plan_ranges(query, ["a"], spec("earliest"), spec({"a:9": 1}))
    with pytest.raises(ConfigError, match="does not exist"):
        plan_ranges(query, ["nope"], spec("earliest"), spec("latest"))


# -- splitting ---------------------------------------------------------------------------
def covers(pieces, ranges):
    """Pieces are contiguous, non-empty and cover exactly the ranges."""
    by_partition = {}
    for p in pieces:
        assert p.size > 0
        by_partition.setdefault((p.topic, p.partition), []).append(p)
    for r in ranges:
        parts = sorted(by_partition.pop((r.topic, r.partition)))
        assert parts[0].from_offset == r.from_offset and parts[-1].until_offset == r.until_offset
        assert all(a.until_offset == b.from_offset for a, b in zip(parts, parts[1:], strict=False))
    assert not by_partition


def test_no_split_without_min_partitions_or_when_enough_ranges():
    ranges = [OffsetRange("t", 0, 0, 1000), OffsetRange("t", 1, 0, 10), OffsetRange("t", 2, 5, 5)]
    assert split_ranges(ranges) == ranges[:2]
    assert split_ranges(ranges, 2) == ranges[:2]


def test_big_ranges_take_the_extra_pieces_small_ones_stay_whole():
    ranges = [OffsetRange("t", 0, 0, 100), OffsetRange("t", 1, 0, 10), OffsetRange("t", 2, 0, 10)]
    pieces = split_ranges(ranges, 4)
    assert pieces == [OffsetRange("t", 0, 0, 50), OffsetRange("t", 0, 50, 100),
                      OffsetRange("t", 1, 0, 10), OffsetRange("t", 2, 0, 10)]
    pieces = split_ranges(ranges, 12)  # 100 : 10 : 10 -> 10 : 1 : 1 pieces of 10
    assert len(pieces) == 12 and {p.size for p in pieces} == {10}
    covers(pieces, ranges)


def test_split_reaches_min_partitions_exactly_where_rounding_would_not():
    ranges = [OffsetRange("t", p, 0, 300) for p in range(3)]
    pieces = split_ranges(ranges, 4)  # proportional rounding gives each 1.33 -> 1 piece; we still reach 4
    assert len(pieces) == 4
    covers(pieces, ranges)
    pieces = split_ranges(ranges, 7)
    assert len(pieces) == 7 and max(p.size for p in pieces) - min(p.size for p in pieces) <= 150
    covers(pieces, ranges)


def test_split_never_makes_empty_pieces():
    ranges = [OffsetRange("t", 0, 7, 10), OffsetRange("t", 1, 0, 1)]
    pieces = split_ranges(ranges, 50)
    assert len(pieces) == 4 and all(p.size == 1 for p in pieces)
    covers(pieces, ranges)


def test_max_offsets_per_partition_cuts_after_apportioning():
    ranges = [OffsetRange("t", 0, 0, 95), OffsetRange("t", 1, 0, 20)]
    pieces = split_ranges(ranges, max_offsets_per_partition=30)
    assert [p.size for p in pieces] == [23, 24, 24, 24, 20]
    covers(pieces, ranges)


@pytest.mark.parametrize("bad", [0, -3, "4", 2.5])
def test_bad_split_arguments_name_the_option(bad):
    with pytest.raises(OffsetSpecError, match="minPartitions: expected a positive integer"):
        split_ranges([OffsetRange("t", 0, 0, 10)], bad)


def test_plan_splits_after_resolving(query):
    result = plan(query, ["a"], spec("earliest"), spec("latest"), 5)
    assert len(result.ranges) == 5
    covers(result.ranges, [b.range for b in result.bounds])
    assert result.total_offsets == 140


def test_another_groups_commits_bound_a_range_and_a_partition_it_never_committed_is_refused():
    query = FakeQuery({("t", 0): (0, 100), ("t", 1): (0, 100)}, groups={"live": {("t", 0): 40, ("t", 1): 60}})
    ranges = plan_ranges(query, ["t"], spec("earliest"), spec({"group": "live"}))
    assert [(r.partition, r.from_offset, r.until_offset) for r in ranges] == [(0, 0, 40), (1, 0, 60)]
    query.groups["live"].pop(("t", 1))
    with pytest.raises(OffsetSpecError, match="'live' has no committed offset for t:1"):
        plan_ranges(query, ["t"], spec("earliest"), spec({"group": "live"}))
    with pytest.raises(OffsetSpecError, match="unknown consumer group 'ghost'"):
        plan_ranges(query, ["t"], spec({"group": "ghost"}), spec("latest"))
