"""Debezium change events as graph changes: the `debezium` built-in transformation's logic.

A Debezium connector writes one event per row change: the key holds the row's
primary key columns, the value is an envelope `{before, after, source, op,
ts_ms, ...}` (wrapped as `{"schema": ..., "payload": ...}` by the JSON
converter with schemas enabled; Avro through a Schema Registry decodes to the
same maps). What each event does to the graph (Neo4j connector's "schema"
strategy: labels and keys from the table and its primary key):

- `r` (snapshot read), `c` (create), `u` (update): MERGE the row's node by its
  primary key, its label the table's (`labels` in the options renames it), and
  set its properties to the row's columns exactly (`SET n = ...`: a column that
  became absent is removed);
- `d` (delete): DETACH DELETE the node; the tombstone that follows (a null
  value) changes nothing;
- `t` (truncate): ignored, or with `truncate: delete` every node of the table's
  label goes;
- foreign keys named in the options become relationships from the row's node to
  the node it references (MERGEd by the key, so the order tables arrive in does
  not matter), replaced when the column changes, removed when it becomes null.

Order: every node keeps the source position of the event that wrote it (PostgreSQL's
`lsn`; MySQL's binlog `file`, `pos` and `row`; else the event's time, `ts_ns`, `ts_us` or
`ts_ms`) as a fixed-width text that sorts as the positions do. An event whose position is
older than the node's changes nothing, so a redelivered or replayed batch leaves the graph
as one delivery did, and an event delivered out of order never overwrites a newer one.
(A node deleted is gone with its position: a create older than that delete, replayed after
it, makes the node again; the log replays it before the delete, which removes it again.)

Events in a row of the same table and kind are one UNWIND statement (`$mgstreams_rows`,
the Bolt sink's folding names, graph/unwind.py): one round trip per run, not per row.

What real events carry and is handled here: `source.snapshot` as text or boolean; 64-bit
`lsn`, `ts_us`, `ts_ns` as integers; `before` null or partial (never used); field order
anything; `transaction` null or absent; decimals as base64 unscaled bytes with the scale in
the JSON schema (made exact decimal text when the schema is in the event); a truncate with
a null key.
"""
from __future__ import annotations

import base64
import decimal
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..formats import plain as _plain
from ..graph.unwind import ROW_VARIABLE, ROWS_PARAMETER

POSITION_PROPERTY = "_debezium_position"
TRUNCATE_MODES = ("ignore", "delete")
_UPSERT_OPS = ("r", "c", "u")
_ROW = ROW_VARIABLE


@dataclass(frozen=True)
class RelationshipSpec:
    column: str
    type: str
    label: str
    key: str


@dataclass(frozen=True)
class CdcOptions:
    """The stream's `transform.options` for `debezium`."""
    labels: Mapping[str, str] = field(default_factory=dict)
    relationships: Mapping[str, tuple[RelationshipSpec, ...]] = field(default_factory=dict)
    truncate: str = "ignore"

    @classmethod
    def parse(cls, options: Mapping[str, Any] | None) -> CdcOptions:
        options = dict(options or {})
        unknown = sorted(set(options) - {"labels", "relationships", "truncate"})
        if unknown:
            raise ValueError(f"transform.options: unknown key {unknown[0]!r} for debezium (known: labels, "
                             f"relationships, truncate)")
        labels = options.get("labels") or {}
        if not isinstance(labels, Mapping) or not all(isinstance(k, str) and isinstance(v, str) and v
                                                      for k, v in labels.items()):
            raise ValueError("transform.options['labels']: expected a map of table names to labels")
        truncate = options.get("truncate", "ignore")
        if truncate not in TRUNCATE_MODES:
            raise ValueError(f"transform.options['truncate']: expected one of {', '.join(TRUNCATE_MODES)}, "
                             f"got {truncate!r}")
        relationships: dict[str, tuple[RelationshipSpec, ...]] = {}
        given = options.get("relationships") or {}
        if not isinstance(given, Mapping):
            raise ValueError("transform.options['relationships']: expected a map of tables to "
                             "{column: {type, label, key}}")
        for table, columns in given.items():
            where = f"transform.options['relationships'][{table!r}]"
            if not isinstance(columns, Mapping):
                raise ValueError(f"{where}: expected a map of columns to {{type, label, key}}")
            specs = []
            for column, spec in columns.items():
                if not isinstance(spec, Mapping) or not isinstance(spec.get("label"), str) or not spec.get("label"):
                    raise ValueError(f"{where}[{column!r}]: expected {{label, key, type}} (label required)")
                specs.append(RelationshipSpec(column=str(column), label=spec["label"],
                                              key=str(spec.get("key") or "id"),
                                              type=str(spec.get("type") or str(column).upper())))
            relationships[str(table)] = tuple(specs)
        return cls(labels=dict(labels), relationships=relationships, truncate=truncate)


@dataclass(frozen=True)
class Change:
    """One event, read: what it does to which node."""
    op: str                       # "upsert", "delete", "truncate", or "none" (a tombstone, a message event)
    table: tuple[str, ...] = ()   # the names the table goes by, most qualified first
    key: Mapping[str, Any] = field(default_factory=dict)
    properties: Mapping[str, Any] = field(default_factory=dict)
    position: str = ""


def statements(messages: Iterable[Any], options: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
    """The batch's events as Cypher records (see the module docstring)."""
    parsed = CdcOptions.parse(options)
    out: list[dict[str, Any]] = []
    run_shape: tuple | None = None
    run_rows: list[dict[str, Any]] = []

    def flush() -> None:
        if run_shape is not None and run_rows:
            out.extend(_run_statements(run_shape, run_rows))

    for message in messages:
        change = read_change(message)
        if change.op == "none":
            continue
        label = _label(change.table, parsed)
        if change.op == "truncate":
            flush()
            run_shape, run_rows = None, []
            if parsed.truncate == "delete":
                out.append({"query": f"MATCH (n:{_name(label)}) WHERE n.{_name(POSITION_PROPERTY)} IS NULL OR "
                                     f"n.{_name(POSITION_PROPERTY)} <= $position DETACH DELETE n",
                            "parameters": {"position": change.position}})
            continue
        relationships = _relationships(change.table, parsed) if change.op == "upsert" else ()
        shape = (change.op, label, tuple(change.key), relationships)
        if shape != run_shape:
            flush()
            run_shape, run_rows = shape, []
        row: dict[str, Any] = {"key": dict(change.key), "position": change.position}
        if change.op == "upsert":
            row["properties"] = {**change.properties, **change.key, POSITION_PROPERTY: change.position}
            for spec in relationships:
                row[f"target_{spec.column}"] = change.properties.get(spec.column)
        run_rows.append(row)
    flush()
    return out


def _run_statements(shape: tuple, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    op, label, key_columns, relationships = shape
    match = f"(n:{_name(label)} {{{', '.join(f'{_name(c)}: {_ROW}.key.{_name(c)}' for c in key_columns)}}})"
    position = f"n.{_name(POSITION_PROPERTY)}"
    unwind = f"UNWIND ${ROWS_PARAMETER} AS {_ROW} "
    if op == "delete":
        query = (f"{unwind}MATCH {match} WHERE {position} IS NULL OR {position} <= {_ROW}.position "
                 f"DETACH DELETE n")
        return [{"query": query, "parameters": {ROWS_PARAMETER: rows}}]
    out = [{"query": f"{unwind}MERGE {match} WITH n, {_ROW} WHERE {position} IS NULL OR {position} <= "
                     f"{_ROW}.position SET n = {_ROW}.properties",
            "parameters": {ROWS_PARAMETER: [{"key": r["key"], "position": r["position"],
                                              "properties": r["properties"]} for r in rows]}}]
    for spec in relationships:
        rel, target_key = _name(spec.type), _name(spec.key)
        rel_rows = [{"key": r["key"], "position": r["position"], "target": r[f"target_{spec.column}"]}
                    for r in rows]
        # only for the event the node now holds (its position); no null is deleted, no WITH: two plain statements
        unlink = (f"{unwind}MATCH {match}-[old:{rel}]->(m) WHERE {position} = {_ROW}.position AND "
                  f"({_ROW}.target IS NULL OR m.{target_key} <> {_ROW}.target) DELETE old")
        link = (f"{unwind}MATCH {match} WHERE {position} = {_ROW}.position AND {_ROW}.target IS NOT NULL "
                f"MERGE (m:{_name(spec.label)} {{{target_key}: {_ROW}.target}}) MERGE (n)-[:{rel}]->(m)")
        out.append({"query": unlink, "parameters": {ROWS_PARAMETER: rel_rows}})
        out.append({"query": link, "parameters": {ROWS_PARAMETER: rel_rows}})
    return out


# -- reading one event ------------------------------------------------------------------------------
def read_change(message: Any) -> Change:
    """What one message does (ValueError naming the record and the field when it is not a Debezium event)."""
    where = f"record {message.topic_name()}:{message.partition()}@{message.offset()}"
    value = _document(_value_of(message), where, "value")
    value, value_schema = _unwrapped(value)
    if value is None:
        return Change("none")   # a tombstone: its delete came before it
    if not isinstance(value, dict):
        raise ValueError(f"{where}: value is a {type(value).__name__}, expected a Debezium change event (a map "
                         f"with op, source, before and after)")
    op = value.get("op")
    if op == "m":
        return Change("none")   # a logical decoding message, not a row
    if op not in ("r", "c", "u", "d", "t"):
        raise ValueError(f"{where}: value.op is {op!r}, expected one of 'r', 'c', 'u', 'd', 't' (is this a "
                         f"Debezium change event topic?)")
    source = value.get("source")
    if not isinstance(source, dict) or not source.get("table"):
        raise ValueError(f"{where}: value.source.table is missing: the event does not name its table")
    table = _table_names(source)
    position = source_position(source, value)
    if op == "t":
        return Change("truncate", table=table, position=position)
    key, _ = _unwrapped(_document(_key_of(message), where, "key"))
    if not isinstance(key, dict) or not key:
        raise ValueError(f"{where}: the Debezium event (op {op!r} on {table[0]}) has no key: the table needs a "
                         f"primary key (or message.key.columns) for its rows to become nodes")
    key = _plain(key)
    if op == "d":
        return Change("delete", table=table, key=key, position=position)
    after = value.get("after")
    if not isinstance(after, dict):
        raise ValueError(f"{where}: value.after is {type(after).__name__} for op {op!r}, expected the row")
    decimals = _decimal_scales(value_schema, "after")
    if decimals:
        properties = {str(k): _column(v, decimals.get(k)) for k, v in after.items() if v is not None}
    else:
        properties = {k: v for k, v in _plain(after).items() if v is not None}
    return Change("upsert", table=table, key=key, properties=properties, position=position)


def source_position(source: Mapping[str, Any], envelope: Mapping[str, Any]) -> str:
    """The event's place in the source's log as text that sorts as the positions do: PostgreSQL `lsn`, MySQL
    binlog file/pos/row, else the event's time in nanoseconds."""
    lsn = source.get("lsn")
    if lsn is not None:
        return f"pg:{int(lsn):020d}"
    if source.get("file") is not None and source.get("pos") is not None:
        return f"my:{source['file']}:{int(source['pos']):020d}:{int(source.get('row') or 0):010d}"
    for name, scale in (("ts_ns", 1), ("ts_us", 1_000), ("ts_ms", 1_000_000)):
        for holder in (source, envelope):
            if holder.get(name) is not None:
                return f"ts:{int(holder[name]) * scale:025d}"
    raise ValueError("value.source has no position (lsn, file/pos, ts_ms)")


def _value_of(message: Any) -> Any:
    value = message.value() if hasattr(message, "value") else message.payload()
    return value


def _key_of(message: Any) -> Any:
    return message.key_value() if hasattr(message, "key_value") else message.key()


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
    return data


def _unwrapped(document: Any) -> tuple[Any, Any]:
    """The JSON converter's `{"schema": ..., "payload": ...}` wrapper taken off: (payload, schema)."""
    if isinstance(document, dict) and "payload" in document and "schema" in document and len(document) == 2:
        return document["payload"], document["schema"]
    return document, None


def _table_names(source: Mapping[str, Any]) -> tuple[str, ...]:
    table = str(source["table"])
    names = []
    db, schema = source.get("db"), source.get("schema")
    if db and schema:
        names.append(f"{db}.{schema}.{table}")
    if schema:
        names.append(f"{schema}.{table}")
    if db:
        names.append(f"{db}.{table}")
    names.append(table)
    return tuple(names)


def _label(table: tuple[str, ...], options: CdcOptions) -> str:
    return next((options.labels[name] for name in table if name in options.labels), table[-1])


def _relationships(table: tuple[str, ...], options: CdcOptions) -> tuple[RelationshipSpec, ...]:
    return next((options.relationships[name] for name in table if name in options.relationships), ())


def _name(identifier: str) -> str:
    """A label, type or property name as a Cypher identifier (backticks doubled inside)."""
    return "`" + identifier.replace("`", "``") + "`"


def _decimal_scales(schema: Any, field_name: str) -> dict[str, int]:
    """Columns of `field_name` (after) that Kafka Connect's Decimal logical type carries, with their scales."""
    if not isinstance(schema, Mapping):
        return {}
    for part in schema.get("fields") or ():
        if isinstance(part, Mapping) and part.get("field") == field_name:
            return {f["field"]: int(f.get("parameters", {}).get("scale", 0)) for f in part.get("fields") or ()
                    if isinstance(f, Mapping) and f.get("name") == "org.apache.kafka.connect.data.Decimal"}
    return {}


def _column(value: Any, scale: int | None) -> Any:
    if scale is not None and isinstance(value, str):
        try:
            unscaled = int.from_bytes(base64.b64decode(value), "big", signed=True)
        except ValueError:
            return value
        return str(decimal.Decimal(unscaled).scaleb(-scale))
    return _plain(value)
