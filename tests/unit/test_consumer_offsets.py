"""`stream_registry.builtin_transformations.consumer_offsets`: Kafka's `__consumer_offsets` records, built here
byte for byte in Kafka's documented coordinator formats (the embedded cluster has no such topic), decoded into
commit timelines. Checked as statements and as the graph they describe (a model of their MERGE/SET/DELETE);
tests/integration/test_consumer_offsets_stream.py runs them through a stream."""
from __future__ import annotations

import struct
from datetime import datetime

import pytest
from consumer_offsets_records import T, group_metadata_key, key, s16, value

from stream_registry.builtin_transformations import consumer_offsets
from stream_registry.builtin_transformations import offset_commits as co
from stream_registry.graph.transform import Message, Messages


def offsets_batch(records) -> Messages:
    """A batch of __consumer_offsets records (key, value) at offsets 100, 101, ..., as a stream delivers it."""
    return Messages([Message("__consumer_offsets", 7, 100 + i, k, v, T) for i, (k, v) in enumerate(records)])


# -- decoding ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("version, expected", [
    (0, co.OffsetCommitValue(0, 42, "m", T)),
    (1, co.OffsetCommitValue(1, 42, "m", T, expire_timestamp=T + 86_400_000)),
    (2, co.OffsetCommitValue(2, 42, "m", T)),
    (3, co.OffsetCommitValue(3, 42, "m", T, leader_epoch=7)),
])
def test_every_value_version(version, expected):
    assert co.decode_value(value(42, T, "m", version=version, expire=T + 86_400_000)) == expected


def test_keys_of_both_versions_and_no_leader_epoch():
    assert co.decode_key(key("billing", "orders", 3, version=0)) == co.OffsetCommitKey(0, "billing", "orders", 3)
    assert co.decode_key(key("billing", "orders", 3)) == co.OffsetCommitKey(1, "billing", "orders", 3)
    assert co.decode_value(value(5, T, epoch=-1)).leader_epoch is None
    null_metadata = struct.pack(">hqh", 2, 5, -1) + struct.pack(">q", T)
    assert co.decode_value(null_metadata).metadata is None


MALFORMED = [
    ("no key", None, value(1, T), "no version"),
    ("key cut short", key("g", "orders", 0)[:-2], value(1, T), "ends inside partition"),
    ("key with trailing bytes", key("g", "orders", 0) + b"x", value(1, T), "after the last field"),
    ("key version 9", struct.pack(">h", 9) + s16("g"), value(1, T), "not an offset commit key"),
    ("group not UTF-8", struct.pack(">hh", 1, 2) + b"\xff\xfe" + s16("orders") + struct.pack(">i", 0), value(1, T),
     "not UTF-8"),
    ("string longer than the record", struct.pack(">hh", 1, 300) + b"g", value(1, T), "needs 300 bytes"),
    ("value version 9", key("g", "orders", 0), struct.pack(">hq", 9, 1), "unknown version 9"),
    ("value cut short", key("g", "orders", 0), value(1, T)[:-3], "ends inside commit timestamp"),
    ("one-byte value", key("g", "orders", 0), b"\x00", "no version"),
]


@pytest.mark.parametrize("case, k, v, reason", MALFORMED, ids=[m[0] for m in MALFORMED])
def test_malformed_records_are_skipped_and_counted(case, k, v, reason, caplog):
    before = co.skipped()
    good = (key("g", "orders", 1), value(9, T))
    records = consumer_offsets(offsets_batch([(k, v), good]))
    assert [r["parameters"]["offset"] for r in records] == [9], "the good record after it is kept"
    assert co.skipped() == before + 1
    assert reason in caplog.text and "__consumer_offsets:7@100" in caplog.text


# -- statements and the graph they describe ----------------------------------------------------------------
def test_statements_per_record_kind():
    records = consumer_offsets(offsets_batch([
        (key("billing", "orders", 0), value(10, T, "first", version=3)),
        (group_metadata_key("billing"), b"\x00\x03membership-bytes"),
        (key("billing", "orders", 0), b""),                       # tombstone (null value)
    ]))
    assert [r["query"] for r in records] == [co.MERGE_COMMIT, co.DELETE_CURRENT]
    assert records[0]["parameters"] == {
        "group": "billing", "topic": "orders", "partition": 0, "source_partition": 7, "source_offset": 100,
        "offset": 10, "committed_at": datetime(2023, 11, 14, 22, 13, 20), "metadata": "first", "leader_epoch": 7,
        "expire_at": None}
    assert records[1]["parameters"] == {"group": "billing", "topic": "orders", "partition": 0, "source_offset": 102}
    for fragment in ("(g:ConsumerGroup {name: $group})", "(p:Partition {topic: $topic, partition: $partition})",
                     "(p)-[:OF]->(t)", "(t:Topic {name: $topic})", "-[c:COMMITTED {source_partition",
                     "c.offset = $offset, c.committed_at = $committed_at, c.metadata = $metadata", "(g)-[a:AT]->(p)"):
        assert fragment in co.MERGE_COMMIT
    assert co.DELETE_CURRENT.endswith("DELETE a")


class Graph:
    """What the two statements do, by their parameters: the timeline (COMMITTED, keyed by the record's place
    in __consumer_offsets) and the current offset (AT, moved only by a record at or after the one it holds)."""

    def __init__(self):
        self.committed: dict[tuple, dict] = {}
        self.at: dict[tuple, dict] = {}

    def apply(self, records):
        for r in records:
            p = r["parameters"]
            where = (p["group"], p["topic"], p["partition"])
            current = self.at.get(where)
            newer = current is None or current["source_offset"] <= p["source_offset"]
            if r["query"] == co.MERGE_COMMIT:
                self.committed[(*where, p["source_partition"], p["source_offset"])] = {
                    "offset": p["offset"], "committed_at": p["committed_at"], "metadata": p["metadata"]}
                if newer:
                    self.at[where] = {"offset": p["offset"], "committed_at": p["committed_at"],
                                      "source_offset": p["source_offset"]}
            elif r["query"] == co.DELETE_CURRENT and current is not None and newer:
                del self.at[where]


def test_the_graph_holds_every_commit_and_one_current_offset_per_group_and_partition():
    batch = offsets_batch([
        (key("billing", "orders", 0), value(10, T)),
        (key("billing", "orders", 0), value(25, T + 1000, version=2)),
        (key("audit", "orders", 0), value(3, T + 2000, version=0)),
        (key("billing", "orders", 1), value(7, T + 3000, version=1)),
        (key("billing", "orders", 1), b""),                       # billing's offset of orders:1 deleted
        (group_metadata_key("audit"), b"\x00\x03x"),
    ])
    records = consumer_offsets(batch)
    graph = Graph()
    graph.apply(records)
    assert sorted((g, t, p, o["offset"]) for (g, t, p, _, _), o in graph.committed.items()) == [
        ("audit", "orders", 0, 3), ("billing", "orders", 0, 10), ("billing", "orders", 0, 25),
        ("billing", "orders", 1, 7)]
    assert {k: v["offset"] for k, v in graph.at.items()} == {("billing", "orders", 0): 25, ("audit", "orders", 0): 3}
    graph.apply(records)                      # a replay (at-least-once, a backfill) changes nothing
    assert len(graph.committed) == 4 and graph.at[("billing", "orders", 0)]["offset"] == 25
    graph.apply(records[:1])                  # an older record replayed alone does not move AT back
    assert graph.at[("billing", "orders", 0)]["offset"] == 25


