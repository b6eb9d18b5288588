"""A sink change's rules as plain functions (registry.sink_change) and the realignment rule (resume_point):
what the host tests drive through a real host, here case by case."""
from __future__ import annotations

import pytest

from stream_registry.config import StreamConfig
from stream_registry.errors import ConfigError, OffsetSpecError, StreamStateError
from stream_registry.model import PartitionKey, Realignment
from stream_registry.registry.host.sink_change import carried_over, sink_change, split_from
from stream_registry.resume_point import assignment_reason, realignments

T0, T1 = PartitionKey("t", 0), PartitionKey("t", 1)


def config(sink: str = "cypherl:///tmp/a.cypherl", delivery: str = "exactly_once") -> StreamConfig:
    return StreamConfig(name="s", topics=["t"], bootstrap_servers="localhost:9092", transform="m.f", sink=sink,
                        delivery=delivery)


def test_from_is_split_off_the_config_changes():
    assert split_from({"sink": "null://", "from": "earliest"}) == ({"sink": "null://"}, "earliest")
    assert split_from({"batch_size": 5}) == ({"batch_size": 5}, None)


def test_a_sink_change_carries_over_unless_from_names_a_start_and_from_needs_a_sink_change():
    before, after = config(), config("cypherl:///tmp/b.cypherl")
    carried = sink_change(before, after, None)
    assert carried.spec is None and "continues where the stream stood" in carried.note
    chosen = sink_change(before, after, "earliest")
    assert chosen.spec is not None and "starts from 'earliest'" in chosen.note
    assert sink_change(before, before, None) is None
    with pytest.raises(ConfigError, match=r"^from: names where a new sink or cluster starts"):
        sink_change(before, before, "earliest")
    with pytest.raises(OffsetSpecError, match=r"^from: "):
        sink_change(before, after, "nonsense")


def test_carried_over_is_what_the_old_sink_stores_except_pending_partitions():
    asked = []

    def stored(cfg, partitions):
        asked.append(list(partitions))
        return {T0: 200, T1: 20}
    rows, stood = carried_over(config(), [T0, T1], stored, pending={T1: 5})
    assert asked == [[T0, T1]]
    assert [(r.partition, r.previous_offset, r.offset) for r in rows] == [(0, 200, 200)], \
        "a partition with a pending change keeps it"
    assert stood == {T1: 20}, "its change moves it from where the old sink stood"
    assert carried_over(config(delivery="at_least_once"), [T0], stored, {}) == ([], {}), "the group's commit stays"
    with pytest.raises(StreamStateError, match="could not be read"):
        carried_over(config(), [T0], lambda cfg, partitions: None, {})


def test_a_realignment_is_a_move_from_where_a_partition_stood():
    moves = realignments({T0: 150, T1: 20}, {T0: 0, T1: 20}, lambda tp, was, to: assignment_reason(None, was, to))
    assert moves == [Realignment(topic="t", partition=0, previous_offset=150, offset=0,
                                 reason=assignment_reason(None, 150, 0))]
    assert "stores no offset" in moves[0].reason
    assert realignments({T0: None}, {T0: 5}, lambda *a: "x") == [], "stood nowhere: nothing to say"
    assert "behind the group's commit 100" in assignment_reason(50, 100, 50)
    assert "ahead of the group's commit 100" in assignment_reason(120, 100, 120)
