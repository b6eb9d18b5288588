"""Debezium change events as the PostgreSQL and MySQL connectors write them, for the CDC tests.

Written from Debezium's documented envelopes (debezium.io/documentation/reference/stable/connectors/postgresql.html
and mysql.html, "Data change events": the key `{"id": ...}`, the value `{before, after, source, op, ts_ms}`,
`source` with PostgreSQL's `lsn`, `txId`, `sequence` or MySQL's `file`, `pos`, `row`, `server_id`), with what
real events carry beyond the documented samples (DESIGN.md): `snapshot` as text, `ts_us`/`ts_ns` beyond 2^53,
`sequence` as a string holding a JSON array, `transaction` present and null, `before` null on a PostgreSQL update
under REPLICA IDENTITY DEFAULT, a truncate with a null key. `wrapped` adds the JSON converter's
`{"schema": ..., "payload": ...}`.
"""
from __future__ import annotations

import json

TS_MS = 1_700_000_000_000


def pg_source(lsn: int, *, table: str = "customers", snapshot: str = "false", tx: int = 555) -> dict:
    ts_ms = TS_MS + lsn % 1000
    return {"version": "2.7.3.Final", "connector": "postgresql", "name": "dbserver1", "ts_ms": ts_ms,
            "ts_us": ts_ms * 1000 + 123, "ts_ns": ts_ms * 1_000_000 + 123_456, "snapshot": snapshot,
            "db": "postgres", "sequence": json.dumps([str(lsn - 8), str(lsn)]), "schema": "inventory",
            "table": table, "txId": tx, "lsn": lsn, "xmin": None}


def mysql_source(pos: int, row: int = 0, *, table: str = "customers", snapshot: str = "false",
                 file: str = "mysql-bin.000003") -> dict:
    return {"version": "2.7.3.Final", "connector": "mysql", "name": "mysql-server-1", "ts_ms": TS_MS + pos,
            "snapshot": snapshot, "db": "inventory", "sequence": None, "table": table, "server_id": 223344,
            "gtid": None, "file": file, "pos": pos, "row": row, "thread": 7, "query": None}


def envelope(op: str, source: dict, *, before: dict | None = None, after: dict | None = None) -> dict:
    ts_ms = source["ts_ms"] + 5
    # field order as real events have it differs from the samples: keep op first here
    return {"op": op, "before": before, "after": after, "source": source, "transaction": None, "ts_ms": ts_ms,
            "ts_us": ts_ms * 1000, "ts_ns": ts_ms * 1_000_000}


def key(row_id: int) -> dict:
    return {"id": row_id}


def customer(row_id: int, first: str, last: str = "Kretchmar", email: str | None = "annek@noanswer.org") -> dict:
    row = {"id": row_id, "first_name": first, "last_name": last}
    if email is not None:
        row["email"] = email
    return row


KEY_SCHEMA = {"type": "struct", "optional": False, "name": "dbserver1.inventory.customers.Key",
              "fields": [{"type": "int32", "optional": False, "field": "id"}]}


def wrapped(payload, schema: dict | None = None) -> dict:
    """The JSON converter's form with schemas.enable=true (the schema is abridged: the tests read the payload)."""
    return {"schema": schema if schema is not None else {"type": "struct", "optional": False, "fields": []},
            "payload": payload}


def encode(document) -> bytes | None:
    return None if document is None else json.dumps(document).encode()


# -- Avro, as Debezium's AvroConverter registers it (abridged to the fields used) ----------------------
AVRO_KEY = {"type": "record", "name": "Key", "namespace": "dbserver1.inventory.customers",
            "fields": [{"name": "id", "type": "int"}]}
_ROW = {"type": "record", "name": "Value", "namespace": "dbserver1.inventory.customers",
        "fields": [{"name": "id", "type": "int"}, {"name": "first_name", "type": "string"},
                   {"name": "last_name", "type": "string"},
                   {"name": "email", "type": ["null", "string"], "default": None}]}
AVRO_ENVELOPE = {
    "type": "record", "name": "Envelope", "namespace": "dbserver1.inventory.customers",
    "fields": [
        {"name": "before", "type": ["null", _ROW], "default": None},
        {"name": "after", "type": ["null", "Value"], "default": None},
        {"name": "source", "type": {"type": "record", "name": "Source", "namespace": "io.debezium.connector.postgresql",
                                    "fields": [{"name": "version", "type": "string"},
                                               {"name": "connector", "type": "string"},
                                               {"name": "name", "type": "string"},
                                               {"name": "ts_ms", "type": "long"},
                                               {"name": "ts_us", "type": ["null", "long"], "default": None},
                                               {"name": "ts_ns", "type": ["null", "long"], "default": None},
                                               {"name": "snapshot", "type": ["string", "null"], "default": "false"},
                                               {"name": "db", "type": "string"},
                                               {"name": "sequence", "type": ["null", "string"], "default": None},
                                               {"name": "schema", "type": "string"},
                                               {"name": "table", "type": "string"},
                                               {"name": "txId", "type": ["null", "long"], "default": None},
                                               {"name": "lsn", "type": ["null", "long"], "default": None},
                                               {"name": "xmin", "type": ["null", "long"], "default": None}]}},
        {"name": "op", "type": "string"},
        {"name": "ts_ms", "type": ["null", "long"], "default": None},
        {"name": "ts_us", "type": ["null", "long"], "default": None},
        {"name": "ts_ns", "type": ["null", "long"], "default": None},
        {"name": "transaction", "type": ["null", {
            "type": "record", "name": "block", "namespace": "event",
            "fields": [{"name": "id", "type": "string"}, {"name": "total_order", "type": "long"},
                       {"name": "data_collection_order", "type": "long"}]}], "default": None},
    ]}


def pg_story() -> list[tuple[dict | None, dict | None]]:
    """(key, value) pairs of one PostgreSQL table's life: a snapshot of two rows, a create, an update that drops a
    column (before null: REPLICA IDENTITY DEFAULT), a delete and its tombstone."""
    return [
        (key(1), envelope("r", pg_source(1000, snapshot="first"), after=customer(1, "Anne"))),
        (key(2), envelope("r", pg_source(1000, snapshot="last"), after=customer(2, "Bob", "Builder"))),
        (key(3), envelope("c", pg_source(2000), after=customer(3, "Cleo", "Patra"))),
        (key(1), envelope("u", pg_source(3000), after=customer(1, "Anne Marie", email=None))),
        (key(2), envelope("d", pg_source(4000), before=customer(2, "Bob", "Builder"))),
        (key(2), None),
    ]
