"""Kafka messages with the accessors of Memgraph's `mgp.Message` and `mgp.Messages`, so a transformation
written for Memgraph's built-in streams reads them unchanged."""
from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any


class Message:
    """One Kafka message with the accessors of Memgraph's `mgp.Message`.

    Read-only by contract (private slots, no setters); kept to plain slots
    because one is built per consumed message.
    """

    __slots__ = ("_topic", "_partition", "_offset", "_key", "_value", "_timestamp")

    def __init__(self, topic: str, partition: int, offset: int, key: bytes | None,
                 value: bytes | None, timestamp: int):
        self._topic = topic
        self._partition = partition
        self._offset = offset
        self._key = key
        self._value = b"" if value is None else value
        self._timestamp = timestamp

    @classmethod
    def from_kafka(cls, msg: Any) -> Message:
        """Wrap a confluent_kafka.Message without copying its fields (hot path)."""
        return _KafkaMessage(msg)

    def payload(self) -> bytes:
        return self._value

    def topic_name(self) -> str:
        return self._topic

    def key(self) -> bytes | None:
        return self._key

    def timestamp(self) -> int:
        """Milliseconds since the epoch, as Kafka reports it."""
        return self._timestamp

    def offset(self) -> int:
        return self._offset

    def partition(self) -> int:
        return self._partition

    def _fields(self) -> tuple[Any, ...]:
        return (self.topic_name(), self.partition(), self.offset(), self.key(), self.payload(),
                self.timestamp())

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Message):
            return NotImplemented
        return self._fields() == other._fields()

    def __hash__(self) -> int:
        return hash(self._fields())

    def __repr__(self) -> str:
        return (f"Message({self.topic_name()!r}, partition={self.partition()}, offset={self.offset()}, "
                f"{len(self.payload())} bytes)")


class _KafkaMessage(Message):
    """A Message that reads through to the confluent_kafka.Message it wraps."""

    __slots__ = ("_msg",)

    def __init__(self, msg: Any):  # super().__init__ skipped on purpose: nothing to copy
        self._msg = msg

    def payload(self) -> bytes:
        value = self._msg.value()
        return b"" if value is None else value

    def topic_name(self) -> str:
        return self._msg.topic()

    def key(self) -> bytes | None:
        return self._msg.key()

    def timestamp(self) -> int:
        return self._msg.timestamp()[1]

    def offset(self) -> int:
        return self._msg.offset()

    def partition(self) -> int:
        return self._msg.partition()


class Messages:
    """A batch with the accessors of Memgraph's `mgp.Messages`."""

    __slots__ = ("_messages",)

    def __init__(self, messages: Sequence[Message]):
        self._messages = messages

    def total_messages(self) -> int:
        return len(self._messages)

    def message_at(self, index: int) -> Message:
        return self._messages[index]

    def is_valid(self) -> bool:
        """Always true: unlike Memgraph's, this batch does not expire after the call."""
        return True

    def __len__(self) -> int:
        return len(self._messages)

    def __iter__(self) -> Iterator[Message]:
        return iter(self._messages)
