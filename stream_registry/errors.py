"""One error hierarchy: every failure a user can see is a StreamError.

Each class owns the HTTP status the host answers it with (`http_status`): the
API, the client (`class_for_status`) and the pipe from a child process
(`class_named`) all map through this one module.
"""
from __future__ import annotations


class StreamError(Exception):
    """Base of every mgstreams error; the message names the field and the value."""
    http_status = 409   # a conflict with the stream's present state, unless a subclass says otherwise


class ConfigError(StreamError):
    """A stream configuration or argument was rejected; nothing was changed."""
    http_status = 400


class BodyTooLarge(ConfigError):
    """A request body, or a preview's answer, is larger than the host handles."""
    http_status = 413


class OffsetSpecError(ConfigError):
    """An offset spec could not be parsed or does not fit the stream's topics."""


class StreamNotFound(StreamError):
    """No stream of that name is registered."""
    http_status = 404


class StreamStateError(StreamError):
    """The operation does not fit the stream's current state."""
    http_status = 409


class StreamExists(StreamStateError):
    """A stream of that name is already registered: one error (409, as in Kafka Connect) wherever it is found."""


class TransformError(StreamError):
    """The transformation could not be loaded, or failed on a batch."""


class DecodeError(TransformError):
    """A record's key or value does not decode in the stream's format (stream_registry.formats): the message's
    fault, set aside under errors.tolerance 'all'."""


class RegistryUnavailable(StreamError):
    """The Schema Registry could not be reached or refused the stream's credentials: transient, the batch is
    retried (graph.sink_faults)."""


class TransformNotFound(TransformError):
    """The transformation's module is in none of the places transformations may come from."""


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

    def __init__(self, message: str, *, stored: dict, expected: dict | None = None):
        super().__init__(message)
        self.stored = dict(stored)
        self.expected = dict(expected or {})   # (topic, partition) -> what the writer expected (None: none)


class KafkaOperationError(StreamError):
    """A Kafka call failed; carries the Kafka error code and the partition it concerns."""
    http_status = 503

    def __init__(self, message: str, *, code: str | None = None, topic: str | None = None,
                 partition: int | None = None):
        super().__init__(message)
        self.code, self.topic, self.partition = code, topic, partition


class Busy(KafkaOperationError):
    """A cap on concurrent work is reached (503): try again shortly."""


# What a client raises for a host's status: the most general class that answers with it.
_BY_STATUS = {cls.http_status: cls for cls in (ConfigError, BodyTooLarge, StreamNotFound, StreamStateError,
                                               KafkaOperationError)}
# What crosses a pipe by name: every class that is built from its message alone.
_BY_NAME = {cls.__name__: cls for cls in (StreamError, ConfigError, BodyTooLarge, OffsetSpecError, StreamNotFound,
                                          StreamStateError, StreamExists, TransformError, DecodeError, SinkError,
                                          RegistryUnavailable,
                                          KafkaOperationError, Busy)}


def class_for_status(status: int) -> type[StreamError]:
    """The error class a client raises for an HTTP status the host answered (StreamError if none is ours)."""
    return _BY_STATUS.get(status, StreamError)


def class_named(name: str) -> type[StreamError]:
    """The error class of that name, as a child process reports it (StreamError for a name we do not know)."""
    return _BY_NAME.get(name, StreamError)
