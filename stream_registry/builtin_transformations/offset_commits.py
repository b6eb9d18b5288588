"""Kafka's own offsets in the graph: decoding `__consumer_offsets` records into commit timelines.

Every consumer group's commits land in the internal topic `__consumer_offsets`
as binary records (Kafka's coordinator formats, big-endian, strings as an int16
length and UTF-8 bytes):

- key version 0 or 1 (OffsetCommitKey): group, topic, partition (int32);
- key version 2 (GroupMetadataKey): group membership, not offsets: skipped;
- value versions 0 to 3 (OffsetCommitValue): offset (int64), leader epoch
  (int32, version 3 only), metadata, commit timestamp (int64 ms), expire
  timestamp (int64 ms, version 1 only);
- a null value (a tombstone): the group's offset for that partition was deleted.

`statements(messages)` turns a batch into Cypher: per commit one
`(:ConsumerGroup {name})-[:COMMITTED {offset, committed_at, metadata, ...}]->(:Partition {topic, partition})`,
keyed by the record's own position in `__consumer_offsets` (a replay MERGEs the
same relationship: the timeline has one COMMITTED per commit), the partition
`-[:OF]->(:Topic {name})`, and one current `(:ConsumerGroup)-[:AT {offset, committed_at}]->(:Partition)`
that a later record moves and a tombstone removes (a replayed older record
does not move it back). Records that cannot be decoded are skipped and
counted, never raised: one bad record must not stop the stream.
"""
from __future__ import annotations

import logging
import struct
import threading
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from ..graph.statement import Statements

log = logging.getLogger("mgstreams.consumer_offsets")

OFFSET_KEY_VERSIONS = (0, 1)
GROUP_METADATA_KEY_VERSION = 2
VALUE_VERSIONS = (0, 1, 2, 3)

MERGE_COMMIT = (
    "MERGE (g:ConsumerGroup {name: $group}) "
    "MERGE (t:Topic {name: $topic}) "
    "MERGE (p:Partition {topic: $topic, partition: $partition}) "
    "MERGE (p)-[:OF]->(t) "
    "MERGE (g)-[c:COMMITTED {source_partition: $source_partition, source_offset: $source_offset}]->(p) "
    "SET c.offset = $offset, c.committed_at = $committed_at, c.metadata = $metadata, "
    "c.leader_epoch = $leader_epoch, c.expire_at = $expire_at "
    "MERGE (g)-[a:AT]->(p) "
    "WITH a WHERE a.source_offset IS NULL OR a.source_offset <= $source_offset "
    "SET a.offset = $offset, a.committed_at = $committed_at, a.source_offset = $source_offset")
DELETE_CURRENT = (
    "MATCH (:ConsumerGroup {name: $group})-[a:AT]->(:Partition {topic: $topic, partition: $partition}) "
    "WHERE a.source_offset IS NULL OR a.source_offset <= $source_offset "
    "DELETE a")


class MalformedRecord(ValueError):
    """A record of __consumer_offsets that is not what its version says."""


@dataclass(frozen=True)
class OffsetCommitKey:
    version: int
    group: str
    topic: str
    partition: int


@dataclass(frozen=True)
class OffsetCommitValue:
    version: int
    offset: int
    metadata: str | None
    commit_timestamp: int
    leader_epoch: int | None = None     # version 3
    expire_timestamp: int | None = None  # version 1


class _Reader:
    def __init__(self, data: bytes, what: str):
        self.data, self.pos, self.what = bytes(data), 0, what

    def take(self, fmt: str, name: str):
        size = struct.calcsize(fmt)
        if self.pos + size > len(self.data):
            raise MalformedRecord(f"{self.what}: ends inside {name} (byte {self.pos} of {len(self.data)})")
        (value,) = struct.unpack_from(fmt, self.data, self.pos)
        self.pos += size
        return value

    def string(self, name: str) -> str:
        text = self.nullable_string(name)
        if text is None:
            raise MalformedRecord(f"{self.what}: {name} has length -1")
        return text

    def nullable_string(self, name: str) -> str | None:
        length = self.take(">h", f"the length of {name}")
        if length == -1:
            return None
        if length < 0:
            raise MalformedRecord(f"{self.what}: {name} has length {length}")
        if self.pos + length > len(self.data):
            raise MalformedRecord(f"{self.what}: {name} needs {length} bytes, {len(self.data) - self.pos} left")
        raw = self.data[self.pos:self.pos + length]
        self.pos += length
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise MalformedRecord(f"{self.what}: {name} is not UTF-8 ({exc.reason})") from None

    def end(self) -> None:
        if self.pos != len(self.data):
            raise MalformedRecord(f"{self.what}: {len(self.data) - self.pos} byte(s) after the last field")


def key_version(key: bytes | None) -> int:
    if key is None or len(key) < 2:
        raise MalformedRecord(f"key: {0 if key is None else len(key)} byte(s), no version")
    return struct.unpack_from(">h", key)[0]


def decode_key(key: bytes | None) -> OffsetCommitKey:
    """An offset commit's key (versions 0 and 1); MalformedRecord for anything else."""
    version = key_version(key)
    if key is None or version not in OFFSET_KEY_VERSIONS:   # None: key_version has raised already
        raise MalformedRecord(f"key: version {version} is not an offset commit key")
    reader = _Reader(key, f"key v{version}")
    reader.take(">h", "version")
    group = reader.string("group")
    topic = reader.string("topic")
    partition = reader.take(">i", "partition")
    reader.end()
    return OffsetCommitKey(version, group, topic, partition)


def decode_value(value: bytes) -> OffsetCommitValue:
    """An offset commit's value (versions 0 to 3)."""
    if len(value) < 2:
        raise MalformedRecord(f"value: {len(value)} byte(s), no version")
    version = struct.unpack_from(">h", value)[0]
    if version not in VALUE_VERSIONS:
        raise MalformedRecord(f"value: unknown version {version} (known: 0 to 3)")
    reader = _Reader(value, f"value v{version}")
    reader.take(">h", "version")
    offset = reader.take(">q", "offset")
    epoch = reader.take(">i", "leader epoch") if version >= 3 else None
    metadata = reader.nullable_string("metadata")
    committed = reader.take(">q", "commit timestamp")
    expire = reader.take(">q", "expire timestamp") if version == 1 else None
    reader.end()
    return OffsetCommitValue(version, offset, metadata, committed, None if epoch in (None, -1) else epoch, expire)


# Malformed records seen by this process, for operators (logged per batch too).
_SKIPPED = {"malformed": 0}
_SKIPPED_LOCK = threading.Lock()


def skipped() -> int:
    """How many malformed records this process has skipped."""
    return _SKIPPED["malformed"]


def statements(messages) -> Statements:
    """The transformation: Cypher statements for a batch of __consumer_offsets messages (runs of one query)."""
    out: list[tuple[str, dict[str, Any]]] = []
    bad: list[str] = []
    for i in range(messages.total_messages()):
        message = messages.message_at(i)
        where = f"{message.topic_name()}:{message.partition()}@{message.offset()}"
        try:
            if key_version(message.key()) == GROUP_METADATA_KEY_VERSION:
                continue   # group membership, not an offset
            key = decode_key(message.key())
            value = bytes(message.payload() or b"")
            base = {"group": key.group, "topic": key.topic, "partition": key.partition,
                    "source_offset": message.offset()}
            if not value:
                out.append((DELETE_CURRENT, base))
                continue
            commit = decode_value(value)
        except MalformedRecord as exc:
            bad.append(f"{where}: {exc}")
            continue
        out.append((MERGE_COMMIT, {
            **base, "source_partition": message.partition(), "offset": commit.offset,
            "committed_at": _time(commit.commit_timestamp), "metadata": commit.metadata,
            "leader_epoch": commit.leader_epoch,
            "expire_at": None if commit.expire_timestamp in (None, -1) else _time(commit.expire_timestamp)}))
    if bad:
        with _SKIPPED_LOCK:
            _SKIPPED["malformed"] += len(bad)
        log.warning("consumer_offsets: skipped %d malformed record(s) (%d in this process), first: %s",
                    len(bad), skipped(), bad[0])
    return Statements.of_pairs(out)


def _time(ms: int) -> datetime:
    """A Kafka timestamp as a UTC datetime (Memgraph's LocalDateTime, in UTC)."""
    return datetime.fromtimestamp(ms / 1000, tz=UTC).replace(tzinfo=None)
