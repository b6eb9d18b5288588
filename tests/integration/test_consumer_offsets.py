"""`stream_registry.builtin_transformations.consumer_offsets`: Kafka's `__consumer_offsets` records, built here
byte for byte in Kafka's documented coordinator formats (the embedded cluster has no such topic), decoded into
commit timelines. Checked as statements, as the graph they describe (a model of their MERGE/SET/DELETE), and
end to end: a stream on a topic holding such records writes them through a cypherl sink and outlives
malformed ones."""
from __future__ import annotations

import struct
from datetime import datetime

import pytest
from stream_helpers import FAST_REJOIN, wait_until

from stream_registry import StreamConfig, StreamRegistry, StreamStatus
from stream_registry.builtin_transformations import consumer_offsets
from stream_registry.graph import consumer_offsets as co
from stream_registry.graph.transform import Message

T = 1_700_000_000_000   # ms


def s16(text: str) -> bytes:
    raw = text.encode()
    return struct.pack(">h", len(raw)) + raw


def key(group: str, topic: str, partition: int, version: int = 1) -> bytes:
    """OffsetCommitKey: int16 version, string group, string topic, int32 partition."""
    return struct.pack(">h", version) + s16(group) + s16(topic) + struct.pack(">i", partition)


def value(offset: int, committed: int, metadata: str = "", version: int = 3, epoch: int = 7,
          expire: int = -1) -> bytes:
    """OffsetCommitValue v0-v3: offset, [leader epoch (v3)], metadata, commit timestamp, [expire (v1)]."""
    out = struct.pack(">hq", version, offset)
    if version >= 3:
        out += struct.pack(">i", epoch)
    out += s16(metadata) + struct.pack(">q", committed)
    if version == 1:
        out += struct.pack(">q", expire)
    return out


def group_metadata_key(group: str) -> bytes:
    return struct.pack(">h", 2) + s16(group)


class Batch:
    def __init__(self, records):
        self.messages = [Message("__consumer_offsets", 7, 100 + i, k, v, T) for i, (k, v) in enumerate(records)]

    def total_messages(self):
        return len(self.messages)

    def message_at(self, i):
        return self.messages[i]


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
    records = consumer_offsets(Batch([(k, v), good]))
    assert [r["parameters"]["offset"] for r in records] == [9], "the good record after it is kept"
    assert co.skipped() == before + 1
    assert reason in caplog.text and "__consumer_offsets:7@100" in caplog.text


# -- statements and the graph they describe ----------------------------------------------------------------
def test_statements_per_record_kind():
    records = consumer_offsets(Batch([
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
    batch = Batch([
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


# -- end to end: a stream ingesting such records ------------------------------------------------------------
def test_a_stream_writes_commits_and_outlives_malformed_records(kafka, tmp_path):
    from confluent_kafka import Producer

    if kafka.embedded is not None:
        kafka.embedded.set_initial_rebalance_delay(200)
    topic = kafka.new_topic(partitions=1, prefix="consumer_offsets_copy")
    producer = Producer({"bootstrap.servers": kafka.bootstrap_servers})
    for k, v in [(key("billing", "orders", 0), value(10, T)), (b"\x00", b"junk"),
                 (group_metadata_key("billing"), b"\x00\x03x"), (key("billing", "orders", 0), value(11, T + 5))]:
        producer.produce(topic, key=k, value=v, partition=0)
    producer.produce(topic, key=key("billing", "orders", 0), value=None, partition=0)   # a real null value
    assert producer.flush(10) == 0
    out = tmp_path / "state" / "output" / "offsets.cypherl"
    registry = StreamRegistry(tmp_path / "state")
    try:
        registry.create(StreamConfig(name="offsets", topics=[topic], bootstrap_servers=kafka.bootstrap_servers,
                                     transform="stream_registry.builtin_transformations.consumer_offsets",
                                     sink=f"cypherl://{out}", consumer_group="offsets_e2e", configs=FAST_REJOIN,
                                     batch_interval_ms=20))
        registry.start("offsets")
        wait_until(lambda: any(r.committed_offset == 5 for r in registry.describe("offsets")), timeout=30,
                   what="all five records committed")
        assert registry.get("offsets").status == StreamStatus.RUNNING
    finally:
        registry.close()
        if kafka.embedded is not None:
            kafka.embedded.set_initial_rebalance_delay(3000)
    lines = [line for line in out.read_text().splitlines() if line.strip() and not line.startswith("//")]
    assert len(lines) == 3, lines
    assert lines[0].startswith('MERGE (g:ConsumerGroup {name: "billing"})') and "c.offset = 10" in lines[0]
    assert "localDateTime(\"2023-11-14T22:13:20\")" in lines[0] and "source_offset: 0" in lines[0]
    assert "c.offset = 11" in lines[1] and "source_offset: 3" in lines[1]
    assert lines[2].startswith('MATCH (:ConsumerGroup {name: "billing"})-[a:AT]->') and lines[2].endswith("DELETE a;")
