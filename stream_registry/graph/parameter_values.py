"""A statement's parameter values converted for where they go next: the Bolt driver, or a JSON preview.

(cypher_literals renders them as Cypher text for a cypherl file instead.)
"""
from __future__ import annotations

import datetime as dt
import math
from collections.abc import Mapping
from typing import Any

from .cypher_literals import text_of_bytes

_PLAIN_TYPES = frozenset({str, int, float, bool, type(None)})


def driver_parameters(parameters: Mapping[str, Any], index: int) -> dict[str, Any]:
    """Parameters as the Bolt driver takes them: bytes become UTF-8 text, as in cypherl files (SinkError naming
    the parameter of statement `index` when they are not UTF-8)."""
    return {name: _driver_value(value, f"${name} (statement {index})") for name, value in parameters.items()}


def _driver_value(value: Any, where: str) -> Any:
    kind = type(value)
    if kind in _PLAIN_TYPES:
        return value
    if kind is list or kind is tuple:
        return [_driver_value(v, f"{where}[{i}]") for i, v in enumerate(value)]
    if isinstance(value, Mapping):
        return {k: _driver_value(v, f"{where}.{k}") for k, v in value.items()}
    if isinstance(value, (bytes, bytearray, memoryview)):
        return text_of_bytes(value, where)
    return value


def plain_parameters(parameters: Mapping[str, Any]) -> dict[str, Any]:
    """A statement's parameters as plain JSON values, for showing them (a preview): bytes as UTF-8 text
    (invalid bytes replaced), dates and times as ISO-8601, durations in seconds, other values as text."""
    return {str(key): _plain(value) for key, value in parameters.items()}


def _plain(value: Any) -> Any:
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value).decode("utf-8", errors="replace")
    if isinstance(value, (dt.date, dt.time)):   # datetime is a date
        return value.isoformat()
    if isinstance(value, dt.timedelta):
        return value.total_seconds()
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [_plain(v) for v in value]
    return str(value)
