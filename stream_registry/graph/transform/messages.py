"""Kafka messages with the accessors of Memgraph's `mgp.Message` and `mgp.Messages`, so a transformation
written for Memgraph's built-in streams reads them unchanged.

Beyond Memgraph's: `value()` and `key_value()` are the value and key decoded in the stream's formats
(`key.format`, `value.format`: stream_registry.formats); `payload()` and `key()` stay the raw bytes. With the
default format (`bytes`) they are the same."""
from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Any


class Message:
    """One Kafka message with the accessors of Memgraph's `mgp.Message`.

    Read-only by contract (private slots, no setters); kept to plain slots
    because one is built per consumed message.
    """

    __slots__ = ("_topic", "_partition", "_offset", "_key", "_value", "_timestamp", "_headers")

    def __init__(self, topic: str, partition: int, offset: int, key: bytes | None,
                 value: bytes | None, timestamp: int, headers: Sequence[tuple[str, bytes | None]] = ()):
        self._topic = topic
        self._partition = partition
        self._offset = offset
        self._key = key
        self._value = b"" if value is None else value
        self._timestamp = timestamp
        self._headers = list(headers)

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

    def value(self) -> Any:
        """The value decoded in the stream's value.format (the raw bytes for `bytes`; None for a tombstone)."""
        return self.payload()

    def key_value(self) -> Any:
        """The key decoded in the stream's key.format (the raw bytes for `bytes`)."""
        return self.key()

    def timestamp(self) -> int:
        """Milliseconds since the epoch, as Kafka reports it."""
        return self._timestamp

    def headers(self) -> list[tuple[str, bytes | None]]:
        """The record's headers, `(name, value bytes)` in order (Debezium's `__debezium.oldkey`, the unwrap SMT's
        `add.headers`)."""
        return self._headers

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

    def headers(self) -> list[tuple[str, bytes | None]]:
        return self._msg.headers() or []

    def offset(self) -> int:
        return self._msg.offset()

    def partition(self) -> int:
        return self._msg.partition()

    # never decoded (DecodedMessage wraps a message to decode it): value and key are the raw ones, read directly
    value = payload
    key_value = key


_UNSET: Any = object()


class DecodedMessage(Message):
    """A message whose value() and key_value() are decoded by a formats.Decoder, once, when `decode()` is first
    called (the worker calls it before the transformation runs, so a record that does not decode is known as such,
    and an unreachable registry is not mistaken for the transformation's fault). The rest reads through to the
    message it wraps (a consumed confluent_kafka.Message's wrapper, or any Message: the backfill's)."""

    __slots__ = ("_inner", "_decoder", "_decoded_value", "_decoded_key")

    def __init__(self, inner: Message, decoder: Any):  # super().__init__ skipped on purpose: nothing to copy
        self._inner = inner
        self._decoder = decoder
        self._decoded_value = _UNSET
        self._decoded_key = _UNSET

    def decode(self) -> DecodedMessage:
        """Decode key and value (DecodeError naming the record and the field, or RegistryUnavailable)."""
        from ...errors import DecodeError
        if self._decoded_value is _UNSET or self._decoded_key is _UNSET:
            inner = self._inner
            topic = inner.topic_name()
            try:
                if self._decoded_key is _UNSET:
                    self._decoded_key = self._decoder.decode(topic, inner.key(), key=True)
                if self._decoded_value is _UNSET:
                    self._decoded_value = self._decoder.decode(topic, inner.payload())
            except DecodeError as exc:
                raise DecodeError(f"record {topic}:{inner.partition()}@{inner.offset()}: {exc}") from None
        return self

    def value(self) -> Any:
        return self.decode()._decoded_value

    def key_value(self) -> Any:
        return self.decode()._decoded_key

    def payload(self) -> bytes:
        return self._inner.payload()

    def topic_name(self) -> str:
        return self._inner.topic_name()

    def key(self) -> bytes | None:
        return self._inner.key()

    def timestamp(self) -> int:
        return self._inner.timestamp()

    def headers(self) -> list[tuple[str, bytes | None]]:
        return self._inner.headers()

    def offset(self) -> int:
        return self._inner.offset()

    def partition(self) -> int:
        return self._inner.partition()


def wrap(msg: Any, decoder: Any = None) -> Message:
    """A message for a transformation (a consumed confluent_kafka.Message, or a Message), decoded (lazily) when
    the decoder is active."""
    inner = msg if isinstance(msg, Message) else _KafkaMessage(msg)
    if decoder is not None and decoder.active:
        return DecodedMessage(inner, decoder)
    return inner


def decode_all(messages: Iterable[Message]) -> None:
    """Decode every DecodedMessage of a batch (what the transformation will read), raising the first failure."""
    for message in messages:
        if isinstance(message, DecodedMessage):
            message.decode()


class Messages:
    """A batch with the accessors of Memgraph's `mgp.Messages`.

    Built from consumed confluent_kafka messages (`of_kafka`), a message's wrapper is made when the
    transformation asks for it (message_at, iteration), so a batch costs no object per message up front; the
    built-in transformations read the consumed messages themselves (`kafka_messages`)."""

    __slots__ = ("_messages", "_raw")

    def __init__(self, messages: Sequence[Message]):
        self._messages = messages
        self._raw: Sequence[Any] | None = None

    @classmethod
    def of_kafka(cls, consumed: Sequence[Any], decoder: Any = None) -> Messages:
        """A batch of consumed confluent_kafka messages; decoded (lazily, see DecodedMessage) when the decoder
        is active, each wrapper then made at once (decode_all reads every one before the transformation)."""
        if decoder is not None and decoder.active:
            return cls([DecodedMessage(_KafkaMessage(m), decoder) for m in consumed])
        batch = cls(consumed)
        batch._raw = consumed
        return batch

    def kafka_messages(self) -> Sequence[Any] | None:
        """The consumed confluent_kafka messages, when the batch is exactly those, undecoded (else None)."""
        return self._raw

    def total_messages(self) -> int:
        return len(self._messages)

    def message_at(self, index: int) -> Message:
        if self._raw is not None:
            return _KafkaMessage(self._raw[index])
        return self._messages[index]

    def is_valid(self) -> bool:
        """Always true: unlike Memgraph's, this batch does not expire after the call."""
        return True

    def __len__(self) -> int:
        return len(self._messages)

    def __iter__(self) -> Iterator[Message]:
        if self._raw is not None:
            return map(_KafkaMessage, self._raw)
        return iter(self._messages)
