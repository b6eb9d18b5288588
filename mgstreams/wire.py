"""The JSON shape of report values, shared by the host's API and its clients.

The host encodes the core library's frozen dataclasses with `to_json`; the CLI
decodes them back with `from_json` so its tables print the same values whether
they came over HTTP or from an in-process registry.
"""
from __future__ import annotations

import dataclasses
import datetime
import enum
import types
import typing
from collections.abc import Mapping
from typing import Any, TypeVar

from stream_registry.errors import StreamError

T = TypeVar("T")


def to_json(value: Any, *, zulu: bool = False) -> Any:
    """Frozen dataclasses, str enums, datetimes, mappings and sequences as JSON-ready data; `zulu` writes a UTC
    moment with `Z` (as the CLI's tables do) instead of `+00:00`."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: to_json(getattr(value, f.name), zulu=zulu) for f in dataclasses.fields(value)}
    if isinstance(value, enum.Enum):
        return to_json(value.value, zulu=zulu)
    if isinstance(value, datetime.datetime):
        text = value.isoformat()
        return text[:-6] + "Z" if zulu and text.endswith("+00:00") else text
    if isinstance(value, Mapping):
        return {str(k): to_json(v, zulu=zulu) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [to_json(v, zulu=zulu) for v in value]
    return value


def from_json(cls: type[T], data: Any) -> T:
    """Rebuild a report dataclass from `to_json` output; a shape mismatch is a StreamError."""
    if not isinstance(data, Mapping):
        raise StreamError(f"response: expected an object for {cls.__name__}, got {type(data).__name__}")
    hints = typing.get_type_hints(cls)
    values = {}
    for f in dataclasses.fields(typing.cast(Any, cls)):
        if f.name in data:
            values[f.name] = _decode(hints[f.name], data[f.name])
    try:
        return cls(**values)
    except (TypeError, ValueError) as exc:
        raise StreamError(f"response: not a {cls.__name__}: {exc}") from None


def _decode(hint: Any, value: Any) -> Any:
    if value is None:
        return None
    options = typing.get_args(hint) if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union \
        else (hint,)
    for option in options:
        if isinstance(option, type) and issubclass(option, enum.Enum):
            return option(value)
        if option is datetime.datetime:
            return datetime.datetime.fromisoformat(value)
        if typing.get_origin(option) is tuple:
            return tuple(value)
    return value
