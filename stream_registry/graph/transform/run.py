"""Running a transformation on one batch and normalising what it returns (mgp.Records, mappings or
Statements) to Statements: runs of one query text with their parameters, no object per record (a Statements
the transformation built itself, as the built-in ones do, passes as it is)."""
from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from ...errors import TransformError
from ...model import STREAM_MEMORY_MB_ENV
from ..statement import Statement, Statements
from .messages import Message, Messages


def run_transformation(fn: Callable, messages: Sequence[Message] | Messages, *,
                       name: str | None = None) -> Statements:
    """Run `fn` on one batch and normalise what it returns to Statements.

    `messages` is a sequence of Message or a Messages (`Messages.of_kafka(consumed)` for a consumed batch: a
    wrapper per message only when the transformation asks for one).

    Records may be `mgp.Record(query=..., parameters=...)`, mappings with keys
    `query` and `parameters`, or Statements; None parameters mean {}.
    """
    if not isinstance(messages, Messages):
        messages = Messages(messages)
    try:
        result = fn(messages)
        if type(result) is Statements:
            return result
        return _normalised(_records(result))
    except TransformError as exc:
        raise TransformError(f"transform {_name(fn, name)!r}: {exc} "
                             f"(batch starting at {_batch_start(messages)})") from None
    except MemoryError:   # the kernel's limit in a stream process (stream_registry.sandbox): say which
        raise TransformError(f"memory: transform {_name(fn, name)!r} ran out of memory on the batch starting at "
                             f"{_batch_start(messages)}: past the cap of its process (${STREAM_MEMORY_MB_ENV})"
                             ) from None
    except (Exception, SystemExit) as exc:
        raise TransformError(f"transform {_name(fn, name)!r} failed on the batch starting at "
                             f"{_batch_start(messages)}: {type(exc).__name__}: {exc}") from exc


def _records(result: Any) -> Iterable:
    if isinstance(result, (list, tuple)):
        return result
    if hasattr(result, "fields") or isinstance(result, (Mapping, Statement)):
        return (result,)
    if result is None or isinstance(result, (str, bytes)) or not isinstance(result, Iterable):
        raise TransformError(f"returned {type(result).__name__}; expected a list of records")
    return list(result)


def _normalised(records: Iterable) -> Statements:
    return Statements.of_pairs(_statement(record, index) for index, record in enumerate(records))


def _statement(record: Any, index: int) -> tuple[str, Mapping[str, Any]]:
    if type(record) is not dict:
        if isinstance(record, Statement):
            return record.query, record.parameters
        fields = getattr(record, "fields", None)
        if isinstance(fields, Mapping):
            record = fields
        elif not isinstance(record, Mapping):
            raise TransformError(f"record {index} is a {type(record).__name__}, "
                                 f"expected mgp.Record(query=..., parameters=...) or a mapping")
    query = record.get("query")
    if not isinstance(query, str) or not query or query.isspace():
        raise TransformError(f"record {index}: query must be a non-empty string, got {query!r:.80}")
    parameters = record.get("parameters")
    if parameters is None:
        parameters = {}
    elif type(parameters) is not dict and not isinstance(parameters, Mapping):
        raise TransformError(f"record {index}: parameters must be a map or null, "
                             f"got {type(parameters).__name__}")
    return query, parameters


def _name(fn: Callable, name: str | None) -> str:
    if name:
        return name
    fn = getattr(fn, "__wrapped__", fn)
    return f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', repr(fn))}"


def _batch_start(messages: Messages) -> str:
    if not messages.total_messages():
        return "an empty batch"
    first = messages.message_at(0)
    return f"{first.topic_name()}:{first.partition()} offset {first.offset()}"
