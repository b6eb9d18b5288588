"""Where a consumed confluent_kafka `Message` sits, as typed values.

confluent-kafka types `topic()`, `partition()` and `offset()` as optional: a
client-level error event carries none of them. A record (or a partition's EOF
event) carries all three; these helpers say so once, instead of every consume
loop checking for None.
"""
from __future__ import annotations

from functools import lru_cache

from confluent_kafka import Message

from ..errors import KafkaOperationError
from ..model import PartitionKey


def message_key(msg: Message) -> PartitionKey | None:
    """The message's (topic, partition), None for an event that belongs to no partition."""
    topic, partition = msg.topic(), msg.partition()
    return None if topic is None or partition is None else partition_key(topic, partition)


@lru_cache(maxsize=65536)
def partition_key(topic: str, partition: int) -> PartitionKey:
    """One key per partition, not one per message: a stream asks twice per record (bench/ingest_throughput.py)."""
    return PartitionKey(topic, partition)


def message_offset(msg: Message) -> int:
    """A record's offset; an event without one (not a record) is a KafkaOperationError, never a made-up offset."""
    offset = msg.offset()
    if offset is None:
        raise KafkaOperationError(f"{msg.topic()}:{msg.partition()}: a message without an offset "
                                  f"({msg.error() or 'no error'})", topic=msg.topic(), partition=msg.partition())
    return offset


def record_key(msg: Message) -> PartitionKey:
    """A record's (topic, partition); an event without them (not a record) is a KafkaOperationError."""
    key = message_key(msg)
    if key is None:
        raise KafkaOperationError(f"a message without a topic and partition ({msg.error() or 'no error'})")
    return key
