"""Reading one record: which row of which table it changes, and how, or what else it is.

Row events come as Debezium's envelope (`{before, after, source, op, ...}`) or as the `ExtractNewRecordState`
(unwrap) SMT's flat row (its metadata in `__`-prefixed fields, `add.fields`, or headers, `add.headers`; a delete
as the row's `before` with `__deleted: "true"`). The rest of what a connector writes is recognised and skipped:
tombstones (the delete came before), logical decoding messages (`op: m`), heartbeats (`{ts_ms}` keyed by
`serverName`), schema changes (`ddl`/`tableChanges`/`databaseName`) and transaction metadata (`status` BEGIN/END).

Values: semantic types converted (types.py); PostgreSQL's TOAST placeholder (`unavailable.value.placeholder`),
an unchanged column whose value the event does not carry, is listed in `Change.unchanged`, never written; so is a
Cassandra column that the mutation did not set. MongoDB's `after` (extended JSON text) is read as its document.
"""
from __future__ import annotations

import base64
import json
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, NamedTuple

from ...formats import plain
from .options import CdcOptions
from .positions import Position, source_position
from .types import column_value, field_types

_EMPTY: Mapping[str, Any] = MappingProxyType({})
SNAPSHOT_ENDS = frozenset({"last", "last_in_data_collection"})
_TOAST_UUID = "b68a35a7-17ad-35b3-af2a-ae46edb4545a"   # the PostgreSQL connector's placeholder for a uuid column


class Change(NamedTuple):
    """One record, read (a named tuple: one is made per record, and a frozen dataclass is slower to make)."""
    kind: str                                # "upsert", "delete", "truncate", or "skip"
    reason: str = ""                         # for "skip": what the record is
    names: tuple[str, ...] = ()              # the table's names, most qualified first
    qualified: str = ""                      # its schema-qualified name (the default label)
    key: Mapping[str, Any] = _EMPTY
    properties: Mapping[str, Any] = _EMPTY
    unchanged: frozenset[str] = frozenset()  # columns the event does not carry (TOAST): the stored value stays
    position: Position = Position("")
    snapshot: str = ""                       # source.snapshot of a read: "first", "true", "last", ...


def skip(reason: str) -> Change:
    return Change("skip", reason)


def read_change(message: Any, options: CdcOptions) -> Change:
    """What one message does (ValueError naming the record and the field when it is not a Debezium record)."""
    where = f"record {message.topic_name()}:{message.partition()}@{message.offset()}"
    value, value_schema = _unwrapped(_document(_value_of(message), where, "value"))
    if value is None:
        return skip("tombstone")
    if not isinstance(value, dict):
        raise ValueError(f"{where}: value is a {type(value).__name__}, expected a Debezium change event (a map "
                         f"with op, source, before and after)")
    try:
        if "op" in value and "source" in value:
            return _envelope(message, value, value_schema, options, where)
        other = _other_record(value, value_schema)
        if other:
            return skip(other)
        headers = _headers(message)
        if any(k.startswith("__") for k in value) or any(k.startswith("__") for k in headers):
            return _flattened(message, value, value_schema, headers, options, where)
    except ValueError as exc:
        if str(exc).startswith(where):
            raise
        raise ValueError(f"{where}: {exc}") from None
    raise ValueError(f"{where}: value.op is {value.get('op')!r}, expected a Debezium change event (op one of "
                     f"'r', 'c', 'u', 'd', 't'), the unwrap SMT's row (with __op or __deleted), a heartbeat, a "
                     f"schema change or transaction metadata (is this a Debezium topic?)")


def _other_record(value: Mapping[str, Any], schema: Any) -> str:
    name = str(schema.get("name") or "") if isinstance(schema, Mapping) else ""
    if name.endswith("Heartbeat") or set(value) == {"ts_ms"}:
        return "heartbeat"
    if "ddl" in value or "tableChanges" in value or (set(value) <= {"databaseName", "schemaName"} and value):
        return "schema_change"
    if value.get("status") in ("BEGIN", "END") and "id" in value:
        return "transaction"
    return ""


def _envelope(message: Any, value: Mapping[str, Any], schema: Any, options: CdcOptions, where: str) -> Change:
    op = value.get("op")
    if op == "m":
        return skip("message")
    if op not in ("r", "c", "u", "d", "t"):
        raise ValueError(f"{where}: value.op is {op!r}, expected one of 'r', 'c', 'u', 'd', 't'")
    source = value.get("source")
    if not isinstance(source, dict) or not (source.get("table") or source.get("collection")):
        raise ValueError(f"{where}: value.source.table is missing: the event does not name its table")
    names, qualified = _table_names(source)
    if not options.mirrors(names, message.topic_name()):
        return skip("not_mirrored")
    snapshot = _snapshot(source.get("snapshot")) if op == "r" else ""
    position = source_position(source, value, snapshot=op == "r")
    if op == "t":
        return Change("truncate", names=names, qualified=qualified, position=position)
    key = _key(message, where, op, names, source)
    types = {**options.types_of(names), **field_types(schema, "after")} if schema or options.types else _EMPTY
    if op == "d":   # the key as the row's types read it (a key without a schema holds a decimal as base64)
        before = value.get("before")
        if isinstance(before, dict):
            key = _key_as_columns(key, _row(before, {**types, **field_types(schema, "before")}, options)[0])
        return Change("delete", names=names, qualified=qualified, key=key, position=position)
    after = value.get("after")
    if isinstance(after, str) and source.get("collection"):   # MongoDB: the document as extended JSON text
        after = _mongo(json.loads(after))
    if not isinstance(after, dict):
        raise ValueError(f"{where}: value.after is {type(after).__name__} for op {op!r}, expected the row")
    properties, unchanged = _row(after, types, options, cassandra=str(source.get("connector")) == "cassandra")
    return Change("upsert", names=names, qualified=qualified, key=_key_as_columns(key, properties),
                  properties=properties, unchanged=unchanged, position=position, snapshot=snapshot)


def _flattened(message: Any, value: Mapping[str, Any], schema: Any, headers: Mapping[str, Any],
               options: CdcOptions, where: str) -> Change:
    """The unwrap SMT's record: its metadata fields (`__op`, `__table`, `__lsn`, ...) as a source block."""
    meta = {k[2:]: v for k, v in headers.items() if k.startswith("__")}
    meta.update({k[2:]: v for k, v in value.items() if k.startswith("__")})
    row = {k: v for k, v in value.items() if not k.startswith("__")}
    source = {k[len("source_"):] if k.startswith("source_") else k: v for k, v in meta.items()}
    parts = message.topic_name().split(".")   # Debezium's topic: prefix.schema.table (or prefix.db.table)
    if not source.get("table"):
        source["table"] = parts[-1]
    if len(parts) > 2 and parts[-1] == source["table"] and not source.get("schema") and not source.get("db"):
        source["schema"] = parts[-2]
    names, qualified = _table_names(source)
    if not options.mirrors(names, message.topic_name()):
        return skip("not_mirrored")
    op = str(meta.get("op") or "c")
    deleted = str(meta.get("deleted", "false")).lower() == "true" or op == "d"
    try:
        position = source_position(source, {}, snapshot=op == "r")
    except ValueError:   # no metadata added: the record's time (Kafka's), on the partition that keys the row
        position = Position(f"ts:{int(message.timestamp()) * 1_000_000:025d}", time=int(message.timestamp()))
    key = _key(message, where, op, names, source)
    if deleted:
        return Change("delete", names=names, qualified=qualified, key=key, position=position)
    types = {**options.types_of(names), **field_types(schema, "")}
    properties, unchanged = _row(row, types, options)
    return Change("upsert", names=names, qualified=qualified, key=_key_as_columns(key, properties),
                  properties=properties, unchanged=unchanged, position=position,
                  snapshot=_snapshot(meta.get("snapshot")) if op == "r" else "")


def _row(after: Mapping[str, Any], types: Mapping[str, tuple[str, int | None]], options: CdcOptions,
         cassandra: bool = False) -> tuple[dict[str, Any], frozenset[str]]:
    properties: dict[str, Any] = {}
    unchanged = []
    placeholders = _placeholders(options.unavailable_value)
    for column, raw in after.items():
        column = str(column)
        kind = type(raw)
        if cassandra:   # {value, deletion_ts, set}; a column the mutation did not touch is null
            if raw is None:
                unchanged.append(column)
                continue
            raw = raw.get("value") if isinstance(raw, Mapping) else raw
            kind = type(raw)
        if kind in _SCALARS and column not in types:   # the common case, quickly
            if kind is str and raw in placeholders:
                unchanged.append(column)
            elif raw is not None:
                properties[column] = raw
            continue
        if _placeholder(raw, placeholders):
            unchanged.append(column)
            continue
        try:
            converted = column_value(raw, types.get(column))
        except (ValueError, TypeError, OverflowError) as exc:
            raise ValueError(f"value.after.{column}: {raw!r} is not a {types.get(column, ('value',))[0]} "
                             f"({exc})") from None
        if converted is not None:
            properties[column] = converted
    return properties, frozenset(unchanged)


_SCALARS = frozenset({str, int, float, bool, type(None)})
_PLACEHOLDERS: dict[str, frozenset[Any]] = {}


def _placeholders(placeholder: str) -> frozenset[Any]:
    """The forms the placeholder takes: text, base64 of its bytes (a bytea column), the uuid column's."""
    found = _PLACEHOLDERS.get(placeholder)
    if found is None:
        found = _PLACEHOLDERS[placeholder] = frozenset({placeholder, _b64(placeholder), _TOAST_UUID,
                                                        placeholder.encode()})
    return found


def _placeholder(value: Any, placeholders: frozenset[Any]) -> bool:
    if isinstance(value, (str, bytes)):
        return value in placeholders
    if isinstance(value, bytearray):
        return bytes(value) in placeholders
    if isinstance(value, list) and value:
        return all(_placeholder(v, placeholders) for v in value)
    return False


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode("ascii")


def _key(message: Any, where: str, op: str, names: tuple[str, ...], source: Mapping[str, Any]) -> dict[str, Any]:
    key, schema = _unwrapped(_document(_key_of(message), where, "key"))
    if not isinstance(key, dict) or not key:
        raise ValueError(f"{where}: the Debezium event (op {op!r} on {names[0]}) has no key: the table needs a "
                         f"primary key (or message.key.columns) for its rows to become nodes")
    if source.get("collection") and set(key) == {"id"} and isinstance(key["id"], str):   # MongoDB: _id as JSON
        try:
            return {"_id": _mongo(json.loads(key["id"]))}
        except ValueError:
            return {"_id": key["id"]}
    if schema is None:
        return {str(k): v if type(v) in _SCALARS else column_value(v, None) for k, v in key.items()}
    types = field_types(schema, "")
    return {str(k): column_value(v, types.get(str(k))) for k, v in key.items()}


def _key_as_columns(key: Mapping[str, Any], properties: dict[str, Any]) -> dict[str, Any]:
    """The key columns as the row holds them (decoded with the row's types: a key without a schema holds a
    decimal as base64), so that a key and a foreign key to it are one value; the key's own where the row lacks
    the column."""
    return {k: properties.get(k, v) for k, v in key.items()}


def _mongo(value: Any) -> Any:
    """Extended JSON's wrappers ($numberLong, $oid, ...) as plain values."""
    if isinstance(value, dict):
        if len(value) == 1:
            (name, inner), = value.items()
            if name in ("$numberLong", "$numberInt"):
                return int(inner)
            if name in ("$oid", "$numberDecimal", "$symbol"):
                return str(inner)
            if name == "$numberDouble":
                return float(inner)
            if name == "$date":
                return inner if not isinstance(inner, dict) else _mongo(inner)
        return {k: _mongo(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_mongo(v) for v in value]
    return value


def _snapshot(flag: Any) -> str:
    if isinstance(flag, bool):
        return "true" if flag else ""
    return "" if flag in (None, "false") else str(flag)


def _table_names(source: Mapping[str, Any]) -> tuple[tuple[str, ...], str]:
    table = str(source.get("table") or source.get("collection"))
    db = source.get("db") or source.get("keyspace")
    schema = source.get("schema")
    found = _NAMES.get((db, schema, table))
    if found is None:
        if len(_NAMES) > 4096:
            _NAMES.clear()
        found = _NAMES[(db, schema, table)] = _names(db, schema, table)
    return found


_NAMES: dict[tuple[Any, Any, str], tuple[tuple[str, ...], str]] = {}


def _names(db: Any, schema: Any, table: str) -> tuple[tuple[str, ...], str]:
    names = []
    if db and schema:
        names.append(f"{db}.{schema}.{table}")
    if schema:
        names.append(f"{schema}.{table}")
    if db:
        names.append(f"{db}.{table}")
    names.append(table)
    return tuple(names), f"{schema}.{table}" if schema else f"{db}.{table}" if db else table


def _value_of(message: Any) -> Any:
    return message.value() if hasattr(message, "value") else message.payload()


def _key_of(message: Any) -> Any:
    return message.key_value() if hasattr(message, "key_value") else message.key()


def _headers(message: Any) -> dict[str, Any]:
    read = getattr(message, "headers", None)
    out: dict[str, Any] = {}
    for name, data in (read() if read is not None else None) or ():
        text = bytes(data).decode("utf-8", "replace") if isinstance(data, (bytes, bytearray)) else data
        out[str(name)] = _unwrapped(_json_or_text(text))[0]
    return out


def _json_or_text(text: Any) -> Any:
    if isinstance(text, str):
        try:
            return json.loads(text)
        except ValueError:
            return text
    return text


def _document(data: Any, where: str, what: str) -> Any:
    """A decoded value as it is; raw bytes (format `bytes`) read as JSON; empty means null."""
    if isinstance(data, (bytes, bytearray, memoryview)):
        data = bytes(data)
        if not data:
            return None
        try:
            return json.loads(data)
        except ValueError as exc:
            raise ValueError(f"{where}: {what} is not JSON ({exc}); set the stream's {what}.format for Avro, "
                             f"Protobuf or JSON Schema records") from None
    return plain(data) if isinstance(data, dict) else data


def _unwrapped(document: Any) -> tuple[Any, Any]:
    """The JSON converter's `{"schema": ..., "payload": ...}` wrapper taken off: (payload, schema)."""
    if isinstance(document, dict) and "payload" in document and "schema" in document and len(document) == 2:
        return document["payload"], document["schema"]
    return document, None
