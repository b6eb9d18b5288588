"""Kafka's `__consumer_offsets` records, built byte for byte in Kafka's documented coordinator formats (the
embedded cluster has no such topic): what the consumer_offsets transformation's tests feed it."""
from __future__ import annotations

import struct

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
