"""Whose fault a failure is, decided by the exception's type, never by its text.

A message (topic names, payloads, a user's exception text) can hold any word,
so no decision here reads one:

- TRANSIENT: retry the batch as it is, later. The operating system's errors
  (`OSError`: connection, timeout, disk), the Bolt driver's connection and
  timeout classes (pymgclient's `TransientError`, which it raises for
  Memgraph's TransientError code such as a conflicting transaction and for
  transport failures; `OperationalError`, which `connect` raises; and
  `InterfaceError`, which it raises on a session lost before), and a
  `SinkError(transient=True)`, and a Schema Registry that cannot be reached
  (`RegistryUnavailable`).
- MESSAGE: the messages may be at fault; bisect and set aside. Whatever the
  transformation raised (`TransformError`), a decode/deserialization error,
  the database refusing the statements (`SinkError(rejected=True)`, or the
  driver's other `DatabaseError`s).
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
    """pymgclient's connection and timeout classes (none when it is not installed)."""
    try:
        import mgclient
    except ImportError:
        return ()
    return tuple(getattr(mgclient, name) for name in ("TransientError", "OperationalError", "InterfaceError")
                 if isinstance(getattr(mgclient, name, None), type))


@lru_cache(maxsize=1)
def driver_refusal_types() -> tuple[type, ...]:
    """pymgclient's DatabaseError: the server refused a statement (its transient subclasses aside)."""
    try:
        import mgclient
    except ImportError:
        return ()
    refused = getattr(mgclient, "DatabaseError", None)
    return (refused,) if isinstance(refused, type) else ()


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


def is_refusal(error: BaseException) -> bool:
    """A driver error in which the database refused the statements themselves (a type error, a constraint)."""
    return isinstance(error, driver_refusal_types()) and not isinstance(error, driver_transient_types())
