"""Column values as the graph takes them: Debezium's and Kafka Connect's semantic types made the graph's values.

The JSON converter (with schemas) names each column's semantic type in the schema (`name`, `parameters`); a
schemaless stream declares them in `transform.options.types`. Temporal types become the graph's temporal values
(Python date/time/datetime/timedelta, written by the sinks as Memgraph's Date, LocalTime, LocalDateTime,
ZonedDateTime, Duration); decimals exact decimal text (the graph has no decimal type); geometry and any other
structured value JSON text (a graph property cannot hold a map). What is not named stays as it arrived.
"""
from __future__ import annotations

import base64
import datetime as dt
import decimal
import json
from collections.abc import Mapping
from typing import Any

from ...formats import plain

_EPOCH = dt.datetime(1970, 1, 1)
_EPOCH_DATE = dt.date(1970, 1, 1)


def field_types(schema: Any, field_name: str) -> dict[str, tuple[str, int | None]]:
    """The columns of `field_name` (`after`, or the key's top level when field_name is "") that carry a semantic
    type: {column: (type name, decimal scale)}."""
    if not isinstance(schema, Mapping):
        return {}
    fields = schema.get("fields") or ()
    if field_name:
        part = next((p for p in fields if isinstance(p, Mapping) and p.get("field") == field_name), None)
        fields = part.get("fields") or () if isinstance(part, Mapping) else ()
    out: dict[str, tuple[str, int | None]] = {}
    for column in fields:
        if isinstance(column, Mapping) and column.get("name") and column.get("field"):
            scale = (column.get("parameters") or {}).get("scale")
            out[str(column["field"])] = (str(column["name"]), int(scale) if scale is not None else None)
    return out


def column_value(value: Any, semantic: tuple[str, int | None] | None) -> Any:
    """One column's value as the graph takes it (ValueError when it is not what its type says)."""
    if value is None:
        return None
    if semantic is not None:
        converter = _CONVERTERS.get(semantic[0])
        if converter is not None:
            return converter(value, semantic[1])
    value = plain(value)
    if isinstance(value, dict):
        return json.dumps(value, sort_keys=True, default=str)
    if isinstance(value, list) and any(isinstance(v, (dict, list)) for v in value):
        return json.dumps(value, sort_keys=True, default=str)
    return value


def _decimal(value: Any, scale: int | None) -> Any:
    if isinstance(value, str):
        unscaled = int.from_bytes(base64.b64decode(value, validate=True), "big", signed=True)
        return str(decimal.Decimal(unscaled).scaleb(-(scale or 0)))
    return plain(value)   # Avro's Decimal, or decimal.handling.mode=double/string


def _variable_scale(value: Any, _: int | None) -> Any:
    if isinstance(value, Mapping) and "value" in value:
        return _decimal(value["value"], int(value.get("scale") or 0))
    return plain(value)


def _zoned(value: Any, _: int | None) -> Any:
    text = str(value).replace("Z", "+00:00")
    head, dot, tail = text.partition(".")
    if dot:   # Python reads at most 6 fractional digits; Debezium writes up to 9
        digits = len(tail) - len(tail.lstrip("0123456789"))
        tail = tail[:min(digits, 6)] + tail[digits:]
        text = f"{head}.{tail}"
    return dt.datetime.fromisoformat(text)


def _micros(value: Any, per_unit: int) -> int:
    """Microseconds of `value` counted in units of 1/per_unit ms (1: ms, 1000: us, 1000000: ns), exactly."""
    return int(value) * 1000 // per_unit


def _time(per_unit: int) -> Any:
    def convert(value: Any, _: int | None) -> dt.time:
        return (dt.datetime.min + dt.timedelta(microseconds=_micros(value, per_unit))).time()
    return convert


def _timestamp(per_unit: int) -> Any:
    def convert(value: Any, _: int | None) -> dt.datetime:
        return _EPOCH + dt.timedelta(microseconds=_micros(value, per_unit))
    return convert


def _date(value: Any, _: int | None) -> dt.date:
    return _EPOCH_DATE + dt.timedelta(days=int(value))


def _geometry(value: Any, _: int | None) -> Any:
    return json.dumps(plain(value), sort_keys=True) if isinstance(value, Mapping) else plain(value)


_CONVERTERS = {
    "org.apache.kafka.connect.data.Decimal": _decimal,
    "io.debezium.data.VariableScaleDecimal": _variable_scale,
    "io.debezium.time.Date": _date,
    "org.apache.kafka.connect.data.Date": _date,
    "io.debezium.time.Time": _time(1),
    "org.apache.kafka.connect.data.Time": _time(1),
    "io.debezium.time.MicroTime": _time(1_000),
    "io.debezium.time.NanoTime": _time(1_000_000),
    "io.debezium.time.Timestamp": _timestamp(1),
    "org.apache.kafka.connect.data.Timestamp": _timestamp(1),
    "io.debezium.time.MicroTimestamp": _timestamp(1_000),
    "io.debezium.time.NanoTimestamp": _timestamp(1_000_000),
    "io.debezium.time.ZonedTimestamp": _zoned,
    "io.debezium.time.MicroDuration": lambda v, _: dt.timedelta(microseconds=int(v)),
    "io.debezium.data.geometry.Geometry": _geometry,
    "io.debezium.data.geometry.Geography": _geometry,
    "io.debezium.data.geometry.Point": _geometry,
}
