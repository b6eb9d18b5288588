"""One error hierarchy: every failure a user can see is a StreamError."""
from __future__ import annotations


class StreamError(Exception):
    """Base of every mgstreams error; the message names the field and the value."""


class ConfigError(StreamError):
    """A stream configuration or argument was rejected; nothing was changed."""


class OffsetSpecError(ConfigError):
    """An offset spec could not be parsed or does not fit the stream's topics."""


class StreamNotFound(StreamError):
    """No stream of that name is registered."""


class StreamStateError(StreamError):
    """The operation does not fit the stream's current state."""


class TransformError(StreamError):
    """The transformation could not be loaded, or failed on a batch."""


class SinkError(StreamError):
    """The graph sink did not apply a batch. `transient`: retrying later may succeed (a lost connection);
    `rejected`: the database refused the statements themselves (a query error caused by the data)."""

    def __init__(self, message: str, *, transient: bool = False, rejected: bool = False):
        super().__init__(message)
        self.transient, self.rejected = transient, rejected


class StoredOffsetsConflict(SinkError):
    """An exactly-once batch does not continue from the offsets its sink stores: nothing was written.

    `stored` maps (topic, partition) to the next offset the sink holds for the
    batch's partitions (a partition absent from it has none stored): the
    caller realigns there (seek, and a new batch from those offsets) instead of
    retrying the same batch. Neither transient nor the messages' fault.
    """

    def __init__(self, message: str, *, stored: dict):
        super().__init__(message)
        self.stored = dict(stored)


class KafkaOperationError(StreamError):
    """A Kafka call failed; carries the Kafka error code and the partition it concerns."""

    def __init__(self, message: str, *, code: str | None = None, topic: str | None = None,
                 partition: int | None = None):
        super().__init__(message)
        self.code, self.topic, self.partition = code, topic, partition
