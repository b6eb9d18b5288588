"""The streaming source's offsets and options: admission control per micro-batch, epochs in the JSON Spark
checkpoints, and the streaming options' errors (each names its option and changes nothing)."""
from __future__ import annotations

import json

import pytest

from spark_bridge.range_plan import OffsetRange
from spark_bridge.source_options import parse_source_options
from spark_bridge.stream_offsets import (
    Move,
    StreamOffset,
    admit,
    group_ranges,
    offsets_read,
    plan_next,
    ranges_between,
)
from stream_registry.errors import ConfigError
from stream_registry.model import PartitionKey

A, B = PartitionKey("t", 0), PartitionKey("t", 1)
BASE = {"kafka.bootstrap.servers": "127.0.0.1:9", "subscribe": "t"}


def test_admission_shares_max_rows_fairly_and_never_exceeds_it():
    assert admit({A: 100, B: 3}, 20) == {A: 17, B: 3}     # the small one takes all it has, the rest is split
    assert admit({A: 100, B: 100}, 21) == {A: 10, B: 11} or admit({A: 100, B: 100}, 21) == {A: 11, B: 10}
    assert admit({A: 5, B: 0}, None) == {A: 5, B: 0}
    assert sum(admit({A: 7, B: 9}, 4).values()) == 4


def test_a_change_opens_an_epoch_whose_first_batch_reads_from_the_target():
    start = StreamOffset(0, {A: 50, B: 50})
    end = plan_next(start, {A: (0, 60), B: (0, 60)}, [Move(7, 3, {A: 10})], max_rows=30)
    assert (end.epoch, end.changes, dict(end.origin)) == (3, (7,), {A: 10})
    assert StreamOffset.from_json(end.to_json()) == end
    assert [(r.partition, r.from_offset, r.until_offset) for r in ranges_between(start, end)] == \
        [(0, 10, 10 + end.next[A] - 10), (1, 50, end.next[B])]
    assert sum(r.size for r in ranges_between(start, end)) == 30
    after = plan_next(end, {A: (0, 60), B: (0, 60)})
    assert after.epoch == 3 and not after.origin and ranges_between(end, after)[0].from_offset == end.next[A]
    clamped = plan_next(start, {A: (20, 60), B: (0, 60)}, [Move(8, 4, {A: 5, B: 99})])
    assert clamped.origin == {A: 20, B: 60} and clamped.clamped == {A, B}
    assert plan_next(after, {A: (0, after.next[A]), B: (0, after.next[B])}) is after   # nothing new: no batch


def test_an_onward_target_the_query_read_past_stays_where_it_stands_an_explicit_one_goes_back():
    """`latest` or `+N`, computed when the call was made: at the boundary where it applies the query may stand
    past it; it stays there (`stayed`, no origin: it reads on from where it stood), as on a host stream. The
    same offset as an explicit target moves back. A later onward call is judged against where the partition
    stands, not against an earlier call's target in the same micro-batch."""
    start = StreamOffset(0, {A: 50, B: 50})
    marks = {A: (0, 60), B: (0, 60)}
    end = plan_next(start, marks, [Move(7, 3, {A: 40, B: 55}, onward=frozenset({A, B}))])
    assert (end.stayed, dict(end.origin), end.next) == ({A}, {B: 55}, {A: 60, B: 60})
    assert StreamOffset.from_json(end.to_json()) == end and end.to_json()["stayed"] == ["t:0"]
    assert "stayed" not in plan_next(end, {A: (0, 70), B: (0, 70)}).to_json()   # later batches: as before
    assert [(r.partition, r.from_offset) for r in ranges_between(start, end)] == [(0, 50), (1, 55)]
    assert plan_next(start, marks, [Move(7, 3, {A: 40})]).origin == {A: 40}   # explicit: back to 40
    both = plan_next(start, marks, [Move(7, 3, {A: 10}), Move(8, 4, {A: 45}, onward=frozenset({A}))])
    assert both.stayed == {A} and not both.origin and both.next[A] == 60


def test_a_progress_reports_offsets_read_not_stats_rows():
    """A Spark stream's query yields one stats row per range: its progress counts records from the offsets."""
    start = StreamOffset(0, {A: 50, B: 50})
    end = plan_next(start, {A: (0, 60), B: (0, 60)}, [Move(7, 3, {A: 10})], max_rows=30)
    assert offsets_read(json.dumps(start.to_json()), end.to_json()) == 30
    assert offsets_read(None, end.to_json()) is None and offsets_read("{}", end.to_json()) is None


def test_a_micro_batchs_ranges_are_grouped_into_at_most_tasks_of_about_equal_size():
    ranges = [OffsetRange("t", p, 0, size) for p, size in enumerate([10, 10, 10, 10, 30, 1])]
    groups = group_ranges(ranges, 2)
    assert len(groups) == 2 and sorted(r for g in groups for r in g) == sorted(ranges)
    assert sorted(sum(r.size for r in g) for g in groups) == [31, 40]
    assert group_ranges(ranges, None) == group_ranges(ranges, 6) == [(r,) for r in ranges]


@pytest.mark.parametrize("options, error", [
    ({}, r"^controlDir: required for a streaming read"),
    ({"controlDir": "/c", "resumeFrom": "nowhere"}, r"^resumeFrom: expected one of checkpoint, group, graph, "
                                                    r"got 'nowhere'"),
    ({"controlDir": "/c", "resumeFrom": "graph"}, r"^sink: resumeFrom=graph needs sink .* and sinkStream"),
    ({"controlDir": "/c", "endingOffsets": "latest"}, r"^endingOffsets: not for a streaming read"),
    ({"controlDir": "/c", "maxOffsetsPerTrigger": "0"}, r"^maxOffsetsPerTrigger: expected a positive integer"),
    ({"controlDir": "/c", "sink": "ftp://x"}, r"^sink: "),
])
def test_streaming_options_errors_name_the_option(options, error):
    with pytest.raises(ConfigError, match=error):
        parse_source_options({**BASE, **options}, streaming=True)


def test_streaming_options_parse():
    parsed = parse_source_options({**BASE, "controlDir": "/c", "startingOffsets": "latest", "resumeFrom": "graph",
                                   "sink": "null://", "sinkStream": "s", "maxOffsetsPerTrigger": "9"}, streaming=True)
    assert (parsed.control_dir, parsed.resume_from, parsed.sink, parsed.sink_stream,
            parsed.max_offsets_per_trigger) == ("/c", "graph", "null://", "s", 9)
