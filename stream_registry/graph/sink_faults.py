"""Whose fault a failure is, decided by the exception's type, never by its text.

A message (topic names, payloads, a user's exception text) can hold any word,
so no decision here reads one:

- TRANSIENT: retry the batch as it is, later. The operating system's errors
  (`OSError`: connection, timeout, disk), the neo4j driver's connection and
  timeout classes (`ServiceUnavailable`, which a refused or lost connection
  and a commit whose outcome is unknown raise, `SessionExpired`, and
  `TransientError`, the class of a server error whose code says
  TransientError, such as Memgraph's conflicting transactions), and a
  `SinkError(transient=True)`, and a Schema Registry that cannot be reached
  (`RegistryUnavailable`).
- MESSAGE: the messages may be at fault; bisect and set aside. Whatever the
  transformation raised (`TransformError`), a decode/deserialization error,
  the database refusing the statements (`SinkError(rejected=True)`, or the
  driver's other server errors, `Neo4jError`).
- SINK: the sink cannot take any batch now (an untrusted certificate, a
  missing driver) or it must be realigned (`StoredOffsetsConflict`): never a
  message's fault, never helped by retrying the same batch blindly.
"""
from __future__ import annotations

from enum import StrEnum
from functools import lru_cache

from ..errors import RegistryUnavailable, SinkError, TransformError


class Fault(StrEnum):
    TRANSIENT = "transient"
    MESSAGE = "message"
    SINK = "sink"


@lru_cache(maxsize=1)
def driver_transient_types() -> tuple[type, ...]:
    """The neo4j driver's connection and timeout classes (none when it is not installed)."""
    try:
        from neo4j import exceptions
    except ImportError:
        return ()
    return (exceptions.ServiceUnavailable, exceptions.SessionExpired, exceptions.TransientError)


@lru_cache(maxsize=1)
def driver_refusal_types() -> tuple[type, ...]:
    """The neo4j driver's server errors: the server refused a statement (its transient class aside)."""
    try:
        from neo4j import exceptions
    except ImportError:
        return ()
    return (exceptions.Neo4jError,)


def classify(error: BaseException) -> Fault:
    """The fault of `error`, by its type (see the module's docstring)."""
    if isinstance(error, TransformError):
        return Fault.MESSAGE
    if isinstance(error, SinkError):
        if error.transient:
            return Fault.TRANSIENT
        return Fault.MESSAGE if error.rejected else Fault.SINK
    if isinstance(error, (OSError, RegistryUnavailable)) or isinstance(error, driver_transient_types()):
        return Fault.TRANSIENT
    return Fault.MESSAGE


def is_transient(error: BaseException) -> bool:
    """Worth retrying the same batch later: a lost connection, a timeout, a conflicting transaction."""
    return classify(error) is Fault.TRANSIENT


def is_server_answer(error: BaseException) -> bool:
    """The server answered with this error (the driver's Neo4jError classes): the statement did not apply. A
    connection lost meanwhile is no answer: then it may have."""
    return isinstance(error, driver_refusal_types())


def is_refusal(error: BaseException) -> bool:
    """A driver error in which the database refused the statements themselves (a type error, a constraint)."""
    return isinstance(error, driver_refusal_types()) and not isinstance(error, driver_transient_types())
